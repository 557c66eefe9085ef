# The optimized stage: the executable's final HLO, what actually runs.
# RUN: irshard compile %examples/heat1d.py --fn simulate_set --mesh x=4 --emit optimized | filecheck %s

# CHECK: HloModule jit_simulate_set, is_scheduled=true
# CHECK: FileNames
# CHECK: heat1d.py
# CHECK: all-gather
# CHECK-SAME: replica_groups=
# CHECK: while(
# CHECK-SAME: "known_trip_count":{"n":"100"}
