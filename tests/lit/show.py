# irshard show: which device holds which slice, without running. A grid for
# 1-D and 2-D arrays, a table of index ranges for 3-D.
# RUN: irshard show %s --mesh x=2,y=2 | filecheck %s

# CHECK: inputs
# CHECK-NEXT: v  f32[8]  x
# CHECK-NEXT: index   0:4  4:8
# CHECK-NEXT: device  0-1  2-3
# CHECK-NEXT: m  f32[4,6]  y,x
# CHECK-NEXT: {{^ +}}0:3  3:6
# CHECK-NEXT: 0:2    0    2
# CHECK-NEXT: 2:4    1    3
# CHECK-NEXT: t  f32[2,4,4]  _,x,y
# CHECK-NEXT: device  process  index
# CHECK-NEXT: 0       0        [0:2, 0:2, 0:2]
# CHECK-NEXT: 1       0        [0:2, 0:2, 2:4]
# CHECK-NEXT: 2       0        [0:2, 2:4, 0:2]
# CHECK-NEXT: 3       0        [0:2, 2:4, 2:4]
# CHECK: outputs
# CHECK-NEXT: output 0 (result)  f32[]  replicated
# CHECK-NEXT: every block on devices 0-3


def f(v: "f32[8@x]", m: "f32[4@y,6@x]", t: "f32[2,4@x,4@y]"):
    return v.sum() + m.sum() + t.sum()
