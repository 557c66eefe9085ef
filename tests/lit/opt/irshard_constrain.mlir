// RUN: irshard opt %s --split-input-file -p 'irshard-constrain{match=stablehlo.tanh sharding=_,x}' | filecheck %s --check-prefix=NAME
// RUN: irshard opt %s --split-input-file --verify-diagnostics -p 'irshard-constrain{match=model.jl:5 sharding=x,_}' | filecheck %s --check-prefix=LOC
// RUN: irshard opt %s --split-input-file -p 'irshard-constrain{match=stablehlo.tanh sharding=_,x},sdy-propagation-pipeline' | filecheck %s --check-prefix=PROP

sdy.mesh @mesh = <["x"=2]>

// By op name: every tanh's result is constrained, and its users read the
// constrained value.
// NAME-LABEL: func.func @constrain_by_op_name
// NAME: %[[T:.*]] = stablehlo.tanh %arg0
// NAME-NEXT: %[[C:.*]] = sdy.sharding_constraint %[[T]] <@mesh, [{}, {"x"}]> : tensor<8x8xf32>
// NAME-NEXT: stablehlo.negate %[[C]]
// By source line: a suffix of the path or its base name matches.
// LOC-LABEL: func.func @constrain_by_op_name
// LOC: %[[N:.*]] = stablehlo.negate
// LOC-NEXT: %[[C:.*]] = sdy.sharding_constraint %[[N]] <@mesh, [{"x"}, {}]>
// LOC-NEXT: return %[[C]]
// Propagation honours the constraint up to the function's result.
// PROP-LABEL: func.func @constrain_by_op_name
// PROP-SAME: -> (tensor<8x8xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}, {"x"}]>})
func.func @constrain_by_op_name(%arg0: tensor<8x8xf32>) -> tensor<8x8xf32> {
  %0 = stablehlo.tanh %arg0 : tensor<8x8xf32> loc("model.jl":4:3)
  %1 = stablehlo.negate %0 : tensor<8x8xf32> loc("/src/model.jl":5:3)
  return %1 : tensor<8x8xf32>
}

// -----

sdy.mesh @mesh = <["x"=2]>

// Only results of the sharding's rank are constrained; ops in regions are
// found too.
// NAME-LABEL: func.func @constrain_inside_a_loop
// NAME: stablehlo.while
// NAME: %[[T:.*]] = stablehlo.tanh
// NAME-NEXT: sdy.sharding_constraint %[[T]] <@mesh, [{}, {"x"}]>
// LOC-NOT: // -----
// expected-error @unknown {{irshard-constrain: no operation matches 'model.jl:5'}}
func.func @constrain_inside_a_loop(%arg0: tensor<8x8xf32>) -> tensor<8x8xf32> {
  %c0 = stablehlo.constant dense<0> : tensor<i32>
  %0:2 = stablehlo.while(%i = %c0, %v = %arg0) : tensor<i32>, tensor<8x8xf32>
    cond {
      %c4 = stablehlo.constant dense<4> : tensor<i32>
      %1 = stablehlo.compare LT, %i, %c4 : (tensor<i32>, tensor<i32>) -> tensor<i1>
      stablehlo.return %1 : tensor<i1>
    } do {
      %c1 = stablehlo.constant dense<1> : tensor<i32>
      %2 = stablehlo.add %i, %c1 : tensor<i32>
      %3 = stablehlo.tanh %v : tensor<8x8xf32>
      stablehlo.return %2, %3 : tensor<i32>, tensor<8x8xf32>
    }
  return %0#1 : tensor<8x8xf32>
}
