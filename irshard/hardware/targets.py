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

Pure Python: profiles are read from `profiles.json` beside this file.
"""

from __future__ import annotations

import functools
import json
import math
import os
import re
import shlex
from dataclasses import dataclass, field
from typing import Any

from irshard.core import schema
from irshard.core.errors import SpecError, UsageError
from irshard.core.specs import MeshSpec, repeated

TPU_CHIPS = ("v4", "v5e", "v5p", "v6e")
GPU_CHIPS = ("h100", "h200", "b200")
_HELP = ("expected cpu, tpu-v4|v5e|v5p|v6e:TOPOLOGY[,slices=N] (e.g. "
         "tpu-v5e:4x4, tpu-v5p:2x2x2) or gpu-h100|h200|b200:NODESxGPUS "
         "(e.g. gpu-h100:2x8)")


@dataclass(frozen=True)
class Link:
    """One kind of link: the bandwidth one device can drive over it in one
    direction (bytes/s) and the latency of one step of a collective."""

    name: str
    bandwidth: float
    latency: float
    base: float = 0.0                 # once per collective (NCCL's launch)
    sources: dict[str, str] = field(default_factory=dict, compare=False)
    # Fitted numbers of each collective kind, where a calibration has them:
    # kind -> (latency, bandwidth).
    kinds: dict[str, tuple[float, float]] = field(default_factory=dict,
                                                  compare=False)
    # A CPU host's rendezvous: group size -> seconds of one tiny collective
    # among that many of its devices' threads, in a row with others
    # (`irshard calibrate`); the latencies above are a group of all of them.
    rendezvous: dict[int, float] = field(default_factory=dict, compare=False)

    def for_kind(self, kind: str) -> tuple[float, float]:
        """(latency, bandwidth) for a collective of `kind`."""
        return self.kinds.get(kind, (self.latency, self.bandwidth))

    def group_scale(self, group: int) -> float:
        """What a group of `group` devices takes of the latency: its
        rendezvous over that of the largest group measured (the nearest
        size measured, the smaller on a tie; 1 where none was)."""
        if not self.rendezvous:
            return 1.0
        whole = self.rendezvous[max(self.rendezvous)]
        nearest = min(self.rendezvous, key=lambda g: (abs(g - group), g))
        return self.rendezvous[nearest] / whole if whole > 0 else 1.0


@dataclass(frozen=True)
class Profile:
    """A chip's numbers (see profiles.json for where each comes from)."""

    name: str
    hbm_bytes: int | None
    hbm_bandwidth: float | None
    peak_flops: float | None          # dense bf16 FLOPs/s
    links: dict[str, Link]
    # A TPU's ICI torus: when a dimension has wraparound links (a ring both
    # ways): "full-16" (a dimension of 16 chips), "multiple-of-4".
    wraparound: str | None = None
    sources: dict[str, str] = field(default_factory=dict, compare=False)
    # What the step simulation times compute with, where it differs from
    # the peak numbers (a CPU host's, measured): `flops` and `bandwidth`
    # per second (a number, or `[bytes, rate]` points by size),
    # `op_overhead` seconds per instruction, `launch` seconds per execution;
    # for the whole host, or for one device while `devices` of them run.
    compute: dict[str, Any] = field(default_factory=dict, compare=False)
    # Seconds the runtime takes to start one execution of a program (a CPU
    # host's dispatch to its devices' threads), where measured.
    launch: float = 0.0
    # What was measured with a given number of devices sharing the host
    # (`by_devices` in profiles.json: links and launch), read by
    # `for_devices`.
    by_devices: dict[int, dict[str, Any]] = field(default_factory=dict,
                                                  compare=False)
    data: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)
    # A TPU's clock: what turns the cycles libtpu's cost model estimates for
    # an instruction into seconds; None where no figure is sourced.
    clock_hz: float | None = None

    def for_devices(self, devices: int) -> "Profile":
        """The profile as measured with `devices` devices, or with the
        nearest number measured (fewer, on a tie): a CPU host's devices
        share its cores, and its collectives slow as they contend."""
        if not self.by_devices or devices < 1:
            return self
        nearest = min(self.by_devices, key=lambda n: (abs(n - devices), n))
        overlay = self.by_devices[nearest]
        data = dict(self.data)
        data["links"] = dict(data.get("links", {}), **overlay.get("links", {}))
        if "compute" in overlay:
            data["compute"] = dict(overlay["compute"], devices=nearest)
        data.pop("by_devices", None)
        return profile_from_json(self.name, data)

    def has_wraparound(self, size: int) -> bool:
        if self.wraparound == "full-16":
            return size == 16
        if self.wraparound == "multiple-of-4":
            return size % 4 == 0
        return False

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "hbm_bytes": self.hbm_bytes,
                "hbm_bandwidth": self.hbm_bandwidth,
                "peak_flops": self.peak_flops,
                "links": {k: {"bandwidth": v.bandwidth, "latency": v.latency}
                          for k, v in sorted(self.links.items())}}


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

    def to_json(self, estimated: bool) -> dict[str, Any]:
        d: dict[str, Any] = {"name": self.text, "kind": self.kind,
                             "profile": self.profile_name, "estimated": estimated}
        if self.kind == "tpu":
            d.update(topology=list(self.topology), slices=self.slices)
        if self.kind == "gpu":
            d.update(nodes=self.nodes, gpus_per_node=self.gpus_per_node)
        return d


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
# Profiles


