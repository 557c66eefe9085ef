# A collective the partitioner made without metadata of its own (here, the
# all-gather that replicates the result as --out-shard asks) is attributed to
# a neighbouring instruction, and the report says so.
# RUN: irshard compile %s --mesh x=4 --out-shard 0=_,_ | filecheck %s
# RUN: irshard compile %s --mesh x=4 --out-shard 0=_,_ --format json | filecheck %s --check-prefix=JSON

import jax.numpy as jnp


def f(a: "f32[16@x,16]"):
    return jnp.sin(a)
    # CHECK: all-gather  {{[a-z_.0-9-]+}}  f32[16,16]  1024  768  x  4  1  {{[a-z]+ +[0-9.]+ [nmu]?s}}  inferred_attribution.py:[[# @LINE - 1]] (f) [inferred]
    # JSON: "attribution": "inferred",
    # JSON-NEXT: "op_name": "jit(f)/sin",
