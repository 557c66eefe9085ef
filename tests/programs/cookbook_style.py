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


# The cookbook's train state: parameters and optimizer state held in
# `jax.Ref`s, updated in place by the step, which returns only metrics.
def adam_update(param, grad, opt):
    opt["mu"][...] = 0.9 * opt["mu"][...] + 0.1 * grad
    opt["count"][...] += 1
    param[...] -= 1e-3 * opt["mu"][...] / (1 - 0.9 ** opt["count"][...])


@jax.jit
def train_step_refs(train_state, tokens, targets):
    def loss_fn(params):
        logits = model_apply(params, tokens)
        return jnp.mean((logits - targets) ** 2)

    params = jax.tree.map(jax.ref.get, train_state["params"])
    loss, grad = jax.value_and_grad(loss_fn)(params)
    jax.tree.map(adam_update, train_state["params"], grad, train_state["opt"])
    return {"train_loss": loss}


def ref_args():
    keys = iter(jax.random.split(jax.random.key(0), 8))
    init = jax.nn.initializers.he_normal()
    layers = [{"in_kernel": init(next(keys), (EMBED, HIDDEN)),
               "out_kernel": init(next(keys), (HIDDEN, EMBED))}
              for _ in range(2)]
    params = {"layers": layers, "linear_out": init(next(keys), (EMBED, 16))}
    opt = jax.tree.map(lambda p: {"mu": jnp.zeros_like(p),
                                  "count": jnp.array(0)}, params)
    train_state = jax.tree.map(jax.ref.new_ref, {"params": params, "opt": opt})
    tokens = jax.random.normal(next(keys), (BATCH, EMBED))
    return train_state, tokens, jnp.zeros((BATCH, 16))
