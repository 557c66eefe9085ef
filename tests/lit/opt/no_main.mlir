// A module of several functions and no @main (as Reactant exports): the
// passes that take no entry run as on any module; Shardy's propagation,
// which takes @main or a module's only function, would abort the process,
// and is one error line instead.
// RUN: irshard opt %s -p 'sdy-add-data-flow-edges,sdy-close-shardings' | filecheck %s
// RUN: %exit 2 irshard opt %s -p 'sdy-propagation-pipeline' 2> %t.err
// RUN: filecheck %s --check-prefix=ABORT < %t.err
// RUN: sed 's/@main2/@main/' %s | irshard opt - -p 'sdy-propagation-pipeline' | filecheck %s --check-prefix=MAIN

// CHECK: sdy.mesh @mesh = <["x"=2]>
// CHECK: func.func @main1(%arg0: tensor<8xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"x"}]>})
// CHECK: func.func @main2(%arg0: tensor<8xf32>)

// ABORT: irshard: error: pass 'sdy-propagation-pipeline' aborted (SIGABRT): Shardy takes the function named main, or a module's only function, as the entry, and this module has 2 functions (@main1, @main2) and no @main; rename its entry function to @main
// ABORT-NOT: LLVM ERROR

// MAIN: func.func @main(%arg0: tensor<8xf32>) -> tensor<8xf32>
sdy.mesh @mesh = <["x"=2]>
func.func @main1(%arg0: tensor<8xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"x"}]>}) -> tensor<8xf32> {
  %0 = stablehlo.add %arg0, %arg0 : tensor<8xf32>
  return %0 : tensor<8xf32>
}
func.func @main2(%arg0: tensor<8xf32>) -> tensor<8xf32> {
  %0 = stablehlo.multiply %arg0, %arg0 : tensor<8xf32>
  return %0 : tensor<8xf32>
}
