"""Training-step gradients of the shape real models have, for `--check`:
sums over hundreds of terms whose results cancel to nearly zero in places.

- `mlp_loss`: a two-layer MLP, data- and tensor-parallel (Megatron style).
- `network_loss`: the JAX documentation's sharded network, three layers
  with biases, over a (batch, model) mesh.
- `moe_loss`: a soft mixture of experts: a router's softmax weighs every
  expert's output; experts are split over `ep`, tokens over `dp`.
"""

import jax
import jax.numpy as jnp


def mlp_loss(w1: "f32[512,2048@tp]", w2: "f32[2048@tp,512]",
             x: "f32[64@dp,512]", y: "f32[64@dp,512]"):
    hidden = jax.nn.relu(x @ w1)
    return jnp.mean((hidden @ w2 - y) ** 2)


def network_loss(w1: "f32[256,1024@model]", b1: "f32[1024@model]",
                 w2: "f32[1024@model,1024]", b2: "f32[1024]",
                 w3: "f32[1024,16]", b3: "f32[16]",
                 x: "f32[128@batch,256]", y: "f32[128@batch,16]"):
    inputs = x
    for w, b in ((w1, b1), (w2, b2), (w3, b3)):
        outputs = inputs @ w + b
        inputs = jnp.maximum(outputs, 0)
    return jnp.mean(jnp.sum((outputs - y) ** 2, axis=-1))


def moe_loss(router: "f32[64,8]", w_in: "f32[8@ep,64,128]",
             w_out: "f32[8@ep,128,64]", x: "f32[256@dp,64]"):
    gates = jax.nn.softmax(x @ router, axis=-1)
    hidden = jax.nn.gelu(jnp.einsum("td,edf->etf", x, w_in))
    experts = jnp.einsum("etf,efd->etd", hidden, w_out)
    out = jnp.einsum("te,etd->td", gates, experts)
    return jnp.mean(out ** 2)


def one_element_wrong(a: "f32[8@x,64]", b: "f32[64,64]"):
    """Correct, but for one element that the device holding it changes by
    one part in ten thousand: a subtle bug `--check` must still catch."""
    c = a @ b

    def body(block):
        bump = jnp.where(jax.lax.axis_index("x") == 1, 1e-4 * block[0, 3], 0.0)
        return block.at[0, 3].add(bump)

    return jax.shard_map(body, in_specs=jax.P("x"), out_specs=jax.P("x"))(c)
