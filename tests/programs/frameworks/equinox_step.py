"""An Equinox training step as Equinox's parallelism example writes it: an
`eqx.filter_jit` step that donates its buffers, the batch laid over the
devices with `eqx.filter_shard` and the model replicated."""

import equinox as eqx
import jax
import jax.numpy as jnp
import optax
from jax.sharding import NamedSharding, PartitionSpec as P

OPTIMIZER = optax.adam(1e-3)


class Model(eqx.Module):
    layers: list

    def __init__(self, key):
        k1, k2 = jax.random.split(key)
        self.layers = [eqx.nn.Linear(32, 128, key=k1), eqx.nn.Linear(128, 4, key=k2)]

    def __call__(self, x):
        return self.layers[1](jax.nn.relu(self.layers[0](x)))


@eqx.filter_jit(donate="all")
def make_step(model, opt_state, x, y, sharding, replicated):
    model, opt_state = eqx.filter_shard((model, opt_state), replicated)
    x, y = eqx.filter_shard((x, y), sharding)

    def loss(model):
        return jnp.mean((jax.vmap(model)(x) - y) ** 2)

    value, grads = eqx.filter_value_and_grad(loss)(model)
    updates, opt_state = OPTIMIZER.update(grads, opt_state, model)
    model = eqx.apply_updates(model, updates)
    model, opt_state = eqx.filter_shard((model, opt_state), replicated)
    return model, opt_state, value


def args():
    mesh = jax.make_mesh((4,), ("batch",), axis_types=(jax.sharding.AxisType.Auto,))
    sharding = NamedSharding(mesh, P("batch"))
    model = Model(jax.random.key(0))
    opt_state = OPTIMIZER.init(eqx.filter(model, eqx.is_array))
    x = jnp.ones((64, 32))
    y = jnp.ones((64, 4))
    return model, opt_state, x, y, sharding, NamedSharding(mesh, P())
