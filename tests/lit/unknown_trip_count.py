# A while loop whose trip count depends on the data: its collectives run an
# unknown number of times; the totals say they are a lower bound.
# RUN: irshard compile %s --mesh x=4 | filecheck %s
# RUN: irshard compile %s --mesh x=4 --format json | filecheck %s --check-prefix=JSON

import jax
import jax.numpy as jnp


def until(d: "f32[64@x]"):
    def cond(carry):
        i, d = carry
        return (jnp.abs(d).sum() > 1.0) & (i < 50)
        # CHECK: all-reduce  {{.*}}  x  4  ?  {{[a-z]+ +[0-9.]+ [nmu]?s}}  unknown_trip_count.py:[[# @LINE - 1]] (until.<locals>.cond)

    def body(carry):
        i, d = carry
        return i + 1, jnp.roll(d, 1) * 0.5
    return jax.lax.while_loop(cond, body, (0, d))[1]

# CHECK: per run: at least 8 bytes
# CHECK-NEXT: time per run: at least {{[0-9.]+ [nmu]?s}}, from the cpu-host profile
# CHECK-NEXT: (2 in loops whose trip count is not known counted once)
# JSON: "loop_trip_counts": [null],
# JSON-NEXT: "executions": null,
# JSON: "unknown_executions": 2
