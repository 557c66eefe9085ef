"""The collective report: its data, JSON (schema 1) and the text table.

Pure data and formatting; `analysis` builds reports from HLO modules. The
same report always renders to the same bytes.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from dataclasses import dataclass, field, fields
from json.encoder import encode_basestring_ascii as _encode_string
from typing import Any, Iterator, Sequence

from irshard.core.frames import SourceLocation
from irshard.core.specs import MeshSpec, ShardingSpec, format_shape
from irshard.xla.tiling import Tiling, mesh_axes_of

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

    @property
    def sharding_label(self) -> str:
        if self.sharding is None:
            return self.sharding_text or "?"
        return ",".join(self.sharding) if self.sharding else "replicated"


def axis_size(axis: str, mesh: MeshSpec) -> int:
    """A mesh axis's size; a sub-axis `x:(1)2` (Shardy's notation) is 2."""
    if ":(" in axis:
        return int(axis.rsplit(")", 1)[1])
    return mesh.size_of(axis)


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
        entries = tuple(str(d).rstrip("?") for d in sharding.dims)
        local = tuple(-(-n // math.prod(axis_size(a, mesh) for a in d.axes))
                      for n, d in zip(shape, sharding.dims))
    else:
        tiling = (Tiling.replicate(len(shape)) if sharding is None
                  else sharding if isinstance(sharding, Tiling)
                  else Tiling.from_hlo_sharding(sharding, len(shape)))
        entries = mesh_axes_of(tiling, mesh) if mesh else None
        local = tiling.local_shape(shape)
        text = None if entries is not None else tiling.text
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
    # `--explain`: why it exists (explain.attach), JSON `why`.
    why: dict[str, Any] | None = field(default=None, compare=False)

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
            "loop_trip_counts": list(self.loop_trip_counts),
            "executions": self.executions if self.executions_known else None,
            "async": self.is_async,
            "operands": self.operands,
            **({"backend_dtype": self.backend_dtype}
               if self.backend_dtype else {}),
            **({"link": self.link, "time_s": self.time_s}
               if self.link is not None else {}),
            **({"why": self.why} if self.why is not None else {}),
        }


# The fields a `PackedCollective` shares with every collective alike, in
# field order: all but its own name and op_name.
SHARED_FIELDS = tuple(f.name for f in fields(Collective)
                      if f.name not in ("name", "op_name"))


class PackedCollective(Collective):
    """A `Collective` that holds its own name and op_name and shares the
    rest (kind, shape, bytes, axes, source, loops...) with every collective
    alike, as one tuple: the same value in a fraction of the memory, for
    reports of a hundred thousand collectives. Equal to the `Collective` of
    the same fields; what builds one from fields (`dataclasses.replace`,
    unpickling) gets a plain `Collective`."""

    # Its name and op_name as one string, `name` or `name\0op_name` (HLO
    # names hold no NUL): one object less for each of many collectives.
    __slots__ = ("_names", "_shared")

    def __new__(cls, *args, **kwargs):
        return Collective(*args, **kwargs)

    @classmethod
    def pack(cls, name: str, op_name: str | None,
             shared: tuple) -> "PackedCollective":
        """`shared`: the values of `SHARED_FIELDS`, in order (give the same
        tuple object to collectives alike)."""
        self = object.__new__(cls)
        object.__setattr__(self, "_names",
                           name if op_name is None else f"{name}\0{op_name}")
        object.__setattr__(self, "_shared", shared)
        return self

    @property
    def name(self) -> str:
        return self._names.partition("\0")[0]

    @property
    def op_name(self) -> str | None:
        _, mark, op_name = self._names.partition("\0")
        return op_name if mark else None

    def _compared(self) -> tuple:
        return tuple(getattr(self, f.name) for f in fields(self) if f.compare)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Collective):
            return NotImplemented
        return self._compared() == tuple(
            getattr(other, f.name) for f in fields(other) if f.compare)

    def __hash__(self) -> int:
        return hash(self._compared())

    def __reduce__(self):
        return Collective, tuple(getattr(self, f.name) for f in fields(self))


for _i, _field in enumerate(SHARED_FIELDS):
    setattr(PackedCollective, _field,
            property(lambda self, _i=_i: self._shared[_i]))
del _i, _field


@dataclass(frozen=True)
class CollectiveReport:
    """The collectives of a program (or of a module read from a dump): what
    `irshard compile` prints; a plain value, which the writers (JSON, text
    here; HTML, budgets above) read. `stage(name)` gives the IR of a
    pipeline stage. The Python API's reports (`irshard.api.Report`) can
    also check budgets and draw their HTML page."""

    source: str
    function: str | None
    stage_name: str                # the stage the report read
    mesh: MeshSpec | None
    platform: str | None
    inputs: tuple[TensorInfo, ...]
    outputs: tuple[TensorInfo, ...]
    collectives: tuple[Collective, ...]
    memory: dict[str, int] | None
    module: str | None = None
    # What the reader must know to read the numbers right (64-bit mode, a
    # backend that widens types), one sentence each.
    notes: tuple[str, ...] = ()
    extra: dict[str, Any] = field(default_factory=dict, compare=False)
    # The pipeline's stages the report came from (see `stage`).
    stages: Any = field(default=None, compare=False, repr=False)
    # What it was compiled for (JSON `target`), and the step's roofline.
    target: dict[str, Any] | None = None
    roofline: dict[str, Any] | None = None
    # What XLA warned about while partitioning (findings.Finding).
    findings: tuple[Any, ...] = ()
    # `irshard.run`: how the program ran, and its outputs' values.
    run: Any = field(default=None, compare=False, repr=False)
    results: Any = field(default=None, compare=False, repr=False)

    def totals(self) -> dict[str, Any]:
        by_kind = Counter(c.kind for c in self.collectives)
        totals = {
            "count": len(self.collectives),
            "by_kind": {k: by_kind[k] for k in sorted(by_kind)},
            "bytes_per_run": sum(c.bytes * c.executions for c in self.collectives),
            "wire_bytes_per_run": sum(c.wire_bytes * c.executions
                                      for c in self.collectives),
        }
        if any(c.time_s is not None for c in self.collectives) or \
                (self.collectives == () and self.target is not None):
            totals["time_s"] = sum((c.time_s or 0.0) * c.executions
                                   for c in self.collectives)
        unknown = sum(not c.executions_known for c in self.collectives)
        if unknown:
            # Loops whose trip count is unknown are counted once: the totals
            # are then lower bounds.
            totals["unknown_executions"] = unknown
        return totals

    def to_json(self) -> dict[str, Any]:
        return self._json([c.to_json() for c in self.collectives])

    def _json(self, collectives: Any) -> dict[str, Any]:
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
            d["target"] = self.target
        d["inputs"] = [t.to_json() for t in self.inputs]
        d["outputs"] = [t.to_json() for t in self.outputs]
        d["collectives"] = collectives
        d["totals"] = self.totals()
        d["memory"] = self.memory
        if self.roofline is not None:
            d["roofline"] = self.roofline
        if self.target is not None:
            d["findings"] = [f.to_json() for f in self.findings]
        notes = report_notes(self)
        if notes:
            d["notes"] = notes
        d.update(self.extra)
        if self.run is not None:
            d["run"] = self.run.to_json()
        return d

    def render_json(self) -> str:
        return "".join(self.render_json_pieces())

    def render_json_pieces(self) -> Iterator[str]:
        """`render_json` in pieces, for writing as they come: each
        collective's object is made as it is written, so a module's
        thousands are never all held at once, nor their text."""
        text = dumps_json(self._json(_Marker()))
        before, after = text.split(_Marker.TOKEN)
        indent = before[before.rfind("\n") + 1:]
        indent = indent[:len(indent) - len(indent.lstrip())]
        inner = indent + "  "
        yield before
        if not self.collectives:
            yield "[]"
        else:
            cache: dict = {}
            for i, c in enumerate(self.collectives):
                yield ("[\n" if i == 0 else ",\n") + inner + \
                    _collective_text(c, inner, cache)
            yield "\n" + indent + "]"
        yield after + "\n"

    def render_text(self, fold: bool = False) -> str:
        return "".join(self.render_text_pieces(fold))

    def render_text_pieces(self, fold: bool = False) -> Iterator[str]:
        """`render_text` line by line, made as they are written."""
        for line in text_lines(self, fold=fold):
            yield line + "\n"

    def to_text(self) -> str:
        return self.render_text()

    def stage(self, name: str) -> str:
        """The IR of pipeline stage `name` (stablehlo, propagated,
        partitioned, optimized), as `--emit` prints it."""
        from irshard import STAGES
        from irshard.core.errors import UsageError
        if name not in STAGES:
            raise UsageError(f"unknown stage '{name}'; stages are "
                             f"{', '.join(STAGES)}")
        if self.stages is None:
            raise UsageError("this report was read from HLO; it has no "
                             "pipeline stages")
        return self.stages.text(name)


def mesh_json(mesh: MeshSpec, platform: str | None) -> dict[str, Any]:
    """The mesh's axes; an explicit axis also says `"type": "explicit"`
    (axes the compiler propagates over, the default, say nothing)."""
    return {"axes": [{"name": a.name, "size": a.size}
                     | ({"type": a.type} if a.type != "auto" else {})
                     for a in mesh.axes],
            "devices": mesh.num_devices, "platform": platform}


class _Marker:
    """Where the collectives go in a report's JSON, written separately."""

    TOKEN = "\x00collectives\x00"


