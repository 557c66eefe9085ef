"""The report's parts beside its collectives and tensors, each a typed,
frozen value that writes its own JSON: the device's memory (`MemoryUse`),
what the program was compiled for (`TargetInfo`), what XLA warned about
(`Finding`) and the budgets the report was held to (`BudgetOutcome`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from irshard.core.frames import SourceLocation
from irshard.hardware.targets import Placement, libtpu_flags
from irshard.reporting.peak import Peak
from irshard.reporting.why import Cause


@dataclass(frozen=True)
class Finding:
    """What XLA warned about while partitioning, in the user's terms (JSON
    `findings`; read by `irshard.collectives.findings`)."""

    kind: str                               # involuntary-remat
    message: str
    op: str | None = None                   # the HLO opcode, e.g. add
    shape: str | None = None                # its per-device shape
    from_sharding: str | None = None        # in mesh axes where possible
    to_sharding: str | None = None
    source: SourceLocation | None = None
    op_name: str | None = None
    # With --explain: the decision that demands the sharding it was moved
    # to (the cause of the collectives XLA made for it).
    cause: Cause | None = None

    def to_json(self) -> dict[str, Any]:
        d = {"kind": self.kind, "from": self.from_sharding,
             "to": self.to_sharding, "op": self.op, "shape": self.shape,
             "source": self.source.to_json() if self.source else None,
             "op_name": self.op_name, "message": self.message}
        if self.cause is not None:
            d["cause"] = self.cause.to_json()
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "Finding":
        return cls(d.get("kind") or "", d.get("message") or "", d.get("op"),
                   d.get("shape"), d.get("from"), d.get("to"),
                   SourceLocation.from_json(d.get("source")), d.get("op_name"),
                   Cause.from_json(d["cause"]) if d.get("cause") else None)

    def describe(self) -> str:
        where = f" at {self.source}" if self.source else ""
        said = (f"{self.op or 'an op'}{where}: from {self.from_sharding} to "
                f"{self.to_sharding} by replicating the whole tensor")
        if self.cause is not None:
            said += f"; {self.cause.text().replace('cause: ', 'demanded by ', 1)}"
        return said


@dataclass(frozen=True)
class BudgetOutcome:
    """A budget the report was held to (JSON `budgets`): its expression,
    the report's value and the limit, and whether it held."""

    budget: str
    value: float
    limit: float
    passed: bool

    def to_json(self) -> dict[str, Any]:
        def whole(x: float) -> float:
            return int(x) if isinstance(x, float) and x.is_integer() else x
        return {"budget": self.budget, "value": whole(self.value),
                "limit": whole(self.limit), "passed": self.passed}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "BudgetOutcome":
        return cls(d["budget"], d["value"], d["limit"], bool(d["passed"]))


@dataclass(frozen=True)
class TargetInfo:
    """What a program was compiled for (JSON `target`): the `--target`, its
    kind and profile, whether its numbers are estimated from a compile for
    stand-in devices; a TPU slice's topology, slices, clock and the libtpu
    flags it compiled with; a GPU cluster's nodes."""

    name: str
    kind: str
    profile: str
    estimated: bool
    topology: tuple[int, ...] = ()
    slices: int = 1
    nodes: int = 1
    gpus_per_node: int = 0
    clock_hz: float | None = None
    libtpu_flags: tuple[str, ...] = ()

    @classmethod
    def of(cls, placement: Placement) -> "TargetInfo":
        t = placement.target
        return cls(t.text, t.kind, t.profile_name, placement.estimated,
                   tuple(t.topology), t.slices, t.nodes, t.gpus_per_node,
                   placement.profile.clock_hz or None,
                   tuple(libtpu_flags()) if t.kind == "tpu" else ())

    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {"name": self.name, "kind": self.kind,
                             "profile": self.profile, "estimated": self.estimated}
        if self.kind == "tpu":
            d.update(topology=list(self.topology), slices=self.slices)
        if self.kind == "gpu":
            d.update(nodes=self.nodes, gpus_per_node=self.gpus_per_node)
        if self.clock_hz:
            d["clock_hz"] = self.clock_hz
        if self.kind == "tpu":
            d["libtpu_flags"] = list(self.libtpu_flags)
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "TargetInfo":
        return cls(d["name"], d["kind"], d.get("profile") or "",
                   bool(d.get("estimated")), tuple(d.get("topology") or ()),
                   d.get("slices", 1), d.get("nodes", 1), d.get("gpus_per_node", 0),
                   d.get("clock_hz"), tuple(d.get("libtpu_flags") or ()))


@dataclass(frozen=True)
class MemoryUse:
    """A device's memory: XLA's memory analysis (arguments, outputs, what
    the outputs alias of the arguments, temporaries), the peak of its
    buffer assignment where it was read, and the chip's capacity where the
    target has one (JSON `memory`)."""

    argument_bytes: int
    output_bytes: int
    alias_bytes: int
    temp_bytes: int
    peak: Peak | None = None
    capacity_bytes: int | None = None

    @property
    def analysed_bytes(self) -> int:
        """XLA's memory analysis: arguments, outputs and temporaries less
        what the outputs alias."""
        return (self.argument_bytes + self.output_bytes + self.temp_bytes
                - self.alias_bytes)

    @property
    def in_use(self) -> int:
        """Bytes per device in its main memory: XLA's buffer assignment's
        total there (the peak), where it was read, else its memory analysis.
        libtpu's memory analysis leaves temporaries out of a small program
        and counts its other memory spaces into a large one's (MaxText's
        32B step on v5p-128: 102.3 GB, over the chip's 95 GiB, for an
        executable libtpu builds, its HBM holding 93.9 GB), so it is the
        fallback only."""
        return self.peak.bytes if self.peak else self.analysed_bytes

    @property
    def fits(self) -> bool | None:
        return None if not self.capacity_bytes else self.in_use <= self.capacity_bytes

    @property
    def over_bytes(self) -> int:
        return max(0, self.in_use - self.capacity_bytes) if self.capacity_bytes else 0

    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {"argument_bytes": self.argument_bytes,
                             "output_bytes": self.output_bytes,
                             "alias_bytes": self.alias_bytes,
                             "temp_bytes": self.temp_bytes}
        if self.peak:
            d["peak"] = self.peak.to_json()
        if self.capacity_bytes:
            d["capacity_bytes"] = self.capacity_bytes
            d["fits"] = self.fits
            if not self.fits:
                d["over_bytes"] = self.over_bytes
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "MemoryUse":
        return cls(d.get("argument_bytes", 0), d.get("output_bytes", 0),
                   d.get("alias_bytes", 0), d.get("temp_bytes", 0),
                   Peak.from_json(d["peak"]) if d.get("peak") else None,
                   d.get("capacity_bytes"))
