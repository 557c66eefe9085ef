"""The report as text: units, tables (folded on a terminal), the headline,
the collectives by source line, memory and the verdict, notes.
"""

from __future__ import annotations

import re
from typing import Iterator, Sequence

from irshard.core.specs import format_shape
from irshard.reporting import grouping, peak
from irshard.reporting.report import (Collective, CollectiveReport, TensorInfo,
                                      counted, report_notes)


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


# What a terminal would act on rather than show: control characters (an
# escape sequence could clear the screen or retitle the window), line and
# paragraph separators, and the marks that reorder text.
_UNPRINTABLE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u200e\u200f"
                          "\u202a-\u202e\u2066-\u2069]")


def printable(text: str) -> str:
    """`text` with what a terminal would act on written as Python writes it
    in a string (`\\x1b`, `\\u202e`): a name from a program (a pytree key,
    a file name) is shown, never run."""
    def escaped(m: re.Match) -> str:
        code = ord(m.group())
        return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"
    return _UNPRINTABLE.sub(escaped, text)


def table(header: list[str], rows: list[list[str]], indent: str = "  ") -> list[str]:
    """Left-aligned columns; numeric columns (all digits) right-aligned."""
    if not rows:
        return []
    header = [printable(str(c)) for c in header]
    rows = [[printable(str(c)) for c in r] for r in rows]
    widths = [max(len(str(r[i])) for r in [header] + rows)
              for i in range(len(header))]
    numeric = [all(str(r[i]).replace(",", "").isdigit() for r in rows)
               for i in range(len(header))]

    def fmt(row):
        cells = [str(c).rjust(w) if num else str(c).ljust(w)
                 for c, w, num in zip(row, widths, numeric)]
        return (indent + "  ".join(cells)).rstrip()

    return [fmt(header)] + [fmt(r) for r in rows]


def _collective_cells(c: Collective, timed: bool, scoped: bool) -> list[str]:
    """A collectives table row; its name cell (the one cell no two rows
    share) is left empty, and so is its scope's (read from its own
    op_name), filled in as the row is written."""
    axes = ",".join(c.mesh_axes) if c.mesh_axes else "?"
    runs = str(c.executions) if c.executions_known else "?"
    kind = c.kind + (f" ({c.operands} combined)" if c.operands > 1 else "")
    shape = c.shape_text + ("*" if c.backend_dtype else "")
    source = str(c.source) if c.source else "-"
    if c.attribution == "inferred":
        source += " [inferred]"
    row = [kind, "", shape, str(c.bytes), str(c.wire_bytes), axes,
           str(c.group_size), runs]
    if timed:
        row += [c.link or "?",
                human_time(c.time_s) if c.time_s is not None else "?"]
    return row + ([""] if scoped else []) + [source]


def _column_widths(header: list[str], shown: Sequence[Collective], cells_of,
                   own: list[int], scoped: bool) -> tuple[list[int], list[bool]]:
    """Each column's width and whether it is numeric (right-aligned): the
    shared cells read once per distinct row, the `own` columns (the name,
    the scope) from each collective."""
    rest: dict[int, list[str]] = {}        # each distinct row, by identity
    own_width = [len(header[i]) for i in own]
    name_numeric = True
    for c in shown:
        row = cells_of(c)
        rest[id(row)] = row
        name = c.name
        own_width[0] = max(own_width[0], len(name))
        if scoped:
            own_width[1] = max(own_width[1], len(c.scope or "-"))
        if name_numeric and not name.replace(",", "").isdigit():
            name_numeric = False
    distinct = list(rest.values())
    widths = [max(len(cell) for cell in [header[i]] + [r[i] for r in distinct])
              for i in range(len(header))]
    numeric = [all(r[i].replace(",", "").isdigit() for r in distinct)
               for i in range(len(header))]
    for i, width in zip(own, own_width):
        widths[i], numeric[i] = width, False
    numeric[1] = name_numeric
    return widths, numeric


