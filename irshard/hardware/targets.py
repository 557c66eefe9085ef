"""What the program is compiled for: simulated CPU devices, a TPU slice, a
GPU cluster — and the hardware profile that puts a time on its collectives.

    target := 'cpu'
            | 'tpu-' GEN ':' TOPOLOGY [',slices=' N]     tpu-v5e:4x4, tpu-v5p:2x2x2
            | 'gpu-' CHIP ':' NODES 'x' GPUS             gpu-h100:2x8

A TPU target is compiled by libtpu for that topology on any machine (no TPU
needed); the mesh is laid onto the chips as `jax.make_mesh` lays it, and
with several slices the leading mesh axes span the slices (over DCN). A GPU
target is compiled for the GPUs when they are present, else estimated from
the partitioned HLO of a compile for simulated devices; devices fill a node
first, so an axis inside a node talks over NVLink and one across nodes over
InfiniBand.

Pure Python: the profile of each target is read by
`irshard.timemodel.profiles`.
"""

from __future__ import annotations

import math
import os
import re
import shlex
from dataclasses import dataclass

from irshard.core.errors import SpecError, UsageError
from irshard.core.specs import MeshSpec
from irshard.core.textinput import repeated
from irshard.timemodel.profiles import Profile, profile

TPU_CHIPS = ("v4", "v5e", "v5p", "v6e")
GPU_CHIPS = ("h100", "h200", "b200")
_HELP = ("expected cpu, tpu-v4|v5e|v5p|v6e:TOPOLOGY[,slices=N] (e.g. "
         "tpu-v5e:4x4, tpu-v5p:2x2x2) or gpu-h100|h200|b200:NODESxGPUS "
         "(e.g. gpu-h100:2x8)")


@dataclass(frozen=True)
class Target:
    """A parsed `--target`."""

    text: str
    kind: str                  # cpu | tpu | gpu
    chip: str                  # host, v5e, h100, ...
    topology: tuple[int, ...] = ()
    slices: int = 1
    nodes: int = 1
    gpus_per_node: int = 0

    @property
    def num_devices(self) -> int | None:
        if self.kind == "tpu":
            return math.prod(self.topology) * self.slices
        if self.kind == "gpu":
            return self.nodes * self.gpus_per_node
        return None

    @property
    def profile_name(self) -> str:
        return "cpu-host" if self.kind == "cpu" else f"{self.kind}-{self.chip}"

    @property
    def topology_name(self) -> str:
        """libtpu's name of the slice, e.g. `v5e:4x4`."""
        return f"{self.chip}:{'x'.join(map(str, self.topology))}"

    def check_mesh(self, mesh: MeshSpec) -> None:
        count = self.num_devices
        if count is not None and mesh.num_devices != count:
            raise SpecError(f"--mesh {mesh} has {mesh.num_devices} devices but "
                            f"--target {self.text} has {count}; give a mesh of "
                            f"{count} devices")


CPU = Target("cpu", "cpu", "host")


