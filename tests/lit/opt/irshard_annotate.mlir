// RUN: irshard opt %s --split-input-file -p 'irshard-annotate{mesh="x=2,y=2" args="0=x,_;rhs=_,y?" results="0=_,y"}' | filecheck %s

// A module as another frontend emits it: no mesh, no shardings.

// CHECK-LABEL: sdy.mesh @mesh = <["x"=2, "y"=2]>
// CHECK-LABEL: func.func @main
// CHECK-SAME: %arg0: tensor<8x16xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"x"}, {}]>}
// CHECK-SAME: %arg1: tensor<16x8xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}, {"y", ?}]>}
// CHECK-SAME: -> (tensor<8x8xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}, {"y"}]>})
func.func @main(%arg0: tensor<8x16xf32>, %arg1: tensor<16x8xf32> loc("rhs")) -> tensor<8x8xf32> {
  %0 = stablehlo.dot_general %arg0, %arg1, contracting_dims = [1] x [0] : (tensor<8x16xf32>, tensor<16x8xf32>) -> tensor<8x8xf32>
  return %0 : tensor<8x8xf32>
}

// -----

// Shardings already in the module are kept; the pass overrides those it is
// given, and an existing @mesh is replaced by the new one.

// CHECK-LABEL: sdy.mesh @mesh = <["x"=2, "y"=2]>
// CHECK-LABEL: func.func @main
// CHECK-SAME: %arg0: tensor<8x16xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"x"}, {}]>}
// CHECK-SAME: %arg1: tensor<16x8xf32> {mhlo.frontend = "keep", sdy.sharding = #sdy.sharding<@mesh, [{}, {"y", ?}]>}
sdy.mesh @mesh = <["x"=4]>
func.func @main(%arg0: tensor<8x16xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}, {"x"}]>},
                %arg1: tensor<16x8xf32> {mhlo.frontend = "keep"} loc("rhs")) -> tensor<8x8xf32> {
  %0 = stablehlo.dot_general %arg0, %arg1, contracting_dims = [1] x [0] : (tensor<8x16xf32>, tensor<16x8xf32>) -> tensor<8x8xf32>
  return %0 : tensor<8x8xf32>
}