class _Shared:
    """A value many objects hold (a source location): written once per
    indentation."""

    def __init__(self, value: Any, cache: dict):
        self.value = value
        self.cache = cache


def _collective_json(collective, cache: dict) -> dict[str, Any]:
    d = collective.to_json()
    if collective.source is not None:
        d["source"] = _Shared(collective.source, cache)
    return d


def _collective_text(collective, indent: str, cache: dict) -> str:
    """`dumps_json(_collective_json(collective, cache), indent)`, written
    directly: a report may hold a hundred thousand collectives, most of
    whose values (shapes, axes, sources) repeat; collectives alike (a
    `PackedCollective`'s shared fields) differ only in name and op_name."""
    if collective.why is not None:
        return dumps_json(_collective_json(collective, cache), indent)
    shared = getattr(collective, "_shared", None)
    if shared is None:
        return _collective_object(collective, indent, cache)
    key = ("alike", id(shared), indent)    # alive as long as the report
    around = cache.get(key)
    if around is None:
        around = cache[key] = _collective_object(
            collective, indent, cache, "\0").split("\0")
    op_name = collective.op_name
    return (around[0] + _encode_string(collective.name) + around[1]
            + ("null" if op_name is None else _encode_string(op_name))
            + around[2])


def _collective_object(collective, indent: str, cache: dict,
                       names: str | None = None) -> str:
    """`_collective_text` of one collective; with `names`, that string
    stands for its name's and its op_name's JSON."""
    inner = indent + "  "
    parts = []
    for key, value in collective.to_json().items():
        kind = type(value)
        if names is not None and key in ("name", "op_name"):
            text = names
        elif kind is str:
            text = _encode_string(value)
        elif kind is int:
            text = int.__repr__(value)
        elif value is None or kind is bool:
            text = "null" if value is None else "true" if value else "false"
        elif kind is float:
            text = _scalar(value)
        elif key == "source":
            text = dumps_json(_Shared(collective.source, cache), inner)
        else:
            # A list of scalars (shape, axes, trip counts): few distinct.
            memo = (key, kind, repr(value))
            text = cache.get(memo)
            if text is None:
                text = cache[memo] = dumps_json(value, inner)
        parts.append(f'{inner}"{key}": {text}')
    return "{\n" + ",\n".join(parts) + "\n" + indent + "}"


