"""A GPT training step: pytree parameters, an AdamW update, a token batch.

Plain JAX, written as model code is: parameters and optimizer state are
nested dicts and lists, the step differentiates the loss with respect to the
parameters only and updates them with AdamW. `example_args` gives the step's
arguments as abstract arrays (nothing is allocated), so irshard can compile
the step at any size:

    irshard compile examples/gpt.py --fn train_step --args example_args \\
        --mesh fsdp=8 --shard '**/embed=fsdp,_' --shard '**/w*=fsdp,_' \\
        --shard 'batch/*=fsdp,_'

Inputs are named by path (`params/layers/0/attn/wq`, `opt_state/mu/...`,
`batch/tokens`); the rules above shard every weight matrix, its AdamW moments
and the batch over `fsdp` (fully sharded data parallelism). The README shows
a tensor-parallel rule set beside it.
"""

import jax
import jax.numpy as jnp

VOCAB, D_MODEL, HEADS, LAYERS, D_FF = 512, 128, 4, 2, 512
BATCH, SEQ = 16, 64


def init_params(key):
    """Parameters: an embedding, `LAYERS` blocks (attention and MLP), a
    final layer norm. The output projection is the embedding's transpose."""
    keys = iter(jax.random.split(key, 2 + 6 * LAYERS))

    def dense(shape):
        return jax.random.normal(next(keys), shape) * shape[0] ** -0.5

    layers = []
    for _ in range(LAYERS):
        layers.append({
            "attn": {"wq": dense((D_MODEL, D_MODEL)), "wk": dense((D_MODEL, D_MODEL)),
                     "wv": dense((D_MODEL, D_MODEL)), "wo": dense((D_MODEL, D_MODEL))},
            "mlp": {"w_in": dense((D_MODEL, D_FF)), "w_out": dense((D_FF, D_MODEL))},
            "norm1": jnp.ones((D_MODEL,)),
            "norm2": jnp.ones((D_MODEL,)),
        })
    return {"embed": dense((VOCAB, D_MODEL)),
            "position": dense((SEQ, D_MODEL)),
            "layers": layers,
            "norm": jnp.ones((D_MODEL,))}


def _norm(x, scale):
    x = x - x.mean(-1, keepdims=True)
    return x * jax.lax.rsqrt((x * x).mean(-1, keepdims=True) + 1e-5) * scale


def _attention(p, x):
    batch, seq, _ = x.shape
    heads = lambda w: (x @ w).reshape(batch, seq, HEADS, D_MODEL // HEADS)
    q, k, v = heads(p["wq"]), heads(p["wk"]), heads(p["wv"])
    logits = jnp.einsum("bqhd,bkhd->bhqk", q, k) * (D_MODEL // HEADS) ** -0.5
    causal = jnp.tril(jnp.ones((seq, seq), bool))
    weights = jax.nn.softmax(jnp.where(causal, logits, -1e9), axis=-1)
    out = jnp.einsum("bhqk,bkhd->bqhd", weights, v).reshape(batch, seq, D_MODEL)
    return out @ p["wo"]


def forward(params, tokens):
    x = params["embed"][tokens] + params["position"]
    for layer in params["layers"]:
        x = x + _attention(layer["attn"], _norm(x, layer["norm1"]))
        hidden = jax.nn.gelu(_norm(x, layer["norm2"]) @ layer["mlp"]["w_in"])
        x = x + hidden @ layer["mlp"]["w_out"]
    return _norm(x, params["norm"]) @ params["embed"].T


def loss_fn(params, batch):
    logits = forward(params, batch["tokens"])
    logp = jax.nn.log_softmax(logits)
    target = jnp.take_along_axis(logp, batch["targets"][..., None], axis=-1)
    return -target.mean()


def adamw_init(params):
    zeros = jax.tree_util.tree_map(jnp.zeros_like, params)
    return {"mu": zeros, "nu": zeros, "count": jnp.zeros((), jnp.int32)}


def adamw_update(grads, state, params, lr=3e-4, b1=0.9, b2=0.95, eps=1e-8,
                 weight_decay=0.1):
    count = state["count"] + 1
    mu = jax.tree_util.tree_map(lambda m, g: b1 * m + (1 - b1) * g, state["mu"], grads)
    nu = jax.tree_util.tree_map(lambda v, g: b2 * v + (1 - b2) * g * g,
                                state["nu"], grads)
    step = count.astype(jnp.float32)
    scale = lr * jnp.sqrt(1 - b2 ** step) / (1 - b1 ** step)
    params = jax.tree_util.tree_map(
        lambda p, m, v: p - scale * m / (jnp.sqrt(v) + eps) - lr * weight_decay * p,
        params, mu, nu)
    return params, {"mu": mu, "nu": nu, "count": count}


def train_step(params, opt_state, batch):
    loss, grads = jax.value_and_grad(loss_fn)(params, batch)
    params, opt_state = adamw_update(grads, opt_state, params)
    return params, opt_state, loss


def example_args():
    """The step's arguments as abstract arrays: shapes and dtypes only."""
    params = jax.eval_shape(init_params, jax.random.key(0))
    opt_state = jax.eval_shape(adamw_init, params)
    tokens = jax.ShapeDtypeStruct((BATCH, SEQ), jnp.int32)
    return params, opt_state, {"tokens": tokens, "targets": tokens}
