"""A two-layer MLP's training loss, data- and tensor-parallel.

The batch is split over `dp` (data parallelism); the hidden layer is split
over `tp` (tensor parallelism, Megatron style: the first weight by columns,
the second by rows). Compile the gradient with

    irshard compile examples/mlp.py --mesh dp=2,tp=2 --grad

and the report shows the all-reduce over `tp` that completes the second
matmul, and the all-reduces over `dp` that sum the weight gradients across
the batch shards.
"""

import jax
import jax.numpy as jnp


def loss(w1: "f32[64,256@tp]", w2: "f32[256@tp,64]",
         x: "f32[32@dp,64]", y: "f32[32@dp,64]"):
    hidden = jax.nn.relu(x @ w1)
    prediction = hidden @ w2
    return jnp.mean((prediction - y) ** 2)
