// RUN: irshard opt %s -p 'irshard-annotate{mesh="x=2" args="0=x"},sdy-propagation-pipeline,irshard-strip-shardings' --print-ir-after-all -o %t.mlir 2>&1 | filecheck %s

// CHECK: // -----// IR Dump After irshard-annotate //----- //
// CHECK: sdy.sharding = #sdy.sharding<@mesh, [{"x"}]>
// CHECK: // -----// IR Dump After sdy-propagation-pipeline //----- //
// CHECK: stablehlo.negate %arg0 {sdy.sharding = #sdy.sharding_per_value<[<@mesh, [{"x"}]>]>}
// CHECK: // -----// IR Dump After irshard-strip-shardings //----- //
// CHECK-NOT: sdy.sharding
func.func @main(%arg0: tensor<8xf32>) -> tensor<8xf32> {
  %0 = stablehlo.negate %arg0 : tensor<8xf32>
  return %0 : tensor<8xf32>
}
