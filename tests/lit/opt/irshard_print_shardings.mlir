// RUN: irshard opt %s -p 'sdy-import-pipeline,sdy-aggressive-propagate{debug-sharding-origins=true},irshard-print-shardings' -o %t.mlir 2>&1 | filecheck %s

// CHECK: value                  type             sharding                origin     source
// CHECK-NEXT: @main arg 0            tensor<8x8xf32>  <@mesh, [{"x"}, {}]>    x: self
// CHECK-NEXT: @main result 0         tensor<8x8xf32>  <@mesh, [{"x", ?}, {?}]>  x: input: 0
// CHECK-NEXT: stablehlo.tanh         tensor<8x8xf32>  <@mesh, [{"x", ?}, {?}]>  x: input: 0  model.jl:12
// CHECK-NEXT: stablehlo.add          tensor<8x8xf32>  <@mesh, [{"x", ?}, {?}]>  x: input: 0  model.jl:13
sdy.mesh @mesh = <["x"=2]>
func.func @main(%arg0: tensor<8x8xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"x"}, {}]>}) -> tensor<8x8xf32> {
  %0 = stablehlo.tanh %arg0 : tensor<8x8xf32> loc("model.jl":12:3)
  %1 = stablehlo.add %0, %0 : tensor<8x8xf32> loc("model.jl":13:3)
  return %1 : tensor<8x8xf32>
}