def _collectives_table(header: list[str], shown: Sequence[Collective],
                       timed: bool, scoped: bool = False,
                       indent: str = "  ") -> Iterator[str]:
    """`table(header, rows)` of the collectives, line by line: the cells
    other than the name and the scope are made once for collectives alike
    (a `PackedCollective`'s shared fields), and the table twice walked (its
    widths, then its lines) rather than held."""
    cells: dict[int, list[str]] = {}

    def cells_of(c: Collective) -> list[str]:
        # By the shared fields, else by the collective: both live as long
        # as the report, so their identities are not reused meanwhile.
        key = id(getattr(c, "_shared", c))
        found = cells.get(key)
        if found is None:
            found = cells[key] = _collective_cells(c, timed, scoped)
        return found

    if not shown:
        return
    # The cells of each row's own: its name, and its scope (if shown).
    own = [1] + ([len(header) - 2] if scoped else [])
    widths, numeric = _column_widths(header, shown, cells_of, own, scoped)

    def cell(text: str, i: int) -> str:
        return text.rjust(widths[i]) if numeric[i] else text.ljust(widths[i])

    yield (indent + "  ".join(cell(h, i) for i, h in enumerate(header))).rstrip()
    # Each distinct row's cells around its own, padded once.
    bounds = [-1] + own + [len(header)]
    around: dict[int, list[str]] = {}
    for c in shown:
        row = cells_of(c)
        sides = around.get(id(row))
        if sides is None:
            sides = around[id(row)] = [
                "".join(cell(row[i], i) + "  " for i in range(lo + 1, hi))
                for lo, hi in zip(bounds, bounds[1:])]
            sides[0] = indent + sides[0]
        line = sides[0] + cell(c.name, 1) + "  " + sides[1]
        if scoped:
            line += cell(c.scope or "-", own[1]) + "  " + sides[2]
        yield line.rstrip()


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


# The grouped table's title, first column, and what it counts (in the
# title, then under a folded table).
_GROUP_NAMES = {"line": ("source line", "source", "lines", "source lines"),
                "scope": ("scope", "scope", "scopes", "scopes"),
                "caller": ("caller", "caller", "callers", "callers"),
                "cause": ("cause", "cause", "causes", "causes")}


def _grouped(collectives: Sequence[Collective], by: str,
             limit: int | None) -> list[str]:
    """The collectives summed by `by` (`grouping.keys`), the heaviest
    groups first (`limit` of them when folded); by cause
    (`grouping.by_cause`), with their simulated time and its share, the
    costliest first by time."""
    timed = by == "cause" and all(c.time_s is not None for c in collectives)
    if by == "cause":
        entries = [(t.cause.decision.key() if t.cause else grouping.NONE,
                    t.collectives, t) for t in grouping.by_cause(collectives)]
    else:
        groups: dict[str, list[Collective]] = {}
        for c, key in zip(collectives, grouping.keys(collectives, by)):
            groups.setdefault(key, []).append(c)
        entries = [(key, group, None) for key, group in sorted(
            groups.items(), key=lambda item: (
                -sum(c.bytes * c.executions for c in item[1]), item[0]))]
    rows = []
    for key, group, total in entries[:limit]:
        counts: dict[str, int] = {}
        for c in group:
            counts[c.kind] = counts.get(c.kind, 0) + 1
        rows.append([key, str(len(group)),
                     ", ".join(k if len(counts) == 1 else f"{n} {k}"
                               for k, n in sorted(counts.items())),
                     str(sum(c.bytes * c.executions for c in group))])
        if timed:
            rows[-1] += [human_time(total.time_s),
                         f"{100 * total.share:.0f}%" if total.share is not None else "-"]
    label, column, counted_as, folded = _GROUP_NAMES[by]
    columns = [column, "collectives", "kinds", "bytes per run"]
    if timed:
        columns += ["time per run", "of collective time"]
    title = f"by {label} ({len(entries)} {counted_as}"
    title += (f", the {limit} that take the most time per run)" if timed else
              f", the {limit} that move the most bytes per run)") \
        if limit is not None and len(entries) > limit else ")"
    return (["", title]
            + table(columns, rows)
            + fold_note(len(rows), len(entries), folded))


