"""`irshard diff A B`: two collective reports compared by source line and
kind.

A side is a JSON report (`irshard compile --format json`), an HLO file or an
XLA dump directory (read as `irshard collectives` reads them:
`irshard.collectives.dumps.diff_side`). Collectives
are grouped by the user's line and kind; each group's count, bytes and time
per run is compared, then the totals and memory. B regresses when it moves
more bytes per run, or takes longer, than A.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from irshard.core.rendering import Rendered
from irshard.reporting import htmlreport
from irshard.reporting import notebook
from irshard.reporting.report import Collective, CollectiveReport
from irshard.reporting.cells import change_text, human_bytes, human_time, table
from irshard.reporting.writer import dumps_json

SCHEMA = 1
HINT = "give a report written by irshard compile --format json"


@dataclass
class Group:
    """One side's collectives of one kind at one line."""

    count: int = 0
    bytes_per_run: int = 0
    wire_bytes_per_run: int = 0
    time_s: float | None = None
    names: list[str] = field(default_factory=list)

    def add(self, c: Collective) -> None:
        runs = c.executions
        self.count += 1
        self.bytes_per_run += c.bytes * runs
        self.wire_bytes_per_run += c.wire_bytes * runs
        if c.time_s is not None:
            self.time_s = (self.time_s or 0.0) + c.time_s * runs
        self.names.append(c.name)

    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {"count": self.count, "bytes_per_run": self.bytes_per_run,
                             "wire_bytes_per_run": self.wire_bytes_per_run}
        if self.time_s is not None:
            d["time_s"] = self.time_s
        d["names"] = self.names
        return d


@dataclass(frozen=True)
class Side:
    """One report compared, and where it came from."""

    path: str
    report: CollectiveReport
    name: str | None = None        # the label given, where not the file's

    @property
    def label(self) -> str:
        if self.name is not None:
            return self.name
        what = self.report.function or self.report.module
        return f"{os.path.basename(self.path.rstrip(os.sep)) or self.path}" \
            + (f" ({what})" if what else "")

    def groups(self) -> dict[tuple[str, int, str], Group]:
        return groups(self.report)

    def functions(self) -> dict[tuple[str, int], str]:
        """(file, line) -> the function it is in, for display."""
        result: dict[tuple[str, int], str] = {}
        for c in self.report.collectives:
            if c.source is not None and c.source.function:
                result.setdefault((c.source.file, c.source.line), c.source.function)
        return result

    def totals(self) -> dict[str, Any]:
        return totals(self.report)

    def peak_by_kind(self) -> dict[str, int] | None:
        """The memory peak's bytes per kind of buffer, where it was read."""
        memory = self.report.memory
        return memory.peak.by_kind() if memory is not None and memory.peak else None


def groups(report: CollectiveReport) -> dict[tuple[str, int, str], Group]:
    """The report's collectives by (file, line, kind)."""
    found: dict[tuple[str, int, str], Group] = {}
    for c in report.collectives:
        key = (c.source.file if c.source else "-", c.source.line if c.source else 0,
               c.kind)
        found.setdefault(key, Group()).add(c)
    return found


def totals(report: CollectiveReport) -> dict[str, Any]:
    """What a comparison reads of a report: its collectives' count, bytes
    and time per run, and memory per device (the peak where it was read)."""
    t = report.totals()
    d: dict[str, Any] = {"count": t["count"], "bytes_per_run": t["bytes_per_run"],
                         "wire_bytes_per_run": t["wire_bytes_per_run"]}
    if t.get("time_s") is not None:
        d["time_s"] = t["time_s"]
    if report.memory is not None:
        d["memory_bytes"] = report.memory.in_use
    return d


def is_report(value: Any) -> bool:
    return isinstance(value, dict) and isinstance(value.get("collectives"), list)


def main_module(modules: list, is_sharded) -> Any:
    """The module a dump is about: the only sharded one (a dump also holds
    one-device helpers), else its only module; None when neither is one."""
    sharded = [m for m in modules if is_sharded(m)]
    if len(sharded) == 1:
        return sharded[0]
    return modules[0] if len(modules) == 1 else None


