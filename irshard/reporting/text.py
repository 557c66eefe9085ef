"""The report as text: units, tables (folded on a terminal), the headline,
the collectives by source line, memory and the verdict, notes.
"""

from __future__ import annotations

from typing import Iterator, Sequence

from irshard.core.specs import format_shape
from irshard.reporting.cells import human_bytes, human_time, printable, table
from irshard.reporting import grouping, peak
from irshard.reporting.report import (Collective, CollectiveReport, TensorInfo,
                                      counted, report_notes)
from irshard.reporting.steptext import step_lines, verdict_line


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
    yield from step_lines(report)
    verdict = verdict_line(report)
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
