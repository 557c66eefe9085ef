# `--explain`: why each collective of the heat equation's `.at[1:-1].set`
# exists. The gathers read d (sharded over x, because the input is) and
# the interior update computed from it, for the scatter on line 25; the
# neighbour exchanges are halos of the shifted slices. The scatter's
# gathers are the op's kind; the halos, input d's sharding.
# RUN: irshard compile %examples/heat1d.py --fn simulate_set --mesh x=4 --explain | filecheck %s
# RUN: irshard compile %examples/heat1d.py --fn simulate_roll --mesh x=4 --explain | filecheck %s --check-prefix=ROLL

# CHECK-LABEL: why
# CHECK-NEXT: all-gather{{(\.[0-9]+)?}}  heat1d.py:25 (step_set)
# CHECK-NEXT: reads input d sharded x; scatter at heat1d.py:25 (step_set) gets it replicated
# CHECK-NEXT: x from input d
# CHECK-NEXT: a scatter (`.at[...].set/add`) writes at positions of a dimension sharded over x that need not line up with the shards: XLA gathers the dimension for it
# CHECK-NEXT: cause: scatter at heat1d.py:25 indexes along a sharded dimension (the op's kind)
# CHECK-NEXT: collective-permute{{(\.[0-9]+)?}}  heat1d.py:25 (step_set)
# CHECK-NEXT: reads slice at heat1d.py:25 (step_set) sharded x; slice at heat1d.py:25 (step_set) gets it x
# CHECK-NEXT: x from input d
# CHECK-NEXT: a halo exchange: neighbours along x
# CHECK-NEXT: cause: input d (not verified; --verify recompiles without it)
# CHECK: all-gather{{(\.[0-9]+)?}}  heat1d.py:25 (step_set)
# CHECK-NEXT: reads add at heat1d.py:25 (step_set) sharded x; scatter at heat1d.py:25 (step_set) gets it replicated
# CHECK-NEXT: x from input d
# CHECK-NEXT: a scatter
# CHECK-NEXT: cause: scatter at heat1d.py:25
# CHECK-EMPTY:
# CHECK-NEXT: totals: 4 collectives

# ROLL-LABEL: why
# ROLL-NEXT: collective-permute{{(\.[0-9]+)?}}  heat1d.py:29 (step_roll)
# ROLL-NEXT: reads concatenate at heat1d.py:29 (step_roll) sharded x;
# ROLL-NEXT: x from input d
# ROLL-NEXT: a halo exchange: neighbours along x swap the edges of their shards, for a shift, slice or pad of a dimension sharded over x (the concatenate)
# ROLL-NEXT: cause: input d (not verified; --verify recompiles without it)
