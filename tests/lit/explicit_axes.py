# Explicit mesh axes: each input is traced with its sharding in its type, so
# reshard moves data where the program says; without them, JAX's error and
# the option that helps.
# RUN: irshard compile %s --mesh dp=2,tp=4 --axis-types explicit | filecheck %s
# RUN: irshard compile %s --mesh dp=2,tp=4 --axis-types explicit --format json | filecheck %s --check-prefix=JSON
# RUN: %exit 2 irshard compile %s --mesh dp=2,tp=4 2> %t.err
# RUN: filecheck %s --check-prefix=AUTO < %t.err

import jax.numpy as jnp
from jax.sharding import PartitionSpec as P, reshard


def step(x: "f32[64@dp,512]", w: "f32[512,256@tp]"):
    h = reshard(jnp.tanh(x @ w), P("dp", None))
    # CHECK: explicit_axes.py:step  mesh dp=2,tp=4 explicit (8 cpu devices)  stage optimized
    # CHECK: all-gather  all-gather  f32[32,256]  32768  24576  tp  4  1  {{[a-z]+ +[0-9.]+ [nmu]?s}}  explicit_axes.py:[[# @LINE - 2]] (step)
    # CHECK: totals: 1 collective (1 all-gather)
    # AUTO: irshard: error: {{.*}}explicit_axes.py:[[# @LINE - 4]]: in step: ValueError: PartitionSpec passed to reshard cannot contain axis names that are of type Auto
    # AUTO-NEXT: hint: the program shards in its types (reshard, auto_axes, sharded types), which needs explicit mesh axes: give --axis-types explicit
    return jnp.sum(h * h, axis=1)

# JSON: "axes": [
# JSON-NEXT: {"name": "dp", "size": 2, "type": "explicit"},
# JSON-NEXT: {"name": "tp", "size": 4, "type": "explicit"}
