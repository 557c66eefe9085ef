"""Why a collective exists (`--explain`, JSON `why`), as a value: the value
its operand is and the sharding the op reading its result needs (`Value`),
and where propagation got each mesh axis it moves (`Origin`), read by
`irshard.collectives.explain`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from irshard.core.frames import SourceLocation


@dataclass(frozen=True)
class Origin:
    """Where propagation got a mesh axis of a sharding
    (`sdy.sharding_origins`), in the user's terms: an `input` or `output`
    by name, a `constraint` (its line), a `shard_map`, or `other`."""

    kind: str
    name: str
    source: SourceLocation | None = None      # a constraint's line

    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {"kind": self.kind, "name": self.name}
        if self.kind == "constraint":
            d["source"] = self.source.to_json() if self.source else None
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "Origin":
        return cls(d.get("kind") or "other", d.get("name") or "",
                   SourceLocation.from_json(d.get("source")))

    def text(self) -> str:
        if self.kind in ("input", "output"):
            return f"{self.kind} {self.name}"
        if self.kind == "constraint":
            where = self.source
            return f"the constraint at {where.file}:{where.line}" if where \
                else "a sharding constraint"
        if self.kind == "shard_map":
            return "a shard_map"
        return self.name or self.kind


@dataclass(frozen=True)
class Value:
    """One side of a collective: what it reads, or what reads its result."""

    what: str                                   # "input d", "add", "output 0"
    sharding: tuple[str, ...] | None
    source: SourceLocation | None
    origins: dict[str, Origin] = field(default_factory=dict)
    # A partial sum: what the op that made it reads sharded over the axes
    # it sums over.
    sums: tuple["Value", ...] = ()
    # Where every axis of its sharding came from (a collective reading
    # another's result reads these).
    all_origins: dict[str, Origin] = field(default_factory=dict, repr=False)

    def to_json(self, key: str) -> dict[str, Any]:
        d = {key: self.what,
             "sharding": list(self.sharding) if self.sharding is not None else None,
             "source": self.source.to_json() if self.source else None,
             "origins": {axis: o.to_json() for axis, o in self.origins.items()}}
        if self.sums:
            d["sums_over"] = [v.to_json("value") for v in self.sums]
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any], key: str) -> "Value":
        sharding = d.get("sharding")
        return cls(d.get(key) or "", tuple(sharding) if sharding is not None else None,
                   SourceLocation.from_json(d.get("source")),
                   {axis: Origin.from_json(o) for axis, o in (d.get("origins") or {}).items()},
                   tuple(cls.from_json(v, "value") for v in d.get("sums_over") or ()))

    def text(self) -> str:
        where = f" at {self.source}" if self.source else ""
        return f"{self.what}{where}"


@dataclass(frozen=True)
class Why:
    """Why a collective exists: the value it reads (`operand`; all of them
    where XLA combined several, `combined`), what the op reading its result
    needs (`needed`), where each axis it moves came from, a note on the
    op's kind, and all of it in words (`text`); or that XLA made it after
    partitioning (`made_by`)."""

    text: str
    operand: Value | None = None
    needed: Value | None = None
    origins: dict[str, Origin] = field(default_factory=dict)
    combined: tuple[Value, ...] = ()
    note: str | None = None
    made_by: str | None = None

    def to_json(self) -> dict[str, Any]:
        if self.made_by is not None:
            return {"made_by": self.made_by, "note": self.note, "text": self.text}
        d: dict[str, Any] = {
            "operand": self.operand.to_json("value") if self.operand else None,
            "needed": self.needed.to_json("op") if self.needed else None,
            "origins": {axis: o.to_json() for axis, o in self.origins.items()},
        }
        if self.combined:
            d["combined"] = [v.to_json("value") for v in self.combined]
        if self.note:
            d["note"] = self.note
        d["text"] = self.text
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "Why":
        if d.get("made_by") is not None:
            return cls(d.get("text") or "", note=d.get("note"), made_by=d["made_by"])
        return cls(d.get("text") or "",
                   Value.from_json(d["operand"], "value") if d.get("operand") else None,
                   Value.from_json(d["needed"], "op") if d.get("needed") else None,
                   {axis: Origin.from_json(o) for axis, o in (d.get("origins") or {}).items()},
                   tuple(Value.from_json(v, "value") for v in d.get("combined") or ()),
                   d.get("note"))