def render_text_lines(report: CollectiveReport, tensors: bool = True,
                      fold: bool = False, group_by: str | None = None
                      ) -> list[str]:
    return [printable(line)
            for line in text_lines(report, tensors, fold, group_by)]


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
    if report.target and report.target.kind != "cpu":
        parts.append(f"target {report.target.name}"
                     + (" (estimated)" if report.target.estimated else ""))
    parts.append(f"stage {report.stage_name}")
    if report.module:
        parts.append(f"module {report.module}")
    return parts


def text_lines(report: CollectiveReport, tensors: bool = True,
               fold: bool = False, group_by: str | None = None
               ) -> Iterator[str]:
    """The text report's lines, the collectives table's made as they come
    (a module's hundred thousand rows are never all held); `group_by`
    (`grouping.keys`) adds the collectives summed by it, and a folded
    table is summed by line unless it is given."""
    limit = FOLDED_ROWS if fold else None
    yield "  ".join(headline(report))
    if tensors:
        yield from _tensor_lines(report, limit)
    yield ""
    if not report.collectives:
        yield "collectives: none"
    else:
        yield from _collective_lines(report, limit, group_by)
    yield from _totals_lines(report)
    if report.memory:
        m = report.memory
        yield (f"memory per device: arguments {human_bytes(m.argument_bytes)}, "
               f"outputs {human_bytes(m.output_bytes)}"
               + (f" ({human_bytes(m.alias_bytes)} in donated arguments)"
                  if m.alias_bytes else "")
               + f", temp {human_bytes(m.temp_bytes)}")
        if m.peak:
            yield from peak.lines(m.peak.to_json(), human_bytes,
                                  fold=limit is not None)
    yield from _step_lines(report)
    verdict = _verdict(report)
    if verdict:
        yield verdict
    if report.findings:
        yield from ["", f"findings: {len(report.findings)}"]
        for f in report.findings:
            yield f"  {f.kind}  {f.describe()}"
    budgets = [b.to_json() for b in report.budgets or ()]
    if budgets:
        yield from ["", "budgets"]
        yield from table(["budget", "value", "result"],
                         [[b["budget"], str(b["value"]),
                           "ok" if b["passed"] else "EXCEEDED"] for b in budgets])
    for note in report_notes(report):
        yield f"note: {note}"


def _tensor_lines(report: CollectiveReport, limit: int | None) -> list[str]:
    """The inputs' and outputs' tables."""
    lines = []
    if report.inputs:
        lines += ["", "inputs"]
        lines += table(["name", "type", "sharding", "per device"],
                       _tensor_rows(report.inputs[:limit], False))
        lines += fold_note(len(report.inputs[:limit]), len(report.inputs), "inputs")
    if report.outputs:
        lines += ["", "outputs"]
        lines += table(["#", "name", "type", "sharding", "per device"],
                       _tensor_rows(report.outputs[:limit], True))
        lines += fold_note(len(report.outputs[:limit]), len(report.outputs),
                           "outputs")
    return lines


def _collective_lines(report: CollectiveReport, limit: int | None,
                      group_by: str | None) -> Iterator[str]:
    """The collectives' table (folded to the `limit` heaviest), their sums
    by `group_by` and why each is there."""
    heading = "collectives"
    timed = any(c.time_s is not None for c, _ in counted(report.collectives))
    scoped = any(c.scope for c, _ in counted(report.collectives))
    shown = report.collectives
    if limit is not None and len(shown) > limit:
        # The heaviest (bytes per run), in program order.
        heaviest = sorted(range(len(shown)),
                          key=lambda i: -shown[i].bytes * shown[i].executions)
        shown = tuple(shown[i] for i in sorted(heaviest[:limit]))
        heading += (f" (the {limit} that move the most bytes per run, "
                    f"of {len(report.collectives)})")
    yield heading
    yield from _collectives_table(
        ["kind", "name", "shape", "bytes", "wire", "axes", "group", "runs"]
        + (["link", "time"] if timed else [])
        + (["scope"] if scoped else []) + ["source"], shown, timed, scoped)
    yield from fold_note(len(shown), len(report.collectives), "collectives")
    if group_by is not None:
        yield from _grouped(report.collectives, group_by, limit)
    elif limit is not None and len(report.collectives) > limit:
        yield from _grouped(report.collectives, "line", limit)
    if any(c.why is not None for c, _ in counted(report.collectives)):
        yield from ["", "why"]
        for c in report.collectives:
            if c.why is not None:
                where = f"  {c.source}" if c.source else ""
                yield f"  {c.name}{where}"
                for line in c.why.full_text().split("\n"):
                    yield f"    {line}"


