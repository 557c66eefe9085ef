import jax.numpy as jnp


def reductions(a: "f32[16,8]"):
    return a.sum(axis=0), a.max(axis=1), jnp.mean(a), jnp.linalg.norm(a, axis=0)