# Objects and lists of scalars on one line, as `json` writes them (in C).
_FLAT = json.JSONEncoder(separators=(", ", ": "))


def _scalar(value: Any) -> str:
    """`json.dumps` of a scalar, without its per-call cost."""
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if type(value) is int:
        return int.__repr__(value)
    if type(value) is str:
        return _encode_string(value)
    return json.dumps(value)


def _flat(value: Any) -> str:
    try:
        if not isinstance(value, dict) or all(type(k) is str for k in value):
            return _FLAT.encode(value)
    except (TypeError, ValueError):
        pass
    # What only `json.dumps` writes (keys that are not strings, say).
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_scalar(k)}: {_scalar(v)}"
                               for k, v in value.items()) + "}"
    return "[" + ", ".join(_flat(v) if isinstance(v, list) else _scalar(v)
                           for v in value) + "]"


def dumps_json(value: Any, indent: str = "") -> str:
    """JSON with objects and lists of objects indented, and lists of scalars
    (shapes, axes) kept on one line."""
    inner = indent + "  "
    if isinstance(value, _Shared):
        key = (id(value.value), indent)
        text = value.cache.get(key)
        if text is None:       # the value lives as long as the report
            text = value.cache[key] = dumps_json(value.value.to_json(), indent)
        return text
    if isinstance(value, _Marker):
        return _Marker.TOKEN
    if isinstance(value, dict):
        if not value:
            return "{}"
        if all(not isinstance(v, (dict, list, _Shared, _Marker))
               for v in value.values()):
            flat = _flat(value)
            if len(flat) <= 100:
                return flat
        items = [f"{inner}{_scalar(k)}: {dumps_json(v, inner)}"
                 for k, v in value.items()]
        return "{\n" + ",\n".join(items) + "\n" + indent + "}"
    if isinstance(value, list):
        nested = [v for v in value if isinstance(v, (dict, list))]
        flat_able = all(isinstance(v, list) and not any(
            isinstance(x, (dict, list)) for x in v) for v in nested)
        if flat_able:
            flat = _flat(value)
            if not nested or len(flat) <= 100:
                return flat
        items = [inner + dumps_json(v, inner) for v in value]
        return "[\n" + ",\n".join(items) + "\n" + indent + "]"
    return _scalar(value)