def _totals_lines(report: CollectiveReport) -> list[str]:
    """The collectives' totals: how many, bytes and time per run."""
    totals = report.totals()
    kinds = ", ".join(f"{n} {k}" for k, n in totals["by_kind"].items())
    lines = ["", f"totals: {totals['count']} collective"
             f"{'' if totals['count'] == 1 else 's'}"
             + (f" ({kinds})" if kinds else "")]
    at_least = "at least " if totals.get("unknown_executions") else ""
    lines.append(f"  per run: {at_least}{totals['bytes_per_run']} bytes "
                 f"({human_bytes(totals['bytes_per_run'])}), wire "
                 f"{totals['wire_bytes_per_run']} bytes "
                 f"({human_bytes(totals['wire_bytes_per_run'])}) per device")
    if "time_s" in totals:
        estimated = " (estimated)" if report.target and \
            report.target.estimated else ""
        profile = report.target.profile if report.target else "cpu-host"
        lines.append(f"  time per run: {at_least}{human_time(totals['time_s'])}"
                     f"{estimated}, from the {profile} profile")
    if at_least:
        lines.append(f"  ({totals['unknown_executions']} in loops whose trip "
                     f"count is not known counted once)")
    return lines


def _step_lines(report: CollectiveReport) -> list[str]:
    """`step: 41.7 ms simulated = compute 38.0 ms + exposed communication
    3.7 ms`, and what the simulation could not time."""
    if report.step is None:
        return []
    s = report.step.to_json()
    launch = f"launch {human_time(s['launch_s'])} + " if s.get("launch_s") else ""
    lines = [f"step: {human_time(s['step_s'])} simulated = {launch}compute "
             f"{human_time(s['compute_s'])} + exposed communication "
             f"{human_time(s['exposed_comm_s'])}"
             + (f" ({human_time(s['overlapped_comm_s'])} more overlapped "
                f"with compute)" if s["overlapped_comm_s"] else "")]
    lines += _made_of(s, report.target.clock_hz if report.target else None)
    lines += _communication_line(report, s)
    lines += _model_line(s)
    untimed = s.get("untimed")
    if untimed:
        ops = ", ".join(f"{n} {op}{'' if n == 1 else 's'}"
                        for op, n in untimed["instructions"].items())
        lines.append(f"  not timed: {ops}, counted by their memory traffic "
                     f"alone ({human_time(untimed['min_s'])}, a lower bound)")
    if s.get("unknown_trip_counts"):
        n = s["unknown_trip_counts"]
        lines.append(f"  {n} loop{'' if n == 1 else 's'} whose trip count is "
                     f"not known counted once: the step is a lower bound")
    return lines


def _communication_line(report: CollectiveReport, s: dict) -> list[str]:
    """Where the step's communication is more than the collectives' own
    times (the totals' `time per run`): what the rest is."""
    own = report.totals().get("time_s")
    comm = s["exposed_comm_s"] + s["overlapped_comm_s"]
    if not own or comm <= own * 1.01:
        return []
    host = report.target is None or report.target.kind == "cpu"
    why = ("the devices' rendezvous on this host: an execution's first "
           "collective, and the wait for the devices its scheduler ran last"
           if host else "what the schedule adds around them")
    return [f"  communication: {human_time(comm)} in the step, of which the "
            f"collectives' own {human_time(own)} (the table's time per run) "
            f"and {human_time(comm - own)} {why}"]


