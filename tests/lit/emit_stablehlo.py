# The stablehlo stage: JAX's lowering with irshard's mesh and shardings.
# RUN: irshard compile %s --mesh x=2,y=2 --shard b=_,y? --out-shard 0=x,_ --emit stablehlo | filecheck %s

# CHECK: module @jit_matmul attributes {mhlo.num_partitions = 4 : i32, mhlo.num_replicas = 1 : i32}
# CHECK-NEXT: sdy.mesh @mesh = <["x"=2, "y"=2]>
# CHECK-NEXT: func.func public @main(
# CHECK-SAME: %arg0: tensor<8x16xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"x"}, {}]>}
# CHECK-SAME: %arg1: tensor<16x4xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}, {"y", ?}]>}
# CHECK-SAME: -> (tensor<8x4xf32> {jax.result_info = "result", sdy.sharding = #sdy.sharding<@mesh, [{"x"}, {}]>})
# CHECK: stablehlo.dot_general %arg0, %arg1


def matmul(a: "f32[8@x,16]", b: "f32[16,4]"):
    return a @ b
