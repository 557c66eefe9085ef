"""The one place that touches JAX and XLA internals.

Device set-up, the MLIR context with Shardy's passes, lowering, compile
options and dump flags, the backend's compile/execute entry points and XLA's
HLO objects all live here, so a JAX upgrade is one file to fix. Tested with
jax/jaxlib 0.10.2, 0.11.2 and 0.12.0.1 (the range is pinned in
pyproject.toml); the calls used here exist in all three.

Nothing here is imported by `irshard --help`: importing this module imports
JAX. Call `configure` before that, so the host platform gets the devices the
mesh needs.
"""

from __future__ import annotations

import glob
import math
import os
import re
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from irshard.core import syntax
from irshard.core.errors import BackendError, SpecError

_DEVICE_COUNT_FLAG = "--xla_force_host_platform_device_count"

# Platforms a user may ask for, and the names JAX knows them by.
PLATFORMS = ("cpu", "gpu", "tpu")
# The most CPU devices XLA simulates in one process: above it, XLA's CPU
# client treats the device ids as another process's and refuses to compile.
MAX_CPU_DEVICES = 2048


def configure(num_devices: int, platform: str = "cpu", exact: bool = False) -> None:
    """Prepares the environment for `num_devices` local devices on `platform`.

    Must run before JAX is imported. On the CPU it asks XLA for as many host
    devices as the mesh needs, keeping a larger count the user set unless
    `exact` (each process of a multi-process run must own exactly its share);
    on a real accelerator it leaves device discovery to JAX.
    """
    if platform == "cpu":
        if num_devices > MAX_CPU_DEVICES:
            raise SpecError(
                f"the mesh needs {num_devices} devices in this process; XLA "
                f"simulates at most {MAX_CPU_DEVICES} CPU devices in one "
                f"process; give a smaller --mesh")
        flags = os.environ.get("XLA_FLAGS", "")
        m = re.search(_DEVICE_COUNT_FLAG + r"=(\d+)", flags)
        if m is None:
            flags = f"{flags} {_DEVICE_COUNT_FLAG}={num_devices}".strip()
        elif int(m.group(1)) < num_devices or exact:
            flags = flags.replace(m.group(0),
                                  f"{_DEVICE_COUNT_FLAG}={num_devices}")
        os.environ["XLA_FLAGS"] = flags
    # Only the platform asked for (and the CPU, which hosts a program's
    # callbacks) starts: another's plugin (libtpu) would print its own
    # start-up failures. JAX reads the variable when it is imported; a
    # process that imported it already is told through its config.
    wanted = "cpu" if platform == "cpu" else f"{platform},cpu"
    if "JAX_PLATFORMS" not in os.environ:
        os.environ["JAX_PLATFORMS"] = wanted
        import sys
        if "jax" in sys.modules and not started():
            config = sys.modules["jax"].config
            if not config.jax_platforms:
                config.update("jax_platforms", wanted)
    # XLA's warnings (level 1) are kept: the partitioner's are captured while
    # compiling and reported as findings; its informational chatter is not.
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
    # libtpu, which describes TPU slices for TPU targets, otherwise lets one
    # process at a time load it (through a lock file in /tmp).
    os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")


def _jax():
    import jax
    return jax


def started() -> bool:
    """Whether JAX has created its backends (device counts are then fixed)."""
    import sys
    if "jax" not in sys.modules:
        return False
    from jax._src import xla_bridge
    return bool(getattr(xla_bridge, "_backends", None))


def device_count(platform: str) -> int:
    try:
        return len(_jax().devices(platform))
    except RuntimeError:
        return 0


def devices(platform: str, count: int) -> list[Any]:
    """The first `count` devices of `platform` in the global device list."""
    jax = _jax()
    try:
        available = jax.devices(platform)
    except RuntimeError:
        raise SpecError(
            f"platform '{platform}' is not available here; use --platform "
            f"cpu (simulated devices) or a platform this machine has") from None
    if len(available) < count:
        hint = (f"; set XLA_FLAGS={_DEVICE_COUNT_FLAG}={count} before JAX "
                f"starts, or let irshard start it"
                if platform == "cpu" else "")
        asked = getattr(jax.config, "jax_num_cpu_devices", -1)
        if platform == "cpu" and isinstance(asked, int) and asked >= 0:
            hint = (f"; the program sets jax_num_cpu_devices={asked}: set it "
                    f"to {count} or more, or leave it to irshard")
        raise SpecError(
            f"the mesh needs {count} devices but {platform} has "
            f"{len(available)}{hint}")
    return list(available[:count])


def process_index() -> int:
    return _jax().process_index()


# ---------------------------------------------------------------------------
# Targets: a TPU slice described by libtpu, GPUs


class _Progress:
    """`label... 12 s` on a terminal (the file descriptor `fd`, or None for
    none) once the work has taken more than `after` seconds; cleared when
    it is done."""

    def __init__(self, fd: int | None, label: str, after: float = 3.0):
        self.fd, self.label = fd, label
        self.after = float(os.environ.get("IRSHARD_PROGRESS_AFTER", after))
        self.width = 0

    def __call__(self, elapsed: float | None) -> None:
        if self.fd is None:
            return
        if elapsed is None:
            if self.width:
                os.write(self.fd, ("\r" + " " * self.width + "\r").encode())
            return
        if elapsed < self.after:
            return
        text = f"\rirshard: {self.label}... {elapsed:.0f} s"
        self.width = max(self.width, len(text))
        os.write(self.fd, text.encode())


