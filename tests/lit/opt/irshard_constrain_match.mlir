// irshard-constrain's match= forms on a line that holds several ops, one of
// them a size-1 broadcast the sharding cannot divide: by line, that op is
// left alone; by op name and line, or by index on the line, one op is
// constrained; an op picked alone must take the sharding.
// RUN: irshard opt %s -p 'irshard-constrain{match=model.py:7 sharding=x,_}' | filecheck %s --check-prefix=LINE
// RUN: irshard opt %s -p 'irshard-constrain{match=multiply@model.py:7 sharding=_,x}' | filecheck %s --check-prefix=OPLINE
// RUN: irshard opt %s -p 'irshard-constrain{match=stablehlo.add@model.py:7 sharding=_,x}' | filecheck %s --check-prefix=FULLNAME
// RUN: irshard opt %s -p 'irshard-constrain{match=model.py:7#3 sharding=x,_}' | filecheck %s --check-prefix=INDEX
// RUN: %exit 2 irshard opt %s -p 'irshard-constrain{match=model.py:7#1 sharding=x,_}' 2>&1 | filecheck %s --check-prefix=ALONE
// RUN: %exit 2 irshard opt %s -p 'irshard-constrain{match=model.py:7#9 sharding=x,_}' 2>&1 | filecheck %s --check-prefix=RANGE
// RUN: %exit 2 irshard opt %s -p 'irshard-constrain{match=broadcast_in_dim@model.py:7 sharding=x,_}' 2>&1 | filecheck %s --check-prefix=NODIV
// RUN: %exit 2 irshard opt %s -p 'irshard-constrain{match=model.py:x sharding=x,_}' 2>&1 | filecheck %s --check-prefix=FORM
// RUN: %exit 2 irshard opt %s -p 'irshard-constrain{match=model.py:7#0 sharding=x,_}' 2>&1 | filecheck %s --check-prefix=ZERO

// Every op at the line the sharding divides: the multiply and the add, not
// the [1,8] broadcast.
// LINE: %[[B:.*]] = stablehlo.broadcast_in_dim
// LINE-NOT: sdy.sharding_constraint %[[B]]
// LINE: %[[M:.*]] = stablehlo.multiply
// LINE-NEXT: sdy.sharding_constraint %[[M]] <@mesh, [{"x"}, {}]>
// LINE: %[[A:.*]] = stablehlo.add
// LINE-NEXT: sdy.sharding_constraint %[[A]] <@mesh, [{"x"}, {}]>

// OPLINE: %[[M:.*]] = stablehlo.multiply
// OPLINE-NEXT: sdy.sharding_constraint %[[M]] <@mesh, [{}, {"x"}]>
// OPLINE-NOT: sdy.sharding_constraint

// FULLNAME: %[[A:.*]] = stablehlo.add
// FULLNAME-NEXT: sdy.sharding_constraint %[[A]] <@mesh, [{}, {"x"}]>
// FULLNAME-NEXT: return

// The third op at the line is the add.
// INDEX-NOT: sdy.sharding_constraint
// INDEX: %[[A:.*]] = stablehlo.add
// INDEX-NEXT: sdy.sharding_constraint %[[A]] <@mesh, [{"x"}, {}]>

// ALONE: irshard: error: irshard-constrain: sharding 'x,_' for the result of stablehlo.broadcast_in_dim at model.py:7: dimension 0 has size 1, which is not divisible by 2 (x=2)
// RANGE: irshard: error: irshard-constrain: match 'model.py:7#9': 3 operation(s) match before the index, so there is no #9 (they are: #1 stablehlo.broadcast_in_dim -> tensor<1x8xf32>; #2 stablehlo.multiply -> tensor<8x8xf32>; #3 stablehlo.add -> tensor<8x8xf32>)
// NODIV: irshard: error: irshard-constrain: sharding 'x,_' for the result of stablehlo.broadcast_in_dim at model.py:7
// FORM: irshard: error: irshard-constrain: match 'model.py:x': 'model.py:x' is not an op name
// ZERO: irshard: error: irshard-constrain: match 'model.py:7#0': '#0' is not an index from 1

sdy.mesh @mesh = <["x"=2]>
func.func @main(%arg0: tensor<8x8xf32>, %arg1: tensor<8xf32>) -> tensor<8x8xf32> {
  %0 = stablehlo.broadcast_in_dim %arg1, dims = [1] : (tensor<8xf32>) -> tensor<1x8xf32> loc("model.py":7:5)
  %1 = stablehlo.multiply %arg0, %arg0 : tensor<8x8xf32> loc("model.py":7:9)
  %2 = stablehlo.add %1, %arg0 : tensor<8x8xf32> loc("model.py":7:13)
  return %2 : tensor<8x8xf32>
}
