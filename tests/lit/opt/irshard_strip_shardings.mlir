// RUN: irshard opt %s --split-input-file -p 'irshard-strip-shardings' | filecheck %s
// RUN: irshard opt %s --split-input-file -p 'irshard-strip-shardings{keep-meshes=false num-partitions=true}' | filecheck %s --check-prefix=NOMESH

// CHECK-LABEL: sdy.mesh @mesh
// NOMESH: module attributes {mhlo.num_partitions = 1 : i32}
// NOMESH-NOT: sdy.mesh
sdy.mesh @mesh = <["x"=2]>

// Annotations, constraints and reshards go; the program stays.
// CHECK-LABEL: func.func @strip_annotations_and_constraints(%arg0: tensor<8x8xf32>) -> tensor<8x8xf32>
// CHECK-NEXT: %[[T:.*]] = stablehlo.tanh %arg0 : tensor<8x8xf32>
// CHECK-NEXT: return %[[T]]
func.func @strip_annotations_and_constraints(%arg0: tensor<8x8xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"x"}, {}]>}) -> tensor<8x8xf32> {
  %0 = stablehlo.tanh %arg0 {sdy.sharding = #sdy.sharding_per_value<[<@mesh, [{"x"}, {}]>]>} : tensor<8x8xf32>
  %1 = sdy.sharding_constraint %0 <@mesh, [{}, {"x"}]> : tensor<8x8xf32>
  %2 = sdy.reshard %1 <@mesh, [{"x"}, {}]> : tensor<8x8xf32>
  return %2 : tensor<8x8xf32>
}

// -----

sdy.mesh @mesh = <["x"=2]>

// What propagation records (origins, edges) goes with the shardings.
// CHECK-LABEL: func.func @strip_propagation_records(%arg0: tensor<8xf32>) -> tensor<8xf32>
// CHECK-NOT: sdy.
func.func @strip_propagation_records(%arg0: tensor<8xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"x"}]>, sdy.sharding_origins = {x = "self"}}) -> (tensor<8xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"x"}]>, sdy.sharding_origins = {x = "input: 0"}}) {
  %0 = stablehlo.negate %arg0 {sdy.sharding = #sdy.sharding_per_value<[<@mesh, [{"x"}]>]>, sdy.sharding_origins = [{x = "input: 0"}]} : tensor<8xf32>
  return %0 : tensor<8xf32>
}
