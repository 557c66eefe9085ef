"""Reports in notebooks: what a report, or a diff of two, shows itself as in
Jupyter, Colab or VS Code (`_repr_html_`, `_repr_markdown_`, `repr`).

The HTML is a fragment of the notebook's own page: a summary in plain HTML
(no script; every style rule scoped under `.irshard-nb`), then the full
page, the same bytes as `--format html`, in a closed `<details>`, inside an
`<iframe srcdoc>` sandboxed to scripts alone: its styles and scripts cannot
reach the notebook, and several reports on one page never meet. Where a
notebook is shown without scripts or frames (an untrusted notebook, a
static viewer), the summary still reads. The Markdown and the text are a
few lines, for consoles. The same report gives the same bytes.

Pure Python: nothing here imports JAX.
"""

from __future__ import annotations

import html
import os
from typing import Any, Sequence

from irshard.core.specs import format_shape
from irshard.reporting.cells import change_text, human_bytes, human_time
from irshard.reporting.text import headline

# The collectives (or a diff's changes) the summary lists, heaviest first.
ROWS = 5
# The full page's frame; the reader can drag it taller.
FRAME_HEIGHT_PX = 720

_STYLE = """<style>
.irshard-nb { font: 13px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif;
  max-width: 100%; margin: 0 0 14px; }
.irshard-nb .irshard-head { font-weight: 600; margin: 0 0 6px; }
.irshard-nb .irshard-head span { font-weight: 400; opacity: 0.75; }
.irshard-nb .irshard-facts { display: flex; flex-wrap: wrap; gap: 4px 22px;
  margin: 0 0 8px; padding: 0; }
.irshard-nb .irshard-fact { margin: 0; padding: 0; }
.irshard-nb .irshard-fact span { display: block; margin: 0; }
.irshard-nb .irshard-fact .irshard-k { font-size: 11px; opacity: 0.7; }
.irshard-nb .irshard-fact .irshard-v { font-weight: 600; font-variant-numeric: tabular-nums; }
.irshard-nb table.irshard-top { border-collapse: collapse; margin: 0 0 6px; font-size: 12px; }
.irshard-nb table.irshard-top th, .irshard-nb table.irshard-top td { padding: 2px 12px 2px 0;
  text-align: left; vertical-align: top; border-bottom: 1px solid rgba(127, 127, 127, 0.3); }
.irshard-nb table.irshard-top td.irshard-n { text-align: right;
  font-variant-numeric: tabular-nums; }
.irshard-nb .irshard-note { font-size: 12px; opacity: 0.75; margin: 0 0 6px; }
.irshard-nb .irshard-bad { color: #c5221f; font-weight: 600; }
.irshard-nb .irshard-good { color: #188038; font-weight: 600; }
.irshard-nb details.irshard-full > summary { cursor: pointer; font-weight: 600; margin: 4px 0; }
.irshard-nb .irshard-frame { resize: vertical; overflow: hidden; height: FRAME_HEIGHTpx;
  border: 1px solid rgba(127, 127, 127, 0.35); }
.irshard-nb .irshard-frame iframe { display: block; width: 100%; height: 100%; border: 0;
  background: #fff; }
</style>""".replace("FRAME_HEIGHT", str(FRAME_HEIGHT_PX))


def _e(text: Any) -> str:
    return html.escape(str(text), quote=True)


def _fragment(kind: str, head: str, facts: Sequence[tuple[str, str]],
              body: Sequence[str], page: str, title: str) -> str:
    parts = [f'<div class="irshard-nb" data-irshard="{kind}">', _STYLE,
             f'<p class="irshard-head">{head}</p>', '<div class="irshard-facts">']
    parts += [f'<div class="irshard-fact"><span class="irshard-k">{_e(name)}</span>'
              f'<span class="irshard-v">{_e(value)}</span></div>'
              for name, value in facts]
    parts.append("</div>")
    parts += body
    parts += ['<details class="irshard-full"><summary>The full '
              f'{"report" if kind == "report" else "diff"}: collectives, source '
              'lines, IR, layout, memory</summary>',
              '<div class="irshard-frame">'
              f'<iframe sandbox="allow-scripts" title="{_e(title)}" '
              f'srcdoc="{_e(page)}"></iframe></div></details></div>']
    return "\n".join(parts)


def _table(header: Sequence[str], rows: Sequence[Sequence[str]],
           numeric: Sequence[int]) -> str:
    head = "".join(f"<th>{_e(h)}</th>" for h in header)
    body = "".join(
        "<tr>" + "".join(
            f'<td class="irshard-n">{_e(v)}</td>' if i in numeric else f"<td>{_e(v)}</td>"
            for i, v in enumerate(row)) + "</tr>"
        for row in rows)
    return (f'<table class="irshard-top"><thead><tr>{head}</tr></thead>'
            f'<tbody>{body}</tbody></table>')


