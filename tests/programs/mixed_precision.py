"""The Flax lm1b step's precision: float32 parameters, every matmul in
bfloat16 (`dtype=jnp.bfloat16` layers cast their inputs and kernels), the
loss and gradients back in float32."""

import jax
import jax.numpy as jnp

bf16 = jnp.bfloat16


def dense(x, kernel):
    return jnp.dot(x.astype(bf16), kernel.astype(bf16))


def loss(params, x, y):
    hidden = jax.nn.relu(dense(x, params["w1"]))
    out = dense(hidden, params["w2"]).astype(jnp.float32)
    return jnp.mean((out - y) ** 2)


def grad_step(params, x, y):
    value, grads = jax.value_and_grad(loss)(params, x, y)
    return value, grads


def args():
    f32 = jnp.float32
    return ({"w1": jax.ShapeDtypeStruct((256, 512), f32),
             "w2": jax.ShapeDtypeStruct((512, 64), f32)},
            jax.ShapeDtypeStruct((64, 256), f32), jax.ShapeDtypeStruct((64, 64), f32))
