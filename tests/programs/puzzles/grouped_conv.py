"""A grouped convolution (`feature_group_count=4`, as in ResNeXt's blocks)
over a batch sharded along its first dimension: XLA's partitioner does not
split a grouped convolution along the batch and gathers the images whole.
The same convolution ungrouped (its kernel block-diagonal, the same
result) and the depthwise one (a group per channel) are split along the
batch with no collective."""

import jax
import jax.numpy as jnp

CHANNELS, GROUPS = 16, 4


def conv(images, kernel, groups=GROUPS):
    return jax.lax.conv_general_dilated(
        images, kernel, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"),
        feature_group_count=groups)


def step(images, kernel):
    return jnp.tanh(conv(images, kernel))


def args():
    return (jnp.ones((8, 32, 32, CHANNELS)),
            jnp.ones((3, 3, CHANNELS // GROUPS, CHANNELS)))
