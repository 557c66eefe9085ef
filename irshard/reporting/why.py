"""Why a collective exists (`--explain`, JSON `why`), as a value: the value
its operand is and the sharding the op reading its result needs (`Value`),
and where propagation got each mesh axis it moves (`Origin`), read by
`irshard.collectives.explain`; the decisions that may have caused it, each
with the verdict of a recompile without it (`Cause`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from irshard.core.frames import SourceLocation


@dataclass(frozen=True)
class Origin:
    """Where propagation got a mesh axis of a sharding
    (`sdy.sharding_origins`), in the user's terms: an `input` or `output`
    by name, a `constraint` (its line), a `shard_map`, or `other`. It is
    also the vocabulary of a cause: a decision the user can change."""

    kind: str
    name: str
    source: SourceLocation | None = None      # a constraint's line
    # An input's: what gave its sharding (`--shard PATTERN=SPEC`,
    # `shardings['PATH']`); every input it gave is one decision.
    rule: str | None = None
    # `together`: the decisions removed at once (where each alone was not
    # the cause: both operands of a partial sum, a weight's sharding and
    # the constraint that repeats it).
    parts: tuple["Origin", ...] = ()

    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {"kind": self.kind, "name": self.name}
        if self.kind in ("constraint", "op", "shard_map"):
            d["source"] = self.source.to_json() if self.source else None
        if self.rule is not None:
            d["rule"] = self.rule
        if self.parts:
            d["parts"] = [part.to_json() for part in self.parts]
        return d

    def key(self) -> str:
        """The decision as one line (`--group-by cause`): a constraint by its
        line, an input or output by name."""
        if self.kind in ("constraint", "shard_map") and self.source is not None:
            return f"{self.kind} {self.source.file}:{self.source.line}"
        if self.rule is not None:
            return f"rule {self.rule}"
        if self.kind == "together":
            return " + ".join(p.key() for p in self.parts)
        if self.kind == "op" and self.source is not None:
            return f"op {self.name.partition(' ')[0]} at {self.source.file}:{self.source.line}"
        return f"{self.kind} {self.name}".strip()

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "Origin":
        return cls(d.get("kind") or "other", d.get("name") or "",
                   SourceLocation.from_json(d.get("source")), d.get("rule"),
                   tuple(cls.from_json(p) for p in d.get("parts") or ()))

    def text(self) -> str:
        if self.kind == "input" and self.rule is not None:
            return f"input {self.name} (its sharding from {self.rule})"
        if self.kind in ("input", "output"):
            return f"{self.kind} {self.name}"
        if self.kind == "constraint":
            where = self.source
            return f"the constraint at {where.file}:{where.line}" if where \
                else "a sharding constraint"
        if self.kind == "shard_map":
            where = self.source
            spec = _spec_of(self.name)
            return (f"the shard_map at {where.file}:{where.line}" if where
                    else "a shard_map") + (f" (its {spec})" if spec else "")
        if self.kind == "together":
            return "together: " + "; ".join(p.text() for p in self.parts)
        if self.kind == "op":
            where = f" at {self.source.file}:{self.source.line}" if self.source else ""
            what, _, why = self.name.partition(" ")
            return f"{what}{where} {why} (the op's kind)"
        return self.name or self.kind


def _spec_of(name: str) -> str:
    """`in_specs[1]` for Shardy's `mc_0_input: 1`."""
    _, side, index = name.partition("_input: ")
    if not side:
        _, side, index = name.partition("_output: ")
        return f"out_specs[{index}]" if side and index.isdigit() else ""
    return f"in_specs[{index}]" if index.isdigit() else ""


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


# A cause's verdict (`--verify`): the collective goes without it, becomes
# another collective at its line, or stays.
CONFIRMED, CHANGED, NOT_CONFIRMED = "confirmed", "changed", "not confirmed"
VERDICTS = (CONFIRMED, CHANGED, NOT_CONFIRMED)


@dataclass(frozen=True)
class Cause:
    """A decision that may have made a collective: the one that gave the
    value it reads its sharding (`side` "operand"), or the one that gave
    its reader the sharding it computes in ("needed"); with `--verify`, the
    verdict of a recompile without it and what that recompile showed."""

    decision: Origin
    side: str
    verdict: str | None = None
    seen: str | None = None              # what the recompile showed

    def to_json(self) -> dict[str, Any]:
        d = dict(self.decision.to_json(), side=self.side, verdict=self.verdict)
        if self.seen is not None:
            d["seen"] = self.seen
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "Cause":
        return cls(Origin.from_json(d), d.get("side") or "operand",
                   d.get("verdict"), d.get("seen"))

    @property
    def holds(self) -> bool:
        return self.verdict in (CONFIRMED, CHANGED)

    def text(self) -> str:
        said = f"cause: {self.decision.text()}"
        if self.verdict is None:
            return said if self.decision.kind == "op" else \
                f"{said} (not verified; --verify recompiles without it)"
        return f"{said}, {self.verdict}: {self.seen}" if self.seen \
            else f"{said}, {self.verdict}"


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
    # The decisions that may have made it, most likely first; with
    # `--verify`, each tried until one held.
    causes: tuple[Cause, ...] = ()

    @property
    def cause(self) -> Cause | None:
        """The cause: the first candidate (the demanding side's first) that
        a recompile confirmed; else the first that no recompile can test
        (an op with no operand of its result's type: a reshape that merges
        a sharded dimension, whose input's sharding a recompile confirms
        where it can); else the first one whose recompile changed the
        collective; not verified, the first candidate; None where every
        one was refuted, an op's kind among them."""
        if any(c.verdict is not None for c in self.causes):
            return next((c for c in self.causes if c.verdict == CONFIRMED),
                        next((c for c in self.causes if c.verdict is None
                              and c.decision.kind in ("op", "shard_map")),
                             next((c for c in self.causes if c.holds), None)))
        return self.causes[0] if self.causes else None

    def with_causes(self, causes: tuple[Cause, ...]) -> "Why":
        import dataclasses
        return dataclasses.replace(self, causes=causes)

    def full_text(self) -> str:
        """`text` with the cause's line."""
        cause = self.cause
        lines = [self.text]
        if cause is not None:
            lines.append(cause.text())
        elif self.causes:
            lines.append("cause: not found; every candidate below was refuted")
        for other in self.causes:
            if other is cause or (other.verdict is None and cause is not None
                                  and other.decision.kind != "op"):
                continue
            said = other.text().removeprefix("cause: ")
            lines.append(f"  {'also' if other.holds or other.verdict is None else 'not'}: {said}")
        return "\n".join(lines)

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
        cause = self.cause
        d["cause"] = cause.to_json() if cause is not None else None
        d["causes"] = [c.to_json() for c in self.causes]
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
                   d.get("note"), None,
                   tuple(Cause.from_json(c) for c in d.get("causes") or ()))
