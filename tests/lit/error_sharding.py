# A sharding that does not fit its tensor: one error per violation.
# RUN: %exit 2 irshard compile %s --mesh x=2,y=4 --shard a=x 2> %t.err
# RUN: filecheck %s --check-prefix=RANK < %t.err
# RUN: %exit 2 irshard compile %s --mesh x=2,y=4 --shard a=z,_ 2> %t.err
# RUN: filecheck %s --check-prefix=AXIS < %t.err
# RUN: %exit 2 irshard compile %s --mesh x=2,y=4 --shard a=x,x 2> %t.err
# RUN: filecheck %s --check-prefix=TWICE < %t.err
# RUN: %exit 2 irshard compile %s --mesh x=2,y=4 --shard a=_,y 2> %t.err
# RUN: filecheck %s --check-prefix=DIVIDE < %t.err
# RUN: %exit 2 irshard compile %s --mesh x=2,y=4 --shard b=x 2> %t.err
# RUN: filecheck %s --check-prefix=NOARG < %t.err

# RANK: irshard: error: sharding 'x' for input 'a' (rule --shard a=x) has 1 entry but the tensor has shape [8,6] (rank 2); give one entry per dimension, e.g. _,_
# AXIS: irshard: error: sharding 'z,_' for input 'a' (rule --shard a=z,_): unknown mesh axis 'z'; the mesh has axes x, y
# TWICE: irshard: error: sharding 'x,x' for input 'a' (rule --shard a=x,x): mesh axis 'x' is used twice; an axis may shard only one dimension of a tensor
# DIVIDE: irshard: error: sharding '_,y' for input 'a' (rule --shard a=_,y): dimension 1 has size 6, which is not divisible by 4 (y=4); shard it over axes whose sizes divide 6, or leave it '_'
# NOARG: irshard: error: --shard b=x: 'b' matches no input; the inputs are a


def f(a: "f32[8,6]"):
    return a * 2
