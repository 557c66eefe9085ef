"""Equinox's data-parallel example's style: the program asks JAX for its
CPU devices at import, builds its mesh from `jax.device_count()`, and
constrains its values with NamedShardings of that mesh (as
`eqx.filter_shard` does)."""

import jax
import jax.numpy as jnp
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P

jax.config.update("jax_num_cpu_devices", 8)

num_devices = jax.device_count()
mesh = jax.make_mesh((num_devices,), ("batch",), axis_types=(AxisType.Auto,))
data_sharding = NamedSharding(mesh, P("batch"))
replicated = NamedSharding(mesh, P())


def loss(params, x, y):
    pred = jnp.tanh(x @ params["w"] + params["b"])
    return jnp.mean((pred - y) ** 2)


@jax.jit
def train_step(params, x, y):
    params = jax.lax.with_sharding_constraint(params, replicated)
    x, y = jax.lax.with_sharding_constraint((x, y), data_sharding)
    grads = jax.grad(loss)(params, x, y)
    return jax.tree.map(lambda p, g: p - 0.1 * g, params, grads)


def args():
    f32 = jnp.float32
    return ({"w": jax.ShapeDtypeStruct((16, 4), f32),
             "b": jax.ShapeDtypeStruct((4,), f32)},
            jax.ShapeDtypeStruct((64, 16), f32), jax.ShapeDtypeStruct((64, 4), f32))
