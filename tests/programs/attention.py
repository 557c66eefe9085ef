import jax
import jax.numpy as jnp


def attention(q: "f32[2,16,4,8]", k: "f32[2,16,4,8]", v: "f32[2,16,4,8]"):
    scores = jnp.einsum("bqhd,bkhd->bhqk", q, k) / jnp.sqrt(8.0)
    return jnp.einsum("bhqk,bkhd->bqhd", jax.nn.softmax(scores), v)
