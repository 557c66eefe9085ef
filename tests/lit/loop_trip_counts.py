# Collectives inside nested loops run once per iteration of every enclosing
# loop: 3 outer x 5 inner = 15 runs, in the optimized and partitioned HLO.
# RUN: irshard compile %s --mesh x=4 --format json | filecheck %s
# RUN: irshard compile %s --mesh x=4 --format json --stage partitioned | filecheck %s

import jax
import jax.numpy as jnp


def nested(d: "f32[64@x]"):
    def inner(_, d):
        return jnp.roll(d, 1) + d
    def outer(_, d):
        return jax.lax.fori_loop(0, 5, inner, d)
    return jax.lax.fori_loop(0, 3, outer, d)

# CHECK: "kind": "collective-permute",
# CHECK: "loop_trip_counts": [3, 5],
# CHECK-NEXT: "executions": 15,
# CHECK: "totals":
# CHECK: "bytes_per_run": 60,
