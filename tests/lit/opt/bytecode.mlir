// A module in MLIR bytecode reads like its text.
// RUN: %python %inputs/to_bytecode.py %s %t.mlirbc
// RUN: irshard opt %t.mlirbc -p 'irshard-annotate{mesh="x=2" args="0=x"}' | filecheck %s
// RUN: irshard compile %t.mlirbc --mesh x=2 --shard arg0=x | filecheck %s --check-prefix=REPORT

// CHECK: func.func @main(%arg0: tensor<8xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"x"}]>})
// REPORT: arg0  f32[8]  x  f32[4]
func.func @main(%arg0: tensor<8xf32>) -> tensor<8xf32> {
  %0 = stablehlo.negate %arg0 : tensor<8xf32>
  return %0 : tensor<8xf32>
}
