"""A training step whose batch is sharded by `in_shardings` and again by
each layer's activation constraint (MaxText's `activation_batch`, one per
layer kind; a Flax model's `nn.with_logical_constraint` in every block).
The weights' gradients are sums over the batch: all-reduces over the
batch's axis. Any one of the four decisions keeps the batch sharded."""

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding, PartitionSpec as P

LAYERS = 3
CONSTRAINED = True


def loss(ws, batch):
    h = batch["inputs"]
    for w in ws:
        h = jnp.tanh(h @ w)
        if CONSTRAINED:
            h = jax.lax.with_sharding_constraint(h, P("x", None))
    return jnp.mean((h - batch["targets"]) ** 2)


def step(mesh, data=P("x")):
    """The weights' gradient, jitted over `mesh`, the weights replicated
    and the batch sharded by `data`."""
    return jax.jit(jax.grad(loss),
                   in_shardings=(NamedSharding(mesh, P()),
                                 NamedSharding(mesh, data)))


def args():
    return ([jnp.ones((64, 64)) for _ in range(LAYERS)],
            {"inputs": jnp.ones((32, 64)), "targets": jnp.ones((32, 64))})
