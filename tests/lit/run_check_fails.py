# --check fails, with exit status 1, when the sharded program computes
# something else: here each shard adds its own position along x.
# RUN: %exit 1 irshard run %s --mesh x=4 --check > %t.out 2> %t.err
# RUN: filecheck %s --check-prefix=OUT < %t.out
# RUN: filecheck %s --check-prefix=ERR < %t.err

# OUT: check against one device: FAILED
# OUT: 0  result  3  {{[0-9.e+-]+}}  [{{[67]}}]  float64  {{.*}}  MISMATCH
# ERR: irshard: error: check failed: output 0 (result) differs from the float64 result: error 3 at [{{[67]}}]

import jax
from jax.sharding import PartitionSpec as P


def shifted(a: "f32[8@x]"):
    def body(block):
        return block + jax.lax.axis_index("x").astype(block.dtype)
    return jax.shard_map(body, in_specs=P("x"), out_specs=P("x"))(a)
