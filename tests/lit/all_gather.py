# A product whose contraction dimension is sharded on both operands the
# "wrong" way: each operand is all-gathered along one mesh axis. The two are
# listed in the order the executable's schedule runs them.
# RUN: irshard compile %s --mesh x=2,y=2 | filecheck %s

# CHECK: a     f32[8,8]  x,y       f32[4,4]
# CHECK: all-gather  all-gather{{(\.[0-9]+)?}}  f32[8,4]  128  64  x  2  1  {{[a-z]+ +[0-9.]+ [nmu]?s}}  all_gather.py:[[# @LINE + 5]] (matmul)
# CHECK-NEXT: all-gather  all-gather{{(\.[0-9]+)?}}  f32[4,8]  128  64  y  2  1  {{[a-z]+ +[0-9.]+ [nmu]?s}}  all_gather.py:[[# @LINE + 4]] (matmul)


def matmul(a: "f32[8@x,8@y]", b: "f32[8@x,8@y]"):
    return a @ b
