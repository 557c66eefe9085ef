# A training step over pytrees: arguments from a function of the file
# (--args), shardings by path rules (the first match applies), gradients with
# respect to the parameters only (--grad params), the optimizer's learning
# rate static. Inputs and outputs are named by path.
# RUN: irshard compile %s --fn step --args example_args --mesh dp=2,tp=2 --shard 'params/**/w1=_,tp' --shard 'params/**/w2=tp,_' --shard 'batch/*=dp,_' | filecheck %s
# RUN: irshard compile %s --fn loss --args loss_args --mesh dp=2,tp=2 --shard 'params/**/w1=_,tp' --shard 'params/**/w2=tp,_' --shard 'batch/*=dp,_' --grad params | filecheck %s --check-prefix=GRAD
# RUN: %exit 2 irshard compile %s --fn step --args example_args --mesh dp=2,tp=2 --shard 'params/**/w3=_,tp' 2> %t.err
# RUN: filecheck %s --check-prefix=NOMATCH < %t.err
# RUN: %exit 2 irshard compile %s --fn step --args example_args --mesh dp=2,tp=2 --shard 'params/**=tp' 2> %t.err
# RUN: filecheck %s --check-prefix=NOFIT < %t.err
# RUN: %exit 2 irshard compile %s --fn loss --args loss_args --mesh dp=2,tp=2 --grad batch,opt 2> %t.err
# RUN: filecheck %s --check-prefix=GRADNAME < %t.err

# CHECK: inputs
# CHECK-NEXT: name                 type         sharding  per device
# CHECK-NEXT: params/layers/0/w1  f32[64,256]  _,tp  f32[64,128]
# CHECK-NEXT: params/layers/0/w2  f32[256,64]  tp,_  f32[128,64]
# CHECK-NEXT: params/layers/1/w1  f32[64,256]  _,tp  f32[64,128]
# CHECK-NEXT: params/layers/1/w2  f32[256,64]  tp,_  f32[128,64]
# CHECK-NEXT: batch/x             f32[32,64]   dp,_  f32[16,64]
# CHECK: outputs
# CHECK: 0  result/layers/0/w1  f32[64,256]  _,tp  f32[64,128]
# CHECK: all-reduce {{.*}}  tp  2  1  {{[a-z]+ +[0-9.]+ [nmu]?s}}  pytrees.py:[[# @LINE + 16]] (block)

# GRAD: outputs
# GRAD-NEXT: #  name
# GRAD-NEXT: 0  grad(params)/layers/0/w1  f32[64,256]  _,tp
# GRAD-NOT: grad(batch)

# NOMATCH: irshard: error: --shard params/**/w3=_,tp: 'params/**/w3' matches no input; the inputs are params/layers/0/w1, params/layers/0/w2, params/layers/1/w1, params/layers/1/w2, batch/x
# NOFIT: irshard: error: sharding 'tp' for input 'params/layers/0/w1' (rule --shard params/**=tp) has 1 entry but the tensor has shape [64,256] (rank 2)
# GRADNAME: irshard: error: --grad opt: 'opt' is not an argument of 'loss'; its traced arguments are params, batch

import jax
import jax.numpy as jnp


def block(layer, x):
    return jnp.tanh(jax.nn.relu(x @ layer["w1"]) @ layer["w2"])


def loss(params, batch):
    x = batch["x"]
    for layer in params["layers"]:
        x = block(layer, x)
    return jnp.mean(x ** 2)


def step(params, batch, lr=0.1):
    grads = jax.grad(loss)(params, batch)
    return jax.tree_util.tree_map(lambda p, g: p - lr * g, params, grads)


def loss_args():
    f32 = jnp.float32
    layer = {"w1": jax.ShapeDtypeStruct((64, 256), f32),
             "w2": jax.ShapeDtypeStruct((256, 64), f32)}
    return {"layers": [layer, layer]}, {"x": jax.ShapeDtypeStruct((32, 64), f32)}


def example_args():
    return loss_args()
