"""The Flax NNX guide's sharded training step ("Scale up on multiple
devices"): a `DotReluDot` model whose kernel and weight are annotated with
their sharding, created sharded under a `data x model` mesh, an
`nnx.Optimizer` with Adam, and an `@nnx.jit` step. Its first Adam step
divides each gradient by its own size: where a gradient cancels to about
zero, a correct sharded step differs from one device's by far more than a
relative tolerance allows."""

import jax
import jax.numpy as jnp
import optax
from flax import nnx
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P


class DotReluDot(nnx.Module):
    def __init__(self, depth: int, rngs: nnx.Rngs):
        init = nnx.initializers.lecun_normal()
        self.dot1 = nnx.Linear(depth, depth, use_bias=False, rngs=rngs,
                               kernel_init=nnx.with_partitioning(init, (None, "model")))
        self.w2 = nnx.Param(init(rngs.params(), (depth, depth)),
                            sharding=("model", None))

    def __call__(self, x):
        y = jax.nn.relu(self.dot1(x))
        y = jax.lax.with_sharding_constraint(y, P("data", "model"))
        return jnp.dot(y, self.w2[...])


@nnx.jit
def train_step(model, optimizer, x, y):
    def loss_fn(model):
        return jnp.mean((model(x) - y) ** 2)

    loss, grads = nnx.value_and_grad(loss_fn)(model)
    optimizer.update(model, grads)
    return loss


def step_and_args(depth: int = 1024, data: int = 2, model: int = 4):
    """The mesh, the step and its arguments, created sharded as the guide
    creates them."""
    mesh = jax.make_mesh((data, model), ("data", "model"),
                         axis_types=(AxisType.Auto,) * 2)

    @nnx.jit
    def create():
        made = DotReluDot(depth, rngs=nnx.Rngs(0))
        state = nnx.state(made)
        nnx.update(made, jax.lax.with_sharding_constraint(
            state, nnx.get_partition_spec(state)))
        return made

    with jax.set_mesh(mesh):
        made = create()
        optimizer = nnx.Optimizer(made, optax.adam(1e-3), wrt=nnx.Param)
    rows = NamedSharding(mesh, P("data", None))
    x = jax.device_put(jax.random.normal(jax.random.key(1), (8, depth)), rows)
    y = jax.device_put(jax.random.normal(jax.random.key(2), (8, depth)), rows)
    return mesh, (made, optimizer, x, y)


def args():
    """The step's arguments (`irshard compile ... --fn train_step --args args`)."""
    return step_and_args()[1]
