"""What the commands take from the stages and write: the IR of the stages
asked for (`--emit`), the report of the stage read (with `--explain`'s why),
in text, JSON, HTML (the page's parts taken from the program first, by
`pageparts`) or a trace (`ReportOutput`), and the reports of an HLO file or
dump's modules (`irshard collectives`).

Each returns text (or its pieces, for writing as they are made); where it
goes is the caller's.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Sequence

from irshard.core.errors import UsageError
from irshard.core.rendering import Rendered
from irshard.reporting import text, writer
from irshard.reporting.report import SCHEMA
from irshard.reporting.text import render_text_pieces
from irshard.reporting.writer import dumps_json, render_json_pieces
from irshard.stages import pageparts


def emit(lowered, emits: Sequence[str], stage: str, debug_info: bool, *,
         compile_anyway: bool = False, explain: bool = False,
         note: Callable[[str], None] = lambda _: None):
    """The requested stages' IR, in pipeline order, and the compiled
    program (None when only MLIR stages were asked for and not
    `compile_anyway`; its partitioned HLO kept where it is asked for or
    read). Propagation's notes go to `note`."""
    texts = []
    if "stablehlo" in emits:
        texts.append(("stablehlo", lowered.as_text(debug_info)))
    if "propagated" in emits:
        propagated = lowered.propagate()
        for line in propagated.notes:
            note(line)
        texts.append(("propagated", propagated.as_text(debug_info)))
    compiled = None
    if (compile_anyway or not emits
            or any(s in emits for s in ("partitioned", "optimized"))):
        compiled = lowered.compile(
            partitioned="partitioned" in emits or stage == "partitioned"
            or explain)
    if "partitioned" in emits:
        texts.append(("partitioned", compiled.partitioned().as_text()))
    if "optimized" in emits:
        texts.append(("optimized", compiled.as_text()))
    return texts, compiled


def join_stages(texts: Sequence[tuple[str, str]]) -> str:
    """Stage texts as `--emit` prints them: one alone as it is, several
    each under a `// ----- irshard stage: NAME` line."""
    def ended(ir: str) -> str:
        return ir if ir.endswith("\n") else ir + "\n"

    if len(texts) == 1:
        return ended(texts[0][1])
    return "".join(f"// ----- irshard stage: {name}\n" + ended(ir)
                   for name, ir in texts)


def report(lowered, compiled, stage: str, explain: bool, verify: bool = False,
           jobs: int = 1):
    """The collective report of `stage` (partitioned or optimized), with
    each collective's why when `explain`, its cause confirmed by a
    recompile without it when `verify` (`jobs` recompiles at once)."""
    read = compiled.partitioned() if stage == "partitioned" else compiled
    found = read.report()
    if explain or verify:
        from irshard.collectives import explain as explaining
        found = explaining.explained(found, lowered, read)
    if verify:
        from irshard.collectives import causes
        found = causes.verified(found, lowered, stage, jobs=jobs)
    return found


@dataclass(frozen=True)
class ReportOutput(Rendered):
    """A compile's report as it is written: text (folded on a terminal,
    the collectives summed by `group_by` too), JSON (both in pieces), the
    HTML page, or the simulated step as a trace (`compiled`: the
    executable the report read, for the page's layouts and IR)."""

    FORMATS = ("text", "json", "html", "trace")
    report: Any
    compiled: Any = None
    fold: bool = False
    group_by: str | None = None

    def pieces_text(self) -> Iterator[str]:
        return text.render_text_pieces(self.report, self.fold, self.group_by)

    def render_text(self) -> str:
        return "".join(self.pieces_text())

    def pieces_json(self) -> Iterator[str]:
        return writer.render_json_pieces(self.report)

    def render_json(self) -> str:
        return "".join(self.pieces_json())

    def render_html(self) -> str:
        from irshard.reporting import htmlreport
        return htmlreport.render_report(self.report,
                                        pageparts.page_parts(self.report, self.compiled))

    def render_trace(self) -> str:
        return trace(self.compiled, self.report)


def modules_json(modules) -> Iterator[str]:
    """`irshard collectives`' reports (`library.ModuleReports`) as JSON,
    in pieces: one module's report written as it is made (a large
    module's is never held whole), several as one object."""
    path, reports, skipped = modules.path, list(modules.reports), list(modules.skipped)
    if len(reports) == 1 and not os.path.isdir(path):
        return render_json_pieces(reports[0])
    body = {"schema": SCHEMA, "source": path,
            "modules": [r.to_json() for r in reports]}
    if skipped:
        body["skipped"] = [{"module": label, "devices": n} for label, n in skipped]
    return iter([dumps_json(body) + "\n"])


def modules_html(modules) -> str:
    """`irshard collectives --format html`: the page of its one sharded
    module."""
    return _one_page(modules.path, modules.stage, list(modules.reports))


def modules_text(modules) -> Iterator[str]:
    """`irshard collectives`' reports as text, the collectives summed by
    the reports' `group_by` too."""
    return _texts(list(modules.reports), list(modules.skipped), modules.mesh,
                  modules.group_by)


def _one_page(path: str, stage: str, reports) -> str:
    """The HTML page of the one sharded module among `reports`."""
    from irshard.collectives import dumps
    from irshard.reporting import diff, htmlreport

    def sharded(r):
        return bool(r.collectives) or (r.mesh is not None and r.mesh.num_devices > 1)

    chosen = diff.main_module(reports, sharded)
    if chosen is None:
        names = ", ".join(r.module or "?" for r in reports) or "none"
        count = sum(map(sharded, reports)) or len(reports)
        raise UsageError(f"--format html shows one module; '{path}' "
                         f"holds {count} ({names}): give one module's HLO file")
    found = {m.label: m.path for m in dumps.find_modules(path, stage)}
    return htmlreport.render_report(chosen, htmlreport.PageParts(
        ir_text=htmlreport.read_ir(found.get(chosen.module, ""))))


def _texts(reports, skipped, mesh, group_by=None) -> Iterator[str]:
    """The text reports of several modules, in pieces, one blank line
    between them, and the modules skipped."""
    for i, r in enumerate(reports):
        if i:
            yield "\n"
        yield from render_text_pieces(r, group_by=group_by)
    if skipped:
        yield (f"\nskipped {len(skipped)} module"
               f"{'' if len(skipped) == 1 else 's'} that "
               f"run{'s' if len(skipped) == 1 else ''} on another number "
               f"of devices than --mesh {mesh}:\n")
        yield "".join(f"  {label}  ({n} device{'' if n == 1 else 's'})\n"
                      for label, n in skipped)


def trace(compiled, report) -> str:
    """`--format trace`: the simulated step as a Perfetto trace."""
    from irshard.reporting import trace as tracing
    if report.step is None:
        placement = compiled.info.placement
        raise UsageError(f"--format trace: the {placement.profile.name} profile "
                         f"has no compute rates to time a step with; give a "
                         f"--target whose profile has them")
    return tracing.render_trace(report, report.step, compiled.info.mesh.num_devices)
