// Malformed MLIR is reported where MLIR finds the problem; a module without
// @main cannot be compiled.
// RUN: %exit 2 irshard opt %inputs/undefined_value.mlir -p canonicalize 2> %t.err
// RUN: filecheck %s --check-prefix=PARSE < %t.err
// RUN: %exit 2 irshard compile %inputs/undefined_value.mlir --mesh x=2 2> %t.err
// RUN: filecheck %s --check-prefix=PARSE < %t.err
// RUN: %exit 2 irshard compile %s --mesh x=2 2> %t.err
// RUN: filecheck %s --check-prefix=NOMAIN < %t.err
// RUN: irshard opt %inputs/undefined_value.mlir --split-input-file --verify-diagnostics | filecheck %s --check-prefix=VERIFY

// PARSE: irshard: error: {{.*}}undefined_value.mlir:5:29: use of undeclared SSA value name
// NOMAIN: irshard: error: the module has no function @main (its functions: @step); irshard compiles the entry function @main
// The undefined value is the error its input expects; the other chunk
// prints its module.
// VERIFY: func.func @main
// VERIFY-NOT: // -----

func.func @step(%arg0: tensor<8xf32>) -> tensor<8xf32> {
  return %arg0 : tensor<8xf32>
}
