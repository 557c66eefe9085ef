"""A shard_map whose in_specs want the input whole: the input is sharded
over rows outside, so it is gathered at the boundary."""

from functools import partial

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P


def step(x):
    mesh = jax.sharding.get_abstract_mesh()
    inner = jax.shard_map(lambda b: b * 2.0, mesh=mesh, in_specs=P(None, None),
                          out_specs=P(None, None))
    return inner(x)


def args():
    return (jnp.ones((64, 128)),)