def human_time(seconds: float) -> str:
    """`812 ns`, `12.3 us`, `1.23 ms`, `4.56 s`."""
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if seconds >= scale:
            return f"{seconds / scale:.3g} {unit}"
    return f"{seconds * 1e9:.3g} ns" if seconds else "0 s"


def human_bytes(n: int) -> str:
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"):
        if value < 1024 or unit == "EiB":
            return f"{n} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{n} B"


def change_text(a: float, b: float, fmt) -> str:
    """`+2.0 MiB (+49.6%)`: from `a` to `b`, each shown by `fmt`."""
    if a == b:
        return "="
    sign = "+" if b > a else "-"
    text = f"{sign}{fmt(abs(b - a))}"
    if a:
        text += f" ({sign}{abs(b - a) / a * 100:.3g}%)"
    return text


def table(header: list[str], rows: list[list[str]], indent: str = "  ") -> list[str]:
    """Left-aligned columns; numeric columns (all digits) right-aligned."""
    if not rows:
        return []
    widths = [max(len(str(r[i])) for r in [header] + rows)
              for i in range(len(header))]
    numeric = [all(str(r[i]).replace(",", "").isdigit() for r in rows)
               for i in range(len(header))]

    def fmt(row):
        cells = [str(c).rjust(w) if num else str(c).ljust(w)
                 for c, w, num in zip(row, widths, numeric)]
        return (indent + "  ".join(cells)).rstrip()

    return [fmt(header)] + [fmt(r) for r in rows]


