# On a 2x2x2 mesh XLA prints replica groups as a mesh whose device order is
# itself an iota (`mesh[...], device_ids=([4,2]T(1,0)) {...}`, jaxlib 0.10)
# or over the user's own axes (0.11 on); the report names the user's axis
# either way: the sum runs over the dimension sharded on z.
# RUN: irshard compile %s --mesh x=2,y=2,z=2 | filecheck %s
# RUN: irshard compile %s --mesh x=2,y=2,z=2 --emit optimized | filecheck %s --check-prefix=HLO-%jax

import jax.numpy as jnp


def three(a: "f32[8@x,8@y,8@z]"):
    return jnp.transpose(a, (2, 0, 1)).sum(0)
    # CHECK: all-reduce  all-reduce  f32[4,4]  64  64  z  2  1  {{[a-z]+ +[0-9.]+ [nmu]?s}}  three_axis_mesh.py:[[# @LINE - 1]] (three)
    # HLO-JAX010: replica_groups=mesh[{{.*}}], device_ids=(
    # HLO-JAX011: replica_groups=mesh['x'=2,'y'=2,'z'=2] {'z'}
    # HLO-JAX012: replica_groups=mesh['x'=2,'y'=2,'z'=2] {'z'}