def parse_target(text: str | None) -> Target:
    if text is None or text.strip() == "cpu":
        return CPU
    m = re.fullmatch(r"\s*(tpu|gpu)-([a-z0-9]+):([0-9x]+)((?:,[a-z]+=[0-9]+)*)\s*",
                     text)
    if not m:
        raise SpecError(f"--target '{text}': {_HELP}")
    kind, chip, shape, options = m.groups()
    dims = [int(d) for d in shape.split("x") if d.isdigit()]
    if not dims or len(dims) != len(shape.split("x")) or min(dims) < 1:
        raise SpecError(f"--target '{text}': '{shape}' is not a shape; {_HELP}")
    pairs = [o.split("=") for o in options.split(",") if o]
    twice = repeated(key for key, _ in pairs)
    if twice:
        raise SpecError(f"--target '{text}': option '{twice[0]}' is given "
                        f"twice; give it once")
    opts = dict(pairs)
    if kind == "tpu":
        if chip not in TPU_CHIPS:
            raise SpecError(f"--target '{text}': unknown TPU '{chip}'; TPUs are "
                            f"{', '.join(TPU_CHIPS)}")
        unknown = set(opts) - {"slices"}
        if unknown:
            raise SpecError(f"--target '{text}': unknown option "
                            f"'{sorted(unknown)[0]}'; a TPU target takes slices=N")
        want = 3 if chip in ("v4", "v5p") else 2
        if len(dims) != want:
            raise SpecError(f"--target '{text}': a {chip} slice is a "
                            f"{want}-D torus; give {'x'.join(['N'] * want)}")
        slices = int(opts.get("slices", 1))
        if slices < 1:
            raise SpecError(f"--target '{text}': slices must be at least 1")
        return Target(text.strip(), "tpu", chip, tuple(dims), slices)
    if chip not in GPU_CHIPS:
        raise SpecError(f"--target '{text}': unknown GPU '{chip}'; GPUs are "
                        f"{', '.join(GPU_CHIPS)}")
    if opts:
        raise SpecError(f"--target '{text}': a GPU target takes no options")
    if len(dims) != 2:
        raise SpecError(f"--target '{text}': give NODESxGPUS, e.g. gpu-{chip}:2x8")
    return Target(text.strip(), "gpu", chip, (), 1, dims[0], dims[1])


# ---------------------------------------------------------------------------
# Placement


@dataclass(frozen=True)
class Placement:
    """Where a program's mesh lives, resolved once before anything compiles:
    the target, the platform JAX compiles for, whether the target's numbers
    are estimated from a compile for stand-in devices (a GPU target without
    GPUs), and the hardware profile its times come from, a saved one
    (`--profile`, `saved`) already read and checked."""

    target: Target
    platform: str
    estimated: bool
    profile: Profile
    saved: str | None = None

    def check_runnable(self) -> None:
        """A described TPU slice, or GPUs that are not here, cannot run."""
        if self.target.kind == "tpu":
            raise UsageError(f"--target {self.target.text}: a TPU slice is "
                             f"compiled here without a TPU and cannot run; use "
                             f"irshard compile or show")
        if self.estimated:
            raise UsageError(f"--target {self.target.text}: without GPUs (give "
                             f"--platform gpu where they are) the target is "
                             f"estimated and cannot run; use irshard compile")


def libtpu_flags() -> list[str]:
    """The flags libtpu compiles with: `LIBTPU_INIT_ARGS`, read by libtpu
    when this process first loads it (MaxText's scripts set their
    `--xla_tpu_...` flags there)."""
    return shlex.split(os.environ.get("LIBTPU_INIT_ARGS", ""))


def place(target: str | None, platform: str = "cpu",
          profile_path: str | None = None) -> Placement:
    """`--target`, `--platform` and `--profile` resolved into a `Placement`:
    each checked against the others (a TPU target is compiled by libtpu on
    this host; a GPU target is compiled for the GPUs present, or
    estimated), the profile read once."""
    found = parse_target(target)
    wanted = {"tpu": ("cpu",), "gpu": ("cpu", "gpu")}.get(found.kind)
    if wanted and platform not in wanted:
        raise UsageError(
            f"--target {found.text} --platform {platform}: a "
            f"{found.kind.upper()} target is compiled "
            + ("by libtpu on this host; leave --platform out"
               if found.kind == "tpu" else
               "for the GPUs present (--platform gpu) or estimated "
               "(no --platform)"))
    loaded = profile(found.profile_name, profile_path)
    # A GPU target is compiled for the GPUs when asked (--platform gpu),
    # else estimated from a compile for simulated devices.
    compiled_for = {"tpu": "tpu", "gpu": platform}.get(found.kind, platform)
    return Placement(found, compiled_for,
                     found.kind == "gpu" and compiled_for != "gpu", loaded,
                     profile_path)
