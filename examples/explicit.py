"""An MLP written in JAX's explicit-sharding style: shardings live in the
types, and the program says where data moves.

    irshard compile examples/explicit.py --fn loss --mesh dp=2,tp=4 --axis-types explicit
    irshard run examples/explicit.py --fn loss --mesh dp=2,tp=4 --axis-types explicit --check

With explicit axes each input is traced with its sharding in its type
(`f32[64@dp,512]` here, `jax.typeof(x)` in the program), so sharding-in-types
rules apply as under `jax.set_mesh(jax.make_mesh(..., axis_types=Explicit))`:
the first matmul's result is `f32[64@dp,1024@tp]` without being asked, the
second contracts over `tp` and must say how its result is sharded
(`out_sharding`), and `reshard` moves data where the program says. Only
`auto_axes` hands a region back to the compiler's propagation.
"""

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P, auto_axes, reshard


def norm(y):
    # Left to the compiler (Auto axes inside); its result comes back sharded
    # over dp alone.
    return y / jnp.sqrt(jnp.mean(y * y, axis=-1, keepdims=True) + 1e-6)


def loss(x: "f32[64@dp,512]", w1: "f32[512,1024@tp]", w2: "f32[1024@tp,512]"):
    h = jax.nn.relu(x @ w1)                                   # f32[64@dp,1024@tp]
    y = jnp.einsum("bh,hd->bd", h, w2, out_sharding=P("dp", None))  # sums over tp
    y = auto_axes(norm, out_sharding=P("dp", None))(y)
    # The whole batch on every device, as a logging step might want it.
    full = reshard(y, P(None, None))
    return jnp.mean(full ** 2)
