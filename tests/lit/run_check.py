# irshard run --check executes the partitioned heat equation and compares it
# with one device; checksums are the same on every mesh. The sharded result
# is bit for bit the single-device one, so its error against the float64 run
# is the single-device result's own (the "ref error").
# RUN: irshard run %examples/heat1d.py --fn simulate_roll --mesh x=4 --check | filecheck %s
# RUN: irshard run %examples/heat1d.py --fn simulate_roll --mesh x=2 --check | filecheck %s
# RUN: irshard run %examples/heat1d.py --fn simulate_roll --mesh x=8 --check | filecheck %s

# CHECK: run: seed 0, 1 process
# CHECK: d  f32[1024]  x  f32[{{[0-9]+}}]  random  6392c89a1b831303
# CHECK: 0  result  f32[1024]  x  f32[{{[0-9]+}}]  [[SUM:[0-9a-f]{16}]]
# CHECK: check against one device: passed
# CHECK-NEXT: #  name    error     allowed   at     reference  ref error  result
# CHECK-NEXT: 0  result  [[E:[0-9.e+-]+]]  {{[0-9.e+-]+}}  [{{[0-9]+}}]  float64  [[E]]  ok
