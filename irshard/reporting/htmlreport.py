"""The HTML report: one self-contained page (`--format html`).

The page is `report.html` (inline CSS and JavaScript, no external resource;
its Content-Security-Policy forbids any) with the report's data embedded as
JSON: the schema-1 report, the user's source files that its collectives and
findings point at (only those its own compile ran, never a file named by a
report, an HLO file or a dump read back), an excerpt of the read stage's IR
around every collective, and where every input and output lives (device ->
block, and the mesh's device grid). The script draws the summary, the
sortable and filterable collective table, the source view, the layout
viewer, memory and findings from that data; nothing is fetched. The same report gives the same bytes.

The renderer reads values only: the report, and what the page shows
beside it (`PageParts`), taken from the program before it is called.
"""

from __future__ import annotations

import json
import math
import os
import re
import sys
from dataclasses import dataclass
from typing import Any, Collection, Iterable, Sequence

from irshard.core import files
from irshard.reporting import trace

# A file larger than this is not embedded in the source view.
MAX_SOURCE_BYTES = 2 << 20
# Lines of IR shown before and after a collective's own, within its
# computation; longer lines are cut.
IR_CONTEXT = 3
IR_LINE_CHARS = 1200
# An HLO file larger than this gives no excerpts (it is not read whole).
MAX_IR_BYTES = 64 << 20

_TEMPLATE = os.path.join(os.path.dirname(__file__), "report.html")
_DATA_MARK = "/*IRSHARD-DATA*/"
_TITLE_MARK = "<!--IRSHARD-TITLE-->"


