"""The collective report: its data, JSON (schema 1) and the text table.

Pure data and formatting; `analysis` builds reports from HLO modules. The
same report always renders to the same bytes.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

from irshard.core.frames import SourceLocation, scope_of
from irshard.core.specs import MeshSpec, ShardingSpec, format_shape
from irshard.reporting.parts import BudgetOutcome, Finding, MemoryUse, TargetInfo
from irshard.reporting.why import Why
from irshard.timemodel.links import Roofline
from irshard.timemodel.step import Step
from irshard.xla import tiling

SCHEMA = 1


@dataclass(frozen=True)
class TensorInfo:
    """An input or output: global and per-device shape, and its sharding as
    one spec entry per dimension (None when it is not a mesh sharding)."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    sharding: tuple[str, ...] | None
    local_shape: tuple[int, ...]
    index: int | None = None
    sharding_text: str | None = None   # XLA's form, when `sharding` is None
    donated: bool = False              # an input XLA may reuse for outputs

    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {}
        if self.index is not None:
            d["index"] = self.index
        d["name"] = self.name
        d["dtype"] = self.dtype
        d["shape"] = list(self.shape)
        d["sharding"] = list(self.sharding) if self.sharding is not None \
            else self.sharding_text
        d["local_shape"] = list(self.local_shape)
        if self.donated:
            d["donated"] = True
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "TensorInfo":
        sharding = d.get("sharding")
        return cls(d.get("name") or "", d.get("dtype") or "", tuple(d.get("shape") or ()),
                   tuple(sharding) if isinstance(sharding, list) else None,
                   tuple(d.get("local_shape") or d.get("shape") or ()), d.get("index"),
                   sharding if isinstance(sharding, str) else None,
                   bool(d.get("donated")))

    @property
    def sharding_label(self) -> str:
        if self.sharding is None:
            return self.sharding_text or "?"
        return ",".join(self.sharding) if self.sharding else "replicated"


def tensor_info(name: str, dtype: str, shape: Sequence[int], sharding: Any,
                mesh: MeshSpec | None, index: int | None = None,
                key: str | None = None) -> TensorInfo:
    """The report row of an input or output, from its sharding: an XLA
    `HloSharding`, a `Tiling`, Shardy's `ShardingSpec`, or None
    (replicated). For a typed PRNG key (`key`, its dtype's name) `shape` is
    its key data's: the row shows the key array, without the data's last
    dimension."""
    shape = tuple(shape)
    text = None
    if isinstance(sharding, ShardingSpec):
        entries = sharding.entries()
        local = sharding.local_shape(shape, mesh)
    else:
        read = tiling.read(sharding, len(shape))
        spec = tiling.in_mesh(read, len(shape), mesh) if mesh else None
        entries = spec.entries() if spec is not None else None
        local = read.local_shape(shape)
        text = None if entries is not None else read.text
    if key:
        shape, local, dtype = shape[:-1], local[:-1], key
        entries = entries[:-1] if entries is not None else None
    return TensorInfo(name=name, dtype=dtype, shape=shape, sharding=entries,
                      local_shape=local, index=index, sharding_text=text)