def _md(text: Any) -> str:
    """Text as Markdown shows it literally (table cells included)."""
    out = str(text)
    for ch in "\\`*_[]<>|#":
        out = out.replace(ch, "\\" + ch)
    return out


def _code(text: Any) -> str:
    """Text as a Markdown code span, whatever backticks it holds: fenced by
    one more backtick than its longest run, padded where it starts or ends
    with one (CommonMark strips one space each side)."""
    out = str(text).replace("\r", " ").replace("\n", " ")
    longest, run = 0, 0
    for ch in out:
        run = run + 1 if ch == "`" else 0
        longest = max(longest, run)
    fence = "`" * (longest + 1)
    pad = " " if out[:1] in ("`", " ") or out[-1:] in ("`", " ") else ""
    return f"{fence}{pad}{out}{pad}{fence}"


def _md_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    lines = ["| " + " | ".join(_md(h) for h in header) + " |",
             "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(_md(v) for v in row) + " |" for row in rows]
    return lines


# ---------------------------------------------------------------------------
# A report


def _headline(report) -> tuple[str, str]:
    """The program (its file's name, not its path) and the rest."""
    what, *rest = headline(report)
    path, colon, function = what.rpartition(":") if report.function else (what, "", "")
    return os.path.basename(path) + colon + function, "  ".join(rest)


def _report_facts(report) -> list[tuple[str, str]]:
    totals = report.totals()
    kinds = ", ".join(f"{n} {k}" for k, n in totals["by_kind"].items())
    at_least = "at least " if totals.get("unknown_executions") else ""
    facts = [("collectives", f"{totals['count']}" + (f" ({kinds})" if kinds else "")),
             ("bytes per run, per device", at_least + human_bytes(totals["bytes_per_run"])),
             ("on the wire", at_least + human_bytes(totals["wire_bytes_per_run"]))]
    if "time_s" in totals:
        profile = report.target.profile if report.target else "cpu-host"
        facts.append((f"time per run ({profile})",
                      at_least + human_time(totals["time_s"])))
    if report.memory:
        m = report.memory
        value = human_bytes(m.in_use)
        if m.capacity_bytes:
            value += (" (fits in " if m.fits else " (does not fit in ") \
                + human_bytes(m.capacity_bytes) + ")"
        facts.append(("memory per device", value))
    budgets = report.budgets
    if budgets:
        held = sum(1 for b in budgets if b.passed)
        facts.append(("budgets", f"{held} of {len(budgets)} held"))
    if report.findings:
        facts.append(("findings", str(len(report.findings))))
    return facts


def _heaviest(report) -> tuple[list[list[str]], int]:
    """The summary's rows: the collectives that move the most bytes per
    run (program order breaks ties), and how many are left out."""
    order = sorted(range(len(report.collectives)),
                   key=lambda i: -report.collectives[i].bytes
                   * report.collectives[i].executions)
    rows = []
    for i in order[:ROWS]:
        c = report.collectives[i]
        rows.append([c.kind, format_shape(c.dtype, c.shape),
                     ",".join(c.mesh_axes) if c.mesh_axes else "?",
                     str(c.executions) if c.executions_known else "?",
                     human_bytes(c.bytes * c.executions),
                     str(c.source) if c.source else "-"])
    return rows, len(report.collectives) - len(rows)


_REPORT_HEADER = ["kind", "shape per device", "axes", "runs", "bytes per run", "source"]


def report_html(report, page: str) -> str:
    """The notebook's view of `report`; `page` is its `--format html` page."""
    what, rest = _headline(report)
    head = f"irshard: {_e(what)} <span>{_e(rest)}</span>"
    rows, more = _heaviest(report)
    body = []
    if rows:
        body.append(_table(_REPORT_HEADER, rows, numeric=(3, 4)))
        if more:
            body.append(f'<p class="irshard-note">and {more} more collective'
                        f'{"" if more == 1 else "s"} in the full report</p>')
    else:
        body.append('<p class="irshard-note">no collectives</p>')
    budgets = report.budgets or ()
    failed = [b.budget for b in budgets if not b.passed]
    if failed:
        body.append('<p class="irshard-bad">budget exceeded: '
                    + _e(", ".join(failed)) + "</p>")
    title = f"irshard report: {what}"
    return _fragment("report", head, _report_facts(report), body, page, title)


def report_markdown(report) -> str:
    what, rest = _headline(report)
    lines = [f"**irshard** {_code(what)} " + _md(rest), ""]
    facts = _report_facts(report)
    lines += _md_table([name for name, _ in facts], [[value for _, value in facts]])
    rows, more = _heaviest(report)
    if rows:
        of = f" (of {len(report.collectives)})" if more else ""
        lines += ["", f"heaviest collectives{of}:", ""]
        lines += _md_table(_REPORT_HEADER, rows)
    return "\n".join(lines) + "\n"


def report_text(report) -> str:
    """A few lines: what it is about and its totals."""
    what, rest = _headline(report)
    facts = "; ".join(f"{name} {value}" for name, value in _report_facts(report))
    return f"<irshard report {what}  {rest}\n  {facts}>"


# ---------------------------------------------------------------------------
# A diff


def _diff_facts(diff) -> list[tuple[str, str]]:
    t = diff.totals()
    a, b = t["a"], t["b"]
    facts = [("collectives", f"{a['count']} -> {b['count']}"),
             ("bytes per run", f"{human_bytes(a['bytes_per_run'])} -> "
              f"{human_bytes(b['bytes_per_run'])} "
              f"({change_text(a['bytes_per_run'], b['bytes_per_run'], human_bytes)})"),
             ("on the wire", f"{human_bytes(a['wire_bytes_per_run'])} -> "
              f"{human_bytes(b['wire_bytes_per_run'])}")]
    if "time_s" in a and "time_s" in b:
        facts.append(("time per run", f"{human_time(a['time_s'])} -> "
                      f"{human_time(b['time_s'])}"))
    if "memory_bytes" in a and "memory_bytes" in b:
        facts.append(("memory per device", f"{human_bytes(a['memory_bytes'])} -> "
                      f"{human_bytes(b['memory_bytes'])}"))
    return facts


_DIFF_HEADER = ["change", "kind", "count", "bytes per run", "delta", "source"]


def _diff_rows(diff) -> tuple[list[list[str]], int]:
    changed = [c for c in diff.changes if c.status != "same"]
    rows = []
    for c in changed[:ROWS]:
        delta = c.b.bytes_per_run - c.a.bytes_per_run
        rows.append([c.status, c.kind, f"{c.a.count} -> {c.b.count}",
                     f"{human_bytes(c.a.bytes_per_run)} -> "
                     f"{human_bytes(c.b.bytes_per_run)}",
                     ("+" if delta > 0 else "-" if delta < 0 else "")
                     + human_bytes(abs(delta)), c.source])
    return rows, len(changed) - len(rows)


def diff_html(diff, page: str) -> str:
    head = (f"irshard diff <span>A</span> {_e(diff.a.label)} "
            f"<span>B</span> {_e(diff.b.label)}")
    rows, more = _diff_rows(diff)
    body = []
    if rows:
        body.append(_table(_DIFF_HEADER, rows, numeric=(4,)))
        if more:
            body.append(f'<p class="irshard-note">and {more} more change'
                        f'{"" if more == 1 else "s"} in the full diff</p>')
    else:
        body.append('<p class="irshard-note">collectives: no change by line and kind</p>')
    regressions = diff.regressions()
    if regressions:
        body += [f'<p class="irshard-bad">regression: {_e(r)}</p>' for r in regressions]
    else:
        body.append('<p class="irshard-good">no regression: B moves no more bytes '
                    'and takes no longer than A</p>')
    title = f"irshard diff: {diff.a.label} vs {diff.b.label}"
    return _fragment("diff", head, _diff_facts(diff), body, page, title)


def diff_markdown(diff) -> str:
    lines = [f"**irshard diff** A {_md(diff.a.label)}, B {_md(diff.b.label)}", ""]
    facts = _diff_facts(diff)
    lines += _md_table([name for name, _ in facts], [[value for _, value in facts]])
    rows, _ = _diff_rows(diff)
    if rows:
        lines += [""] + _md_table(_DIFF_HEADER, rows)
    lines += [""] + [f"regression: {_md(r)}" for r in diff.regressions()]
    return "\n".join(lines).rstrip() + "\n"


def diff_text(diff) -> str:
    facts = "; ".join(f"{name} {value}" for name, value in _diff_facts(diff))
    regressions = diff.regressions()
    verdict = f"{len(regressions)} regression{'' if len(regressions) == 1 else 's'}" \
        if regressions else "no regression"
    return (f"<irshard diff A {diff.a.label}  B {diff.b.label}\n  {facts}; "
            f"{verdict}>")
