# Moving the sharded dimension from rows to columns is an all-to-all.
# RUN: irshard compile %s --mesh x=4 | filecheck %s
# RUN: irshard compile %s --mesh x=4 --stage partitioned | filecheck %s --check-prefix=PART

import jax
from jax.sharding import PartitionSpec as P


def transpose_layout(a: "f32[16@x,16]"):
    return jax.lax.with_sharding_constraint(a * 2, P(None, "x"))
    # CHECK: all-to-all{{( \([0-9]+ combined\))?}}  {{[a-z_.0-9-]+}}  {{.*}}  256  192  x  4  1  {{[a-z]+ +[0-9.]+ [nmu]?s}}  all_to_all.py:[[# @LINE - 1]] (transpose_layout)
    # PART: stage partitioned
    # PART: all-to-all  {{[a-z_.0-9-]+}}  f32[4,4,4]  256  192  x  4  1  {{[a-z]+ +[0-9.]+ [nmu]?s}}  all_to_all.py:[[# @LINE - 3]] (transpose_layout)
