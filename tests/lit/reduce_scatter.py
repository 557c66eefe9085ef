# psum_scatter in a manual region is a reduce-scatter: each device receives
# the sum of one slice.
# RUN: irshard compile %s --mesh x=4 | filecheck %s

import jax
from jax.sharding import PartitionSpec as P


def scatter(a: "f32[16@x,8]"):
    def body(block):
        return jax.lax.psum_scatter(block, "x", scatter_dimension=1, tiled=True)
        # CHECK: reduce-scatter  {{[a-z_.0-9-]+}}  f32[4,2]  32  96  x  4  1  {{[a-z]+ +[0-9.]+ [nmu]?s}}  reduce_scatter.py:[[# @LINE - 1]] (scatter.<locals>.body)
    return jax.shard_map(body, in_specs=P("x", None), out_specs=P("x", None))(a)
