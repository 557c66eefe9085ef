"""The simulated step as a value: its time and what it is made of (`Step`),
and the intervals of its predicted timeline (`Event`); `schedule` walks an
executable's schedule to make one."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Callable, NamedTuple


class Event(NamedTuple):
    """One interval of the predicted timeline."""

    name: str                    # the HLO instruction
    opcode: str
    track: str                   # "compute" or "collectives"
    start_s: float
    duration_s: float
    iteration: tuple[int, ...] = ()   # indices of the loops around it
    repeats: int = 1             # >1: a summary of that many iterations
    collective: str | None = None     # the report's collective, by name
    source: str | None = None    # the user's file:line (compute events)


@dataclass(frozen=True)
class Step:
    """The simulated step: its time and what it is made of. The walk adds
    it up in a `_tally` of the same fields, then freezes it."""

    step_s: float = 0.0
    compute_s: float = 0.0
    flops: float = 0.0             # every run of every instruction
    bytes_accessed: float = 0.0
    untimed_s: float = 0.0         # of compute_s: what has no cost to read
    launch_s: float = 0.0          # the runtime's start of the execution
    exposed_comm_s: float = 0.0
    overlapped_comm_s: float = 0.0
    # Instructions with no cost to read, by opcode: how many.
    untimed: dict[str, int] = field(default_factory=dict)
    unknown_trips: int = 0
    events: tuple[Event, ...] = ()
    dropped_events: int = 0
    # compute_s by what timed it (`ESTIMATE`, `ROOFLINE`, `TRAFFIC`,
    # `TRIPS`) and by what ran (a fusion by its kind, `kOutput fusion`,
    # else the opcode); exposed and overlapped communication by the
    # report's name of the collective (None: one the report does not name).
    compute_by_source: dict[str, float] = field(default_factory=dict)
    compute_by_kind: dict[str, float] = field(default_factory=dict)
    exposed_by: dict[str | None, float] = field(default_factory=dict)
    overlapped_by: dict[str | None, float] = field(default_factory=dict)
    # The communication by the mesh axes it crosses, where the report maps
    # its collectives to them (`by_axes`): axes -> (exposed, overlapped).
    comm_by_axes: dict[str, tuple[float, float]] = field(default_factory=dict)
    # The time model's relative error on the target (its profile's
    # `error_band`): steps closer than it tie.
    error_band: float = 0.0
    # What the model took for granted of the target, as words (on a CPU
    # host: `8 simulated devices on 2 cores, at the rates measured with 8
    # running at once`).
    assumes: str = ""

    def by_axes(self, axes_of: Callable[[str | None], str]) -> "Step":
        """The step with its communication summed by `axes_of` each
        collective's name (`comm_by_axes`)."""
        found: dict[str, list[float]] = {}
        for i, part in enumerate((self.exposed_by, self.overlapped_by)):
            for name, seconds in part.items():
                found.setdefault(axes_of(name), [0.0, 0.0])[i] += seconds
        return replace(self, comm_by_axes={
            k: (v[0], v[1]) for k, v in sorted(found.items()) if v[0] > 0 or v[1] > 0})

    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "step_s": self.step_s, "launch_s": self.launch_s,
            "compute_s": self.compute_s,
            "exposed_comm_s": self.exposed_comm_s,
            "overlapped_comm_s": self.overlapped_comm_s,
        }
        d["compute"] = {
            "by_source": heaviest(self.compute_by_source),
            "by_kind": heaviest(self.compute_by_kind)}
        if self.comm_by_axes:
            d["comm_by_axes"] = {k: {"exposed_s": e, "overlapped_s": o}
                                 for k, (e, o) in self.comm_by_axes.items()}
        if self.untimed:
            d["untimed"] = {"instructions": dict(sorted(self.untimed.items())),
                            "min_s": self.untimed_s}
        if self.unknown_trips:
            d["unknown_trip_counts"] = self.unknown_trips
        if self.error_band:
            d["error_band"] = self.error_band
        if self.assumes:
            d["assumes"] = self.assumes
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "Step":
        """The step as its JSON form holds it: its times and what they are
        made of (not its timeline's events, nor its flops and bytes)."""
        compute = d.get("compute") or {}
        untimed = d.get("untimed") or {}
        return cls(step_s=d["step_s"], compute_s=d.get("compute_s", 0.0),
                   untimed_s=untimed.get("min_s", 0.0), launch_s=d.get("launch_s", 0.0),
                   exposed_comm_s=d.get("exposed_comm_s", 0.0),
                   overlapped_comm_s=d.get("overlapped_comm_s", 0.0),
                   untimed=dict(untimed.get("instructions") or {}),
                   unknown_trips=d.get("unknown_trip_counts", 0),
                   compute_by_source=dict(compute.get("by_source") or {}),
                   compute_by_kind=dict(compute.get("by_kind") or {}),
                   comm_by_axes={k: (v["exposed_s"], v["overlapped_s"])
                                 for k, v in (d.get("comm_by_axes") or {}).items()},
                   error_band=d.get("error_band", 0.0),
                   assumes=d.get("assumes", ""))


def heaviest(part: dict[str, float]) -> dict[str, float]:
    """`part` without zeros, the largest first (ties by name)."""
    return dict(sorted(((k, v) for k, v in part.items() if v > 0),
                       key=lambda kv: (-kv[1], kv[0])))
