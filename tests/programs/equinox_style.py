"""Equinox's data-parallel example's style: the program asks JAX for its
CPU devices at import, builds its mesh from `jax.device_count()`, and
constrains its values with NamedShardings of that mesh (as
`eqx.filter_shard` does)."""

import dataclasses
import functools
from typing import Callable

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


# Equinox's modules: every field is a pytree child, arrays and not (the
# activation function, the layer sizes), and a step returns the new model.
@functools.partial(jax.tree_util.register_dataclass,
                   data_fields=["weight", "bias", "activation", "name"],
                   meta_fields=[])
@dataclasses.dataclass
class Linear:
    weight: jax.Array
    bias: jax.Array
    activation: Callable
    name: str


def mlp_loss(weights, model, x, y):
    for (weight, bias), layer in zip(weights, model):
        x = layer.activation(x @ weight + bias)
    return jnp.mean((x - y) ** 2)


def is_array(x):
    return isinstance(x, jax.Array)


def filter_jit(fn):
    """As `eqx.filter_jit`: array leaves traced, every other leaf (of the
    arguments and of the outputs) static."""
    @functools.wraps(fn)
    def call(*args):
        flat, treedef = jax.tree.flatten(args)
        static = tuple(None if is_array(x) else x for x in flat)
        outputs = []

        @functools.partial(jax.jit, static_argnums=1)
        def arrays_only(arrays, static):
            out = fn(*jax.tree.unflatten(
                treedef, [a if s is None else s for a, s in zip(arrays, static)]))
            out_flat, out_tree = jax.tree.flatten(out)
            outputs[:] = [out_tree, [None if is_array(x) else x for x in out_flat]]
            return [x if is_array(x) else None for x in out_flat]

        result = arrays_only([x if is_array(x) else None for x in flat], static)
        out_tree, out_static = outputs
        return jax.tree.unflatten(
            out_tree, [r if s is None else s for r, s in zip(result, out_static)])

    return call


@filter_jit
def make_step(model, x, y):
    x, y = jax.lax.with_sharding_constraint((x, y), data_sharding)
    weights = [(layer.weight, layer.bias) for layer in model]
    loss, grads = jax.value_and_grad(mlp_loss)(weights, model, x, y)
    model = [dataclasses.replace(layer, weight=layer.weight - 0.1 * gw,
                                 bias=layer.bias - 0.1 * gb)
             for layer, (gw, gb) in zip(model, grads)]
    return loss, model


def model_args():
    key = jax.random.key(0)
    k1, k2 = jax.random.split(key)
    model = [Linear(jax.random.normal(k1, (16, 32)), jnp.zeros(32),
                    jax.nn.relu, "hidden"),
             Linear(jax.random.normal(k2, (32, 4)), jnp.zeros(4),
                    jnp.tanh, "out")]
    return (model, jnp.ones((64, 16)), jnp.zeros((64, 4)))
