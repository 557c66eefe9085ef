# `irshard diff`: the heat equation's two formulations compared by source
# line and kind. Rolling removes both gathers of line 25; its halo
# exchanges (line 29) are what is left. Reversed, B regresses, and
# --fail-on-regression exits 1.
# RUN: irshard compile %examples/heat1d.py --fn simulate_set --mesh x=4 --format json -o %t.set.json
# RUN: irshard compile %examples/heat1d.py --fn simulate_roll --mesh x=4 --format json -o %t.roll.json
# RUN: irshard diff %t.set.json %t.roll.json --fail-on-regression | filecheck %s
# RUN: %exit 1 irshard diff %t.roll.json %t.set.json --fail-on-regression > %t.out 2> %t.err
# RUN: filecheck %s --check-prefix=WORSE < %t.out
# RUN: filecheck %s --check-prefix=ERR < %t.err
# RUN: irshard diff %t.set.json %t.set.json | filecheck %s --check-prefix=SAME

# CHECK: A: {{.*}}.set.json (simulate_set)
# CHECK-NEXT: B: {{.*}}.roll.json (simulate_roll)
# CHECK: collectives by line and kind
# CHECK-NEXT: change   kind                count   bytes per run  delta    time per run {{ *}}source
# CHECK-NEXT: removed  all-gather          2 -> 0  819200 -> 0    -819200  {{.*}} -> -  heat1d.py:25 (step_set)
# CHECK-NEXT: removed  collective-permute  2 -> 0  1200 -> 0      -1200    {{.*}} -> -  heat1d.py:25 (step_set)
# CHECK-NEXT: added    collective-permute  0 -> 2  0 -> 800       +800     - -> {{.*}}  heat1d.py:29 (step_roll)
# CHECK: totals
# CHECK: collectives         4  {{ *}}2  {{ *}}-2
# CHECK-NEXT: bytes per run       801.2 KiB  800 B  {{ *}}-800.4 KiB (-99.9%)
# The memory peaks by kind: the gathered halo's buffers are gone.
# CHECK: memory peak per device, by kind
# CHECK-NEXT: kind {{ +}}A {{ +}}B {{ +}}change
# CHECK-NEXT: collective-buffer  8.0 KiB  8 B {{ +}}-8.0 KiB (-99.9%)
# CHECK: no regression: B moves no more bytes and takes no longer than A, and needs no more memory at its peak

# WORSE: added    all-gather          0 -> 2  0 -> 819200    +819200
# WORSE: regression: B moves more bytes per run than A: 800 B -> 801.2 KiB
# ERR: irshard: error: regression: B moves more bytes per run than A: 800 B -> 801.2 KiB; B takes longer per run than A: {{.*}}; B needs more memory per device at its peak than A: 3.3 KiB -> 11.1 KiB (collective-buffer +8.0 KiB)

# SAME: collectives: no change by line and kind
# SAME-NEXT: (2 unchanged)
# SAME: no regression
