"""The shard_map tutorial's style: the mesh is built at import from
`jax.devices()`, and a jitted shard_map names it."""

from functools import partial

import jax
import numpy as np
from jax.sharding import Mesh, PartitionSpec as P

mesh = Mesh(np.array(jax.devices()[:4]), ("i",))


@jax.jit
@partial(jax.shard_map, mesh=mesh, in_specs=(P("i", None), P("i", None)),
         out_specs=P("i", None))
def matmul_allgather(lhs_block, rhs_block):
    rhs = jax.lax.all_gather(rhs_block, "i", tiled=True)
    return lhs_block @ rhs
