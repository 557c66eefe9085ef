"""Shapes of the JSON files irshard reads back: a report (`irshard diff`) and
a saved hardware profile (`--profile`).

A schema is a tree of small checkers; `check(value, schema, what)` walks the
value once and raises `InputError` naming the first place that does not fit
(`report.json: collectives[3].bytes: expected a non-negative integer, got
"12"`). Numbers must be finite (JSON has no NaN, but Python's reader takes
`NaN` and `Infinity`); keys a schema does not name are allowed, so newer
fields read as before. `load_json` reads a file with the limits every reader
shares (regular file, UTF-8, nesting depth). Pure Python.
"""

from __future__ import annotations

import json
import math
from typing import Any, Callable

from irshard.core import files
from irshard.core.errors import InputError

MAX_DEPTH = 64          # irshard's own files nest about 8 deep


class Mismatch(Exception):
    def __init__(self, where: str, message: str):
        super().__init__(message)
        self.where = where


def _shown(value: Any) -> str:
    text = json.dumps(value, allow_nan=True) if not isinstance(value, (dict, list)) \
        else ("an object" if isinstance(value, dict) else "a list")
    return text if len(text) <= 40 else text[:37] + "..."


class Schema:
    what = "a value"

    def check(self, value: Any, where: str) -> None:
        raise NotImplementedError

    def fail(self, value: Any, where: str) -> None:
        raise Mismatch(where, f"expected {self.what}, got {_shown(value)}")


class Number(Schema):
    """A finite number (an int where `integer`) at least `low`, above 0 where
    `positive`, at most `high` where given (`unit` names what it counts)."""

    def __init__(self, integer: bool = False, low: float | None = 0,
                 positive: bool = False, high: float | None = None,
                 unit: str = ""):
        self.integer, self.low, self.positive = integer, low, positive
        self.high = high
        sign = "positive" if positive else \
            "non-negative" if low == 0 else None
        noun = "integer" if integer else "number"
        self.what = f"a {sign} {noun}" if sign else f"a finite {noun}"
        if high is not None:
            self.what = (f"a {noun} above 0 and at most {high:g}"
                         if positive and not low else
                         f"a {noun} from {low or 0:g} to {high:g}") + \
                (f" ({unit})" if unit else "")

    def check(self, value, where):
        if isinstance(value, bool) or not isinstance(value, (int, float)) \
                or (self.integer and not isinstance(value, int)) \
                or not math.isfinite(value) \
                or (self.low is not None and value < self.low) \
                or (self.positive and value <= 0) \
                or (self.high is not None and value > self.high):
            self.fail(value, where)


class Pair(Schema):
    """A list of exactly two values: `first`, then `second`."""

    def __init__(self, first: Schema, second: Schema):
        self.first, self.second = first, second
        self.what = f"a pair [{first.what}, {second.what}]"

    def check(self, value, where):
        if not isinstance(value, list) or len(value) != 2:
            self.fail(value, where)
        self.first.check(value[0], f"{where}[0]")
        self.second.check(value[1], f"{where}[1]")


class String(Schema):
    def __init__(self, choices: tuple[str, ...] | None = None):
        self.choices = choices
        self.what = ("one of " + ", ".join(choices)) if choices else "a string"

    def check(self, value, where):
        if not isinstance(value, str) or \
                (self.choices is not None and value not in self.choices):
            self.fail(value, where)


class Boolean(Schema):
    what = "true or false"

    def check(self, value, where):
        if not isinstance(value, bool):
            self.fail(value, where)


class Null(Schema):
    """`inner`, or null."""

    def __init__(self, inner: Schema):
        self.inner = inner
        self.what = f"{inner.what} or null"

    def check(self, value, where):
        if value is None:
            return
        try:
            self.inner.check(value, where)
        except Mismatch as e:
            if e.where == where and str(e).startswith("expected "):
                self.fail(value, where)
            raise


class Either(Schema):
    def __init__(self, *options: Schema):
        self.options = options
        self.what = " or ".join(o.what for o in options)

    def check(self, value, where):
        for option in self.options:
            try:
                option.check(value, where)
                return
            except Mismatch:
                pass
        self.fail(value, where)


class List(Schema):
    def __init__(self, item: Schema):
        self.item = item
        self.what = "a list"

    def check(self, value, where):
        if not isinstance(value, list):
            self.fail(value, where)
        for i, x in enumerate(value):
            self.item.check(x, f"{where}[{i}]")


class Map(Schema):
    """An object whose every value is `value` (keys are free)."""

    def __init__(self, value: Schema):
        self.value = value
        self.what = "an object"

    def check(self, value, where):
        if not isinstance(value, dict):
            self.fail(value, where)
        for k, v in value.items():
            self.value.check(v, _field(where, k))


