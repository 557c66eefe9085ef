"""A program whose sharded result really differs from one device's: each
shard adds its own position along x, which on one device is always 0."""

import jax
from jax.sharding import PartitionSpec as P


def shifted(a: "f32[8@x]"):
    def body(block):
        return block + jax.lax.axis_index("x").astype(block.dtype)
    return jax.shard_map(body, in_specs=P("x"), out_specs=P("x"))(a)
