# `?` leaves a dimension open: the stablehlo stage says so, and the report
# shows the sharding propagation chose for the argument.
# RUN: irshard compile %s --mesh x=2,y=2 --shard b=_?,_? --emit stablehlo | filecheck %s --check-prefix=IR
# RUN: irshard compile %s --mesh x=2,y=2 --shard b=_?,_? | filecheck %s

# IR: %arg1: tensor<8x8xf32> {sdy.sharding = #sdy.sharding<@mesh, [{?}, {?}]>}
# CHECK: inputs
# CHECK: a     f32[8,8]  x,y       f32[4,4]
# CHECK-NEXT: b     f32[8,8]  x,y       f32[4,4]
# CHECK: collectives: none


def add(a: "f32[8@x,8@y]", b: "f32[8,8]"):
    return a + b
