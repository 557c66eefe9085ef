"""A host callback has no sharding rule: its operand is sharded over `x`,
and the callback runs once on the whole array."""

import jax
import jax.numpy as jnp
import numpy as np


def _host(a):
    return np.asarray(a) * 2.0


def step(x):
    y = jax.pure_callback(_host, jax.ShapeDtypeStruct(x.shape, x.dtype), jnp.sin(x))
    return y + 1.0


def args():
    return (jnp.ones((64, 128)),)