def _model_line(s: dict) -> list[str]:
    """`model: 8 simulated devices on 2 cores, at the rates measured with 8
    running at once; error band ±22%`: what the time model assumed of the
    target, and how far it was off where it was checked."""
    said = [s["assumes"]] if s.get("assumes") else []
    if s.get("error_band"):
        said.append(f"error band ±{s['error_band']:.0%}")
    return ["  model: " + "; ".join(said)] if said else []


# What timed the step's compute, as the text says it (`schedule`'s sources).
_SOURCES = {"libtpu-estimate": "libtpu's estimated cycles",
            "kernel-estimate": "kernels' declared costs", "roofline": "roofline", "traffic-only": "memory traffic only",
            "loop-trips": "loop trips"}


def _made_of(s: dict, clock: float | None) -> list[str]:
    """`compute: 2.1 ms libtpu's estimated cycles at 1.75 GHz, 31 us
    roofline; kOutput fusion 1.6 ms, ...` and `communication by axes: fsdp
    231 us exposed, 1.2 ms overlapped; tensor ...`: why the step is what
    it is."""
    compute = s.get("compute") or {}
    sources, kinds = compute.get("by_source") or {}, compute.get("by_kind") or {}
    lines = []
    if sources:
        said = []
        for source, seconds in sources.items():
            what = _SOURCES.get(source, source)
            if source == "libtpu-estimate" and clock:
                what += f" at {clock / 1e9:.3g} GHz"
            said.append(f"{human_time(seconds)} {what}")
        top = list(kinds.items())[:4]
        rest = sum(list(kinds.values())[4:])
        by_kind = ", ".join(f"{k} {human_time(v)}" for k, v in top) \
            + (f", other {human_time(rest)}" if rest else "")
        lines.append(f"  compute: {', '.join(said)}; {by_kind}")
    axes = s.get("comm_by_axes")
    if axes:
        lines.append("  communication by axes: " + "; ".join(
            f"{k} {human_time(v['exposed_s'])} exposed"
            + (f", {human_time(v['overlapped_s'])} overlapped"
               if v["overlapped_s"] else "") for k, v in axes.items()))
    return lines


def _verdict(report: CollectiveReport) -> str | None:
    """`fits in 16 GiB HBM: 11.2 GiB; the step is compute-bound` (as the
    step line above it says; the roofline's figures where no step was
    simulated)."""
    m = report.memory
    parts = []
    if m is not None and m.capacity_bytes:
        fits = "fits in" if m.fits else "does not fit in"
        parts.append(f"{fits} {human_bytes(m.capacity_bytes)} HBM: "
                     f"{human_bytes(m.in_use)}"
                     + (f", {human_bytes(m.over_bytes)} over"
                        if m.over_bytes else ""))
    r, step = report.roofline, report.step
    if step is not None:
        # One time story: the simulated step's, as the step line says it.
        bound = "communication" if step.exposed_comm_s > step.compute_s else "compute"
        parts.append(f"the step is {bound}-bound")
    elif r:
        parts.append(f"roofline: comm {human_time(r.comm_s)} vs compute "
                     f"{human_time(r.compute_s)} (memory "
                     f"{human_time(r.memory_s)}) per step, {r.bound}-bound")
    return "; ".join(parts) if parts else None


def render_text(report: CollectiveReport, fold: bool = False,
                group_by: str | None = None) -> str:
    """The report as text; `fold`: tables cut to their heaviest rows, as a
    terminal gets them; `group_by`: the collectives summed by line, scope
    or caller too."""
    return "".join(render_text_pieces(report, fold, group_by))


def render_text_pieces(report: CollectiveReport, fold: bool = False,
                       group_by: str | None = None) -> Iterator[str]:
    """`render_text` line by line, made as they are written."""
    for line in text_lines(report, fold=fold, group_by=group_by):
        yield printable(line) + "\n"
