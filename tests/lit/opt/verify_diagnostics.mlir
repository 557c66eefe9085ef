// --verify-diagnostics checks each chunk's diagnostics against its
// expected-* comments, as mlir-opt does: at the comment's line, @+N, @-N,
// @above, @below (the next line that is no comment of this kind), @unknown;
// -re takes {{regex}} parts. The chunks that work still print.
// RUN: irshard opt %s --split-input-file --verify-diagnostics | filecheck %s
// A wrong expectation fails with every mismatch reported, and exit 1.
// RUN: %exit 1 irshard opt %inputs/verify_mismatch.mlir --split-input-file --verify-diagnostics 2> %t.err
// RUN: filecheck %s --check-prefix=MISMATCH < %t.err
// Operations of unknown dialects parse with --allow-unregistered-dialect.
// RUN: %exit 2 irshard opt %inputs/unregistered_op.mlir 2> %t.unreg
// RUN: filecheck %s --check-prefix=UNREG < %t.unreg
// RUN: irshard opt %inputs/unregistered_op.mlir --allow-unregistered-dialect | filecheck %s --check-prefix=ALLOWED

// CHECK: func.func @works
// CHECK-NOT: // -----
// CHECK-NOT: irshard: error

func.func @below() -> i32 {
  // expected-error @below {{use of undeclared SSA value name}}
  return %x : i32
}

// -----

func.func @above() -> i32 {
  return %y : i32
  // expected-error @above {{use of undeclared SSA value name}}
}

// -----

func.func @minus() -> i32 {
  return %z : i32
  // expected-error @-1 {{undeclared SSA value}}
}

// -----

func.func @regex() -> i32 {
  return %w : i32 // expected-error-re {{use of {{[a-z]+}} SSA value name}}
}

// -----

func.func @works(%arg0: tensor<4xf32>) -> tensor<4xf32> {
  return %arg0 : tensor<4xf32>
}

// MISMATCH: verify_mismatch.mlir:3:10: error: unexpected error: use of undeclared SSA value name
// MISMATCH: verify_mismatch.mlir:2: error: expected error "no such message" was not produced
// MISMATCH: verify_mismatch.mlir:7: error: 'error' diagnostic emitted when expecting a 'warning'
// MISMATCH: verify_mismatch.mlir:7: error: expected warning "use of undeclared SSA value name" was not produced
// MISMATCH: verify_mismatch.mlir:13: error: expected remark "never emitted" was not produced
// MISMATCH: verify_mismatch.mlir:17: error: invalid regex in expected-error-re: {{.*}}
// MISMATCH: verify_mismatch.mlir:18:10: error: unexpected error: use of undeclared SSA value name

// UNREG: irshard: error: {{.*}}unregistered_op.mlir:2:{{[0-9]+}}: operation being parsed with an unregistered dialect
// ALLOWED: "mydialect.op"() : () -> i32
