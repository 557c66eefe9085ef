"""JAX's devices: the host platform set up before JAX starts, the devices a
mesh is laid onto (simulated CPUs, a TPU slice described by libtpu, GPUs),
meshes and partition specs, and XLA's error messages made one line.
"""

from __future__ import annotations

import math
import os
import re
import subprocess
import sys
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
    runs; `text` holds it afterwards."""

    def __enter__(self):
        import sys
        import tempfile
        sys.stderr.flush()
        self._file = tempfile.TemporaryFile()
        self._saved = os.dup(2)
        interrupts.STDERR_COPIES.append(self._saved)
        os.dup2(self._file.fileno(), 2)
        self.text = ""
        # Where the block may still show progress: the real stderr, when it
        # is a terminal.
        self.terminal = self._saved if os.isatty(self._saved) else None
        return self

    def __exit__(self, *exc):
        os.dup2(self._saved, 2)
        interrupts.STDERR_COPIES.remove(self._saved)
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
# The chips whose two TensorCores JAX runs as one device (megacore), as a
# slice of them runs: libtpu describes them so only when asked. Described
# by default, a v4 chip is two devices, and a program compiled for one of
# them runs on one core, at half the chip's rate.
_MEGACORE = ("v4", "v5p")


def tpu_slice(topology: str, slices: int, what: str) -> list[Any]:
    """The chips of a TPU slice (or `slices` of them) as libtpu describes
    them, in its order (as `jax.devices()` lists them on the slice)."""
    if (topology, slices) in _SLICES:
        return _SLICES[topology, slices]
    os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
    tpu_log_dir()
    if not _SLICES:
        _check_libtpu_flags(topology)
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
            if topology.split(":")[0] in _MEGACORE:
                kwargs["chip_config_name"] = "megacore"
            topo = topologies.get_topology_desc(topology_name=topology,
                                                platform="tpu", **kwargs)
        except Exception as e:
            error = e
        else:
            error = None
    if error is not None:
        said = "".join(f"\n{line}" for line in tpu_log_errors(message(error)))
        raise SpecError(f"--target {what}: libtpu cannot describe '{topology}': "
                        f"{first_line(error)}{said}") from None
    del noise
    chips = [d for d in topo.devices if getattr(d, "core_on_chip", 0) == 0]
    _SLICES[topology, slices] = chips
    return chips


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


def tpu_log_errors(known: str = "", limit: int = 5) -> list[str]:
    """The errors libtpu logged in this process (its `tpu_driver.ERROR`
    file, where irshard chose the folder) that `known` does not already
    say, each its first line, indented: shown with a failure only."""
    directory = os.environ.get("TPU_LOG_DIR", "")
    if not os.path.basename(directory).startswith("irshard-tpu-logs-"):
        return []
    import glob
    found: list[str] = []
    for path in sorted(glob.glob(os.path.join(directory, f"*.ERROR.*.{os.getpid()}"))):
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                lines = f.read(1 << 20).splitlines()
        except OSError:
            continue
        for line in lines:
            head, sep, said = line.partition("] ")
            if sep and head[:1] in "EF" and said.strip() and said.strip() not in known:
                found.append(f"  libtpu: {said.strip()[:300]}")
    return found[:limit]


def _check_libtpu_flags(topology: str) -> None:
    """Ends in a SpecError where libtpu refuses `LIBTPU_INIT_ARGS`: it reads
    them when it loads and, for a flag it does not know, prints one line and
    exits the process. So the first load in a process with flags set is
    tried in a process of its own."""
    flags = os.environ.get("LIBTPU_INIT_ARGS", "").strip()
    if not flags:
        return
    code = ("import os, sys\n"
            "os.environ.setdefault('ALLOW_MULTIPLE_LIBTPU_LOAD', '1')\n"
            "from jax.experimental import topologies\n"
            "topologies.get_topology_desc(topology_name=sys.argv[1], platform='tpu')\n")
    try:
        tried = subprocess.run([sys.executable, "-c", code, topology],
                               capture_output=True, text=True, timeout=600)
    except (OSError, subprocess.TimeoutExpired):
        return
    refused = [line.strip() for line in tried.stderr.splitlines()
               if line.startswith("ERROR:")]
    if tried.returncode != 0 and refused:
        raise SpecError(f"LIBTPU_INIT_ARGS: libtpu refuses its flags: "
                        f"{refused[0].removeprefix('ERROR:').strip()}; give only "
                        f"flags this libtpu knows")


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
            # By platform name: asking for a device now would start JAX's
            # backends before the program's import sets JAX's options.
            self._default = jax.default_device("cpu")
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
