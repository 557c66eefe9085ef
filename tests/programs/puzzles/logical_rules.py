"""A logical-rule mismatch under Flax's rules: the layer constrains its
activation to the logical axes ("batch", "mlp"), and the rules in force map
"mlp" to `x` while the batch is already sharded over `x` by the input's
rule: the constraint moves `x` from the rows to the columns."""

import flax.linen as nn
import jax.numpy as jnp

RULES = (("batch", None), ("mlp", "x"))


def step(x, w):
    with nn.logical_axis_rules(RULES):
        h = jnp.tanh(x @ w)
        h = nn.with_logical_constraint(h, ("batch", "mlp"))
    return h * 2.0


def args():
    return jnp.ones((64, 128)), jnp.ones((128, 256))