def _collective_cells(c: Collective, timed: bool) -> list[str]:
    """A collectives table row; its name cell (the one cell no two rows
    share) is left empty."""
    axes = ",".join(c.mesh_axes) if c.mesh_axes else "?"
    runs = str(c.executions) if c.executions_known else "?"
    kind = c.kind + (f" x{c.operands}" if c.operands > 1 else "")
    shape = format_shape(c.dtype, c.shape) + ("*" if c.backend_dtype else "")
    source = str(c.source) if c.source else "-"
    if c.attribution == "inferred":
        source += " [inferred]"
    row = [kind, "", shape, str(c.bytes), str(c.wire_bytes), axes,
           str(c.group_size), runs]
    if timed:
        row += [c.link or "?",
                human_time(c.time_s) if c.time_s is not None else "?"]
    return row + [source]


def _collectives_table(header: list[str], shown: Sequence[Collective],
                       timed: bool, indent: str = "  ") -> Iterator[str]:
    """`table(header, rows)` of the collectives, line by line: the cells
    other than the name are made once for collectives alike (a
    `PackedCollective`'s shared fields), and the table twice walked (its
    widths, then its lines) rather than held."""
    cells: dict[int, list[str]] = {}

    def cells_of(c: Collective) -> list[str]:
        # By the shared fields, else by the collective: both live as long
        # as the report, so their identities are not reused meanwhile.
        key = id(getattr(c, "_shared", c))
        found = cells.get(key)
        if found is None:
            found = cells[key] = _collective_cells(c, timed)
        return found

    if not shown:
        return
    rest: dict[int, list[str]] = {}        # each distinct row, by identity
    name_width, name_numeric = len(header[1]), True
    for c in shown:
        row = cells_of(c)
        rest[id(row)] = row
        name = c.name
        if len(name) > name_width:
            name_width = len(name)
        if name_numeric and not name.replace(",", "").isdigit():
            name_numeric = False
    distinct = list(rest.values())
    widths = [max(len(cell) for cell in [header[i]] + [r[i] for r in distinct])
              for i in range(len(header))]
    widths[1] = name_width
    numeric = [all(r[i].replace(",", "").isdigit() for r in distinct)
               for i in range(len(header))]
    numeric[1] = name_numeric

    def cell(text: str, i: int) -> str:
        return text.rjust(widths[i]) if numeric[i] else text.ljust(widths[i])

    yield (indent + "  ".join(cell(h, i) for i, h in enumerate(header))).rstrip()
    # Each distinct row's cells before and after the name, padded once.
    around: dict[int, tuple[str, str]] = {}
    for c in shown:
        row = cells_of(c)
        sides = around.get(id(row))
        if sides is None:
            sides = around[id(row)] = (
                indent + cell(row[0], 0) + "  ",
                "".join("  " + cell(row[i], i) for i in range(2, len(row))))
        yield (sides[0] + cell(c.name, 1) + sides[1]).rstrip()


def _tensor_rows(tensors: tuple[TensorInfo, ...], with_index: bool) -> list[list[str]]:
    rows = []
    for t in tensors:
        row = [str(t.index)] if with_index else []
        row += [t.name + (" (donated)" if t.donated else ""),
                format_shape(t.dtype, t.shape), t.sharding_label,
                format_shape(t.dtype, t.local_shape)]
        rows.append(row)
    return rows


# How many rows a folded table shows (`fold`: the text a terminal gets).
FOLDED_ROWS = 20


def fold_note(shown: int, total: int, what: str) -> list[str]:
    """The line under a folded table."""
    if shown >= total:
        return []
    return [f"  ... {total - shown} more {what} (--full lists every one)"]


