"""A time on every collective, and the step's roofline.

Each collective crosses the slowest link its groups span: `dcn` between TPU
slices, else `ici` on a TPU; `infiniband` between GPU nodes, else `nvlink`;
`host` on simulated CPU devices. Its time follows the ring model of the
sources in profiles.json (the JAX scaling book, NCCL), with `S` the bytes
of its result per device, `n` the group size, `W` the link's one-way
bandwidth per device and `a` its latency per step:

    all-gather, reduce-scatter   T = a (n-1) + wire / B
    all-reduce                   T = 2 a (n-1) + wire / B
    all-to-all                   T = a (n-1) + S n / (4 B)  (a torus)
                                 T = a (n-1) + wire / B     (a switch)
    collective-permute           T = a + S / W
    any, on the host (CPU)       T = a r(n) / r(N) + wire / W

(The CPU's simulated devices are threads of one process sharing its cores:
each collective is a rendezvous of its group's threads and then memory
copies, and its latency is that of the rendezvous, not of ring steps: `r`
is the measured rendezvous of a group of that size, `N` the largest group
measured, all the host's devices.)

where `wire` is what one device sends with a ring (the report's
`wire_bytes`) and `B` the bandwidth the ring gets: on a TPU, W for each
torus dimension the group spans, doubled when that dimension has wraparound
links (a ring both ways); elsewhere W. A link's `base` latency is added once.
On a TPU a ring over a dimension with wraparound takes n/2 steps, not n-1.
A TPU's collectives over different mesh axes use different links of its
torus, and a link carries each way at once (`torus_lanes`): the step
simulation runs those side by side.

The roofline compares the executable's FLOPs at the chip's peak, its bytes
accessed at HBM bandwidth, and the communication time: whichever is
largest bounds the step, which takes between that (all overlapped) and
compute plus communication (none overlapped).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

from irshard import backend
from irshard.timemodel.profiles import Link, Profile
from irshard.xla import replica_groups


@dataclass(frozen=True)
class Place:
    """Where a logical device is: its TPU slice and chip coordinates, or its
    GPU node."""

    slice: int = 0
    coords: tuple[int, ...] = ()
    node: int = 0


class CostModel:
    """Links and times of collectives for one target and device layout.

    `target` is the `irshard.hardware.targets.Target` compiled for: its
    `kind`, a TPU's `topology`, a GPU cluster's `gpus_per_node`."""

    def __init__(self, target: Any, profile: Profile, places: Sequence[Place]):
        self.target = target
        self.profile = profile.for_devices(len(places)) \
            if target.kind == "cpu" else profile
        self.places = list(places)

    @classmethod
    def for_devices(cls, target: Any, profile: Profile,
                    devices: Sequence[Any]) -> "CostModel":
        places = []
        for i, device in enumerate(devices):
            if target.kind == "tpu":
                slice_index, coords = backend.device_place(device)
                places.append(Place(slice_index, coords))
            elif target.kind == "gpu":
                places.append(Place(node=i // target.gpus_per_node))
            else:
                places.append(Place())
        return cls(target, profile, places)

    # -- slices --

    def slice_groups(self) -> list[list[int]]:
        """Groups of the devices at the same place in each slice."""
        by_place: dict[tuple[int, ...], list[int]] = {}
        for i, place in enumerate(self.places):
            by_place.setdefault(place.coords, []).append(i)
        return [g for _, g in sorted(by_place.items())]

    def slice_axes(self, mesh) -> tuple[str, ...]:
        """The mesh axes along which the slice changes."""
        axes = []
        for k, axis in enumerate(mesh.axes):
            stride = math.prod(mesh.shape[k + 1:])
            if axis.size > 1 and any(
                    self.places[i].slice != self.places[i + stride].slice
                    for i in range(len(self.places) - stride)
                    if (i // stride) % axis.size < axis.size - 1):
                axes.append(axis.name)
        return tuple(axes)

    # -- links --

    def _where(self, device: int) -> Place:
        return self.places[device] if 0 <= device < len(self.places) else Place()

    def link_of(self, groups: Sequence[Sequence[int]]) -> str:
        """The slowest link any group crosses."""
        if self.target.kind == "tpu":
            crosses = any(len({self._where(d).slice for d in g}) > 1 for g in groups)
            return "dcn" if crosses else "ici"
        if self.target.kind == "gpu":
            crosses = any(len({self._where(d).node for d in g}) > 1 for g in groups)
            return "infiniband" if crosses else "nvlink"
        return "host"

    def _ici_bandwidth(self, group: Sequence[int], link: Link) -> tuple[float, bool]:
        """The bandwidth a ring over `group` gets on the torus, and whether
        it runs both ways (wraparound on every dimension it spans)."""
        coords = [self._where(d).coords for d in group]
        spanned = [k for k in range(len(coords[0]) if coords and coords[0] else 0)
                   if len({c[k] for c in coords}) > 1]
        if not spanned:
            return link.bandwidth, False
        both_ways = all(self.profile.has_wraparound(self.target.topology[k])
                        for k in spanned if k < len(self.target.topology))
        return link.bandwidth * len(spanned) * (2 if both_ways else 1), both_ways

    # -- times --

    def estimate(self, kind: str, nbytes: int, wire: int, n: int,
                 groups: Sequence[Sequence[int]]) -> tuple[str, float | None]:
        """(link, seconds) of one execution of a collective."""
        link_name = self.link_of(groups)
        link = self.profile.links.get(link_name)
        if link is None or n <= 1 and kind != "collective-permute":
            return link_name, 0.0 if link is not None else None
        latency, per_link = link.for_kind(kind)
        bandwidth, both_ways = per_link, False
        if link_name == "ici" and groups:
            bandwidth, both_ways = self._ici_bandwidth(groups[0], link)
        switched = link_name != "ici"
        steps = n - 1 if not both_ways else math.ceil(n / 2)
        if kind == "collective-permute":
            return link_name, link.base + latency + nbytes / per_link
        if link_name == "host":
            # The devices are threads of one process: a collective is one
            # rendezvous of its group's, then copies.
            return link_name, link.base + latency * link.group_scale(n) \
                + wire / bandwidth
        if kind == "all-reduce":
            seconds = 2 * latency * steps + wire / bandwidth
        elif kind in ("all-to-all", "ragged-all-to-all") and not switched:
            seconds = latency * steps + nbytes * n / (4 * bandwidth)
        else:
            seconds = latency * steps + wire / bandwidth
        return link_name, link.base + seconds


@dataclass(frozen=True)
class Roofline:
    """What bounds a step: its flops at the chip's peak (`compute_s`), its
    bytes at HBM bandwidth (`memory_s`), its communication (`comm_s`); the
    step between all overlapped and none (`step_s`, `exposed_comm_s`: the
    least and the most)."""

    flops: float
    bytes_accessed: float | None
    compute_s: float
    memory_s: float
    comm_s: float

    @property
    def bound(self) -> str:
        times = {"compute": self.compute_s, "memory": self.memory_s,
                 "communication": self.comm_s}
        return max(times, key=lambda k: (times[k], k))

    @property
    def step_s(self) -> tuple[float, float]:
        local = max(self.compute_s, self.memory_s)
        return max(local, self.comm_s), local + self.comm_s

    @property
    def exposed_comm_s(self) -> tuple[float, float]:
        local = max(self.compute_s, self.memory_s)
        return max(0.0, self.comm_s - local), self.comm_s

    def to_json(self) -> dict[str, Any]:
        return {
            "flops": self.flops, "bytes_accessed": self.bytes_accessed,
            "compute_s": self.compute_s, "memory_s": self.memory_s,
            "comm_s": self.comm_s, "bound": self.bound,
            "step_s": list(self.step_s),
            "exposed_comm_s": list(self.exposed_comm_s),
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "Roofline":
        return cls(d["flops"], d.get("bytes_accessed"), d["compute_s"],
                   d["memory_s"], d["comm_s"])


def roofline(profile: Profile, flops: float | None, bytes_accessed: float | None,
             comm_s: float) -> Roofline | None:
    """What bounds a step: compute, memory traffic or communication."""
    if not profile.peak_flops or not profile.hbm_bandwidth or flops is None:
        return None
    return Roofline(flops, bytes_accessed, flops / profile.peak_flops,
                    (bytes_accessed or 0.0) / profile.hbm_bandwidth, comm_s)


def torus_lanes(mesh, axes: dict[str, tuple[str, ...]]):
    """The links a TPU collective uses, for the step simulation: each mesh
    axis it spans, both ways round the axis's ring (a ring collective sends
    each way at once), or, for a collective-permute, the way round each
    of its pairs goes."""
    found: dict[str, tuple] = {}

    def lanes(inst, name):
        if inst.name in found:
            return found[inst.name]
        ways = set()
        if inst.opcode.startswith("collective-permute") \
                and "source_target_pairs" in inst.attrs:
            try:
                ways = replica_groups.pair_directions(
                    replica_groups.parse_pairs(inst.attrs["source_target_pairs"]),
                    mesh)
            except ValueError:
                ways = set()
        if not ways:
            ways = {(axis, way) for axis in axes.get(name, ("?",))
                    for way in "+-"}
        found[inst.name] = tuple(sorted(ways))
        return found[inst.name]

    return lanes