PROFILES_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                             "profiles.json")


def _number(entry: Any) -> Any:
    return entry["value"] if isinstance(entry, dict) else entry


def _source(entry: Any) -> str:
    return entry.get("source", "") if isinstance(entry, dict) else ""


def profile_from_json(name: str, data: dict[str, Any]) -> Profile:
    links = {}
    for link, values in data.get("links", {}).items():
        kinds = {kind: (float(v["latency"]), float(v["bandwidth"]))
                 for kind, v in (values.get("kinds") or {}).items()}
        links[link] = Link(link, float(_number(values["bandwidth"])),
                           float(_number(values["latency"])),
                           float(_number(values.get("base", 0.0))),
                           {k: _source(v) for k, v in values.items()
                            if k not in ("kinds", "rendezvous")}, kinds,
                           {int(g): float(v) for g, v
                            in (values.get("rendezvous") or {}).items()})
    numbers = {k: data.get(k) for k in ("hbm_bytes", "hbm_bandwidth", "peak_flops",
                                        "clock_hz")}
    return Profile(
        name=name,
        hbm_bytes=int(_number(numbers["hbm_bytes"])) if numbers["hbm_bytes"] else None,
        hbm_bandwidth=float(_number(numbers["hbm_bandwidth"]))
        if numbers["hbm_bandwidth"] else None,
        peak_flops=float(_number(numbers["peak_flops"]))
        if numbers["peak_flops"] else None,
        links=links,
        clock_hz=float(_number(numbers["clock_hz"])) if numbers["clock_hz"] else None,
        wraparound=(data.get("torus") or {}).get("wraparound"),
        sources={k: _source(v) for k, v in numbers.items() if v},
        compute={k: _number(v) for k, v in (data.get("compute") or {}).items()},
        launch=float(_number((data.get("compute") or {}).get("launch", 0.0))),
        by_devices={int(n): v for n, v in (data.get("by_devices") or {}).items()},
        data=data)


@functools.lru_cache(maxsize=None)
def _profiles(path: str) -> dict[str, Any]:
    with open(path, encoding="utf-8") as f:
        return json.load(f)["profiles"]


def profile(name: str, path: str | None = None) -> Profile:
    """The profile `name` from profiles.json, or from a saved profile
    (`irshard calibrate -o PATH`) whose numbers replace the shipped ones."""
    shipped = _profiles(PROFILES_PATH)
    data = dict(shipped[name])
    if path is not None:
        saved = load_saved(path)
        data["links"] = dict(data.get("links", {}), **saved.get("links", {}))
        # Measured here: it holds whatever device count it was measured on.
        data.pop("by_devices", None)
        if "compute" in saved:
            data["compute"] = saved["compute"]
    return profile_from_json(name, data)


def load_saved(path: str) -> dict[str, Any]:
    """A profile `irshard calibrate` saved, its shape checked."""
    hint = "give a profile written by irshard calibrate -o PATH"
    data = schema.load_json(path, "--profile", hint)
    schema.check(data, schema.PROFILE, f"--profile {path}")
    return data


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

    def to_json(self) -> dict[str, Any]:
        d = self.target.to_json(self.estimated)
        if self.profile.clock_hz:
            d["clock_hz"] = self.profile.clock_hz
        if self.target.kind == "tpu":
            d["libtpu_flags"] = libtpu_flags()
        return d


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
