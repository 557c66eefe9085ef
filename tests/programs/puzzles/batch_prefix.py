"""A step whose batch is one argument sharded by one prefix:
`in_shardings=(weight, data)` gives `data`'s sharding to every array of
the batch (its inputs and its targets), as MaxText's and Flax's steps
shard theirs. The loss averages over the batch: a partial sum over the
batch's axis that both arrays make, one decision written once. Opened
alone, either array's sharding is pinned by the other's."""

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding, PartitionSpec as P


def loss(w, batch):
    pred = jnp.tanh(batch["inputs"] @ w)
    return jnp.mean((pred - batch["targets"]) ** 2)


def step(mesh, data=P("x")):
    """`loss` jitted over `mesh`, the weight replicated and the whole
    batch sharded by `data`."""
    return jax.jit(loss, in_shardings=(NamedSharding(mesh, P()),
                                       NamedSharding(mesh, data)))


def args():
    return jnp.ones((128, 64)), {"inputs": jnp.ones((64, 128)),
                                 "targets": jnp.ones((64, 64))}