def _by_source_lines(collectives: Sequence[Collective],
                     limit: int) -> list[str]:
    """A folded table's collectives summed by the source line that caused
    them, the heaviest lines first."""
    groups: dict[str, list[Collective]] = {}
    for c in collectives:
        groups.setdefault(str(c.source) if c.source else "-", []).append(c)
    heaviest = sorted(groups.items(), key=lambda item: (
        -sum(c.bytes * c.executions for c in item[1]), item[0]))
    rows = []
    for source, group in heaviest[:limit]:
        counts: dict[str, int] = {}
        for c in group:
            counts[c.kind] = counts.get(c.kind, 0) + 1
        rows.append([source, str(len(group)),
                     ", ".join(k if len(counts) == 1 else f"{n} {k}"
                               for k, n in sorted(counts.items())),
                     str(sum(c.bytes * c.executions for c in group))])
    title = f"by source line ({len(groups)} lines"
    title += f", the {limit} that move the most bytes per run)" \
        if len(groups) > limit else ")"
    return (["", title]
            + table(["source", "collectives", "kinds", "bytes per run"], rows)
            + fold_note(len(rows), len(groups), "source lines"))


def render_text_lines(report: CollectiveReport, tensors: bool = True,
                      fold: bool = False) -> list[str]:
    return list(text_lines(report, tensors, fold))


def headline(report: CollectiveReport) -> list[str]:
    """What the report is about, in parts: the program, its mesh, the
    target (where not the CPU), the stage, the module."""
    what = report.source + (f":{report.function}" if report.function else "")
    if report.mesh:
        devices = " ".join(filter(None, [str(report.mesh.num_devices),
                                         report.platform, "devices"]))
        types = report.mesh.types_text()
        where = f"mesh {report.mesh}{f' {types}' if types else ''} ({devices})"
    else:
        where = "no mesh"
    parts = [what, where]
    if report.target and report.target.get("kind") != "cpu":
        parts.append(f"target {report.target['name']}"
                     + (" (estimated)" if report.target.get("estimated") else ""))
    parts.append(f"stage {report.stage_name}")
    if report.module:
        parts.append(f"module {report.module}")
    return parts


