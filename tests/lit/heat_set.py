# The heat equation written with `.at[1:-1].set(...)`: the partitioner
# gathers the whole rod on every device, twice per step, 100 steps.
# RUN: irshard compile %examples/heat1d.py --fn simulate_set --mesh x=4 | filecheck %s
# From jaxlib 0.11 on, the partitioner leaves the gather of the loop's
# carried value without metadata: its line is inferred from its user.
# RUN: irshard compile %examples/heat1d.py --fn simulate_set --mesh x=4 --format json | filecheck %s --check-prefixes=JSON,JSON-%jax

# CHECK: examples/heat1d.py:simulate_set  mesh x=4 (4 cpu devices)  stage optimized
# CHECK: d     f32[1024]  x         f32[256]
# CHECK: collectives
# CHECK: all-gather          all-gather{{(\.[0-9]+)?}} {{ *}}f32[1024]   4096  3072  x         4   100  {{[a-z]+ +[0-9.]+ [nmu]?s}}  heat1d.py:25 (step_set)
# CHECK: all-gather          all-gather{{(\.[0-9]+)?}} {{ *}}f32[1024]   4096  3072  x         4   100  {{[a-z]+ +[0-9.]+ [nmu]?s}}  heat1d.py:25 (step_set)
# CHECK: totals: 4 collectives (2 all-gather, 2 collective-permute)

# JSON: "kind": "all-gather",
# JSON-NEXT: "dtype": "f32",
# JSON-NEXT: "shape": [1024],
# JSON-NEXT: "bytes": 4096,
# JSON-NEXT: "wire_bytes": 3072,
# JSON-NEXT: "mesh_axes": ["x"],
# JSON-NEXT: "group_size": 4,
# JSON-NEXT: "source": {
# JSON-NEXT: "file": "heat1d.py",
# JSON-NEXT: "line": 25,
# JSON-NEXT: "function": "step_set",
# JSON-NEXT: "stack": [
# JSON-NEXT: {"file": "heat1d.py", "line": 25, "function": "step_set"},
# JSON-NEXT: {"file": "heat1d.py", "line": 36, "function": "simulate_set.<locals>.<lambda>"}
# JSON-NEXT: ]
# JSON-NEXT: },
# JSON-JAX010-NEXT: "attribution": "metadata",
# JSON-JAX011-NEXT: "attribution": "inferred",
# JSON-JAX012-NEXT: "attribution": "inferred",
# JSON: "loop_trip_counts": [100],
# JSON-NEXT: "executions": 100,
