"""Rematerialized layers with a constraint inside: each layer is under
`jax.checkpoint`, so the constraint runs in the forward pass and again in
the backward pass's recomputation; the layer's matmul output is sharded
over rows (the batch) while the constraint asks for columns."""

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P

CONSTRAINED = True


@jax.checkpoint
def layer(h, w):
    h = jnp.tanh(h @ w)
    if CONSTRAINED:
        h = jax.lax.with_sharding_constraint(h, P(None, "x"))
    return h


def loss(x, w1, w2):
    return jnp.sum(layer(layer(x, w1), w2) ** 2)


def step(x, w1, w2):
    return jax.grad(loss, argnums=(1, 2))(x, w1, w2)


def args():
    return jnp.ones((64, 128)), jnp.ones((128, 128)), jnp.ones((128, 128))
