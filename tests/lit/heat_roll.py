# The heat equation written with shifted copies (`jnp.roll` + `where`): each
# step only exchanges a one-element halo with each neighbour.
# RUN: irshard compile %examples/heat1d.py --fn simulate_roll --mesh x=4 | filecheck %s

# CHECK: collectives
# CHECK-NOT: all-gather
# CHECK: collective-permute  collective-permute{{(\.[0-9]+)?}} {{ *}}f32[1]  4  4  x  4  100  {{[a-z]+ +[0-9.]+ [nmu]?s}}  heat1d.py:29 (step_roll)
# CHECK-NEXT: collective-permute  collective-permute{{(\.[0-9]+)?}} {{ *}}f32[1]  4  4  x  4  100  {{[a-z]+ +[0-9.]+ [nmu]?s}}  heat1d.py:29 (step_roll)
# CHECK-NOT: all-gather
# CHECK: totals: 2 collectives (2 collective-permute)
# CHECK-NEXT: per run: 800 bytes (800 B)