def text_lines(report: CollectiveReport, tensors: bool = True,
               fold: bool = False) -> Iterator[str]:
    """The text report's lines, the collectives table's made as they come
    (a module's hundred thousand rows are never all held)."""
    lines = ["  ".join(headline(report))]
    limit = FOLDED_ROWS if fold else None
    if report.inputs and tensors:
        lines += ["", "inputs"]
        lines += table(["name", "type", "sharding", "per device"],
                       _tensor_rows(report.inputs[:limit], False))
        lines += fold_note(len(report.inputs[:limit]), len(report.inputs), "inputs")
    if report.outputs and tensors:
        lines += ["", "outputs"]
        lines += table(["#", "name", "type", "sharding", "per device"],
                       _tensor_rows(report.outputs[:limit], True))
        lines += fold_note(len(report.outputs[:limit]), len(report.outputs),
                           "outputs")
    lines += [""]
    if not report.collectives:
        lines.append("collectives: none")
    else:
        lines.append("collectives")
        timed = any(c.time_s is not None for c in report.collectives)
        shown = report.collectives
        if limit is not None and len(shown) > limit:
            # The heaviest (bytes per run), in program order.
            heaviest = sorted(range(len(shown)),
                              key=lambda i: -shown[i].bytes * shown[i].executions)
            shown = tuple(shown[i] for i in sorted(heaviest[:limit]))
            lines[-1] += (f" (the {limit} that move the most bytes per run, "
                          f"of {len(report.collectives)})")
        yield from lines
        lines = []
        yield from _collectives_table(
            ["kind", "name", "shape", "bytes", "wire", "axes", "group", "runs"]
            + (["link", "time"] if timed else []) + ["source"], shown, timed)
        lines += fold_note(len(shown), len(report.collectives), "collectives")
        if limit is not None and len(report.collectives) > limit:
            lines += _by_source_lines(report.collectives, limit)
        if any(c.why is not None for c in report.collectives):
            lines += ["", "why"]
            for c in report.collectives:
                if c.why is not None:
                    where = f"  {c.source}" if c.source else ""
                    lines.append(f"  {c.name}{where}")
                    lines += [f"    {line}" for line in c.why["text"].split("\n")]
    totals = report.totals()
    kinds = ", ".join(f"{n} {k}" for k, n in totals["by_kind"].items())
    lines += ["", f"totals: {totals['count']} collective"
              f"{'' if totals['count'] == 1 else 's'}"
              + (f" ({kinds})" if kinds else "")]
    at_least = "at least " if totals.get("unknown_executions") else ""
    lines.append(f"  per run: {at_least}{totals['bytes_per_run']} bytes "
                 f"({human_bytes(totals['bytes_per_run'])}), wire "
                 f"{totals['wire_bytes_per_run']} bytes "
                 f"({human_bytes(totals['wire_bytes_per_run'])}) per device")
    if "time_s" in totals:
        estimated = " (estimated)" if report.target and \
            report.target.get("estimated") else ""
        lines.append(f"  time per run: {at_least}{human_time(totals['time_s'])}"
                     f"{estimated}, from the {report.target['profile'] if report.target else 'cpu-host'} profile")
    if at_least:
        lines.append(f"  ({totals['unknown_executions']} in loops whose trip "
                     f"count is not known counted once)")
    if report.memory:
        m = report.memory
        aliased = m.get("alias_bytes", 0)
        lines.append(
            f"memory per device: arguments {human_bytes(m['argument_bytes'])}, "
            f"outputs {human_bytes(m['output_bytes'])}"
            + (f" ({human_bytes(aliased)} in donated arguments)" if aliased
               else "")
            + f", temp {human_bytes(m['temp_bytes'])}")
    verdict = _verdict(report)
    if verdict:
        lines.append(verdict)
    if report.findings:
        lines += ["", f"findings: {len(report.findings)}"]
        for f in report.findings:
            lines.append(f"  {f.kind}  {f.describe()}")
    budgets = report.extra.get("budgets")
    if budgets:
        lines += ["", "budgets"]
        lines += table(["budget", "value", "result"],
                       [[b["budget"], str(b["value"]),
                         "ok" if b["passed"] else "EXCEEDED"] for b in budgets])
    for note in report_notes(report):
        lines.append(f"note: {note}")
    yield from lines


def memory_in_use(memory: dict[str, int]) -> int:
    """Bytes per device: arguments, outputs and temporaries, less what the
    outputs alias."""
    return (memory["argument_bytes"] + memory["output_bytes"]
            + memory["temp_bytes"] - memory.get("alias_bytes", 0))


def _verdict(report: CollectiveReport) -> str | None:
    """`fits in 16 GiB HBM: 11.2 GiB; comm 3.1 ms vs compute 8.4 ms per step`."""
    m = report.memory or {}
    parts = []
    if m.get("capacity_bytes"):
        fits = "fits in" if m["fits"] else "does not fit in"
        parts.append(f"{fits} {human_bytes(m['capacity_bytes'])} HBM: "
                     f"{human_bytes(memory_in_use(m))}")
    r = report.roofline
    if r:
        parts.append(f"comm {human_time(r['comm_s'])} vs compute "
                     f"{human_time(r['compute_s'])} (memory "
                     f"{human_time(r['memory_s'])}) per step, {r['bound']}-bound")
    return "; ".join(parts) if parts else None


def report_notes(report: CollectiveReport) -> list[str]:
    """The report's notes, and one for collectives a backend widened."""
    notes = list(report.notes)
    widened: dict[tuple[str, str], int] = {}
    for c in report.collectives:
        if c.backend_dtype:
            key = (c.dtype, c.backend_dtype)
            widened[key] = widened.get(key, 0) + 1
    for (own, moved), n in sorted(widened.items()):
        where = report.platform or "this"
        notes.append(
            f"the {where} backend runs {n} {own} collective"
            f"{'' if n == 1 else 's'} in {moved} (marked *); their bytes are "
            f"the program's own {own}, as a GPU or TPU moves them")
    return notes
