// RUN: irshard opt %s -p 'sdy-propagation-pipeline,irshard-strip-shardings' | filecheck %s
// RUN: irshard opt %s -p 'irshard-strip-shardings{keep-meshes=false num-partitions=true}' | filecheck %s --check-prefix=NOMESH

// CHECK: sdy.mesh @mesh
// CHECK-NOT: sdy.sharding
// CHECK-LABEL: func.func @main(%arg0: tensor<8x8xf32>) -> tensor<8x8xf32>
// CHECK-NEXT: %[[T:.*]] = stablehlo.tanh %arg0 : tensor<8x8xf32>
// CHECK-NEXT: return %[[T]]
// NOMESH: module attributes {mhlo.num_partitions = 1 : i32}
// NOMESH-NOT: sdy.
sdy.mesh @mesh = <["x"=2]>
func.func @main(%arg0: tensor<8x8xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"x"}, {}]>}) -> tensor<8x8xf32> {
  %0 = stablehlo.tanh %arg0 : tensor<8x8xf32>
  %1 = sdy.sharding_constraint %0 <@mesh, [{}, {"x"}]> : tensor<8x8xf32>
  %2 = sdy.reshard %1 <@mesh, [{"x"}, {}]> : tensor<8x8xf32>
  return %2 : tensor<8x8xf32>
}
