"""The report the Python API gives (`irshard.api.Report`): the report's
data, the program it came from, and what a person does with it in Python;
and the observers every report is shown to (the pytest plugin)."""

from __future__ import annotations

import contextlib
import dataclasses
from typing import Any, Callable, Iterator

from irshard.core.errors import UsageError
from irshard.reporting.report import CollectiveReport


@dataclasses.dataclass(frozen=True)
class Report(CollectiveReport):
    """A collective report as `compile` and `run` give it: the report's
    data, the program it came from, and what a person does with it in
    Python."""

    # The pipeline's stages the report came from (see `stage`).
    stages: Any = dataclasses.field(default=None, compare=False, repr=False)
    # `irshard.run`: how the program ran, and its outputs' values.
    run: Any = dataclasses.field(default=None, compare=False, repr=False)
    results: Any = dataclasses.field(default=None, compare=False, repr=False)

    @classmethod
    def of(cls, report: CollectiveReport, **changes: Any) -> "Report":
        values = {f.name: getattr(report, f.name)
                  for f in dataclasses.fields(report)}
        return cls(**(values | changes))

    def json_value(self, collectives: Any) -> dict[str, Any]:
        d = super().json_value(collectives)
        if self.run is not None:
            d["run"] = self.run.to_json()
        return d

    def stage(self, name: str) -> str:
        """The IR of pipeline stage `name` (stablehlo, propagated,
        partitioned, optimized), as `--emit` prints it. The partitioned
        stage, unless the report read it (`stage="partitioned"`, `explain`),
        costs one more compile: a default report does not ask XLA for it."""
        from irshard import STAGES
        if name not in STAGES:
            raise UsageError(f"unknown stage '{name}'; stages are "
                             f"{', '.join(STAGES)}")
        if self.stages is None:
            raise UsageError("this report was read from HLO; it has no "
                             "pipeline stages")
        return self.stages.text(name)

    def explain(self) -> list:
        """The collectives summed by cause, costliest first (`CauseTotal`s)."""
        from irshard.reporting import grouping
        if self.collectives and all(c.why is None for c in self.collectives):
            raise UsageError("explain(): compile with explain=True (or verify=True)")
        return grouping.by_cause(self.collectives)

    def check_budget(self, *budgets: str) -> list:
        """Holds the report to `budgets` (`'all-gather@fsdp<=2'`, ...):
        raises `irshard.BudgetExceeded` listing every breach; returns the
        outcomes when all hold."""
        from irshard.reporting import budget
        return budget.check(self, budgets)

    def to_text(self, group_by: str | None = None) -> str:
        """The text report, as `irshard compile` prints it; `group_by`
        (`line`, `scope` or `caller`) sums the collectives by it too."""
        from irshard.reporting import grouping, text
        return text.render_text(self, group_by=grouping.checked(group_by))

    def to_json_text(self) -> str:
        """The JSON report (`--format json`) as text: what `irshard diff`
        and `irshard.compare` read back."""
        from irshard.reporting import writer
        return writer.render_json(self)

    def to_html(self) -> str:
        """The HTML report (`--format html`): one self-contained page."""
        from irshard.reporting import htmlreport
        from irshard.stages import pageparts
        parts = pageparts.page_parts(self, getattr(self.stages, "compiled", None),
                                  self.run, self.stages)
        return htmlreport.render_report(self, parts, self.run)

    # How a report shows itself: a few lines in a console; in a notebook,
    # its summary and the full page (irshard.reporting.notebook).
    def __repr__(self) -> str:
        from irshard.reporting import notebook
        return notebook.report_text(self)

    def _repr_html_(self) -> str:
        from irshard.reporting import notebook
        return notebook.report_html(self, self.to_html())

    def _repr_markdown_(self) -> str:
        from irshard.reporting import notebook
        return notebook.report_markdown(self)


# Called with every report `compile` and `run` give (the pytest plugin
# holds a test's reports to its budgets).
_observers: list[Callable[[Report], None]] = []


@contextlib.contextmanager
def observing(observe: Callable[[Report], None]) -> Iterator[None]:
    """Calls `observe` with every report `compile` and `run` give while open."""
    _observers.append(observe)
    try:
        yield
    finally:
        _observers.remove(observe)


def shown(report: Report) -> Report:
    """`report`, after every observer has seen it."""
    for observe in list(_observers):
        observe(report)
    return report