@dataclass(frozen=True)
class LineChange:
    file: str
    line: int
    function: str | None
    kind: str
    a: Group
    b: Group

    @property
    def status(self) -> str:
        if self.a.count == 0:
            return "added"
        if self.b.count == 0:
            return "removed"
        if (self.a.count, self.a.bytes_per_run) == (self.b.count, self.b.bytes_per_run):
            return "same"
        return "changed"

    @property
    def source(self) -> str:
        if self.file == "-":
            return "-"
        fn = f" ({self.function})" if self.function else ""
        return f"{self.file}:{self.line}{fn}"

    def to_json(self) -> dict[str, Any]:
        return {"status": self.status, "kind": self.kind,
                "source": None if self.file == "-" else
                {"file": self.file, "line": self.line, "function": self.function},
                "a": self.a.to_json(), "b": self.b.to_json(),
                "delta_bytes_per_run": self.b.bytes_per_run - self.a.bytes_per_run}


@dataclass(frozen=True)
class Diff(Rendered):
    """Two reports compared by source line and kind (`irshard diff`)."""

    FORMATS = ("text", "json", "html")
    a: Side
    b: Side
    changes: tuple[LineChange, ...]
    # B's files taken for A's (the same program in another directory).
    renamed: dict[str, str] = field(default_factory=dict)

    def totals(self) -> dict[str, Any]:
        ta, tb = self.a.totals(), self.b.totals()
        delta = {k: tb[k] - ta[k] for k in ta if k in tb}
        return {"a": ta, "b": tb, "delta": delta}

    def peak(self) -> dict[str, Any] | None:
        """Both memory peaks by kind of buffer, and B's change per kind;
        None unless both reports have one."""
        ka, kb = self.a.peak_by_kind(), self.b.peak_by_kind()
        if ka is None or kb is None:
            return None
        kinds = sorted(set(ka) | set(kb),
                       key=lambda k: (-max(ka.get(k, 0), kb.get(k, 0)), k))
        return {"a": {k: ka.get(k, 0) for k in kinds},
                "b": {k: kb.get(k, 0) for k in kinds},
                "delta": {k: kb.get(k, 0) - ka.get(k, 0) for k in kinds}}

    def regressions(self) -> list[str]:
        """What B does worse than A: more bytes per run, more time, a
        higher memory peak."""
        t = self.totals()
        a, b = t["a"], t["b"]
        found = []
        if b["bytes_per_run"] > a["bytes_per_run"]:
            found.append(f"B moves more bytes per run than A: "
                         f"{human_bytes(a['bytes_per_run'])} -> "
                         f"{human_bytes(b['bytes_per_run'])}")
        if "time_s" in a and "time_s" in b and b["time_s"] > a["time_s"]:
            found.append(f"B takes longer per run than A: {human_time(a['time_s'])} "
                         f"-> {human_time(b['time_s'])}")
        if self.peak() is not None and b["memory_bytes"] > a["memory_bytes"]:
            grown = max(self.peak()["delta"].items(), key=lambda kv: kv[1])
            found.append(f"B needs more memory per device at its peak than A: "
                         f"{human_bytes(a['memory_bytes'])} -> "
                         f"{human_bytes(b['memory_bytes'])} ({grown[0]} "
                         f"{'+' if grown[1] >= 0 else ''}{human_bytes(grown[1])})")
        return found

    def to_json(self) -> dict[str, Any]:
        return {"schema": SCHEMA,
                "a": {"path": self.a.path, "source": self.a.report.source,
                      "function": self.a.report.function},
                "b": {"path": self.b.path, "source": self.b.report.source,
                      "function": self.b.report.function},
                "changes": [c.to_json() for c in self.changes
                            if c.status != "same"],
                "unchanged": sum(1 for c in self.changes if c.status == "same"),
                "totals": self.totals(),
                **({"peak": self.peak()} if self.peak() is not None else {}),
                "regressions": self.regressions()}

    def render_json(self) -> str:
        return dumps_json(self.to_json()) + "\n"

    def to_html(self) -> str:
        """The diff's page (`--format html`): both reports side by side."""
        return htmlreport.render_diff(self)

    def __repr__(self) -> str:
        return notebook.diff_text(self)

    def _repr_html_(self) -> str:
        return notebook.diff_html(self, self.to_html())

    def _repr_markdown_(self) -> str:
        return notebook.diff_markdown(self)

    def render_html(self) -> str:
        return htmlreport.render_diff(self)

    def render_text(self) -> str:
        lines = [f"A: {self.a.label}", f"B: {self.b.label}", ""]
        changed = [c for c in self.changes if c.status != "same"]
        timed = any(c.a.time_s is not None or c.b.time_s is not None
                    for c in self.changes)
        if not changed:
            lines.append("collectives: no change by line and kind")
        else:
            lines.append("collectives by line and kind")
            rows = []
            for c in changed:
                row = [c.status, c.kind, f"{c.a.count} -> {c.b.count}",
                       f"{c.a.bytes_per_run} -> {c.b.bytes_per_run}",
                       _signed(c.b.bytes_per_run - c.a.bytes_per_run)]
                if timed:
                    row.append(f"{_time(c.a.time_s)} -> {_time(c.b.time_s)}")
                rows.append(row + [c.source])
            lines += table(["change", "kind", "count", "bytes per run", "delta"]
                           + (["time per run"] if timed else []) + ["source"], rows)
        same = len(self.changes) - len(changed)
        if same:
            lines.append(f"  ({same} unchanged)")
        t = self.totals()
        a, b = t["a"], t["b"]
        lines += ["", "totals"]
        rows = [["collectives", str(a["count"]), str(b["count"]),
                 _signed(b["count"] - a["count"])],
                ["bytes per run", human_bytes(a["bytes_per_run"]),
                 human_bytes(b["bytes_per_run"]),
                 change_text(a["bytes_per_run"], b["bytes_per_run"], human_bytes)],
                ["wire bytes per run", human_bytes(a["wire_bytes_per_run"]),
                 human_bytes(b["wire_bytes_per_run"]),
                 change_text(a["wire_bytes_per_run"], b["wire_bytes_per_run"], human_bytes)]]
        if "time_s" in a and "time_s" in b:
            rows.append(["time per run", human_time(a["time_s"]), human_time(b["time_s"]),
                         change_text(a["time_s"], b["time_s"], human_time)])
        if "memory_bytes" in a and "memory_bytes" in b:
            rows.append(["memory per device", human_bytes(a["memory_bytes"]),
                         human_bytes(b["memory_bytes"]),
                         change_text(a["memory_bytes"], b["memory_bytes"], human_bytes)])
        lines += table(["", "A", "B", "change"], rows)
        peak = self.peak()
        if peak is not None:
            lines += ["", "memory peak per device, by kind"]
            lines += table(["kind", "A", "B", "change"], [
                [k, human_bytes(peak["a"][k]), human_bytes(peak["b"][k]),
                 change_text(peak["a"][k], peak["b"][k], human_bytes)]
                for k in peak["a"]])
        regressions = self.regressions()
        lines.append("")
        lines += [f"regression: {r}" for r in regressions] or \
            ["no regression: B moves no more bytes and takes no longer than A"
             + (", and needs no more memory at its peak" if peak is not None else "")]
        return "\n".join(lines) + "\n"


