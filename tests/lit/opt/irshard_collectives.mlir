// RUN: irshard opt %s -p 'irshard-constrain{match=model.jl:13 sharding=_,x},sdy-propagation-pipeline,sdy-insert-explicit-reshards{enable-full-version=true},sdy-reshard-to-collectives,irshard-collectives' -o %t.mlir 2> %t.txt
// RUN: filecheck %s < %t.txt
// RUN: filecheck %s --check-prefix=IR < %t.mlir
// RUN: irshard opt %s -p 'sdy-propagation-pipeline,sdy-insert-explicit-reshards{enable-full-version=true},sdy-reshard-to-collectives,irshard-collectives{format=json}' -o %t.mlir 2>&1 | filecheck %s --check-prefix=JSON

// The Shardy-level collectives after explicit resharding, reported as the
// HLO report is (stage sdy).
// CHECK: module:main  mesh x=2,y=2 (4 devices)  stage sdy
// CHECK: lhs   f32[8,16]  x,y       f32[4,8]
// CHECK: all-gather  sdy.all_gather  f32[8,8]  256  128  x  2  1  model.jl:12 [inferred]
// CHECK-NEXT: all-reduce  sdy.all_reduce  f32[8,4]  128  128  y  2  1  model.jl:12
// CHECK: totals: 2 collectives (1 all-gather, 1 all-reduce)
// IR: sdy.all_gather [{"x"}, {}]
// IR: sdy.all_reduce {"y"}
// JSON: "stage": "sdy",
// JSON: "kind": "all-reduce",
// JSON: "source": {
// JSON-NEXT: "file": "model.jl",
// JSON-NEXT: "line": 12,
// JSON-NEXT: "function": null,
// JSON-NEXT: "stack": [
// JSON-NEXT: {"file": "model.jl", "line": 12, "function": null}
sdy.mesh @mesh = <["x"=2, "y"=2]>

func.func @main(%arg0: tensor<8x16xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"x"}, {"y"}]>} loc("lhs"),
                %arg1: tensor<16x8xf32> loc("rhs")) -> tensor<8x8xf32> {
  %0 = stablehlo.dot_general %arg0, %arg1, contracting_dims = [1] x [0] : (tensor<8x16xf32>, tensor<16x8xf32>) -> tensor<8x8xf32> loc("model.jl":12:3)
  %1 = stablehlo.tanh %0 : tensor<8x8xf32> loc("model.jl":13:3)
  return %1 : tensor<8x8xf32>
}
