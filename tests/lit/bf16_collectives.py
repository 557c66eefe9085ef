# XLA's CPU backend runs bf16 collectives in f32. The report gives the
# program's own type and bytes (read from the partitioned stage), marks the
# widened ones and says why; a GPU or TPU moves what the program says.
# RUN: irshard compile %s --mesh x=4 | filecheck %s
# RUN: irshard compile %s --mesh x=4 --format json | filecheck %s --check-prefix=JSON

# CHECK: collectives
# CHECK: all-gather          all-gather          bf16[64,64]*  8192  6144  x  4  1  {{[a-z]+ +[0-9.]+ [nmu]?s}}  bf16_collectives.py:[[# @LINE + 13]] (f)
# CHECK: collective-permute  collective-permute  bf16[1,64]*    128   128  x  4  1  {{[a-z]+ +[0-9.]+ [nmu]?s}}  bf16_collectives.py:[[# @LINE + 12]] (f)
# CHECK: note: the cpu backend runs 2 bf16 collectives in f32 (marked *); their bytes are the program's own bf16, as a GPU or TPU moves them

# JSON: "kind": "all-gather",
# JSON-NEXT: "dtype": "bf16",
# JSON: "bytes": 8192,
# JSON: "backend_dtype": "f32"

import jax.numpy as jnp


def f(x: "bf16[64@x,64]", v: "bf16[64@x,64]"):
    return jnp.cumsum(x, axis=0), jnp.roll(v, 1, axis=0)
