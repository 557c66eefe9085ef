# ppermute in a manual region is a collective-permute: each device sends its
# block to the next one around the ring.
# RUN: irshard compile %s --mesh x=4 --format json | filecheck %s

import jax
from jax.sharding import PartitionSpec as P


def rotate(a: "f32[8@x]"):
    def body(block):
        return jax.lax.ppermute(block, "x", [(i, (i + 1) % 4) for i in range(4)])
        # CHECK: "kind": "collective-permute",
        # CHECK-NEXT: "dtype": "f32",
        # CHECK-NEXT: "shape": [2],
        # CHECK-NEXT: "bytes": 8,
        # CHECK-NEXT: "wire_bytes": 8,
        # CHECK-NEXT: "mesh_axes": ["x"],
        # CHECK-NEXT: "group_size": 4,
        # CHECK-NEXT: "source": {
        # CHECK-NEXT: "file": "collective_permute.py",
        # CHECK-NEXT: "line": [[# @LINE - 10]],
        # CHECK-NEXT: "function": "rotate.<locals>.body",
        # The stack: the body, then the line that maps it over the mesh.
        # CHECK-NEXT: "stack": [
        # CHECK-NEXT: {"file": "collective_permute.py", "line": [[# @LINE - 14]], "function": "rotate.<locals>.body"},
        # CHECK-NEXT: {"file": "collective_permute.py", "line": [[# @LINE + 1]], "function": "rotate"}
    return jax.shard_map(body, in_specs=P("x"), out_specs=P("x"))(a)
