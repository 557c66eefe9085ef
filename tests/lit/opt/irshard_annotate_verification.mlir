// RUN: irshard opt %s --split-input-file --verify-diagnostics -p 'irshard-annotate{mesh="x=4" args="0=x"}' | filecheck %s

// irshard's passes report errors without a place in the file: @unknown.
// expected-error @unknown {{irshard-annotate: sharding 'x' for argument 0: dimension 0 has size 6, which is not divisible by 4 (x=4)}}
func.func @main(%arg0: tensor<6xf32>) -> tensor<6xf32> {
  return %arg0 : tensor<6xf32>
}

// -----

// expected-error @unknown {{irshard-annotate: sharding 'x' for argument 0 has 1 entry but the tensor has shape [4,4] (rank 2)}}
func.func @main(%arg0: tensor<4x4xf32>) -> tensor<4x4xf32> {
  return %arg0 : tensor<4x4xf32>
}

// -----

// expected-error @unknown {{irshard-annotate: the module has no function @main (its functions: @forward); irshard compiles the entry function @main}}
func.func @forward(%arg0: tensor<8xf32>) -> tensor<8xf32> {
  return %arg0 : tensor<8xf32>
}

// -----

// A chunk that works still prints its module (the only one printed).
// CHECK-NOT: // -----
// CHECK: func.func @main(%arg0: tensor<8xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"x"}]>})
func.func @main(%arg0: tensor<8xf32>) -> tensor<8xf32> {
  return %arg0 : tensor<8xf32>
}
