"""A step whose activations are constrained by logical axis names, as
MaxText's layers constrain theirs: the names mean mesh axes only inside
`nn.logical_axis_rules(...)` and a `jax.set_mesh`, which the step's
driver enters around tracing (`context`)."""

import contextlib

import flax.linen as nn
import jax
import jax.numpy as jnp

RULES = (("batch", "data"), ("embed", None), ("mlp", "model"))
ENTERED = []


def layer(w_in, w_out, x):
    hidden = nn.with_logical_constraint(x @ w_in, ("batch", "mlp"))
    return nn.with_logical_constraint(jnp.tanh(hidden) @ w_out, ("batch", "embed"))


forward = jax.jit(layer)


@contextlib.contextmanager
def context():
    mesh = jax.make_mesh((2, 2), ("data", "model"),
                         axis_types=(jax.sharding.AxisType.Auto,) * 2)
    with jax.set_mesh(mesh), nn.logical_axis_rules(RULES):
        ENTERED.append(True)
        yield


def args():
    return (jax.ShapeDtypeStruct((64, 256), jnp.float32),
            jax.ShapeDtypeStruct((256, 64), jnp.float32),
            jax.ShapeDtypeStruct((32, 64), jnp.float32))


def broken_context():
    raise RuntimeError("no rules today")
