"""The memory peak: what is live on a device when its memory is fullest
(`Peak`, its buffers `PeakBuffer`, read from XLA's buffer assignment by
`irshard.collectives.memory`), and as text: the report's `memory.peak` (JSON
form) folded to its largest rows, inputs grouped by path prefix and the rest
by source line."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from irshard.core import schema
from irshard.core.frames import SourceLocation, scope_of

ROWS = 10
# What a buffer live at the peak holds (DESIGN.md's `memory.peak`).
KINDS = schema.PEAK_KINDS


@dataclass(frozen=True)
class PeakBuffer:
    """One buffer live at the peak."""

    bytes: int
    kind: str
    name: str                         # the input's path, or the instruction
    shape: str = ""
    op_name: str | None = None
    source: SourceLocation | None = None   # the user's line
    is_input: bool = False
    copy_of: str | None = None        # the input a copy holds (another layout)
    note: str | None = None           # what a row without a value is

    @property
    def scope(self) -> str | None:
        return scope_of(self.op_name) if self.op_name else None

    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {"bytes": self.bytes, "kind": self.kind}
        if self.is_input:
            d["path"] = self.name
        else:
            d["instruction"] = self.name or None
        if self.shape:
            d["shape"] = self.shape
        if self.op_name:
            d["op_name"] = self.op_name
            if self.scope and not self.copy_of:
                d["scope"] = self.scope
        if self.copy_of:
            d["copy_of"] = self.copy_of
        if self.note:
            d["note"] = self.note
        d["source"] = self.source.to_json() if self.source is not None else None
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "PeakBuffer":
        is_input = "path" in d
        return cls(d["bytes"], d["kind"], d["path"] if is_input else d.get("instruction") or "",
                   d.get("shape") or "", d.get("op_name"),
                   SourceLocation.from_json(d.get("source")), is_input,
                   d.get("copy_of"), d.get("note"))


@dataclass(frozen=True)
class Peak:
    """The per-device footprint at the peak and what holds it."""

    bytes: int
    position: int | None              # where in XLA's schedule, if temps
    at: str | None                    # the instruction scheduled there
    buffers: tuple[PeakBuffer, ...]
    schedule_length: int = 0
    # (position, bytes held by the allocations and the live temporaries)
    curve: tuple[tuple[int, int], ...] = ()

    def by_kind(self) -> dict[str, int]:
        found: dict[str, int] = {}
        for b in self.buffers:
            found[b.kind] = found.get(b.kind, 0) + b.bytes
        return dict(sorted(found.items(), key=lambda kv: (-kv[1], kv[0])))

    def to_json(self) -> dict[str, Any]:
        return {"bytes": self.bytes, "source": "XLA buffer assignment",
                "schedule_position": self.position, "instruction": self.at,
                "schedule_length": self.schedule_length,
                "curve": [list(point) for point in self.curve],
                "by_kind": self.by_kind(),
                "buffers": [b.to_json() for b in self.buffers]}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "Peak":
        return cls(d["bytes"], d.get("schedule_position"), d.get("instruction"),
                   tuple(PeakBuffer.from_json(b) for b in d.get("buffers") or ()),
                   d.get("schedule_length", 0),
                   tuple((int(p), int(b)) for p, b in d.get("curve") or ()))


def _prefix(path: str) -> str:
    """An input's group: its path less the leaf's own two last components
    (`opt_state/mu/layers/0/attn/wq` -> `opt_state/mu/layers/0/*`)."""
    parts = path.split("/")
    return "/".join(parts[:-2] + ["*"]) if len(parts) > 2 else path


def _where(b: dict[str, Any]) -> str:
    source = b.get("source")
    if source:
        where = f"{source['file']}:{source['line']}"
        return f"{where} ({source['function']})" if source.get("function") else where
    return "-"


def rows(peak: dict[str, Any]) -> list[tuple[int, str, str, int, str]]:
    """(bytes, kind, what, buffers, where) per group, largest first."""
    groups: dict[tuple[str, str, str], list[int]] = {}
    for b in peak["buffers"]:
        if "path" in b:
            key = (b["kind"], _prefix(b["path"]), "-")
        elif b.get("instruction"):
            what = f"copy of {b['copy_of']}" if b.get("copy_of") else \
                b.get("scope") or _short_op(b.get("op_name")) or b["instruction"]
            key = (b["kind"], what, _where(b))
        else:
            key = (b["kind"], f"({b.get('note') or 'no value'})", "-")
        found = groups.setdefault(key, [0, 0])
        found[0] += b["bytes"]
        found[1] += 1
    out = [(total, kind, what, n, where)
           for (kind, what, where), (total, n) in groups.items()]
    out.sort(key=lambda r: (-r[0], r[1], r[2], r[4]))
    return out


# How wide a row's combined op_name may grow.
_WIDTH = 60


def _short_op(op_name: str | None) -> str | None:
    """`jit(step)/jvp()/dot_general` -> `jvp()/dot_general`: the op and the
    transformation it is under."""
    if not op_name:
        return None
    if "/(" in op_name and op_name.endswith(")"):
        # A combiner's `prefix/(a:b:...)`: its distinct parts, as many
        # as fit in `_WIDTH` characters, one at least (one fusion may join
        # dozens).
        parts = list(dict.fromkeys(op_name[op_name.index("/(") + 2:-1].split(":")))
        shown = 1
        while shown < len(parts) and \
                len(":".join(parts[:shown + 1])) + 10 <= _WIDTH:
            shown += 1
        more = f" +{len(parts) - shown} more" if len(parts) > shown else ""
        return f"({':'.join(parts[:shown])}{more})"
    parts = [p for p in op_name.split("/") if not p.startswith("jit(")]
    return "/".join(parts[-2:]) if parts else op_name


def lines(peak: dict[str, Any], human_bytes, fold: bool = True) -> list[str]:
    """The peak's summary line and its table (all rows unless `fold`)."""
    kinds = ", ".join(f"{k} {human_bytes(v)}" for k, v in peak["by_kind"].items())
    at = ""
    if peak.get("instruction"):
        at = f" at {peak['instruction']} (schedule position {peak['schedule_position']})"
    out = [f"memory peak per device {human_bytes(peak['bytes'])}{at}, from XLA's "
           f"buffer assignment: {kinds}"]
    found = rows(peak)
    shown = found[:ROWS] if fold else found
    table = [("bytes", "kind", "what", "buffers", "source")] + [
        (human_bytes(b), kind, what, str(n), where)
        for b, kind, what, n, where in shown]
    widths = [max(len(r[i]) for r in table) for i in range(4)]
    for r in table:
        out.append("  " + "  ".join(c.ljust(w) if i != 3 else c.rjust(w)
                                    for i, (c, w) in enumerate(zip(r, widths)))
                   + "  " + r[4])
    if len(found) > len(shown):
        rest = sum(r[0] for r in found[len(shown):])
        out.append(f"  ... {len(found) - len(shown)} more rows, "
                   f"{human_bytes(rest)} (all of them in the JSON report)")
    return out
