# The partitioned stage: XLA's HLO right after SPMD partitioning, with
# per-device shapes and the collectives as the partitioner inserted them.
# RUN: irshard compile %examples/heat1d.py --fn simulate_roll --mesh x=4 --emit partitioned | filecheck %s

# CHECK: HloModule
# CHECK-SAME: num_partitions=4
# CHECK: collective-permute
# CHECK-SAME: source_target_pairs={{[{][{]}}0,1},{1,2},{2,3},{3,0}}
# CHECK: ENTRY
# CHECK: f32[256]{0} parameter(0), sharding={devices=[4]<=[4]}
