"""`examples/gpt.py`'s train step with 24 layers, jitted with its
shardings over an `fsdp x tp` mesh: each weight matrix's rows over fsdp
and its columns over tp, the batch's rows over fsdp, all else replicated.
The mesh is made at import (`irshard compile` lays out the devices first):

    irshard compile benchmarks/programs/gpt24.py --fn step --args args \\
        --mesh fsdp=4,tp=2
"""

import os
import sys

import jax
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(
    os.path.dirname(os.path.abspath(__file__)))), "examples"))
import gpt  # noqa: E402

gpt.LAYERS = 24
MESH = jax.make_mesh((4, 2), ("fsdp", "tp"), axis_types=(AxisType.Auto,) * 2)


def _sharding(leaf):
    if len(leaf.shape) == 2:
        return NamedSharding(MESH, P("fsdp", "tp"))
    return NamedSharding(MESH, P())


def args():
    return gpt.example_args()


def _shardings():
    params, opt_state, batch = args()
    rows = NamedSharding(MESH, P("fsdp", None))
    return (jax.tree.map(_sharding, params), jax.tree.map(_sharding, opt_state),
            jax.tree.map(lambda _: rows, batch))


step = jax.jit(gpt.train_step, in_shardings=_shardings(), donate_argnums=(0, 1))
