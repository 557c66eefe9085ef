# Summing over a sharded dimension: each device sums its block, then an
# all-reduce over the mesh axis adds the partial sums.
# RUN: irshard compile %s --mesh x=4 | filecheck %s

import jax.numpy as jnp


def total(a: "f32[64@x,16]"):
    return jnp.sum(a, axis=0)
    # CHECK: all-reduce  all-reduce{{(\.[0-9]+)?}}  f32[16]  64  96  x  4  1  {{[a-z]+ +[0-9.]+ [nmu]?s}}  all_reduce.py:[[# @LINE - 1]] (total)
