"""An output sharding that replicates: the result is asked for whole on
every device (`--out-shard 0=_,_`), so the sharded rows are gathered at
the end."""

import jax.numpy as jnp


def step(x, w):
    return jnp.tanh(x @ w)


def args():
    return jnp.ones((64, 128)), jnp.ones((128, 256))