class Object(Schema):
    """An object with `required` and `optional` keys (others are let be);
    `rule` then checks the whole (e.g. that two fields agree)."""

    what = "an object"

    def __init__(self, required: dict[str, Schema],
                 optional: dict[str, Schema] | None = None,
                 rule: Callable[[dict, str], None] | None = None):
        self.required, self.optional, self.rule = required, optional or {}, rule

    def check(self, value, where):
        if not isinstance(value, dict):
            self.fail(value, where)
        for key, schema in self.required.items():
            if key not in value:
                raise Mismatch(where, f"has no '{key}' ({schema.what})")
            schema.check(value[key], _field(where, key))
        for key, schema in self.optional.items():
            if key in value:
                schema.check(value[key], _field(where, key))
        if self.rule is not None:
            self.rule(value, where)


def _field(where: str, key: str) -> str:
    return f"{where}.{key}" if where else str(key)


def check(value: Any, schema: Schema, what: str) -> None:
    """Raises `InputError` (`{what}: {place}: {problem}`) unless `value`
    fits `schema`."""
    try:
        schema.check(value, "")
    except Mismatch as e:
        place = f"{e.where}: " if e.where else ""
        raise InputError(f"{what}: {place}{e}") from None
    except RecursionError:
        raise InputError(f"{what}: nested too deeply") from None


