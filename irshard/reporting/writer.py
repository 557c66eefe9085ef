"""The report's JSON as it is written: byte for byte what `json.dumps(...,
indent=2)` would write with short objects and lists on one line, made
piece by piece so a module's many collectives are never all held at once
(their shared fields written once per distinct value).
"""

from __future__ import annotations

import json
from json.encoder import encode_basestring_ascii as _encode_string
from typing import Any, Iterator

from irshard.reporting.report import CollectiveReport


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
    `PackedCollective`'s shared fields) differ only in name, op_name and
    the scope read from it."""
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
    op_name, scope = collective.op_name, collective.scope
    return (around[0] + _encode_string(collective.name) + around[1]
            + ("null" if op_name is None else _encode_string(op_name))
            + around[2]
            + ("null" if scope is None else _encode_string(scope))
            + around[3])


def _collective_object(collective, indent: str, cache: dict,
                       names: str | None = None) -> str:
    """`_collective_text` of one collective; with `names`, that string
    stands for its name's, its op_name's and its scope's JSON."""
    inner = indent + "  "
    parts = []
    for key, value in collective.to_json().items():
        kind = type(value)
        if names is not None and key in ("name", "op_name", "scope"):
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


def render_json(report: CollectiveReport) -> str:
    """The report's JSON (schema 1), as `json.dumps(report.to_json(),
    indent=2)` would write it, with short objects on one line."""
    return "".join(render_json_pieces(report))


def render_json_pieces(report: CollectiveReport) -> Iterator[str]:
    """`render_json` in pieces, for writing as they come: each
    collective's object is made as it is written, so a module's
    thousands are never all held at once, nor their text."""
    text = dumps_json(report.json_value(_Marker()))
    before, after = text.split(_Marker.TOKEN)
    indent = before[before.rfind("\n") + 1:]
    indent = indent[:len(indent) - len(indent.lstrip())]
    inner = indent + "  "
    yield before
    if not report.collectives:
        yield "[]"
    else:
        cache: dict = {}
        for i, c in enumerate(report.collectives):
            yield ("[\n" if i == 0 else ",\n") + inner + \
                _collective_text(c, inner, cache)
        yield "\n" + indent + "]"
    yield after + "\n"
