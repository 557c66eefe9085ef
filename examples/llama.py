"""A Llama-style training step: grouped-query attention with rotary
positions, a SwiGLU MLP, RMSNorm, the layers stacked and scanned, each layer
rematerialized in the backward pass, and the GPT step's AdamW update.

Weights keep their heads as a dimension of their own (`wq` is
`[layers, d_model, heads, head_dim]`), so the step reads every size from the
shapes it is given. `example_args` gives the arguments of a model sized like
Llama 3 8B as abstract arrays (nothing is allocated); `small_args` a model
that compiles in a second:

    irshard search examples/llama.py --fn train_step --args example_args \\
        --target tpu-v5e:4x4

    irshard compile examples/llama.py --fn train_step --args small_args \\
        --mesh fsdp=4 --shard '**/layers/w_[gu]*=_,_,fsdp' \\
        --shard '**/layers/w_down=_,fsdp,_' --shard 'batch/*=fsdp,_'

`irshard search` finds the rules; the 8B model's step is compiled for a TPU
slice with `--donate params --donate opt_state` (the update reuses the
buffers of the parameters and optimizer state, as training loops do).
"""

import dataclasses

import jax
import jax.numpy as jnp

from gpt import adamw_init, adamw_update     # the GPT step's AdamW


@dataclasses.dataclass(frozen=True)
class Config:
    vocab: int
    d_model: int
    layers: int
    heads: int
    kv_heads: int
    d_ff: int
    batch: int
    seq: int


LLAMA_8B = Config(vocab=128256, d_model=4096, layers=32, heads=32, kv_heads=8,
                  d_ff=14336, batch=16, seq=2048)
SMALL = Config(vocab=512, d_model=64, layers=2, heads=4, kv_heads=2, d_ff=128,
               batch=8, seq=32)

COMPUTE = jnp.bfloat16      # matrix products in bf16, parameters in f32
ROPE_THETA = 500000.0


def init_params(key, config: Config):
    head = config.d_model // config.heads
    L, d = config.layers, config.d_model
    keys = iter(jax.random.split(key, 9))

    def dense(shape, fan_in):
        return jax.random.normal(next(keys), shape) * fan_in ** -0.5

    return {
        "embed": dense((config.vocab, d), d),
        "layers": {
            "attn_norm": jnp.ones((L, d)),
            "wq": dense((L, d, config.heads, head), d),
            "wk": dense((L, d, config.kv_heads, head), d),
            "wv": dense((L, d, config.kv_heads, head), d),
            "wo": dense((L, config.heads, head, d), d),
            "mlp_norm": jnp.ones((L, d)),
            "w_gate": dense((L, d, config.d_ff), d),
            "w_up": dense((L, d, config.d_ff), d),
            "w_down": dense((L, config.d_ff, d), config.d_ff),
        },
        "norm": jnp.ones((d,)),
        "unembed": dense((d, config.vocab), d),
    }


def rms_norm(x, scale):
    x32 = x.astype(jnp.float32)
    x32 = x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, -1, keepdims=True) + 1e-5)
    return (x32 * scale).astype(x.dtype)


def rope(x):
    """Rotary positions over the last dimension of `[batch, seq, heads, dim]`."""
    seq, dim = x.shape[1], x.shape[-1]
    freq = ROPE_THETA ** (-jnp.arange(0, dim, 2, dtype=jnp.float32) / dim)
    angle = jnp.arange(seq, dtype=jnp.float32)[:, None] * freq[None, :]
    cos, sin = jnp.cos(angle)[None, :, None, :], jnp.sin(angle)[None, :, None, :]
    even, odd = x[..., 0::2].astype(jnp.float32), x[..., 1::2].astype(jnp.float32)
    rotated = jnp.stack([even * cos - odd * sin, even * sin + odd * cos], -1)
    return rotated.reshape(x.shape).astype(x.dtype)


def attention(layer, x):
    batch, seq, _ = x.shape
    heads, kv_heads, head = layer["wq"].shape[1], layer["wk"].shape[1], \
        layer["wq"].shape[2]
    w = lambda name: layer[name].astype(COMPUTE)
    q = rope(jnp.einsum("bsd,dhk->bshk", x, w("wq")))
    k = rope(jnp.einsum("bsd,dhk->bshk", x, w("wk")))
    v = jnp.einsum("bsd,dhk->bshk", x, w("wv"))
    q = q.reshape(batch, seq, kv_heads, heads // kv_heads, head)
    logits = jnp.einsum("bqgrk,bsgk->bgrqs", q, k).astype(jnp.float32)
    causal = jnp.tril(jnp.ones((seq, seq), bool))
    logits = jnp.where(causal, logits * head ** -0.5, -1e9)
    weights = jax.nn.softmax(logits, axis=-1).astype(COMPUTE)
    out = jnp.einsum("bgrqs,bsgk->bqgrk", weights, v)
    out = out.reshape(batch, seq, heads, head)
    return jnp.einsum("bshk,hkd->bsd", out, w("wo"))


def mlp(layer, x):
    w = lambda name: layer[name].astype(COMPUTE)
    gate = jax.nn.silu(x @ w("w_gate"))
    return (gate * (x @ w("w_up"))) @ w("w_down")


def block(x, layer):
    x = x + attention(layer, rms_norm(x, layer["attn_norm"]))
    x = x + mlp(layer, rms_norm(x, layer["mlp_norm"]))
    return x, None


def forward(params, tokens):
    x = params["embed"].astype(COMPUTE)[tokens]
    x, _ = jax.lax.scan(jax.checkpoint(block), x, params["layers"])
    x = rms_norm(x, params["norm"])
    return (x @ params["unembed"].astype(COMPUTE)).astype(jnp.float32)


def loss_fn(params, batch):
    logits = forward(params, batch["tokens"])
    logp = jax.nn.log_softmax(logits)
    target = jnp.take_along_axis(logp, batch["targets"][..., None], axis=-1)
    return -target.mean()


def train_step(params, opt_state, batch):
    loss, grads = jax.value_and_grad(loss_fn)(params, batch)
    params, opt_state = adamw_update(grads, opt_state, params)
    return params, opt_state, loss


def arguments(config: Config):
    """The step's arguments for `config` as abstract arrays."""
    params = jax.eval_shape(lambda key: init_params(key, config), jax.random.key(0))
    opt_state = jax.eval_shape(adamw_init, params)
    tokens = jax.ShapeDtypeStruct((config.batch, config.seq), jnp.int32)
    return params, opt_state, {"tokens": tokens, "targets": tokens}


def example_args():
    """A model sized like Llama 3 8B (8.0B parameters)."""
    return arguments(LLAMA_8B)


def small_args():
    return arguments(SMALL)