def _depth(value: Any, limit: int) -> int:
    """The nesting depth of `value`, counted without recursion, up to
    `limit` + 1."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        x, d = stack.pop()
        if isinstance(x, (dict, list)):
            deepest = max(deepest, d)
            if deepest > limit:
                return deepest
            stack.extend((y, d + 1) for y in
                         (x.values() if isinstance(x, dict) else x))
    return deepest


def load_json(path: str, what: str, hint: str) -> Any:
    """The JSON value in file `path`, which must be a regular UTF-8 file
    nested at most `MAX_DEPTH` deep; `hint` says what would be accepted."""
    files.check_regular(path, what)
    try:
        with open(files.here(path), encoding="utf-8") as f:
            value = json.load(f)
    except RecursionError:
        raise InputError(f"{what} {path}: nested more than {MAX_DEPTH} deep; "
                         f"{hint}") from None
    except json.JSONDecodeError as e:
        raise InputError(f"{what} {path} is not JSON ({e.msg} at line "
                         f"{e.lineno}); {hint}") from None
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise InputError(f"{what} {path}: cannot read it: {e}") from None
    if _depth(value, MAX_DEPTH) > MAX_DEPTH:
        raise InputError(f"{what} {path}: nested more than {MAX_DEPTH} deep; "
                         f"{hint}")
    return value


# ---------------------------------------------------------------------------
# The files irshard reads


COLLECTIVE_KINDS = ("all-reduce", "all-gather", "reduce-scatter", "all-to-all",
                    "collective-permute", "ragged-all-to-all",
                    "collective-broadcast")
_COUNT = Number(integer=True)
_TIME = Number()
_SOURCE = Object({}, {"file": Null(String()), "line": Null(_COUNT),
                      "function": Null(String())})

COLLECTIVE = Object(
    {"name": String(), "kind": String(COLLECTIVE_KINDS), "bytes": _COUNT},
    {"wire_bytes": _COUNT,
     # null: a loop whose trip count XLA does not know
     "executions": Null(Number(integer=True, positive=True)),
     "time_s": Null(_TIME), "source": Null(_SOURCE),
     "group_size": Null(Number(integer=True, positive=True))})

TOTALS = Object({}, {"count": _COUNT, "bytes_per_run": _COUNT,
                     "wire_bytes_per_run": _COUNT, "time_s": Null(_TIME),
                     "by_kind": Map(_COUNT)})

# `memory.peak`: what irshard.reporting.peak.KINDS lists (the core
# cannot import it).
PEAK_KINDS = ("parameter", "optimizer-state", "argument", "donated", "output",
              "activation", "temporary", "collective-buffer")
PEAK_BUFFER = Object({"bytes": _COUNT, "kind": String(PEAK_KINDS)},
                     {"path": String(), "instruction": Null(String()),
                      "shape": String(), "op_name": String(), "scope": String(),
                      "copy_of": String(), "note": String(),
                      "source": Null(_SOURCE)})
PEAK = Object({"bytes": _COUNT, "buffers": List(PEAK_BUFFER)},
              {"source": String(), "by_kind": Map(_COUNT),
               "schedule_position": Null(Number(integer=True)),
               "schedule_length": _COUNT,
               "curve": List(List(Number(integer=True))),
               "instruction": Null(String())})
MEMORY = Object({}, {**{k: _COUNT for k in ("argument_bytes", "output_bytes",
                                            "alias_bytes", "temp_bytes",
                                            "over_bytes")},
                     "peak": PEAK})

_POSITIVE = Number(integer=True, positive=True)
MESH = Object({"axes": List(Object({"name": String(), "size": _POSITIVE},
                                   {"type": String()}))},
              {"devices": _POSITIVE, "platform": Null(String())})

# The simulated step (`timemodel.step.Step.to_json`) and the roofline.
STEP = Object({"step_s": _TIME}, {
    **{k: _TIME for k in ("launch_s", "compute_s", "exposed_comm_s",
                          "overlapped_comm_s", "error_band")},
    "compute": Object({}, {"by_source": Map(_TIME), "by_kind": Map(_TIME)}),
    "comm_by_axes": Map(Object({"exposed_s": _TIME, "overlapped_s": _TIME})),
    "untimed": Object({}, {"instructions": Map(_COUNT), "min_s": _TIME}),
    "unknown_trip_counts": _COUNT, "assumes": String()})
ROOFLINE = Object({k: _TIME for k in ("flops", "compute_s", "memory_s", "comm_s")},
                  {"bytes_accessed": Null(_TIME)})


def _counted(report: dict, where: str) -> None:
    said, listed = report["totals"].get("count"), len(report["collectives"])
    if said is not None and said != listed:
        raise Mismatch(_field(where, "totals.count"),
                       f"is {said}, but the report lists {listed} collectives")


REPORT = Object(
    {"collectives": List(COLLECTIVE), "totals": TOTALS},
    {"schema": Number(integer=True), "memory": Null(MEMORY),
     "function": Null(String()), "module": Null(String()),
     "source": Null(String()), "mesh": Null(MESH), "step": Null(STEP),
     "roofline": Null(ROOFLINE)},
    rule=_counted)

# A link of a saved profile: numbers bare or as {"value": ..., "source": ...}.


class _Measured(Schema):
    """A number bare, or as {"value": NUMBER, "source": TEXT}."""

    def __init__(self, number: Schema):
        self.number = number
        self.entry = Object({"value": number}, {"source": String()})
        self.what = number.what

    def check(self, value, where):
        (self.entry if isinstance(value, dict) else self.number).check(value, where)


_measured = _Measured


# A saved profile's numbers, in ranges no hardware leaves, so that every
# time made from them is finite: a latency of 1e308 s, or a rate of 1e-308,
# would make a step of Infinity.
_BANDWIDTH = Number(low=1.0, high=1e16, unit="bytes/s")
_FLOPS = Number(low=1.0, high=1e19, unit="flop/s")
_LATENCY = Number(high=10.0, unit="seconds")
_SIZE = Number(positive=True, high=2.0 ** 62)
# The links of the shipped profiles (profiles.json).
LINK_KINDS = ("dcn", "host", "ici", "infiniband", "nvlink")

def _group_sizes(value: dict, where: str) -> None:
    for group in value:
        if not (group.isascii() and group.isdigit() and int(group) >= 2):
            raise Mismatch(_field(where, group),
                           "a rendezvous is keyed by its group's size, a whole "
                           "number of at least 2")


LINK = Object(
    {"bandwidth": _measured(_BANDWIDTH), "latency": _measured(_LATENCY)},
    {"base": _measured(_LATENCY),
     "kinds": Map(Object({"bandwidth": _BANDWIDTH, "latency": _LATENCY})),
     "rendezvous": Object({}, rule=lambda v, w: (_group_sizes(v, w),
                                                 Map(_LATENCY).check(v, w)))})


def _link_names(value: dict, where: str) -> None:
    unknown = sorted(set(value) - set(LINK_KINDS))
    if unknown:
        raise Mismatch(_field(where, unknown[0]),
                       f"unknown link kind; links are {', '.join(LINK_KINDS)}")


def _kind_names(value: dict, where: str) -> None:
    for link, entry in value.items():
        unknown = sorted(set(entry.get("kinds") or {}) - set(COLLECTIVE_KINDS))
        if unknown:
            raise Mismatch(_field(_field(where, link), "kinds"),
                           f"unknown collective kind '{unknown[0]}'; kinds are "
                           + ", ".join(COLLECTIVE_KINDS))


_DEVICES = Number(positive=True, high=1e6)
PROFILE = Object({"links": Object({}, rule=lambda v, w: (
    _link_names(v, w), Map(LINK).check(v, w), _kind_names(v, w)))},
                 {"error": Null(Number(high=1e3)), "devices": _DEVICES,
                  "compute": Object(
                      {"devices": _DEVICES, "flops": _FLOPS,
                       "launch": _LATENCY, "op_overhead": _LATENCY,
                       # [bytes, bytes/s] and [flops, flop/s] points
                       "bandwidth": List(Pair(_SIZE, _BANDWIDTH))},
                      {"flops_f32": _FLOPS, "flops_dtype": String(),
                       "flops_by_size": List(Pair(_SIZE, _FLOPS)),
                       "flops_f32_by_size": List(Pair(_SIZE, _FLOPS)),
                       "output": _LATENCY, "loop_trip": _LATENCY,
                       "first_collective": _LATENCY,
                       "rendezvous_skew": _LATENCY,
                       "sliced_strided_bandwidth": _BANDWIDTH})})