class quiet_native_stderr:
    """Sends what native code writes to stderr (libtpu's warnings about the
    TPU it looks for and does not find) to a temporary file while the block
    runs; `text` holds it afterwards."""

    def __enter__(self):
        import sys
        import tempfile
        sys.stderr.flush()
        self._file = tempfile.TemporaryFile()
        self._saved = os.dup(2)
        os.dup2(self._file.fileno(), 2)
        self.text = ""
        # Where the block may still show progress: the real stderr, when it
        # is a terminal.
        self.terminal = self._saved if os.isatty(self._saved) else None
        return self

    def __exit__(self, *exc):
        os.dup2(self._saved, 2)
        os.close(self._saved)
        self._file.seek(0)
        self.text = self._file.read().decode("utf-8", "replace")
        self._file.close()
        return False


def own_mesh_devices(values, names: Sequence[str], shape: Sequence[int],
                     platform: str) -> list[Any] | None:
    """The devices, in its order, of a `jax.sharding.Mesh` among `values`
    (a program module's globals) with these axis names and sizes on
    `platform`; None when there is none."""
    from jax.sharding import Mesh
    for value in values:
        if (isinstance(value, Mesh)
                and tuple(value.axis_names) == tuple(names)
                and tuple(value.devices.shape) == tuple(shape)
                and all(d.platform == platform for d in value.devices.flat)):
            return list(value.devices.flat)
    return None


_SLICES: dict[tuple[str, int], list[Any]] = {}


def tpu_slice(topology: str, slices: int, what: str) -> list[Any]:
    """The chips of a TPU slice (or `slices` of them) as libtpu describes
    them, in its order (as `jax.devices()` lists them on the slice)."""
    if (topology, slices) in _SLICES:
        return _SLICES[topology, slices]
    os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
    _jax()
    try:
        import libtpu  # noqa: F401
    except ImportError:
        raise SpecError(f"--target {what}: compiling for a TPU needs libtpu; "
                        f"install it with pip install 'irshard[tpu]'") from None
    from jax.experimental import topologies
    with quiet_native_stderr() as noise:
        try:
            kwargs = {"num_slices": slices} if slices > 1 else {}
            topo = topologies.get_topology_desc(topology_name=topology,
                                                platform="tpu", **kwargs)
        except Exception as e:
            error = e
        else:
            error = None
    if error is not None:
        raise SpecError(f"--target {what}: libtpu cannot describe '{topology}': "
                        f"{first_line(error)}") from None
    del noise
    # libtpu describes a v4 chip as its two cores; JAX on a v4 slice runs
    # one device per chip (megacore), and meshes must be built that way.
    chips = [d for d in topo.devices if getattr(d, "core_on_chip", 0) == 0]
    _SLICES[topology, slices] = chips
    return chips


class visible_devices:
    """While the block runs, `jax.devices()` and its kin list `devices` (a
    described TPU slice's chips) as JAX would on that slice, so a program
    that builds its mesh from them at import or while tracing
    (`Mesh(np.array(jax.devices()), ...)`, `jax.make_mesh`,
    `mesh_utils.create_device_mesh`) gets the target's devices. Asked for
    another platform by name, JAX answers as usual."""

    _NAMES = ("devices", "local_devices", "device_count", "local_device_count")

    def __init__(self, devices: Sequence[Any]):
        self.devices = list(devices)
        self.platform = getattr(self.devices[0], "platform", None) \
            if self.devices else None

    def _wrap(self, original, answer):
        """`original`, answering `answer()` for this platform or none."""
        def wrapped(backend=None, *args, **kwargs):
            if backend is not None and backend != self.platform:
                return original(backend, *args, **kwargs)
            return answer()
        return wrapped

    def __enter__(self):
        jax = _jax()
        from jax._src import xla_bridge
        self._saved = []
        for owner in (jax, xla_bridge):
            for name in self._NAMES:
                original = getattr(owner, name)
                self._saved.append((owner, name, original))
                answer = (lambda: len(self.devices)) if name.endswith("count") \
                    else (lambda: list(self.devices))
                setattr(owner, name, self._wrap(original, answer))
        # Eager work (a PRNG key for `jax.eval_shape`, a constant) runs on
        # this host's CPU: a described slice's chips cannot execute.
        self._default = None
        if self.platform not in (None, "cpu"):
            self._default = jax.default_device(jax.devices("cpu")[0])
            self._default.__enter__()
        return self

    def __exit__(self, *exc):
        if self._default is not None:
            self._default.__exit__(*exc)
        for owner, name, original in self._saved:
            setattr(owner, name, original)
        return False