@dataclass(frozen=True)
class Collective:
    name: str
    kind: str
    dtype: str
    shape: tuple[int, ...]
    bytes: int
    wire_bytes: int
    mesh_axes: tuple[str, ...] | None
    group_size: int
    source: SourceLocation | None
    attribution: str               # metadata | inferred | none
    op_name: str | None
    loop_trip_counts: tuple[int | None, ...]
    is_async: bool = False
    operands: int = 1              # > 1 for a combined (tuple) collective
    # The element type the backend moves when it differs from the
    # program's (`dtype`): the CPU backend runs bf16 collectives in f32.
    backend_dtype: str | None = None
    link: str | None = None        # the slowest link its groups cross
    time_s: float | None = None    # estimated, one execution
    # `--explain`: why it exists (`collectives.explain`), JSON `why`.
    why: Why | None = field(default=None, compare=False)
    # A combined collective's results, each (dtype, shape); None for one.
    shapes: tuple[tuple[str, tuple[int, ...]], ...] | None = None

    @property
    def scope(self) -> str | None:
        """The model's scope (JAX's name stack) of the op it came from."""
        return scope_of(self.op_name)

    @property
    def shape_text(self) -> str:
        """`f32[256,1024]`; a combined collective's every result,
        `(f32[], f32[256,1024])`, or past 3 `(5 arrays)`."""
        if not self.shapes:
            return format_shape(self.dtype, self.shape)
        if len(self.shapes) > 3:
            return f"({len(self.shapes)} arrays)"
        return "(" + ", ".join(format_shape(d, s) for d, s in self.shapes) + ")"

    @property
    def executions(self) -> int:
        """Runs per program execution; unknown trip counts count once."""
        n = 1
        for trips in self.loop_trip_counts:
            n *= trips if trips is not None else 1
        return n

    @property
    def executions_known(self) -> bool:
        return all(t is not None for t in self.loop_trip_counts)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "kind": self.kind,
            "dtype": self.dtype,
            "shape": list(self.shape),
            "bytes": self.bytes,
            "wire_bytes": self.wire_bytes,
            "mesh_axes": list(self.mesh_axes) if self.mesh_axes is not None else None,
            "group_size": self.group_size,
            "source": self.source.to_json() if self.source else None,
            "attribution": self.attribution,
            "op_name": self.op_name,
            "scope": self.scope,
            "loop_trip_counts": list(self.loop_trip_counts),
            "executions": self.executions if self.executions_known else None,
            "async": self.is_async,
            "operands": self.operands,
            **({"shapes": [{"dtype": d, "shape": list(s)} for d, s in self.shapes]}
               if self.shapes else {}),
            **({"backend_dtype": self.backend_dtype}
               if self.backend_dtype else {}),
            **({"link": self.link, "time_s": self.time_s}
               if self.link is not None else {}),
            **({"why": self.why.to_json()} if self.why is not None else {}),
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "Collective":
        """A collective read back from its JSON form; what a short form
        leaves out (an older report's, one written by hand) reads as
        unknown."""
        trips = d.get("loop_trip_counts")
        if trips is None:
            runs = d.get("executions", 1)
            trips = [] if runs == 1 else [runs]
        axes = d.get("mesh_axes")
        shapes = d.get("shapes")
        return cls(
            name=d["name"], kind=d["kind"], dtype=d.get("dtype") or "?",
            shape=tuple(d.get("shape") or ()), bytes=d["bytes"],
            wire_bytes=d.get("wire_bytes", 0),
            mesh_axes=tuple(axes) if axes is not None else None,
            group_size=d.get("group_size") or 1,
            source=SourceLocation.from_json(d.get("source")),
            attribution=d.get("attribution") or "none", op_name=d.get("op_name"),
            loop_trip_counts=tuple(trips), is_async=bool(d.get("async")),
            operands=d.get("operands", 1), backend_dtype=d.get("backend_dtype"),
            link=d.get("link"), time_s=d.get("time_s"),
            why=Why.from_json(d["why"]) if d.get("why") else None,
            shapes=tuple((s["dtype"], tuple(s["shape"])) for s in shapes)
            if shapes else None)


