"""JAX's devices: the host platform set up before JAX starts, the devices a
mesh is laid onto (simulated CPUs, GPUs; a TPU slice in `tpuslice`),
meshes and partition specs, and XLA's error messages made one line.
"""

from __future__ import annotations

import os
import re
import threading
from typing import Any, Sequence

from irshard.core import interrupts
from irshard.core.errors import SpecError


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
    wanted = "cpu" if platform == "cpu" else f"{_jax_platform(platform)},cpu"
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
    if platform == "tpu":
        tpu_log_dir()


def _jax_platform(platform: str) -> str:
    """The name JAX starts `platform` by: a GPU by its plugin's (cuda or
    rocm), since JAX's alias "gpu" asks for every kind of GPU and fails
    on those whose plugin is not installed."""
    if platform != "gpu":
        return platform
    import importlib.util
    try:
        spec = importlib.util.find_spec("jax_plugins")
    except (ImportError, ValueError):
        spec = None
    found = []
    for folder in (spec.submodule_search_locations or []) if spec else []:
        try:
            found += os.listdir(folder)
        except OSError:
            continue
    kinds = [kind for kind in ("cuda", "rocm")
             if any(name.startswith(f"xla_{kind}") for name in found)]
    return ",".join(kinds) or platform


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


def platform_devices(platform: str) -> list[Any]:
    """`jax.devices(platform)`. Where that starts JAX's backends for an
    accelerator, what native code writes meanwhile (libtpu's warnings about
    the TPU it looks for) is kept from the terminal: a missing platform is
    the caller's one error line."""
    jax = _jax()
    if platform == "cpu" or started():
        return jax.devices(platform)
    with quiet_native_stderr():
        return jax.devices(platform)


def device_count(platform: str) -> int:
    try:
        return len(platform_devices(platform))
    except RuntimeError:
        return 0


def devices(platform: str, count: int) -> list[Any]:
    """The first `count` devices of `platform` in the global device list."""
    jax = _jax()
    try:
        available = platform_devices(platform)
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
    """This process's index; where that starts JAX's backends, quietly (as
    `platform_devices`)."""
    if started():
        return _jax().process_index()
    with quiet_native_stderr():
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
    runs; `text` holds it afterwards. Blocks open at once (compiles on
    several threads) share one redirection: each block's `text` is what
    was written while it was open, its neighbours' lines included."""

    _lock = threading.Lock()
    _open = 0                # blocks open now
    _file: Any = None        # where fd 2 goes while any is open
    _saved = -1              # the real stderr, while any is open

    def __enter__(self):
        import sys
        import tempfile
        cls = quiet_native_stderr
        with cls._lock:
            if cls._open == 0:
                sys.stderr.flush()
                cls._file = tempfile.TemporaryFile()
                cls._saved = os.dup(2)
                interrupts.STDERR_COPIES.append(cls._saved)
                os.dup2(cls._file.fileno(), 2)
            cls._open += 1
            self._start = os.fstat(cls._file.fileno()).st_size
            self._file = cls._file
            # Where the block may still show progress: the real stderr,
            # when it is a terminal.
            self.terminal = cls._saved if os.isatty(cls._saved) else None
        self.text = ""
        return self

    def __exit__(self, *exc):
        cls = quiet_native_stderr
        with cls._lock:
            end = os.fstat(self._file.fileno()).st_size
            self.text = os.pread(self._file.fileno(), end - self._start,
                                 self._start).decode("utf-8", "replace")
            cls._open -= 1
            if cls._open == 0:
                os.dup2(cls._saved, 2)
                interrupts.STDERR_COPIES.remove(cls._saved)
                os.close(cls._saved)
                cls._file.close()
                cls._file, cls._saved = None, -1
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


def tpu_log_dir() -> str:
    """Where libtpu writes its logs (`TPU_LOG_DIR`): the user's folder where
    they chose one; else a temporary folder of this process's, removed when
    it ends (libtpu's own default, `tpu_logs` in /tmp, ignores TMPDIR,
    keeps a set of files per process forever and records the working
    directory). Set before libtpu loads."""
    if "TPU_LOG_DIR" not in os.environ:
        import atexit
        path = interrupts.temp_dir("irshard-tpu-logs-")
        atexit.register(interrupts.remove, path)
        os.environ["TPU_LOG_DIR"] = path
    return os.environ["TPU_LOG_DIR"]


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


def ran_without_devices(exc: BaseException) -> bool:
    """`exc` is JAX's failure to run a computation on devices that are only
    described (a TPU slice's compile-only client): there is nothing here to
    run it on."""
    # `'Executable' object has no attribute 'local_devices'`; newer
    # jaxlibs name the class with its module (`'jaxlib._jax.Executable'`).
    return isinstance(exc, AttributeError) and re.search(
        r"'(?:[\w.]+\.)?Executable' object has no attribute", str(exc)) is not None


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
