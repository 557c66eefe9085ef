// Shardy's debug option that records where each sharding came from crashes
// (SIGSEGV) on a manual computation that threads a token, in the Shardy of
// jaxlib 0.10: it looks up a data-flow edge the token never gets. irshard
// records origins in a child process, so every command that wants them still
// succeeds: the report and the propagated module come without origins,
// saying so. (jaxlib 0.12's Shardy records them.)
// RUN: irshard compile %s --explain | filecheck %s --check-prefixes=CHECK,CHECK-%jax
// RUN: irshard compile %s --emit propagated 2> %t.err | filecheck %s --check-prefixes=IR,IR-%jax
// RUN: filecheck %s --allow-empty --check-prefixes=NOTE,NOTE-%jax < %t.err
// RUN: irshard compile %s --format json | filecheck %s --check-prefix=JSON
// RUN: irshard compile %s --format html -o %t.html
// RUN: filecheck %s --check-prefixes=HTML,HTML-%jax < %t.html

// CHECK: all-gather {{.*}} origins_crash.mlir:[[# @LINE + 24]]
// CHECK: why
// CHECK-NEXT: all-gather  origins_crash.mlir:[[# @LINE + 22]]
// CHECK-JAX010: note: Shardy crashed (SIGSEGV) recording where each sharding came from; shardings are shown without their origins
// CHECK-JAX012-NOT: crashed

// IR: stablehlo.dot_general {{.*}} {sdy.sharding = #sdy.sharding_per_value<[<@mesh, [{"x"}, {}]>]>
// IR-JAX010-NOT: sdy.sharding_origins
// IR-JAX012-SAME: sdy.sharding_origins
// NOTE-JAX010: irshard: note: Shardy crashed (SIGSEGV) recording where each sharding came from
// NOTE-JAX012-NOT: {{.}}

// A report that does not explain does not propagate: no note.
// JSON-NOT: crashed
// HTML: origins_crash.mlir
// HTML-JAX010: Shardy crashed (SIGSEGV)

sdy.mesh @mesh = <["x"=4]>
func.func @main(%arg0: tensor<8x8xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"x"}, {}]>}) -> tensor<8x8xf32> {
  %t0 = stablehlo.create_token : !stablehlo.token
  %0:2 = sdy.manual_computation(%arg0, %t0) in_shardings=[<@mesh, [{"x"}, {}]>, <@mesh, []>] out_shardings=[<@mesh, [{"x"}, {}]>, <@mesh, []>] manual_axes={"x"} (%a: tensor<2x8xf32>, %t: !stablehlo.token) {
    %1 = stablehlo.add %a, %a : tensor<2x8xf32>
    sdy.return %1, %t : tensor<2x8xf32>, !stablehlo.token
  } : (tensor<8x8xf32>, !stablehlo.token) -> (tensor<8x8xf32>, !stablehlo.token)
  %2 = stablehlo.dot_general %0#0, %0#0, contracting_dims = [1] x [0] : (tensor<8x8xf32>, tensor<8x8xf32>) -> tensor<8x8xf32>
  return %2 : tensor<8x8xf32>
}
