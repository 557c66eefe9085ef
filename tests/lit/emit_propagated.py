# The propagated stage: every value's sharding after Shardy's propagation,
# with the origin of each axis.
# RUN: irshard compile %s --mesh x=4 --emit propagated | filecheck %s

# CHECK: func.func public @main(
# CHECK-SAME: %arg0: tensor<16x8xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"x"}, {}]>, sdy.sharding_origins = {x = "self"}}
# CHECK-SAME: %arg1: tensor<16x8xf32>
# CHECK-SAME: -> (tensor<16x8xf32> {jax.result_info = "result", sdy.sharding = #sdy.sharding<@mesh, [{"x"}, {}]>, sdy.sharding_origins = {x = "input: 0"}})
# CHECK: stablehlo.sine %arg1 {sdy.sharding = #sdy.sharding_per_value<[<@mesh, [{"x"}, {}]>]>, sdy.sharding_origins = [{x = "input: 0"}]}
# CHECK: stablehlo.add {{.*}}sdy.sharding_origins = [{x = "input: 0"}]


def f(a: "f32[16@x,8]", b: "f32[16,8]"):
    return a + jax.numpy.sin(b)


import jax  # noqa: E402
