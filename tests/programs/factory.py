"""A program factory, as `irshard search --factory` takes one: keywords
(the knobs) in, the jitted step and its example arguments out. A 2-layer
MLP's training step; `remat` recomputes the hidden activation in the
backward pass, `batch` and `width` size it; a width the batch cannot use
is rejected, as a factory rejects a combination it does not support."""

import jax
import jax.numpy as jnp


def make(batch=32, width=256, remat="none", lr=1e-2):
    if width % 64:
        raise ValueError(f"width {width} is not a multiple of 64")

    def layer(w, x):
        return jax.nn.relu(x @ w)

    if remat == "full":
        layer = jax.checkpoint(layer)
    elif remat != "none":
        raise ValueError(f"remat '{remat}': give none or full")

    def loss(params, x, y):
        h = layer(params["w1"], x)
        return jnp.mean((h @ params["w2"] - y) ** 2)

    @jax.jit
    def step(params, x, y):
        grads = jax.grad(loss)(params, x, y)
        return jax.tree.map(lambda p, g: p - lr * g, params, grads)

    f32 = jnp.float32
    params = {"w1": jax.ShapeDtypeStruct((128, width), f32),
              "w2": jax.ShapeDtypeStruct((width, 128), f32)}
    return step, (params, jax.ShapeDtypeStruct((batch, 128), f32),
                  jax.ShapeDtypeStruct((batch, 128), f32))
