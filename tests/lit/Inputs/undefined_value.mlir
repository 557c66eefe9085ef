func.func @main(%arg0: tensor<8xf32>) -> tensor<8xf32> { return %arg0 : tensor<8xf32> }
// -----
func.func @main(%arg0: tensor<8xf32>) -> tensor<8xf32> {
  // expected-error @+1 {{use of undeclared SSA value name}}
  %0 = stablehlo.add %arg0, %b : tensor<8xf32>
  return %0 : tensor<8xf32>
}
