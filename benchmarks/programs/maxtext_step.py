"""MaxText's train step as its `train_compile.py` builds it, for
`benchmarks/maxtext.py` and the command line:

    irshard compile benchmarks/programs/maxtext_step.py --fn step --args args \\
        --context context --mesh "$(python benchmarks/programs/maxtext_step.py --mesh)" \\
        --target tpu-v5e:4x4

The config comes from MaxText's own `base.yml` with the overrides in
`MAXTEXT_OVERRIDES` (space separated `key=value`, default: a small model
compiled for `v5e-16`). The step is `jax.jit` of MaxText's functional train
step with its in/out shardings, static and donated arguments; `args()` its
shaped state and batch on the topology's mesh; `context()` the mesh and
logical axis rules `train_compile.py` lowers it under. With
`MAXTEXT_PLATFORM=cpu` the mesh is laid on this host's CPU devices instead
(as many as the topology has: irshard asks for them).
"""

from __future__ import annotations

import contextlib
import functools
import os
import sys

DEFAULT_OVERRIDES = (
    "compile_topology=v5e-16 compile_topology_num_slices=1 "
    "base_emb_dim=512 base_num_query_heads=8 base_num_kv_heads=8 "
    "base_mlp_dim=2048 base_num_decoder_layers=2 head_dim=64 "
    "per_device_batch_size=1 max_target_length=512 "
    "enable_checkpointing=false dataset_type=synthetic")


@functools.cache
def _built():
    return build(tuple(os.environ.get("MAXTEXT_OVERRIDES", DEFAULT_OVERRIDES).split()))


def build(overrides):
    """The step, its shaped arguments and keywords, the context maker, the
    mesh and the config, for MaxText's `base.yml` with `overrides`
    (`key=value` strings)."""
    import jax
    from flax.core.spmd import logical_axis_rules
    from maxtext.configs import pyconfig
    from maxtext.trainers.pre_train import train, train_compile
    from maxtext.utils import maxtext_utils, sharding

    base = os.path.join(os.path.dirname(pyconfig.__file__), "base.yml")
    config = pyconfig.initialize([sys.argv[0], base, *overrides])
    jax.config.update("jax_default_prng_impl", "unsafe_rbg")
    if os.environ.get("MAXTEXT_PLATFORM") == "cpu":
        # The same mesh on this host's (simulated) CPU devices.
        from jax.sharding import AxisType, Mesh
        devices = maxtext_utils.create_device_mesh(config, jax.devices())
        mesh = Mesh(devices, config.mesh_axes,
                    axis_types=(AxisType.Auto,) * len(config.mesh_axes))
    else:
        mesh = train_compile.get_topology_mesh(config)
    (shaped_args, shaped_kwargs, state_shardings, _, model) = \
        train_compile.get_shaped_inputs(mesh, config)
    params_shardings, state_shardings = \
        sharding.maybe_update_params_sharding_with_opt(config, state_shardings)
    input_state_shardings = sharding.build_zero1_input_state_mesh_shardings(
        config, state_shardings, params_shardings)
    data_sharding = sharding.get_input_data_sharding(config, mesh)
    fn, in_shard, out_shard, static_argnums, donate_argnums = \
        maxtext_utils.get_functional_train_with_signature(
            train.train_step, data_sharding, input_state_shardings, model,
            config, params_shardings)
    step = jax.jit(fn, in_shardings=in_shard, out_shardings=out_shard,
                   static_argnums=static_argnums, donate_argnums=donate_argnums)

    @contextlib.contextmanager
    def context():
        with jax.set_mesh(mesh), logical_axis_rules(config.logical_axis_rules):
            yield

    return step, shaped_args, shaped_kwargs, context, mesh, config


def __getattr__(name):
    if name == "step":
        return _built()[0]
    raise AttributeError(name)


def args():
    return tuple(_built()[1])


def context():
    return _built()[3]()


def mesh_spec() -> str:
    """The topology mesh as irshard's `--mesh` (`data=1,stage=1,fsdp=16,...`)."""
    mesh = _built()[4]
    return ",".join(f"{name}={size}" for name, size in mesh.shape.items())


def step_and_args():
    step, shaped_args, shaped_kwargs, context_fn, mesh, config = _built()
    return step, shaped_args, shaped_kwargs, context_fn, mesh, config


if __name__ == "__main__" and sys.argv[1:] == ["--mesh"]:
    print(mesh_spec())
