"""A reshard between two orders of mixed axes: `a + b` is sharded like its
operands (y,_,x) and the constraint wants (_,x+y,_); XLA cannot move
between them with one collective and replicates."""

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P

CONSTRAINED = True


def step(a, b):
    c = a + b
    if CONSTRAINED:
        c = jax.lax.with_sharding_constraint(c, P(None, ("x", "y"), None))
    return jnp.tanh(c) * 2


def args():
    return jnp.ones((8, 16, 8)), jnp.ones((8, 16, 8))
