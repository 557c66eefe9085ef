// A module whose shardings are GSPMD's `mhlo.sharding` strings, as older
// jax.export artifacts and other frontends write them: read over --mesh (a
// replicated last tile dimension is the axis it does not use), `{replicated}`
// kept replicated, the mesh inferred when none is given, and the module's own
// file and line where operations carry no location.
// RUN: irshard compile %s --mesh x=4,y=2 | filecheck %s
// RUN: irshard compile %s | filecheck %s --check-prefix=INFERRED
// RUN: %exit 2 irshard compile %s --mesh x=8 2> %t.err
// RUN: filecheck %s --check-prefix=BAD < %t.err

// CHECK: gspmd_shardings.mlir:main  mesh x=4,y=2 (8 cpu devices)  stage optimized
// CHECK: arg0  f32[16,8]  _,x       f32[16,2]
// CHECK: arg1  f32[8,4]   _,_       f32[8,4]
// CHECK: 0  result  f32[16,4]  x,y       f32[4,2]
// CHECK: all-to-all {{.*}}  x  4  1  {{[a-z]+ +[0-9.]+ [nmu]?s}}  gspmd_shardings.mlir:[[# @LINE + 11]]

// INFERRED: mesh x=4,y=2 (8 cpu devices)
// INFERRED: arg0  f32[16,8]  _,x
// INFERRED: note: mesh x=4,y=2 inferred from the module's mhlo.sharding shardings; give --mesh to name its axes

// BAD: irshard: error: {{.*}}gspmd_shardings.mlir: argument 0 has mhlo.sharding "{devices=[1,4,2]<=[8] last_tile_dim_replicate}", which is not a sharding over the mesh x=8 (8 devices); give a --mesh whose axes it tiles (its tile counts: 1x4x2)

module @jit_f attributes {mhlo.num_partitions = 8 : i32, mhlo.num_replicas = 1 : i32} {
  func.func public @main(%arg0: tensor<16x8xf32> {mhlo.sharding = "{devices=[1,4,2]<=[8] last_tile_dim_replicate}"},
                         %arg1: tensor<8x4xf32> {mhlo.sharding = "{replicated}"}) -> (tensor<16x4xf32> {mhlo.sharding = "{devices=[4,2]<=[8]}"}) {
    %0 = stablehlo.dot_general %arg0, %arg1, contracting_dims = [1] x [0] : (tensor<16x8xf32>, tensor<8x4xf32>) -> tensor<16x4xf32>
    return %0 : tensor<16x4xf32>
  }
}
