"""The 1-D heat equation, written two ways.

Both functions run 100 explicit time steps of u_t = alpha * u_xx on a rod of
1024 points whose two end points are held fixed. The arrays are sharded over
mesh axis `x` (the annotation `f32[1024@x]` says so), so each device owns a
contiguous block of the rod.

`simulate_set` updates the interior with `d.at[1:-1].set(...)`. The slice
`[1:-1]` does not line up with the shards, and the partitioner gathers the
whole rod on every device, every step.

`simulate_roll` computes the same update from shifted copies of the rod
(`jnp.roll`) and keeps the end points with `where`. A shift by one element
only needs each device's neighbour's edge value: a one-element halo exchange.
"""

import jax
import jax.numpy as jnp

ALPHA = 0.1
STEPS = 100


def step_set(d):
    return d.at[1:-1].set(d[1:-1] + ALPHA * (d[2:] - 2 * d[1:-1] + d[:-2]))


def step_roll(d):
    laplacian = jnp.roll(d, 1) - 2 * d + jnp.roll(d, -1)
    i = jnp.arange(d.shape[0])
    interior = (i > 0) & (i < d.shape[0] - 1)
    return jnp.where(interior, d + ALPHA * laplacian, d)


def simulate_set(d: "f32[1024@x]"):
    return jax.lax.fori_loop(0, STEPS, lambda _, d: step_set(d), d)


def simulate_roll(d: "f32[1024@x]"):
    return jax.lax.fori_loop(0, STEPS, lambda _, d: step_roll(d), d)