def _signed(n: int) -> str:
    return f"+{n}" if n > 0 else str(n)


def _time(t: float | None) -> str:
    return "-" if t is None else human_time(t)


def _same_files(ga, gb) -> dict[str, str]:
    """B's file -> A's, for a file of B that A does not have but whose name
    exactly one of A's files has (the same program in another directory)."""
    files_a = {k[0] for k in ga} - {"-"}
    files_b = {k[0] for k in gb} - {"-"}
    mapping = {}
    for f in files_b - files_a:
        same = [g for g in files_a - files_b
                if os.path.basename(g) == os.path.basename(f)]
        others = [g for g in files_b - files_a
                  if os.path.basename(g) == os.path.basename(f)]
        if len(same) == 1 and len(others) == 1:
            mapping[f] = same[0]
    return mapping


def compare(a: Side, b: Side) -> Diff:
    ga, gb = a.groups(), b.groups()
    renamed = _same_files(ga, gb)
    if renamed:
        gb = {(renamed.get(f, f), line, kind): g for (f, line, kind), g in gb.items()}
    functions = {**b.functions(), **a.functions()}
    changes = []
    for key in set(ga) | set(gb):
        file, line, kind = key
        changes.append(LineChange(file, line, functions.get((file, line)), kind,
                              ga.get(key, Group()), gb.get(key, Group())))
    changes.sort(key=lambda c: (-abs(c.b.bytes_per_run - c.a.bytes_per_run),
                                c.file, c.line, c.kind))
    return Diff(a, b, tuple(changes), renamed)
