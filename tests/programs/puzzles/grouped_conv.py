"""A grouped (depthwise) convolution whose feature dimension is sharded:
with `feature_group_count` equal to the channels, each output channel
reads its own input channel."""

import jax
import jax.numpy as jnp


def step(x, k):
    y = jax.lax.conv_general_dilated(
        x, k, window_strides=(1,), padding="SAME",
        dimension_numbers=("NWC", "WIO", "NWC"), feature_group_count=x.shape[-1])
    return jnp.tanh(y)


def args():
    return jnp.ones((8, 64, 32)), jnp.ones((3, 1, 32))