def _escape_text(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _script_json(value: Any) -> str:
    """JSON safe inside a <script> element: no `</script` or `<!--`, and no
    NaN or Infinity, which JSON.parse refuses (written as strings)."""
    try:
        text = json.dumps(value, ensure_ascii=True, separators=(",", ":"),
                          allow_nan=False)
    except ValueError:
        return _script_json(_finite(value))
    return text.replace("<", "\\u003c").replace(">", "\\u003e")


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def page(kind: str, data: dict[str, Any], title: str) -> str:
    """The page for `data` (`kind` 'report', 'diff' or 'search')."""
    with open(_TEMPLATE, encoding="utf-8") as f:
        template = f.read()
    body = _script_json({"kind": kind, **data})
    head, tail = template.split(_DATA_MARK)
    head = head.replace(_TITLE_MARK, _escape_text(title))
    return head + body + tail


# ---------------------------------------------------------------------------
# What the page shows beside the report


def _sources_named(report: dict[str, Any]) -> list[str]:
    """Every file a collective, its explanation or a finding points at."""
    found: set[str] = set()

    def add(source: Any) -> None:
        if isinstance(source, dict):
            if source.get("file"):
                found.add(source["file"])
            for frame in source.get("stack") or ():
                if frame.get("file"):
                    found.add(frame["file"])

    for c in report.get("collectives") or ():
        add(c.get("source"))
        why = c.get("why") or {}
        for part in ("operand", "needed"):
            add((why.get(part) or {}).get("source"))
    for f in report.get("findings") or ():
        add(f.get("source"))
    return sorted(found)


def _resolve(name: str, roots: Sequence[str]) -> str | None:
    if os.path.isabs(name):
        return name if os.path.isfile(name) else None
    for root in roots:
        path = os.path.join(root, name)
        if os.path.isfile(path):
            return path
    return None


def read_sources(report: dict[str, Any], user_dir: str | None = None,
                 readable: Collection[str] = ()) -> dict[str, list[str]]:
    """The user's files the report names, as lines: `{name: lines}` under
    the names the report uses. Only files among `readable` (real paths: the
    files the compile itself ran, `program_files`) are read: a name in a
    report, an HLO file or a dump is the input's word and could name any
    file on this machine. Files that cannot be found or read, or are too
    large, are left out (the page lists their lines)."""
    if not readable:
        return {}
    # An installed module is named by its import path
    # (`maxtext/layers/linears.py`): found under the import roots.
    roots = [r for r in (user_dir, os.path.dirname(report.get("source") or ""),
                         os.getcwd(), *sys.path) if r]
    result: dict[str, list[str]] = {}
    for name in _sources_named(report):
        path = _resolve(name, roots) or _resolve(files.real_path(name), roots)
        if path is None or os.path.realpath(path) not in readable:
            continue
        try:
            if os.path.getsize(path) > MAX_SOURCE_BYTES:
                continue
            result[name] = source_lines(_decoded(path))
        except OSError:
            continue
    return result


def loaded_files() -> frozenset[str]:
    """The real paths of the Python files this process has imported."""
    found = set()
    for module in list(sys.modules.values()):
        path = getattr(module, "__file__", None)
        if isinstance(path, str) and path.endswith(".py"):
            found.add(os.path.realpath(path))
    return frozenset(found)


def _decoded(path: str) -> str:
    """A source file's text: Python's own decoding for a .py file (its
    coding declaration), else UTF-8; undecodable bytes replaced."""
    with open(path, "rb") as f:
        data = f.read()
    encoding = "utf-8"
    if path.endswith(".py"):
        import io
        import tokenize
        try:
            encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
        except SyntaxError:
            pass
    try:
        return data.decode(encoding, errors="replace")
    except LookupError:
        return data.decode("utf-8", errors="replace")


def source_lines(text: str) -> list[str]:
    """Lines as Python numbers them (\n, \r\n and \r end a line; a form
    feed or U+2028 does not, where `str.splitlines` would split)."""
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return lines


_INSTRUCTION = re.compile(r"\s*(?:ROOT\s+)?%?([^\s=%]+)\s*=")


def ir_excerpts(text: str, names: Iterable[str]) -> dict[str, dict[str, Any]]:
    """For each instruction named, the lines of `text` (HLO) around it
    within its computation: `{name: {line, at, lines}}`, `line` the first
    line's number (1-based), `at` the instruction's index among `lines`."""
    wanted = set(names)
    lines = text.splitlines()
    found: dict[str, dict[str, Any]] = {}
    start = 0                      # the current computation's header line
    for i, line in enumerate(lines):
        if not line.startswith((" ", "\t")):
            if line.rstrip().endswith("{"):
                start = i
            continue
        m = _INSTRUCTION.match(line)
        if m is None or m.group(1) not in wanted or m.group(1) in found:
            continue
        end = i
        while end + 1 < len(lines) and end < i + IR_CONTEXT \
                and lines[end + 1].startswith((" ", "\t")):
            end += 1
        first = max(start, i - IR_CONTEXT)
        found[m.group(1)] = {
            "line": first + 1, "at": i - first,
            "lines": [_cut(line) for line in lines[first:end + 1]]}
    return found


def _cut(line: str) -> str:
    return line if len(line) <= IR_LINE_CHARS else line[:IR_LINE_CHARS] + " ..."


def _placements(tensors: Iterable[Any]) -> list[list[Any]]:
    """Each tensor's blocks as `[device, [[start, stop], ...]]`."""
    return [[[p.device, [list(r) for r in p.ranges]] for p in t.placements]
            for t in tensors]


def layout_json(inputs: Sequence[Any], outputs: Sequence[Any],
                devices: Any = None) -> dict[str, Any]:
    """Where the executable's inputs and outputs live (each holding its
    `placements`), and the mesh's devices (ids in mesh order), as the page
    draws them."""
    processes = {p.device: p.process for t in (*inputs, *outputs)
                 for p in t.placements}
    return {"devices": devices, "inputs": _placements(inputs),
            "outputs": _placements(outputs),
            "processes": {str(d): processes[d] for d in sorted(processes)}
            if len(set(processes.values())) > 1 else None}


@dataclass(frozen=True)
class PageParts:
    """What the report page shows beside the report, taken from the
    program before the page is rendered (`irshard.stages.pageparts.page_parts`):
    the layout of its inputs and outputs (`layout_json`), the IR of the stage
    the report read, the user's directory, and the Python files the compile
    ran (the only ones whose lines the page may embed)."""

    layout: dict[str, Any] | None = None
    ir_text: str | None = None
    user_dir: str | None = None
    files: frozenset[str] = frozenset()


def read_ir(path: str) -> str | None:
    """The text of an HLO file for the page's IR excerpts: None for a
    directory, a file too large to hold whole, or one that is not text."""
    try:
        if not os.path.isfile(path) or os.path.getsize(path) > MAX_IR_BYTES:
            return None
        with open(path, encoding="utf-8") as f:
            return f.read()
    except (OSError, UnicodeDecodeError):
        return None


def report_data(report, parts: PageParts | None = None,
                run: Any = None) -> dict[str, Any]:
    """Everything the report page shows."""
    parts = parts or PageParts()
    body = report.to_json()
    if run is not None:
        body["run"] = run.to_json()
        for section in ("inputs", "outputs"):   # the layout is kept apart
            for t in body["run"][section]:
                t.pop("layout", None)
    ir: dict[str, Any] = {}
    if parts.ir_text:
        ir = ir_excerpts(parts.ir_text, (c.name for c in report.collectives))
    devices = report.mesh.num_devices if report.mesh is not None else 1
    return {"report": body, "stage": report.stage_name, "ir": ir,
            "timeline": trace.timeline(report, devices),
            "sources": read_sources(body, parts.user_dir, parts.files),
            "layout": parts.layout}


def render_report(report, parts: PageParts | None = None, run: Any = None) -> str:
    """The report's page: `parts` what it shows beside the report (its
    layout, IR and sources), `run` the run's section."""
    where = report.function or report.module or ""
    title = f"irshard: {os.path.basename(report.source)}" + \
        (f" {where}" if where else "")
    return page("report", report_data(report, parts, run), title)


def render_diff(diff) -> str:
    """`irshard diff --format html`: both reports side by side. No source
    is embedded: the files the reports name are the reports' word."""
    a, b = diff.a, diff.b
    data = {"diff": diff.to_json(),
            "changes": [c.to_json() for c in diff.changes],
            "a": {"label": a.label, "report": a.report.to_json()},
            "b": {"label": b.label, "report": b.report.to_json()},
            "sources": {},
            "renamed": diff.renamed}
    return page("diff", data, f"irshard diff: {a.label} vs {b.label}")


def render_search(result) -> str:
    """`irshard search --format html`: the ranked candidates, the winner's
    rules and command, and why it beats the runner-up."""
    data = result.to_json()
    winner = result.winner
    return page("search", {"search": data,
                           "reproduce": result.command_text(winner.change)
                           if winner is not None else ""},
                f"irshard search: {os.path.basename(result.command[0])} on "
                f"{result.target}")
