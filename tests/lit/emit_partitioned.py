# The partitioned stage: XLA's HLO right after SPMD partitioning, with
# per-device shapes and the collectives as the partitioner inserted them.
# A parameter's sharding is printed as XLA's tiling (jaxlib 0.10), as a named
# sharding (0.11), or not at all (0.12).
# RUN: irshard compile %examples/heat1d.py --fn simulate_roll --mesh x=4 --emit partitioned | filecheck %s --check-prefixes=CHECK,CHECK-%jax

# CHECK: HloModule
# CHECK-SAME: num_partitions=4
# CHECK: collective-permute
# CHECK-SAME: source_target_pairs={{[{][{]}}0,1},{1,2},{2,3},{3,0}}
# CHECK: ENTRY
# CHECK: f32[256]{0} parameter(0)
# CHECK-JAX010-SAME: sharding={devices=[4]<=[4]}
# CHECK-JAX011-SAME: sharding={mesh['x'=4], [{'x'}]}
# CHECK-JAX012-NOT: sharding=