def tpu_devices(topology: str, slices: int, mesh_shape: Sequence[int],
                mesh_names: Sequence[str], what: str) -> list[Any]:
    """The chips of a TPU slice (or `slices` of them) as libtpu describes
    them on a machine with no TPU, in the order `jax.make_mesh` lays the
    mesh onto them; with several slices the leading axes span the slices
    (`mesh_utils.create_hybrid_device_mesh`)."""
    jax = _jax()
    from jax.experimental import mesh_utils
    from jax.sharding import AxisType
    devices = tpu_slice(topology, slices, what)
    if slices == 1:
        try:
            mesh = jax.make_mesh(tuple(mesh_shape), tuple(mesh_names),
                                 devices=devices,
                                 axis_types=(AxisType.Auto,) * len(mesh_shape))
        except Exception as e:
            raise SpecError(f"--target {what}: the mesh does not lay onto the "
                            f"slice: {first_line(e)}") from None
        return list(mesh.devices.flat)
    dcn, remaining = [], slices
    for size in mesh_shape:
        part = math.gcd(size, remaining)
        dcn.append(part)
        remaining //= part
    if remaining != 1:
        raise SpecError(f"--target {what}: the leading mesh axes must span the "
                        f"{slices} slices (their sizes' product divisible by "
                        f"{slices})")
    ici = [size // part for size, part in zip(mesh_shape, dcn)]
    try:
        array = mesh_utils.create_hybrid_device_mesh(ici, dcn, devices=devices)
    except Exception as e:
        raise SpecError(f"--target {what}: the mesh does not lay onto the "
                        f"slices: {first_line(e)}") from None
    return list(array.flat)


def device_place(device) -> tuple[int, tuple[int, ...]]:
    """(slice, chip coordinates) of a TPU device; (0, ()) elsewhere."""
    coords = getattr(device, "coords", None)
    return int(getattr(device, "slice_index", 0) or 0), tuple(coords or ())


def cost_analysis(executable) -> dict[str, float]:
    """XLA's cost analysis of an executable (flops, bytes accessed); empty
    where the backend has none."""
    try:
        found = executable.cost_analysis()
    except Exception:
        return {}
    if isinstance(found, (list, tuple)):
        found = found[0] if found else {}
    return {k: float(v) for k, v in (found or {}).items()
            if isinstance(v, (int, float))}


def make_mesh(axis_names: Sequence[str], axis_sizes: Sequence[int],
              mesh_devices: Sequence[Any],
              axis_types: Sequence[str] | None = None):
    """A `jax.sharding.Mesh` whose logical device i is `mesh_devices[i]`.
    Each axis is left to the compiler's propagation (`AxisType.Auto`) unless
    `axis_types` says `explicit` for it."""
    import numpy as np
    from jax.sharding import Mesh
    array = np.array(list(mesh_devices), dtype=object).reshape(tuple(axis_sizes))
    return Mesh(array, tuple(axis_names),
                axis_types=jax_axis_types(axis_types or ["auto"] * len(axis_names)))


def jax_axis_types(types: Sequence[str]) -> tuple[Any, ...]:
    """JAX's `AxisType` of each of irshard's axis types (`auto`, `explicit`)."""
    from jax.sharding import AxisType
    return tuple(AxisType.Explicit if t == "explicit" else AxisType.Auto
                 for t in types)


def axis_types_of(mesh) -> tuple[str, ...]:
    """irshard's name of each axis type of a `jax.sharding.Mesh`; a
    `Manual` axis (inside `shard_map`) counts as explicit."""
    from jax.sharding import AxisType
    types = getattr(mesh, "axis_types", None) or ()
    return tuple("auto" if t == AxisType.Auto else "explicit" for t in types) \
        or ("auto",) * len(mesh.axis_names)


def partition_spec(entries: Sequence[Sequence[str]]):
    """A `PartitionSpec` with one entry per dimension: the dimension's mesh
    axes, major to minor (none: not sharded)."""
    from jax.sharding import PartitionSpec
    return PartitionSpec(*(None if not axes else axes[0] if len(axes) == 1
                           else tuple(axes) for axes in entries))


# ---------------------------------------------------------------------------
# MLIR


def ir_context():
    """An MLIR context with the StableHLO, CHLO and Shardy dialects loaded and
    Shardy's passes registered (as JAX makes it for its own lowering)."""
    from jax._src.interpreters import mlir as jax_mlir
    return jax_mlir.make_ir_context()


@dataclass(frozen=True)
class LoweredFunction:
    """The StableHLO module of a traced function, and its flattened outputs."""

    module: Any                           # jaxlib.mlir.ir.Module
    out_shapes: tuple[tuple[int, ...], ...]
    out_dtypes: tuple[str, ...]           # NumPy dtype names
    out_names: tuple[tuple[Any, ...], ...]   # each output's key path
    # Python callbacks the program calls (jax.debug.print, pure_callback):
    # the executable must be compiled with them and keep them alive.
    callbacks: tuple[tuple[Any, ...], Any] = ((), None)
    out_tree: Any = None                  # the outputs' pytree structure


class BadOutput(TypeError):
    """The traced function returned something that is not an array."""


def array_outputs(outputs, refs: Sequence[Any] = ()) -> tuple[Any, list[str]]:
    """`outputs` with every leaf that is not an array or number replaced by
    None (passed through as static, as `eqx.filter_jit` does), and those
    leaves' names. Outputs with no array at all (and no `refs` written)
    are refused: JAX's own error about a string output names no line of the
    user's."""
    import numpy as np
    jax = _jax()
    from irshard.core import tree
    flat, treedef = jax.tree_util.tree_flatten_with_path(outputs)
    arrays = (jax.Array, np.ndarray, np.generic, bool, int, float, complex)
    kept = [leaf if isinstance(leaf, arrays) else None for _, leaf in flat]
    static = [(path, leaf) for (path, leaf), k in zip(flat, kept) if k is None]
    if not static:
        return outputs, []
    if len(static) == len(flat) and not refs:
        path, leaf = static[0]
        where = f" (output {tree.output_path(path)})" if path else ""
        raise BadOutput(f"it returns a {type(leaf).__name__}{where} and no "
                        f"array; irshard compiles functions that return "
                        f"arrays (or pytrees of arrays)")
    return (jax.tree_util.tree_unflatten(treedef, kept),
            [f"{tree.output_path(path)} ({type(leaf).__name__})"
             for path, leaf in static])


def is_ref(x) -> bool:
    """A `jax.Ref` (a mutable array)."""
    ref = getattr(_jax(), "Ref", None)
    return ref is not None and isinstance(x, ref)


def new_ref(value):
    return _jax().new_ref(value)


def ref_value(ref):
    """The array a `jax.Ref` holds (inside a trace: its current value)."""
    return ref[...]


def jit_options(fn: Callable[..., Any]) -> dict[str, tuple[Any, ...]]:
    """What a `jax.jit`-wrapped function was told about its arguments:
    `static_argnums`, `static_argnames`, `donate_argnums`,
    `donate_argnames` (empty for any other callable)."""
    info = getattr(fn, "_jit_info", None)
    return {name: tuple(getattr(info, name, None) or ())
            for name in ("static_argnums", "static_argnames",
                         "donate_argnums", "donate_argnames")}


def lower(fn: Callable[..., Any], shapes: Sequence[tuple[int, ...]],
          dtypes: Sequence[str], mesh,
          weak: Sequence[bool] | None = None,
          shardings: Sequence[Sequence[Sequence[str]]] | None = None,
          donated: Sequence[int] = (),
          ) -> LoweredFunction:
    """Traces `fn` on abstract inputs and lowers it to StableHLO.

    The mesh is set as JAX's context mesh while tracing, so the function may
    use `with_sharding_constraint(x, P(...))` or `shard_map` without naming a
    mesh. On a mesh of Auto axes the inputs carry no sharding (the annotate
    pass attaches it); with Explicit axes each input is traced with its
    sharding (`shardings[i]`: each dimension's axes; given only then) in its
    type, as
    `jax.jit` sees a sharded array, so `reshard` and sharding-in-types rules
    apply. Unused inputs are kept (`jax.jit` drops them by default), so
    argument i of the module is always input i. Inputs `donated` are
    donated (`donate_argnums`): XLA may reuse their buffers for outputs.
    """
    jax = _jax()
    weak = weak or [False] * len(shapes)
    placed = [jax.sharding.NamedSharding(mesh, partition_spec(entries))
              for entries in shardings] if shardings is not None \
        else [None] * len(shapes)
    avals = [jax.ShapeDtypeStruct(tuple(s), d, weak_type=w, sharding=p)
             for s, d, w, p in zip(shapes, dtypes, weak, placed)]
    with jax.set_mesh(mesh):
        lowered = jax.jit(fn, keep_unused=True,
                          donate_argnums=tuple(donated)).lower(*avals)
        module = lowered.compiler_ir("stablehlo")
    leaves = jax.tree_util.tree_flatten_with_path(lowered.out_info)[0]
    return LoweredFunction(
        module=module,
        out_shapes=tuple(tuple(leaf.shape) for _, leaf in leaves),
        out_dtypes=tuple(str(leaf.dtype) for _, leaf in leaves),
        out_names=tuple(tuple(path) for path, _ in leaves),
        callbacks=_host_callbacks(lowered),
        out_tree=jax.tree_util.tree_structure(lowered.out_info))


def _host_callbacks(lowered) -> tuple[tuple[Any, ...], Any]:
    """The callbacks a lowering registered, and what keeps them alive."""
    lowering = getattr(lowered, "_lowering", None)
    compile_args = getattr(lowering, "compile_args", None) or {}
    return (tuple(compile_args.get("host_callbacks", ()) or ()),
            compile_args.get("keepalive"))


# ---------------------------------------------------------------------------
# Pytree leaves: arrays, abstract arrays, scalars, typed PRNG keys


def describe_leaf(x) -> tuple | None:
    """(shape, dtype name, key dtype name, key implementation, weak type,
    sharding) of an array-like leaf, as `jax.jit` would see it (dtypes
    canonical: 64-bit only with jax_enable_x64); None for anything else.
    A typed PRNG key is described by its key data (u32[..., 2])."""
    import numpy as np
    jax = _jax()
    sharding, weak = None, False
    if isinstance(x, jax.ShapeDtypeStruct):
        shape, dtype, weak = x.shape, x.dtype, x.weak_type
        # A bare PartitionSpec stands for the context mesh, which is --mesh
        # here; reading `.sharding` would look for a `jax.set_mesh` context.
        sharding = getattr(x, "_sharding", None)
        if not isinstance(sharding, jax.sharding.PartitionSpec):
            sharding = x.sharding
    elif isinstance(x, jax.Array):
        shape, dtype, sharding = x.shape, x.dtype, x.sharding
        weak = bool(getattr(x, "weak_type", False))
    elif isinstance(x, (np.ndarray, np.generic)):
        shape, dtype = x.shape, x.dtype
    elif isinstance(x, (bool, int, float, complex)) and not isinstance(x, np.generic):
        shape, weak = (), True
        dtype = jax.numpy.asarray(x).dtype
    else:
        return None
    if not isinstance(sharding, (jax.sharding.NamedSharding,
                                 jax.sharding.PartitionSpec)):
        sharding = None
    if jax.dtypes.issubdtype(dtype, jax.dtypes.prng_key):
        data = jax.eval_shape(jax.random.key_data,
                              jax.ShapeDtypeStruct(shape, dtype))
        return (tuple(data.shape), str(data.dtype), str(dtype),
                dtype._impl.name, False, sharding)
    dtype = jax.dtypes.canonicalize_dtype(dtype)
    return tuple(shape), str(np.dtype(dtype)), None, None, weak, sharding


def is_sharding(x) -> bool:
    """A `PartitionSpec` or `NamedSharding`."""
    from jax.sharding import NamedSharding, PartitionSpec
    return isinstance(x, (NamedSharding, PartitionSpec))


def is_abstract(x) -> bool:
    return isinstance(x, _jax().ShapeDtypeStruct)


def key_data(key):
    """A typed PRNG key array's key data."""
    return _jax().random.key_data(key)


def wrap_key(data, impl: str):
    """A typed PRNG key array from its key data."""
    return _jax().random.wrap_key_data(data, impl=impl)


def key_data_outputs(outputs) -> tuple[Any, list[str | None]]:
    """`outputs` with every typed PRNG key replaced by its key data, and for
    each output leaf its key dtype's name (None for other arrays)."""
    jax = _jax()
    keys: list[str | None] = []

    def unwrap(x):
        dtype = getattr(x, "dtype", None)
        if dtype is not None and jax.dtypes.issubdtype(dtype, jax.dtypes.prng_key):
            keys.append(str(dtype))
            return jax.random.key_data(x)
        keys.append(None)
        return x

    return jax.tree_util.tree_map(unwrap, outputs), keys


def partition_entries(value, mesh_axes: dict[str, int], what: str):
    """[(axes, open), ...] of a PartitionSpec or NamedSharding; None for
    anything else. A NamedSharding's mesh must have the program's axes, each
    of the size `mesh_axes` gives it."""
    jax = _jax()
    from jax.sharding import NamedSharding, PartitionSpec
    if isinstance(value, NamedSharding):
        sizes = dict(value.mesh.shape)
        names = tuple(value.mesh.axis_names)
        mesh_names = list(mesh_axes)
        if not set(names) <= set(mesh_names):
            raise SpecError(f"{what}: its sharding's mesh has axes "
                            f"{', '.join(names)}, but --mesh has "
                            f"{', '.join(mesh_names)}")
        differ = [n for n in names if sizes[n] != mesh_axes[n]]
        if differ:
            raise SpecError(
                f"{what}: its sharding's mesh has "
                + ", ".join(f"{n}={sizes[n]}" for n in differ)
                + ", but --mesh has "
                + ", ".join(f"{n}={mesh_axes[n]}" for n in differ)
                + "; make them agree")
        value = value.spec
    if not isinstance(value, PartitionSpec):
        return None
    entries = []
    for entry in value:
        if entry is None:
            entries.append(((), False))
        elif entry is PartitionSpec.UNCONSTRAINED:
            entries.append(((), True))
        elif isinstance(entry, str):
            entries.append(((entry,), False))
        else:
            entries.append((tuple(entry), False))
    del jax
    return entries


def enable_x64() -> None:
    """64-bit types for the rest of the process (jax_enable_x64): without it
    JAX silently makes i64/f64 values 32-bit."""
    _jax().config.update("jax_enable_x64", True)


def gradient(fn: Callable[..., Any], argnums: Sequence[int]) -> Callable[..., Any]:
    """The reverse-mode gradient of scalar-valued `fn` w.r.t. `argnums`."""
    jax = _jax()
    grad_fn = jax.grad(fn, argnums=tuple(argnums))
    grad_fn.__name__ = f"grad_{getattr(fn, '__name__', 'fn')}"
    return grad_fn


class PassFailure(Exception):
    """A registered pass failed; `describe` gives MLIR's first diagnostic."""

    def __init__(self, error):
        super().__init__(getattr(error, "message", str(error)))
        self.error = error
        from irshard.backend import shardy
        found = shardy.file_locations(error.error_diagnostics[0].location) \
            if getattr(error, "error_diagnostics", None) else []
        self.file = found[0][0] if found else ""

    def describe(self, source: str | None = None, first_line: int = 1) -> str:
        from irshard.backend import shardy
        return shardy.diagnostic_text(self.error, source, first_line)

    def __str__(self) -> str:
        return self.describe()


def run_registered_passes(module, pipeline: str) -> None:
    """Runs a pipeline of passes registered with MLIR (Shardy's, upstream's)
    over `module` (a module or its operation) in place. `pipeline` is MLIR's
    textual form, anchored on the module, e.g.
    `builtin.module(sdy-propagation-pipeline)`."""
    from jaxlib.mlir import ir, passmanager

    from irshard.core import interrupts
    operation = getattr(module, "operation", module)
    with operation.context:
        pm = passmanager.PassManager.parse(pipeline)
        try:
            interrupts.call(pm.run, operation)
        except ir.MLIRError as e:
            raise PassFailure(e) from None


def run_registered_passes_isolated(module, pipeline: str,
                                   diagnostics: list | None = None,
                                   record: Callable[[Any], Any] | None = None
                                   ) -> tuple[Any, str | None]:
    """`run_registered_passes` in a forked child, so that a native crash in
    a pass (a Shardy debug option on IR it does not expect) cannot take this
    process down. Returns `(operation, None)` with the child's result, or
    `(None, why)` when the child died of a signal (`why` names it). A pass
    that fails with a diagnostic is run again here, so its `PassFailure`
    is raised as usual. The diagnostics of a child that succeeds (warnings,
    remarks), each as `record` makes it (picklable), are added to
    `diagnostics`. Where `fork` is missing, the passes run in-process."""
    import pickle
    import faulthandler
    import signal as signals
    import warnings

    from jaxlib.mlir import ir

    from irshard.core import interrupts
    operation = getattr(module, "operation", module)
    if not hasattr(os, "fork"):
        run_registered_passes(operation, pipeline)
        return operation, None
    where = interrupts.temp_dir("irshard-passes-")
    result = os.path.join(where, "module.mlirbc")
    try:
        with warnings.catch_warnings():
            # Python warns that a forked child of a threaded process may
            # deadlock; the child only runs MLIR passes, on its context with
            # multithreading turned off, and writes one file.
            warnings.simplefilter("ignore", DeprecationWarning)
            warnings.simplefilter("ignore", RuntimeWarning)   # JAX's own
            pid = os.fork()
        if pid == 0:                            # the child
            status = 1
            try:
                # A crash is reported by the parent, in its own words.
                faulthandler.disable()
                null = os.open(os.devnull, os.O_WRONLY)
                os.dup2(null, 1)
                os.dup2(null, 2)
                said: list = []

                def keep(info) -> bool:
                    said.append(record(info))
                    return False                # the others see it too

                with operation.context:
                    # The parent's thread pool has no threads here.
                    operation.context.enable_multithreading(False)
                    if record is not None:
                        operation.context.attach_diagnostic_handler(keep)
                    _run_pipeline(operation, pipeline)
                    with open(result, "wb") as f:
                        operation.write_bytecode(f)
                with open(result + ".said", "wb") as f:
                    pickle.dump(said, f)
                status = 0
            finally:
                os._exit(status)
        try:
            _, status = interrupts.call(os.waitpid, pid, 0)
        except BaseException:
            os.kill(pid, signals.SIGKILL)
            os.waitpid(pid, 0)
            raise
        if os.WIFSIGNALED(status):
            number = os.WTERMSIG(status)
            try:
                name = signals.Signals(number).name
            except ValueError:
                name = f"signal {number}"
            return None, name
        if os.WEXITSTATUS(status) != 0:
            run_registered_passes(operation, pipeline)   # raises its failure
            return operation, None
        with open(result, "rb") as f:
            data = f.read()
        if diagnostics is not None:
            with open(result + ".said", "rb") as f:
                diagnostics += pickle.load(f)
        with operation.context:
            # A clone owns itself; the parsed module's operation would go
            # with the module.
            return ir.Module.parse(data).operation.clone(), None
    finally:
        interrupts.remove(where)


def _run_pipeline(operation, pipeline: str) -> None:
    """Runs a textual pipeline on `operation` (in its context, from any
    thread)."""
    from jaxlib.mlir import passmanager
    passmanager.PassManager.parse(pipeline, context=operation.context).run(operation)


def parse_pipeline(pipeline: str, context) -> Any:
    """Parses a textual pipeline with MLIR's own parser (raises ValueError)."""
    from jaxlib.mlir import passmanager
    with context:
        return passmanager.PassManager.parse(pipeline)


# ---------------------------------------------------------------------------
# XLA compilation


def _compile_options(module, num_partitions: int, device_ids: Sequence[int],
                     overrides: dict[str, str] | None,
                     propagate_to_parameters: Sequence[bool],
                     propagate_to_outputs: Sequence[bool]):
    """Compile options as `jax.jit` makes them for the same program."""
    import numpy as np
    from jax._src import compiler
    options = compiler.get_compile_options(
        num_replicas=1, num_partitions=num_partitions,
        device_assignment=np.array([list(device_ids)], dtype=np.int64),
        env_options_overrides=overrides,
        detailed_logging=compiler.use_detailed_logging(module))
    build = options.executable_build_options
    build.use_spmd_partitioning = True
    build.use_shardy_partitioner = True
    build.allow_spmd_sharding_propagation_to_parameters = list(
        propagate_to_parameters)
    build.allow_spmd_sharding_propagation_to_output = list(propagate_to_outputs)
    return options


@dataclass
class CompiledExecutable:
    """A loaded executable and what XLA printed of it."""

    executable: Any
    devices: tuple[Any, ...]
    partitioned_text: str | None     # HLO after SPMD partitioning, if asked
    # Host callbacks the executable calls; they must live as long as it.
    callbacks: Any = None
    log: str = ""                    # what XLA wrote to stderr while compiling

    def hlo_modules(self) -> list[Any]:
        return list(self.executable.hlo_modules())

    def memory_stats(self) -> dict[str, int]:
        stats = self.executable.get_compiled_memory_stats()
        return {
            "argument_bytes": int(stats.argument_size_in_bytes),
            "output_bytes": int(stats.output_size_in_bytes),
            "alias_bytes": int(stats.alias_size_in_bytes),
            "temp_bytes": int(stats.temp_size_in_bytes),
        }

    def cost(self) -> dict[str, float]:
        """XLA's cost analysis: flops, bytes accessed."""
        return cost_analysis(self.executable)

    def parameter_shardings(self, count: int) -> list[Any]:
        """XLA's sharding of each of the `count` parameters."""
        return _shardings(self.executable.get_parameter_shardings(), count)

    def output_shardings(self, count: int) -> list[Any]:
        return _shardings(self.executable.get_output_shardings(), count)


def _shardings(protos, count: int) -> list[Any]:
    # A single-device executable reports no shardings: all are replicated.
    from jaxlib import _hlo
    if protos is None:
        return [_hlo.HloSharding.replicate() for _ in range(count)]
    return [_hlo_sharding(s) for s in protos]


def _hlo_sharding(op_sharding):
    from jaxlib import _hlo
    return _hlo.HloSharding.from_proto(op_sharding)


def hlo_sharding_from_text(text: str):
    """XLA's sharding of printed text: IRError for a malformed device list
    (XLA would abort), RuntimeError for what XLA's parser rejects."""
    from jaxlib import _hlo
    problem = syntax.device_list_problem(text)
    if problem:
        from irshard.core.errors import IRError
        raise IRError(f"malformed sharding {text}: {problem}")
    return _hlo.HloSharding.from_string(text)


def compile_module(module, mesh_devices: Sequence[Any],
                   propagate_to_parameters: Sequence[bool],
                   propagate_to_outputs: Sequence[bool],
                   capture_partitioned: bool = False,
                   callbacks: tuple[tuple[Any, ...], Any] = ((), None),
                   ) -> CompiledExecutable:
    """Compiles a StableHLO module annotated with Shardy shardings for the
    devices of the mesh (logical device i runs on `mesh_devices[i]`).

    `propagate_to_parameters[i]` lets XLA refine argument i's sharding (its
    sharding has open dimensions); `propagate_to_outputs[i]` lets it choose
    result i's (no sharding was given for it). `callbacks` are the host
    callbacks the lowering registered and what keeps them alive.

    With `capture_partitioned`, XLA dumps the module right after SPMD
    partitioning into a temporary directory, read and then removed whatever
    happens (an interrupt included). The compile itself runs where Ctrl-C
    still reaches the command (`interrupts.call`).
    """
    from jax._src import xla_bridge
    from jax._src.lib import xla_client as xc

    from irshard.core import interrupts
    client = getattr(mesh_devices[0], "client", None) or \
        xla_bridge.get_backend(mesh_devices[0].platform)
    from jax._src.lib import _jax as jaxlib_core
    compile_only = isinstance(client, jaxlib_core.CompileOnlyPyClient)
    device_list = xc.DeviceList(tuple(mesh_devices))
    host_callbacks, keepalive = callbacks
    dump_dir = interrupts.temp_dir() if capture_partitioned else None
    try:
        overrides = None
        if dump_dir:
            overrides = {
                "xla_dump_to": dump_dir,
                "xla_dump_hlo_pass_re": "spmd-partitioning",
            }
        options = _compile_options(module, len(mesh_devices),
                                   [d.id for d in mesh_devices], overrides,
                                   propagate_to_parameters, propagate_to_outputs)
        extra = {"host_callbacks": list(host_callbacks)} if host_callbacks else {}
        # A described slice (no devices here) compiles, but cannot load.
        compile_fn = client.compile if compile_only else client.compile_and_load
        try:
            # What XLA warns about while compiling is captured (findings).
            with quiet_native_stderr() as logged:
                executable = interrupts.call(
                    compile_fn, module, device_list, options, **extra,
                    progress=_Progress(logged.terminal,
                                       f"compiling with XLA for "
                                       f"{len(mesh_devices)} devices"))
        except Exception as e:  # XlaRuntimeError and friends
            raise BackendError(f"XLA failed to compile the module: "
                               f"{message(e)}") from None
        partitioned = (_read_partitioned_dump(dump_dir, len(mesh_devices))
                       if dump_dir else None)
    finally:
        if dump_dir:
            interrupts.remove(dump_dir)
    return CompiledExecutable(executable, tuple(mesh_devices), partitioned,
                              (host_callbacks, keepalive), logged.text)


def _read_partitioned_dump(dump_dir: str, num_devices: int) -> str:
    # After `spmd-partitioning` (`tpu-spmd-partitioning` in libtpu).
    files = sorted(f for f in glob.glob(os.path.join(dump_dir, "*.txt"))
                   if re.search(r"\.after_(tpu-)?spmd-partitioning\.",
                                os.path.basename(f)))
    if not files and num_devices == 1:
        # One device: XLA runs no partitioner, and the per-device program is
        # the module as XLA received it.
        files = sorted(glob.glob(os.path.join(
            dump_dir, "*before_optimizations.txt")))
    if not files:
        raise BackendError("XLA wrote no dump after spmd-partitioning; this "
                           "jaxlib may name its passes differently")
    with open(files[0], encoding="utf-8") as f:
        return f.read()


def hlo_module_from_text(text: str):
    """Parses HLO text with XLA's own parser (raises ValueError)."""
    from jaxlib import _hlo
    problem = syntax.device_list_problem(text)
    if problem:
        raise ValueError(f"malformed device list {problem}")
    problem = syntax.parameter_problem(text)
    if problem:
        raise ValueError(problem)
    try:
        return _hlo.hlo_module_from_text(text)
    except RuntimeError as e:
        raise ValueError(str(e)) from None


def hlo_module_from_proto(data: bytes):
    """Parses a serialized HloModuleProto (raises ValueError)."""
    from jaxlib import _hlo
    try:
        return _hlo.HloModule.from_serialized_hlo_module_proto(data)
    except Exception as e:
        raise ValueError(first_line(e)) from None


def hlo_schedule(module) -> Any:
    """The module's instruction schedule, or None when it is not scheduled."""
    try:
        return module.schedule()
    except Exception:
        return None


def scheduled_sequence(schedule, computation) -> list[Any] | None:
    """The instructions of `computation` in scheduled order, or None when
    the schedule has no sequence for it (fused and applied computations)."""
    if schedule is None:
        return None
    try:
        return list(schedule.sequence(computation))
    except Exception:
        return None


def hlo_opcode(name: str) -> Any:
    """XLA's opcode enum member `name`, e.g. `kAsyncStart`."""
    from jaxlib import _hlo
    return getattr(_hlo.HloOpcode, name)


def hlo_opcode_names() -> dict[Any, str]:
    from jaxlib import _hlo
    return {value: name for name, value in _hlo.HloOpcode.__members__.items()}


def first_line(exc: BaseException) -> str:
    """The first informative line of an XLA/JAX error message."""
    for line in str(exc).splitlines():
        line = line.strip()
        if line:
            return line
    return type(exc).__name__


def message(exc: BaseException, limit: int = 40) -> str:
    """An XLA/JAX error message whole (its later lines hold the hints), at
    most `limit` lines."""
    lines = [line.rstrip() for line in str(exc).strip().splitlines()]
    if not lines:
        return type(exc).__name__
    if len(lines) > limit:
        lines = lines[:limit] + [f"... ({len(lines) - limit} more lines)"]
    return "\n".join(lines)


# ---------------------------------------------------------------------------
# Running


def jax_sharding(hlo_sharding, mesh, entries: Sequence[str] | None):
    """The `jax.sharding.Sharding` of an executable's parameter or result:
    a NamedSharding over `mesh` when the tiling is a mesh sharding (its
    mesh axes per dimension, `entries`: `x+y` or `_`), else XLA's own
    sharding wrapped as JAX does internally."""
    from jax.sharding import NamedSharding
    if entries is not None:
        return NamedSharding(mesh, partition_spec(
            [() if e == "_" else e.split("+") for e in entries]))
    from jax._src.sharding_impls import GSPMDSharding
    return GSPMDSharding(tuple(mesh.devices.flat), hlo_sharding)


def execute(compiled: CompiledExecutable, arguments: Sequence[Any]) -> list[list[Any]]:
    """Runs the executable on global arrays; per output, the single-device
    arrays of this process's devices."""
    try:
        from irshard.core import interrupts
        results = interrupts.call(compiled.executable.execute_sharded,
                                  list(arguments))
        return results.disassemble_into_single_device_arrays()
    except Exception as e:
        raise BackendError(f"XLA failed to run the program: {message(e)}") from None


def gather(array) -> Any:
    """The whole value of a global array as a NumPy array, on every process."""
    import numpy as np
    if array.is_fully_addressable:
        return np.asarray(array)
    from jax.experimental import multihost_utils
    return np.asarray(multihost_utils.process_allgather(array, tiled=True))


def allgather_ints(values: Sequence[int]) -> list[list[int]]:
    """Every process's `values` (unsigned 64-bit), in process order."""
    import numpy as np
    jax = _jax()
    if jax.process_count() == 1:
        return [list(values)]
    from jax.experimental import multihost_utils
    # JAX arrays are 32-bit unless x64 is on: send each value as two halves.
    halves = np.array([[v >> 32, v & 0xFFFFFFFF] for v in values],
                      dtype=np.uint32).reshape(-1, 2)
    gathered = np.asarray(multihost_utils.process_allgather(halves))
    gathered = gathered.reshape(jax.process_count(), -1, 2)
    return [[(int(hi) << 32) | int(lo) for hi, lo in row] for row in gathered]


def block_until_ready(arrays: Sequence[Any]) -> None:
    for a in arrays:
        a.block_until_ready()


def describe_devices(platform: str) -> dict[str, Any]:
    """The platform's global devices and each process's addressable ones."""
    jax = _jax()
    try:
        devices = jax.devices(platform)
    except RuntimeError:
        raise SpecError(f"platform '{platform}' is not available here") from None
    processes: dict[int, list[int]] = {}
    for d in devices:
        processes.setdefault(d.process_index, []).append(d.id)
    return {
        "platform": devices[0].platform if devices else platform,
        "process_count": jax.process_count(),
        "process_index": jax.process_index(),
        "processes": [{"index": p, "devices": ids}
                      for p, ids in sorted(processes.items())],
        "devices": [{"id": d.id, "process": d.process_index,
                     "kind": d.device_kind} for d in devices],
    }


def initialize_distributed(coordinator: str, num_processes: int,
                           process_id: int, timeout: float,
                           bind: bool = False) -> None:
    """Joins the processes of one run through `jax.distributed` (CPU
    collectives through gloo) within `timeout` seconds. With `bind`, process
    0's coordination service listens on the coordinator's address only (not
    on every interface).

    When the others do not all join in time, XLA's client ends the process
    with a fatal error of its own; the join therefore runs on a helper thread
    and a `BackendError` marked `hard_exit` names what did not join first.
    """
    import time

    from irshard.core import interrupts
    jax = _jax()
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    deadline = time.monotonic() + timeout
    if process_id != 0:
        # JAX's client retries a coordinator that is not up yet only after a
        # second or so; waiting for the port to open avoids that pause.
        _wait_for_port(coordinator, timeout)
    remaining = max(1.0, deadline - time.monotonic())

    def initialize():
        jax.distributed.initialize(
            coordinator_address=coordinator, num_processes=num_processes,
            process_id=process_id, cluster_detection_method="deactivate",
            # XLA's own deadline comes after ours: it aborts the process.
            initialization_timeout=int(remaining) + 60,
            coordinator_bind_address=coordinator if bind else None)

    try:
        interrupts.call(initialize, deadline=remaining)
    except TimeoutError:
        if process_id == 0:
            what = (f"process 0 waited {timeout:g} s for the run's "
                    f"{num_processes} processes to join at {coordinator}, and "
                    f"not all of them did; start every process (--process-id "
                    f"0 to {num_processes - 1}) with --coordinator "
                    f"{coordinator}, or give a longer --timeout")
        else:
            what = (f"process {process_id} could not join the run coordinated "
                    f"at {coordinator} within {timeout:g} s; is process 0 "
                    f"running there, and reachable?")
        error = BackendError(what)
        error.hard_exit = True
        raise error from None
    except Exception as e:
        raise BackendError(f"process {process_id} could not join the run "
                           f"coordinated at {coordinator}: {message(e)}") from None


def _wait_for_port(address: str, timeout: float) -> None:
    import socket
    import time
    host, _, port = address.rpartition(":")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((host.strip("[]"), int(port)), timeout=1):
                return
        except OSError:
            time.sleep(0.02)
