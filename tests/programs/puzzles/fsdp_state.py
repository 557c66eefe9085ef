"""A fully sharded (FSDP) training step as frameworks jit it: the weight
comes in and goes out sharded over the batch's axis (`in_shardings` and
`out_shardings` from one table of parameter shardings, donated, as
MaxText's and Flax's steps are built), so the matmul reads it split. The weight's sharding
is one decision made twice: opened on the way in alone, the way out
pins it back."""

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding, PartitionSpec as P


def update(w, x):
    loss = lambda w: jnp.sum(jnp.tanh(x @ w) ** 2)
    return w - 0.1 * jax.grad(loss)(w)


def step(mesh, weight=P("x", None), batch=P("x", None)):
    """`update` jitted over `mesh` with the weight's sharding `weight`
    both ways, the batch's `batch`."""
    w = NamedSharding(mesh, weight)
    return jax.jit(update, in_shardings=(w, NamedSharding(mesh, batch)),
                   out_shardings=w, donate_argnums=0)


def args():
    return jnp.ones((128, 128)), jnp.ones((64, 128))
