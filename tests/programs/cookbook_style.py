"""JAX's training cookbook's style: bfloat16 parameters in nested dicts,
a data-parallel gradient step whose weight gradients XLA sums in one
combined all-reduce."""

import jax
import jax.numpy as jnp

EMBED, HIDDEN, BATCH = 64, 256, 32


def model_apply(params, tokens):
    out = tokens
    for layer in params["layers"]:
        out = out + jax.nn.gelu(out @ layer["in_kernel"]) @ layer["out_kernel"]
    return out @ params["linear_out"]


def train_step(params, tokens, targets):
    def loss_fn(params):
        logits = model_apply(params, tokens).astype(jnp.float32)
        return jnp.mean((logits - targets) ** 2)

    grads = jax.grad(loss_fn)(params)
    return jax.tree.map(lambda p, g: p - 1e-3 * g, params, grads)


def args():
    bf16 = jnp.bfloat16
    layer = {"in_kernel": jax.ShapeDtypeStruct((EMBED, HIDDEN), bf16),
             "out_kernel": jax.ShapeDtypeStruct((HIDDEN, EMBED), bf16)}
    params = {"layers": [layer, layer],
              "linear_out": jax.ShapeDtypeStruct((EMBED, 16), bf16)}
    return (params, jax.ShapeDtypeStruct((BATCH, EMBED), bf16),
            jax.ShapeDtypeStruct((BATCH, 16), jnp.float32))
