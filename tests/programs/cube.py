"""A 3-D array on a 3-D mesh: every dimension sharded over its own axis.

    irshard compile tests/programs/cube.py --mesh x=2,y=2,z=2 --shard a=x,z,y
"""

import jax.numpy as jnp


def reduce_rows(a: "f32[8,6,4]"):
    return jnp.sin(a).sum(axis=0) * 2
