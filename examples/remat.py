"""A constraint XLA can only meet by replicating a whole tensor.

`a + b` is computed where its operands live, sharded (y, _, x) on a 4x2
mesh; the constraint asks for (_, x+y, _). No all-to-all goes from one to
the other, so XLA's partitioner gathers the whole tensor on every device and
slices it again: an "involuntary full rematerialization", which irshard
reports as a finding at the constraint's line.

    irshard compile examples/remat.py --mesh x=4,y=2 --explain
    irshard suggest examples/remat.py --mesh x=4,y=2
"""

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P


def layer(a: "f32[8@y,16,8@x]", b: "f32[8@y,16,8@x]"):
    c = jax.lax.with_sharding_constraint(a + b, P(None, ("x", "y"), None))
    return jnp.tanh(c) * 2
