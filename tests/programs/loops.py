import jax
import jax.numpy as jnp


def fori(d: "f32[32]"):
    return jax.lax.fori_loop(0, 10, lambda i, d: jnp.roll(d, 1) * 0.5 + d * 0.5, d)


def scan(w: "f32[6,8,8]", x: "f32[4,8]"):
    def layer(h, w):
        return jnp.tanh(h @ w), h.sum()
    return jax.lax.scan(layer, x, w)
