// irshard opt takes mlir-opt's and sdy_opt's spellings: passes as flags, in
// their order (single or double dash, options after '='), single-dash long
// options, --pass-pipeline and --mlir-print-debuginfo.
// RUN: irshard opt %s -sdy-populate-op-sharding-rules -canonicalize -verify-diagnostics | filecheck %s
// RUN: irshard opt %s --pass-pipeline='builtin.module(canonicalize)' -mlir-print-debuginfo | filecheck %s --check-prefix=LOC
// RUN: %exit 2 irshard opt %s -p cse -canonicalize 2> %t.both
// RUN: filecheck %s --check-prefix=BOTH < %t.both
// RUN: %exit 2 irshard opt %s -no-such-pass 2> %t.unknown
// RUN: filecheck %s --check-prefix=UNKNOWN < %t.unknown
// RUN: %exit 2 irshard opt %s -x 2> %t.short
// RUN: filecheck %s --check-prefix=SHORT < %t.short

// Shardy's warning prints the operation in a note of its own; mlir-opt
// leaves that note out while it verifies diagnostics, and so does irshard.
// CHECK-LABEL: func @unknown_custom_op
// CHECK: stablehlo.custom_call @unknown_custom_op
// LOC: loc(
// BOTH: irshard: error: give passes either as -p PIPELINE or as flags (--canonicalize), not both
// UNKNOWN: irshard: error: pipeline 'no-such-pass': unknown pass 'no-such-pass'
// SHORT: irshard: error: unrecognized argument '-x'
func.func @unknown_custom_op(%arg0: tensor<8x2xui32>) -> tensor<8x2xui64> {
  // expected-warning@+1 {{custom call @unknown_custom_op is unknown to SDY sharding rule registry}}
  %0 = stablehlo.custom_call @unknown_custom_op(%arg0) : (tensor<8x2xui32>) -> tensor<8x2xui64>
  return %0 : tensor<8x2xui64>
}
