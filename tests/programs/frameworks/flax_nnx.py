"""A Flax NNX training step as the NNX guides write it: the model's kernels
annotated with their sharding (`nnx.with_partitioning`), created sharded
under the mesh, and an `@nnx.jit` step that updates the model and the
optimizer in place and returns the loss."""

import jax
import jax.numpy as jnp
import optax
from flax import nnx
from jax.sharding import NamedSharding, PartitionSpec as P

MESH = ("data", "model")


class MLP(nnx.Module):
    def __init__(self, din: int, dhidden: int, dout: int, rngs: nnx.Rngs):
        init = nnx.initializers.lecun_normal()
        self.up = nnx.Linear(din, dhidden, rngs=rngs,
                             kernel_init=nnx.with_partitioning(init, (None, "model")))
        self.down = nnx.Linear(dhidden, dout, rngs=rngs,
                               kernel_init=nnx.with_partitioning(init, ("model", None)))

    def __call__(self, x):
        return self.down(nnx.relu(self.up(x)))


@nnx.jit
def train_step(model, optimizer, x, y):
    def loss_fn(model):
        logits = model(x)
        return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()

    loss, grads = nnx.value_and_grad(loss_fn)(model)
    optimizer.update(model, grads)
    return loss


def _sharded(mesh):
    """The model and optimizer created sharded, as the guide's
    `create_model` does: each state leaf laid out by its annotation."""
    @nnx.jit
    def create():
        model = MLP(64, 256, 10, rngs=nnx.Rngs(0))
        optimizer = nnx.Optimizer(model, optax.adam(1e-3), wrt=nnx.Param)
        for tree in (model, optimizer):
            state = nnx.state(tree)
            nnx.update(tree, jax.lax.with_sharding_constraint(
                state, nnx.get_partition_spec(state)))
        return model, optimizer

    with jax.set_mesh(mesh):
        return create()


def args():
    """The step's arguments on a data=2,model=2 mesh of the first devices."""
    mesh = jax.make_mesh((2, 2), MESH, axis_types=(jax.sharding.AxisType.Auto,) * 2)
    model, optimizer = _sharded(mesh)
    x = jax.device_put(jnp.ones((16, 64)), NamedSharding(mesh, P("data", None)))
    y = jax.device_put(jnp.zeros((16,), jnp.int32), NamedSharding(mesh, P("data")))
    return model, optimizer, x, y
