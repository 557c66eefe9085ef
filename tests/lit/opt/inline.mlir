// `inline` works as mlir-opt's does (jaxlib's MLIR has no inliner interface
// for func, so irshard's own stands in under the same name): calls are
// replaced by their callees' bodies, unused private callees erased, then
// canonicalize runs; the inlined ops are located as called from the call.
// RUN: irshard opt %s --split-input-file -p inline | filecheck %s
// RUN: irshard opt %s --split-input-file -inline='default-pipeline=' --mlir-print-debuginfo | filecheck %s --check-prefix=LOC
// RUN: irshard opt --list-passes | filecheck %s --check-prefix=LIST
// RUN: irshard opt %s --split-input-file -inline='only-private=true default-pipeline=' | filecheck %s --check-prefix=PRIVATE

// LIST: irshard's passes:
// LIST-NEXT: inline
// LIST-NEXT: Inline function calls, as mlir-opt's `inline` does.
// LIST: passes registered with MLIR
// LIST-NOT: {{^  inline$}}

// CHECK-LABEL: func.func public @main
// CHECK-NOT: call
// CHECK: stablehlo.multiply %arg0, %arg0
// CHECK: stablehlo.while
// CHECK: stablehlo.add %iterArg, %arg0
// CHECK: stablehlo.negate
// CHECK: %[[SQ:.*]] = stablehlo.multiply %[[NEG:.*]], %[[NEG]]
// CHECK: stablehlo.add %iterArg, %[[NEG]]
// CHECK: stablehlo.negate
// CHECK-NOT: func.func private
// LOC: stablehlo.multiply %arg0, %arg0 : tensor<8xf32> loc(#[[MUL:loc[0-9]+]])
// LOC: #[[MUL]] = loc(callsite(#{{loc[0-9]*}} at #{{loc[0-9]*}}))
func.func public @main(%arg0: tensor<8xf32>) -> tensor<8xf32> {
  %0 = call @f(%arg0) : (tensor<8xf32>) -> tensor<8xf32>
  %1 = call @f(%0) : (tensor<8xf32>) -> tensor<8xf32>
  return %1 : tensor<8xf32>
}
func.func private @f(%arg0: tensor<8xf32>) -> tensor<8xf32> {
  %0 = stablehlo.multiply %arg0, %arg0 : tensor<8xf32>
  %c = stablehlo.constant dense<0> : tensor<i32>
  %1:2 = stablehlo.while(%iterArg = %0, %i = %c) : tensor<8xf32>, tensor<i32>
   cond {
    %c2 = stablehlo.constant dense<3> : tensor<i32>
    %p = stablehlo.compare LT, %i, %c2 : (tensor<i32>, tensor<i32>) -> tensor<i1>
    stablehlo.return %p : tensor<i1>
  } do {
    %a = stablehlo.add %iterArg, %arg0 : tensor<8xf32>
    %one = stablehlo.constant dense<1> : tensor<i32>
    %n = stablehlo.add %i, %one : tensor<i32>
    stablehlo.return %a, %n : tensor<8xf32>, tensor<i32>
  }
  %2 = call @g(%1#0) : (tensor<8xf32>) -> tensor<8xf32>
  return %2 : tensor<8xf32>
}
func.func private @g(%arg0: tensor<8xf32>) -> tensor<8xf32> {
  %0 = stablehlo.negate %arg0 : tensor<8xf32>
  return %0 : tensor<8xf32>
}

// -----

// A recursive function and a declaration stay called; a public callee
// stays after its calls are inlined. With only-private (how the propagated
// stage inlines a JAX module's outlined functions), its calls stay too.
// PRIVATE-LABEL: func.func public @main(%arg0: tensor<4xf32>)
// PRIVATE-NEXT: call @rec
// PRIVATE-NEXT: call @ext
// PRIVATE-NEXT: call @kept
// CHECK-LABEL: func.func public @main
// CHECK-NEXT: call @rec
// CHECK-NEXT: call @ext
// CHECK-NEXT: stablehlo.abs
// CHECK: func.func private @rec
// CHECK: func.func private @ext
// CHECK: func.func public @kept
func.func public @main(%arg0: tensor<4xf32>) -> tensor<4xf32> {
  %0 = call @rec(%arg0) : (tensor<4xf32>) -> tensor<4xf32>
  %1 = call @ext(%0) : (tensor<4xf32>) -> tensor<4xf32>
  %2 = call @kept(%1) : (tensor<4xf32>) -> tensor<4xf32>
  return %2 : tensor<4xf32>
}
func.func private @rec(%arg0: tensor<4xf32>) -> tensor<4xf32> {
  %0 = call @rec(%arg0) : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}
func.func private @ext(tensor<4xf32>) -> tensor<4xf32>
func.func public @kept(%arg0: tensor<4xf32>) -> tensor<4xf32> {
  %0 = stablehlo.abs %arg0 : tensor<4xf32>
  return %0 : tensor<4xf32>
}
