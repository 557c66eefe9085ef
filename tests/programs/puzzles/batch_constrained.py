"""A step whose batch is sharded twice: by `in_shardings` and again by an
activation constraint that repeats it (`activation_batch` in MaxText's
logical rules, a Flax model's `nn.with_logical_constraint`). The loss's
mean over the batch is a partial sum over the batch's axis. Dropping the
constraint leaves the batch's sharding, opening the batch leaves the
constraint's, and Shardy records only the constraint as the origin: each
decision alone is refuted, the two together are the cause."""

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding, PartitionSpec as P

CONSTRAINED = True


def loss(w, batch):
    h = batch["inputs"] @ w
    if CONSTRAINED:
        h = jax.lax.with_sharding_constraint(h, P("x", None))
    pred = jnp.tanh(h)
    return jnp.mean((pred - batch["targets"]) ** 2)


def step(mesh, data=P("x")):
    """`loss` jitted over `mesh`, the weight replicated and the whole
    batch sharded by `data`."""
    return jax.jit(lambda w, batch: loss(w, batch),
                   in_shardings=(NamedSharding(mesh, P()),
                                 NamedSharding(mesh, data)))


def args():
    return jnp.ones((128, 64)), {"inputs": jnp.ones((64, 128)),
                                 "targets": jnp.ones((64, 64))}
