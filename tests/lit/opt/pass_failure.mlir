// A registered pass that fails is one error naming the pass, with MLIR's
// diagnostic at its place in the file.
// RUN: %exit 2 irshard opt %s --split-input-file -p 'sdy-propagation-pipeline' 2> %t.err
// RUN: filecheck %s < %t.err
// RUN: irshard opt %s --split-input-file --verify-diagnostics -p 'sdy-propagation-pipeline' | filecheck %s --check-prefix=VERIFY

// CHECK: irshard: error: pass 'sdy-propagation-pipeline' failed: {{.*}}pass_failure.mlir:[[# @LINE + 8]]:3: ShardingGroupOps values must have the same shape for groupId: 0
// With --verify-diagnostics the failing chunk prints nothing.
// VERIFY-NOT: // -----
// VERIFY: module
sdy.mesh @mesh = <["x"=2]>
func.func @main(%arg0: tensor<8xf32>, %arg1: tensor<4xf32>) -> tensor<8xf32> {
  sdy.sharding_group %arg0 group_id=0 : tensor<8xf32>
  // expected-error @below {{ShardingGroupOps values must have the same shape for groupId: 0}}
  sdy.sharding_group %arg1 group_id=0 : tensor<4xf32>
  return %arg0 : tensor<8xf32>
}

// -----

sdy.mesh @mesh = <["x"=2]>
func.func @main(%arg0: tensor<8xf32>) -> tensor<8xf32> {
  return %arg0 : tensor<8xf32>
}
