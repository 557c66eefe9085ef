"""Programs the size of a GPU's work, for the time model on one GPU.

The CPU mesh's test programs are launch-bound on a GPU (a kernel of an 8x8
product takes less than its launch); these fill one: a product in bf16 and
in f32, a streaming op, an MLP's gradient and a scanned transformer's
gradient in bf16. `benchmarks/timemodel.py --platform gpu` runs them:

    irshard compile benchmarks/gpu.py --fn transformer --grad --mesh x=1 \\
        --platform gpu --target gpu-h200:1x1
"""

import jax
import jax.numpy as jnp

from transformer import _block as block, _layer_norm as layer_norm

LAYERS, D, HEADS, F, VOCAB = 8, 1024, 16, 4096, 8192


def matmul_bf16(a: "bf16[8192,8192]", b: "bf16[8192,8192]"):
    return a @ b


def matmul_f32(a: "f32[4096,4096]", b: "f32[4096,4096]"):
    return a @ b


def stream(x: "f32[67108864]"):
    """256 MiB read, 256 MiB written."""
    return x * 0.5 + 1.0


def mlp(w1: "bf16[4096,16384]", w2: "bf16[16384,4096]",
        x: "bf16[8192,4096]", y: "bf16[8192,4096]"):
    hidden = jax.nn.gelu(x @ w1)
    return jnp.mean(((hidden @ w2) - y).astype(jnp.float32) ** 2)


def transformer(embed: "bf16[8192,1024]",
                wq: "bf16[8,1024,1024]", wk: "bf16[8,1024,1024]",
                wv: "bf16[8,1024,1024]", wo: "bf16[8,1024,1024]",
                w1: "bf16[8,1024,4096]", w2: "bf16[8,4096,1024]",
                tokens: "i32[8,1024]"):
    x = embed[tokens]
    x, _ = jax.lax.scan(lambda x, w: block(x, w, HEADS), x,
                        (wq, wk, wv, wo, w1, w2))
    logits = (layer_norm(x) @ embed.T).astype(jnp.float32)
    targets = jax.nn.one_hot(jnp.roll(tokens, -1, axis=1), VOCAB)
    return -jnp.mean(jnp.sum(jax.nn.log_softmax(logits) * targets, axis=-1))
