"""Constraints made through the model's own helper, as models write them
(`shard(x, names)` around `with_sharding_constraint`, MaxText's logical
constraints): the decision is the line that called the helper, not the
helper's body that every constraint shares. The first call asks for
columns of a matmul's row-sharded result; the second agrees with what
follows it."""

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P

COLUMNS = True


def shard(x, *names):
    return jax.lax.with_sharding_constraint(x, P(*names))


def step(x, w1, w2):
    h = jnp.tanh(x @ w1)
    h = shard(h, None, "x") if COLUMNS else shard(h, "x", None)
    y = shard(h @ w2, "x", None)
    return jnp.tanh(y)


def args():
    return jnp.ones((64, 128)), jnp.ones((128, 128)), jnp.ones((128, 128))
