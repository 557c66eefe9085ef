"""A step sharded over a mesh of a TPU slice's described devices, as
MaxText's `train_compile.py` builds its mesh without TPUs
(`jax.experimental.topologies.get_topology_desc`)."""

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import topologies
from jax.sharding import NamedSharding, PartitionSpec as P


def _mesh():
    topology = topologies.get_topology_desc(platform="tpu", topology_name="v5e:2x2")
    return jax.sharding.Mesh(np.array(topology.devices).reshape(2, 2),
                             ("data", "model"))


def _loss(w, x):
    return jnp.tanh(x @ w).sum()


step = jax.jit(jax.grad(_loss))


def args():
    mesh = _mesh()
    return (jax.ShapeDtypeStruct((256, 512), jnp.float32,
                                 sharding=NamedSharding(mesh, P(None, "model"))),
            jax.ShapeDtypeStruct((64, 256), jnp.float32,
                                 sharding=NamedSharding(mesh, P("data", None))))
