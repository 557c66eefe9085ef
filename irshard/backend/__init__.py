"""The one place that touches JAX and XLA internals.

Device set-up, the MLIR context with Shardy's passes, lowering, compile
options and dump flags, the backend's compile/execute entry points and XLA's
HLO objects all live here, so a JAX upgrade is one package to fix:
`devices` (platforms, devices, meshes), `tpuslice` (a TPU slice libtpu
describes), `lowering` (MLIR, `jax.jit` lowering, pytree leaves),
`passrunner` (registered passes), `jitted` (what the user jitted, lowered
or compiled themselves), `compiling` (XLA compile), `hlomodules` (XLA's
HLO objects) and `running` (execution, the distributed runtime). Callers
use the names this package gathers from them. MLIR's Shardy bindings are
`shardy` (meshes, shardings, functions), with `locations` (an op's source
frames) and `edits` (a module edited for a counterfactual). Tested with
jax/jaxlib 0.10.2, 0.11.2 and 0.12.0.1 (the range is pinned in
pyproject.toml); the calls used here exist in all three.

May import `irshard.core` only. Importing the package does not import JAX;
calling into it does. Call `configure` before that, so the host platform gets the devices the
mesh needs.
"""

from __future__ import annotations

from irshard.backend.devices import (  # noqa: F401
    MAX_CPU_DEVICES,
    PLATFORMS,
    axis_types_of,
    configure,
    cost_analysis,
    device_count,
    device_place,
    devices,
    first_line,
    jax_axis_types,
    make_mesh,
    message,
    own_mesh_devices,
    partition_spec,
    process_index,
    quiet_native_stderr,
    ran_without_devices,
    started)
from irshard.backend.tpuslice import tpu_devices, tpu_slice, visible_devices  # noqa: F401
from irshard.backend.passrunner import (  # noqa: F401
    PassFailure,
    parse_pipeline,
    run_pipeline,
    run_registered_passes,
    run_registered_passes_isolated)
from irshard.backend.lowering import (  # noqa: F401
    BadLowering,
    BadOutput,
    ContextSwallowed,
    LoweredFunction,
    array_outputs,
    describe_leaf,
    enable_x64,
    gradient,
    gspmd_configured,
    ir_context,
    is_abstract,
    is_ref,
    is_sharding,
    jit_options,
    key_data,
    key_data_outputs,
    lower,
    new_ref,
    partition_entries,
    ref_value,
    wrap_key,
    x64_kept)
from irshard.backend.jitted import (  # noqa: F401
    CompiledStep,
    JittedLowering,
    compiled_of,
    jitted_target,
    lower_jitted,
    lowered_of,
    named_mesh)
from irshard.backend.compiling import (  # noqa: F401
    CompiledExecutable,
    compile_module,
    hlo_sharding_from_text)
from irshard.backend.hlomodules import (  # noqa: F401
    hlo_module_from_proto,
    hlo_module_from_text,
    hlo_opcode,
    hlo_opcode_names,
    hlo_schedule,
    scheduled_sequence)
from irshard.backend.running import (  # noqa: F401
    allgather_ints,
    block_until_ready,
    describe_devices,
    execute,
    gather,
    initialize_distributed,
    jax_sharding,
    profiled,
    time_runs)
