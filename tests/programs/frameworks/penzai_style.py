"""A step jitted as Penzai's `StatefulTrainer` jits its `step_fn`: named
donation of the trainer state and of the model's state variables (an
empty tuple for a model that has none), and static configuration."""

import functools

import jax
import jax.numpy as jnp
import optax
from jax.sharding import NamedSharding, PartitionSpec as P

OPTIMIZER = optax.sgd(0.1)


def _loss(params, batch, scale):
    hidden = jnp.tanh(batch["x"] @ params["w1"])
    return scale * jnp.mean((hidden @ params["w2"] - batch["y"]) ** 2)


@functools.partial(jax.jit, donate_argnames=("state", "state_vars"),
                   static_argnames=("scale",))
def step_fn(state, state_vars, batch, scale):
    params, opt_state = state
    loss, grads = jax.value_and_grad(_loss)(params, batch, scale)
    updates, opt_state = OPTIMIZER.update(grads, opt_state, params)
    return (optax.apply_updates(params, updates), opt_state), state_vars, loss


def args():
    """The trainer's state replicated, its batch split over `data`."""
    mesh = jax.make_mesh((4,), ("data",), axis_types=(jax.sharding.AxisType.Auto,))
    params = {"w1": jnp.ones((128, 256)), "w2": jnp.ones((256, 16))}
    state = (params, OPTIMIZER.init(params))
    rows = NamedSharding(mesh, P("data"))
    batch = {"x": jax.device_put(jnp.ones((32, 128)), rows),
             "y": jax.device_put(jnp.ones((32, 16)), rows)}
    return state, (), batch, 2.0
