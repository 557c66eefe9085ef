// Each mistake in irshard-constrain's options is one error line.
// RUN: %exit 2 irshard opt %s -p 'irshard-constrain{match=stablehlo.add sharding=x}' 2> %t.NOMATCH
// RUN: filecheck %s --check-prefix=NOMATCH < %t.NOMATCH
// RUN: %exit 2 irshard opt %s -p 'irshard-constrain{match=stablehlo.tanh sharding=x}' 2> %t.RANK
// RUN: filecheck %s --check-prefix=RANK < %t.RANK
// RUN: %exit 2 irshard opt %s -p 'irshard-constrain{match=stablehlo.tanh sharding=y,_}' 2> %t.AXIS
// RUN: filecheck %s --check-prefix=AXIS < %t.AXIS
// RUN: %exit 2 irshard opt %s -p 'irshard-constrain{sharding=x}' 2> %t.OPTIONS
// RUN: filecheck %s --check-prefix=OPTIONS < %t.OPTIONS

// NOMATCH: irshard: error: irshard-constrain: no operation matches 'stablehlo.add'
// RANK: irshard: error: irshard-constrain: 1 operation(s) match 'stablehlo.tanh' but none has a result of rank 1
// AXIS: irshard: error: irshard-constrain: sharding 'y,_' for the result of stablehlo.tanh at model.jl:4: unknown mesh axis 'y'; the mesh has axes x
// OPTIONS: irshard: error: irshard-constrain: give match=OP_NAME|FILE:LINE|OP@FILE:LINE and sharding=SPEC
sdy.mesh @mesh = <["x"=2]>
func.func @main(%arg0: tensor<8x8xf32>) -> tensor<8x8xf32> {
  %0 = stablehlo.tanh %arg0 : tensor<8x8xf32> loc("model.jl":4:3)
  return %0 : tensor<8x8xf32>
}