@dataclass(frozen=True)
class CollectiveReport:
    """The collectives of a program (or of a module read from a dump): what
    `irshard compile` prints; a plain value, which the writers (JSON, text
    here; HTML, budgets above) read, holding nothing of the program it was
    read from. The Python API's reports (`irshard.api.Report`) add the
    pipeline's stages and a run's values, check budgets and draw their
    HTML page."""

    source: str
    function: str | None
    stage_name: str                # the stage the report read
    mesh: MeshSpec | None
    platform: str | None
    inputs: tuple[TensorInfo, ...]
    outputs: tuple[TensorInfo, ...]
    collectives: tuple[Collective, ...]
    memory: MemoryUse | None
    module: str | None = None
    # What the reader must know to read the numbers right (64-bit mode, a
    # backend that widens types), one sentence each.
    notes: tuple[str, ...] = ()
    # The budgets it was held to (`--budget`, `check_budget`), where it was.
    budgets: tuple[BudgetOutcome, ...] | None = field(default=None, compare=False)
    # What it was compiled for (JSON `target`), the step's roofline, and
    # the step simulated in the executable's schedule (`schedule.Step`:
    # `to_json()` and the events of its timeline).
    target: TargetInfo | None = None
    roofline: Roofline | None = None
    step: Step | None = field(default=None, compare=False, repr=False)
    # What XLA warned about while partitioning.
    findings: tuple[Finding, ...] = ()

    def totals(self) -> dict[str, Any]:
        alike = list(counted(self.collectives))
        by_kind: Counter = Counter()
        for c, n in alike:
            by_kind[c.kind] += n
        totals = {
            "count": len(self.collectives),
            "by_kind": {k: by_kind[k] for k in sorted(by_kind)},
            "bytes_per_run": sum(c.bytes * c.executions * n for c, n in alike),
            "wire_bytes_per_run": sum(c.wire_bytes * c.executions * n
                                      for c, n in alike),
        }
        if any(c.time_s is not None for c, _ in alike) or \
                (self.collectives == () and self.target is not None):
            # Added in program order, as floats add: the same bytes as
            # ever.
            totals["time_s"] = sum((c.time_s or 0.0) * c.executions
                                   for c in self.collectives)
        unknown = sum(n for c, n in alike if not c.executions_known)
        if unknown:
            # Loops whose trip count is unknown are counted once: the totals
            # are then lower bounds.
            totals["unknown_executions"] = unknown
        return totals

    def to_json(self) -> dict[str, Any]:
        return self.json_value([c.to_json() for c in self.collectives])

    def json_value(self, collectives: Any) -> dict[str, Any]:
        d: dict[str, Any] = {
            "schema": SCHEMA,
            "source": self.source,
            "function": self.function,
            "stage": self.stage_name,
        }
        if self.module is not None:
            d["module"] = self.module
        d["mesh"] = mesh_json(self.mesh, self.platform) if self.mesh else None
        if self.target is not None:
            d["target"] = self.target.to_json()
        d["inputs"] = [t.to_json() for t in self.inputs]
        d["outputs"] = [t.to_json() for t in self.outputs]
        d["collectives"] = collectives
        d["totals"] = self.totals()
        d["memory"] = self.memory.to_json() if self.memory is not None else None
        if self.roofline is not None:
            d["roofline"] = self.roofline.to_json()
        if self.step is not None:
            d["step"] = self.step.to_json()
        if self.target is not None:
            d["findings"] = [f.to_json() for f in self.findings]
        notes = report_notes(self)
        if notes:
            d["notes"] = notes
        if self.budgets is not None:
            d["budgets"] = [b.to_json() for b in self.budgets]
        return d

    @classmethod
    def read(cls, value: Any, what: str) -> "CollectiveReport":
        """A report's JSON form as a file or another process gave it:
        checked against `core.schema.REPORT`, then typed. What the schema
        lets through and this reader still cannot take is the same one
        `InputError`, naming `what`."""
        from irshard.core import schema
        from irshard.core.errors import InputError
        schema.check(value, schema.REPORT, what)
        try:
            return cls.from_json(value)
        except (KeyError, TypeError, ValueError, AttributeError, IndexError) as e:
            raise InputError(f"{what}: not a report this irshard wrote "
                             f"({type(e).__name__}: {e})") from None

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "CollectiveReport":
        """The report its JSON form (`to_json`, schema 1) holds, typed again:
        at a process's or a file's edge, after `core.schema.REPORT` checked
        it. What the JSON works out from the rest (totals, a collective's
        executions and scope, the notes of widened types) is worked out
        again; a short form's missing parts read as unknown."""
        from irshard.core.specs import MeshAxis
        mesh = d.get("mesh")
        spec = MeshSpec(tuple(MeshAxis(a["name"], a["size"], a.get("type", "auto"))
                              for a in mesh["axes"])) if mesh else None
        memory, step, roof = d.get("memory"), d.get("step"), d.get("roofline")
        target = TargetInfo.from_json(d["target"]) if d.get("target") else None
        report = cls(
            source=d.get("source") or "-", function=d.get("function"),
            stage_name=d.get("stage") or "optimized", mesh=spec,
            platform=(mesh or {}).get("platform"),
            inputs=tuple(TensorInfo.from_json(t) for t in d.get("inputs") or ()),
            outputs=tuple(TensorInfo.from_json(t) for t in d.get("outputs") or ()),
            collectives=tuple(Collective.from_json(c) for c in d["collectives"]),
            memory=MemoryUse.from_json(memory) if memory else None,
            module=d.get("module"),
            budgets=tuple(BudgetOutcome.from_json(b) for b in d["budgets"])
            if d.get("budgets") is not None else None,
            target=target, roofline=Roofline.from_json(roof) if roof else None,
            step=Step.from_json(step) if step else None,
            findings=tuple(Finding.from_json(f) for f in d.get("findings") or ()))
        derived = set(report_notes(report))
        from dataclasses import replace
        return replace(report, notes=tuple(n for n in d.get("notes") or ()
                                           if n not in derived))


def counted(collectives: Sequence[Collective]) -> Iterable[tuple[Collective, int]]:
    """(collective, how many are alike) of `collectives`: those that share
    their fields once (`PackedCollectives.counted`), any other by itself;
    for questions of every collective that its name does not answer."""
    counted = getattr(collectives, "counted", None)
    return counted() if counted is not None else ((c, 1) for c in collectives)


def mesh_json(mesh: MeshSpec, platform: str | None) -> dict[str, Any]:
    """The mesh's axes; an explicit axis also says `"type": "explicit"`
    (axes the compiler propagates over, the default, say nothing)."""
    return {"axes": [{"name": a.name, "size": a.size}
                     | ({"type": a.type} if a.type != "auto" else {})
                     for a in mesh.axes],
            "devices": mesh.num_devices, "platform": platform}


def report_notes(report: CollectiveReport) -> list[str]:
    """The report's notes, and one for collectives a backend widened."""
    notes = list(report.notes)
    widened: dict[tuple[str, str], int] = {}
    for c, n in counted(report.collectives):
        if c.backend_dtype:
            key = (c.dtype, c.backend_dtype)
            widened[key] = widened.get(key, 0) + n
    for (own, moved), n in sorted(widened.items()):
        where = report.platform or "this"
        notes.append(
            f"the {where} backend runs {n} {own} collective"
            f"{'' if n == 1 else 's'} in {moved} (marked *); their bytes are "
            f"the program's own {own}, as a GPU or TPU moves them")
    if report.target is not None and report.target.libtpu_flags:
        notes.append("libtpu compiled with LIBTPU_INIT_ARGS "
                     + " ".join(report.target.libtpu_flags))
    return notes
