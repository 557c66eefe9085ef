"""A TPU slice without the hardware: its chips as libtpu describes them
(megacore chips as one device each), the devices a mesh is laid onto
there, a context in which a program sees them as `jax.devices()`, and
libtpu's own log lines where a compile fails."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from typing import Any, Sequence

from irshard.backend.devices import _jax, first_line, message, quiet_native_stderr, tpu_log_dir
from irshard.core.errors import SpecError


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
