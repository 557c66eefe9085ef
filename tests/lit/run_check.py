# irshard run --check executes the partitioned heat equation and compares it
# with one device; checksums are the same on every mesh.
# RUN: irshard run %examples/heat1d.py --fn simulate_roll --mesh x=4 --check | filecheck %s
# RUN: irshard run %examples/heat1d.py --fn simulate_roll --mesh x=2 --check | filecheck %s
# RUN: irshard run %examples/heat1d.py --fn simulate_roll --mesh x=8 --check | filecheck %s

# CHECK: run: seed 0, 1 process
# CHECK: d  f32[1024]  x  f32[{{[0-9]+}}]  random  6392c89a1b831303
# CHECK: 0  result  f32[1024]  x  f32[{{[0-9]+}}]  [[SUM:[0-9a-f]{16}]]
# CHECK: check against one device: passed
# CHECK-NEXT: #  name    max abs error  at  max rel error  rtol   atol   result
# CHECK-NEXT: 0  result  0              -   0              1e-05  1e-06  ok
