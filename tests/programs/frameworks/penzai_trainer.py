"""A Penzai model trained by Penzai's own `StatefulTrainer` (donating its
states), its batch split over `data`: `step_fn` is the trainer's jitted
step, `args()` what `trainer.step(x=..., y=...)` hands it."""

import jax
import jax.numpy as jnp
import optax
from jax.sharding import NamedSharding, PartitionSpec as P
from penzai import pz
from penzai.toolshed import basic_training


def _model():
    return pz.nn.Sequential([
        pz.nn.Linear.from_config(name="up", init_base_rng=jax.random.key(0),
                                 input_axes={"features": 32},
                                 output_axes={"hidden": 128}),
        pz.nn.Elementwise(jax.nn.relu),
        pz.nn.Linear.from_config(name="down", init_base_rng=jax.random.key(1),
                                 input_axes={"hidden": 128},
                                 output_axes={"out": 4}),
    ])


def loss_fn(*, model, state, rng, x, y):
    loss = jnp.mean((model(x).unwrap("batch", "out") - y) ** 2)
    return loss, state, {"loss": loss}


trainer = basic_training.StatefulTrainer.build(
    root_rng=jax.random.key(2), model=_model(), optimizer_def=optax.adam(1e-3),
    loss_fn=loss_fn, donate_states=True)
step_fn = trainer.step_fn


def args():
    """The trainer step's arguments, as `StatefulTrainer.step` makes them."""
    mesh = jax.make_mesh((4,), ("data",), axis_types=(jax.sharding.AxisType.Auto,))
    rows = NamedSharding(mesh, P("data"))
    x = pz.nx.wrap(jax.device_put(jnp.ones((16, 32)), rows)).tag("batch", "features")
    y = jax.device_put(jnp.ones((16, 4)), rows)
    stateless, variables = pz.unbind_variables(trainer.model)
    params = [v for v in variables if isinstance(v, pz.Parameter)]
    states = [v for v in variables if isinstance(v, pz.StateVariable)]
    return (trainer.root_rng, trainer.state.value, stateless,
            pz.freeze_variables(tuple(params)), (),
            pz.freeze_variables(tuple(states)), trainer.loss_fn,
            trainer.optimizer_def, {"x": x, "y": y})
