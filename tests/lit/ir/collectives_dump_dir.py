# irshard collectives reads the modules JAX left in an XLA dump directory:
# the mesh's axis names and the source lines come from the dump itself. A
# real dump also holds one-device helpers (here jit_iota, from an arange):
# with --mesh, the modules it does not fit are listed as skipped.
# RUN: rm -rf %t.dump
# RUN: env XLA_FLAGS=--xla_dump_to=%t.dump %python %s
# RUN: irshard collectives %t.dump | filecheck %s
# RUN: irshard collectives %t.dump --format json | filecheck %s --check-prefix=JSON
# RUN: irshard collectives %t.dump --mesh a=2,b=2 | filecheck %s --check-prefix=MESH
# RUN: irshard collectives %t.dump --mesh a=2,b=2 --format json | filecheck %s --check-prefix=MESHJSON
# RUN: mkdir -p %t.empty
# RUN: %exit 2 irshard collectives %t.empty 2> %t.err
# RUN: filecheck %s --check-prefix=EMPTY < %t.err

# CHECK: stage optimized  module module_{{[0-9]+}}.jit_step
# CHECK: all-reduce  {{.*}}  f32[4,8]  128  128  b  2  1  {{.*}}collectives_dump_dir.py:[[# @LINE + 23]] (step)
# JSON: "schema": 1,
# JSON: "modules": [
# JSON: "module": "module_{{[0-9]+}}.jit_step",
# JSON: "mesh_axes": ["b"],
# EMPTY: irshard: error: no HLO modules in '{{.*}}.empty'
# MESH: mesh a=2,b=2 (4 devices)  stage optimized  module module_{{[0-9]+}}.jit_step
# MESH: skipped 1 module that runs on another number of devices than --mesh a=2,b=2:
# MESH-NEXT: module_{{[0-9]+}}.jit_iota  (1 device)
# MESHJSON: "skipped": [
# MESHJSON-NEXT: {"module": "module_{{[0-9]+}}.jit_iota", "devices": 1}

import os

os.environ["XLA_FLAGS"] += " --xla_force_host_platform_device_count=4"
os.environ["JAX_PLATFORMS"] = "cpu"

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P  # noqa: E402


def step(x, y):
    return jnp.tanh(x @ y)


mesh = jax.make_mesh((2, 2), ("a", "b"), axis_types=(AxisType.Auto,) * 2)
shardings = (NamedSharding(mesh, P("a", "b")), NamedSharding(mesh, P("b", None)))
aval = jax.ShapeDtypeStruct((8, 8), jnp.float32)
jax.jit(step, in_shardings=shardings).lower(aval, aval).compile()
jnp.arange(8)
