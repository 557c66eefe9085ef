// RUN: irshard opt %s --split-input-file -p 'irshard-constrain{match=stablehlo.tanh sharding=_,x}' | filecheck %s --check-prefix=NAME
// RUN: irshard opt %s --split-input-file -p 'irshard-constrain{match=model.jl:5 sharding=x,_}' | filecheck %s --check-prefix=LOC
// RUN: irshard opt %s --split-input-file -p 'irshard-constrain{match=stablehlo.tanh sharding=_,x},sdy-propagation-pipeline' | filecheck %s --check-prefix=PROP

sdy.mesh @mesh = <["x"=2]>

// NAME-LABEL: func.func @main
// NAME: %[[T:.*]] = stablehlo.tanh %arg0
// NAME-NEXT: %[[C:.*]] = sdy.sharding_constraint %[[T]] <@mesh, [{}, {"x"}]> : tensor<8x8xf32>
// NAME-NEXT: stablehlo.negate %[[C]]
// LOC-LABEL: func.func @main
// LOC: %[[N:.*]] = stablehlo.negate
// LOC-NEXT: %[[C:.*]] = sdy.sharding_constraint %[[N]] <@mesh, [{"x"}, {}]>
// LOC-NEXT: return %[[C]]
// PROP-LABEL: func.func @main
// PROP-SAME: -> (tensor<8x8xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}, {"x"}]>})
func.func @main(%arg0: tensor<8x8xf32>) -> tensor<8x8xf32> {
  %0 = stablehlo.tanh %arg0 : tensor<8x8xf32> loc("model.jl":4:3)
  %1 = stablehlo.negate %0 : tensor<8x8xf32> loc("/src/model.jl":5:3)
  return %1 : tensor<8x8xf32>
}
