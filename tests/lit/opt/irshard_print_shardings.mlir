// RUN: irshard opt %s -p 'sdy-import-pipeline,sdy-aggressive-propagate{debug-sharding-origins=true},irshard-print-shardings' -o %t.mlir 2>&1 | filecheck %s
// RUN: irshard opt %s -p 'irshard-print-shardings' 2>&1 >/dev/null | filecheck %s --check-prefix=BEFORE

// After propagation with origins: every value, its sharding, and where each
// axis came from.
// CHECK: value                          type             sharding                  origin       source
// CHECK-NEXT: @print_after_propagation arg 0     tensor<8x8xf32>  <@mesh, [{"x"}, {}]>      x: self
// CHECK-NEXT: @print_after_propagation result 0  tensor<8x8xf32>  <@mesh, [{"x", ?}, {?}]>  x: input: 0
// CHECK-NEXT: stablehlo.tanh                 tensor<8x8xf32>  <@mesh, [{"x", ?}, {?}]>  x: input: 0  model.jl:12
// CHECK-NEXT: stablehlo.add                  tensor<8x8xf32>  <@mesh, [{"x", ?}, {?}]>  x: input: 0  model.jl:13
// Before: only what the module says.
// BEFORE: value                          type             sharding              origin  source
// BEFORE-NEXT: @print_after_propagation arg 0  tensor<8x8xf32>  <@mesh, [{"x"}, {}]>
// BEFORE-NOT: stablehlo
sdy.mesh @mesh = <["x"=2]>
func.func @print_after_propagation(%arg0: tensor<8x8xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"x"}, {}]>}) -> tensor<8x8xf32> {
  %0 = stablehlo.tanh %arg0 : tensor<8x8xf32> loc("model.jl":12:3)
  %1 = stablehlo.add %0, %0 : tensor<8x8xf32> loc("model.jl":13:3)
  return %1 : tensor<8x8xf32>
}
