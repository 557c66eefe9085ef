"""A chip's numbers: the peak rates, HBM, clock and links the step-time
model reads (`Profile`, `Link`), from `profiles.json` beside this file, each
number with its source, or from a profile `irshard calibrate` measured and
saved (`--profile`), whose numbers replace the shipped ones.

Pure Python.
"""

from __future__ import annotations

import functools
import json
import os
from dataclasses import dataclass, field
from typing import Any

from irshard.core import schema


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
    # The time model's relative error on this target, as checked against
    # measurements (its source says which): steps closer than it tie.
    error_band: float = 0.0

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
                                        "clock_hz", "error_band")}
    return Profile(
        name=name,
        hbm_bytes=int(_number(numbers["hbm_bytes"])) if numbers["hbm_bytes"] else None,
        hbm_bandwidth=float(_number(numbers["hbm_bandwidth"]))
        if numbers["hbm_bandwidth"] else None,
        peak_flops=float(_number(numbers["peak_flops"]))
        if numbers["peak_flops"] else None,
        links=links,
        clock_hz=float(_number(numbers["clock_hz"])) if numbers["clock_hz"] else None,
        error_band=float(_number(numbers["error_band"])) if numbers["error_band"] else 0.0,
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
