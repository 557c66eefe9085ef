"""Running the partitioned program on its mesh, and checking it.

The executable is irshard's own annotated module compiled through the
backend (the `optimized` stage), not a second `jax.jit` of the function. Its
inputs are made shard by shard — each device materialises only its own
slice — from seeded values that depend only on the global index, or from
`.npy` files read slice by slice through a memory map. `--check` runs the
same function unsharded on one device with the same values and compares every
output with dtype-aware tolerances.

Everything here works the same in one process or many: per-process work
touches only addressable devices, and what must be global (checksums, the
values `--check` and `--save` need) is combined across processes.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np

from irshard import backend
from irshard.core import files, tree
from irshard.core.errors import InputError, UsageError
from irshard.core.rendering import Rendered
from irshard.core.specs import format_shape
from irshard.core.textinput import split_assignment
from irshard.reporting import htmlreport, layout
from irshard.reporting.report import TensorInfo
from irshard.reporting.cells import table
from irshard.reporting.text import FOLDED_ROWS, fold_note, render_text_lines
from irshard.reporting.writer import dumps_json
from irshard.running import check, inputs, timing
from irshard.stages import output, pageparts, placing
from irshard.stages.declared import TensorDecl
from irshard.stages.staged import Optimized, StableHLO

@dataclass(frozen=True)
class RunOptions:
    seed: int = 0
    inputs: tuple[tuple[str, str], ...] = ()     # (argument, .npy path)
    check: bool = False
    rtol: float | None = None
    atol: float | None = None
    repeat: int | None = None
    save: str | None = None
    progress: bool = False
    ranges: tuple[tuple[str, tuple[float, float]], ...] = ()   # --range
    reference: str | None = None        # --reference: a function's name
    # Values given for inputs, by path (the API's concrete arrays).
    given: Mapping[str, Any] = field(default_factory=dict, compare=False)
    keep_values: bool = False           # return the outputs' values
    trace: str | None = None            # --trace: the measured profile's path

    def range_rules(self) -> list[tree.Rule]:
        return [tree.Rule(pattern, value_range,
                          f"{pattern}={value_range[0]:g},{value_range[1]:g}")
                for pattern, value_range in self.ranges]

    def validate(self) -> None:
        if self.repeat is not None and self.repeat < 1:
            raise UsageError(f"--repeat {self.repeat}: give a positive number "
                             f"of timed runs")
        for name, value in (("--rtol", self.rtol), ("--atol", self.atol)):
            if value is not None and (value < 0 or math.isnan(value)):
                raise UsageError(f"{name} {value}: tolerances are non-negative "
                                 f"numbers")
        seen = set()
        for name, path in self.inputs:
            if name in seen:
                raise UsageError(f"--input {name} is given twice")
            seen.add(name)
            if not path.endswith(".npy"):
                raise InputError(f"--input {name}={path}: expected a .npy file")
        if self.save is not None and not self.save.endswith(".npz"):
            raise UsageError(f"--save {self.save or repr('')}: expected a path "
                             f"ending in .npz")
        if self.reference and not self.check:
            raise UsageError("--reference names the function --check compares "
                             "with; give --check too")
        ranged = {name for name, _ in self.ranges}
        both = sorted(ranged & {name for name, _ in self.inputs})
        if both:
            raise UsageError(f"--range {both[0]}: the argument is read from a "
                             f"file (--input); give one or the other")


def _number(text: str) -> float:
    """An integer exactly (64-bit bounds), else a float."""
    try:
        return int(text)
    except ValueError:
        return float(text)


def parse_range(item: str) -> tuple[str, tuple[float, float]]:
    """`--range NAME=LO,HI` -> (NAME, (LO, HI))."""
    name, value = split_assignment(item, "--range", "LO,HI")
    parts = [p.strip() for p in value.split(",")]
    try:
        if len(parts) != 2 or any(len(p) > 40 for p in parts):
            raise ValueError
        low, high = (_number(p) for p in parts)
    except ValueError:
        raise UsageError(f"--range {item}: expected NAME=LO,HI, two numbers, "
                         f"e.g. x=0,10 (values in [LO, HI))") from None
    if not (math.isfinite(low) and math.isfinite(high) and low < high):
        raise UsageError(f"--range {item}: expected LO < HI, two finite "
                         f"numbers")
    return name, (low, high)


@dataclass(frozen=True)
class TensorRun:
    """An input or output as it ran: where it lived, and its digest."""

    placed: placing.Placed
    digest: "inputs.Digest"
    origin: str | None = None       # inputs: "random", a range or the .npy path

    @property
    def info(self) -> TensorInfo:
        return self.placed.info

    @property
    def name(self) -> str:
        return self.info.name

    @property
    def index(self) -> int | None:
        return self.info.index

    @property
    def checksum(self) -> str:
        return self.digest.checksum

    def to_json(self) -> dict[str, Any]:
        d = self.info.to_json()
        d.update(checksum=self.digest.checksum, nan=self.digest.nan,
                 inf=self.digest.inf)
        if self.origin is not None:
            d["source"] = self.origin
        d["layout"] = [p.to_json() for p in self.placed.placements]
        return d


@dataclass(frozen=True)
class RunResult:
    seed: int
    processes: int
    inputs: tuple[TensorRun, ...]
    outputs: tuple[TensorRun, ...]
    checks: tuple[check.OutputCheck, ...] | None = None
    timings: tuple[float, ...] = ()
    saved: str | None = None
    values: tuple[Any, ...] | None = None     # the outputs, when kept
    predicted_s: float | None = None    # the report's simulated step
    # What stood in for the single-device run, and why, where it is not
    # the function itself (the stripped module, for a program's own mesh).
    reference_note: str | None = None

    def predicted_by(self, report) -> "RunResult":
        """The result with `report`'s simulated step beside its timing."""
        step = getattr(report, "step", None)
        if step is None or not self.timings:
            return self
        return dataclasses.replace(self, predicted_s=step.step_s)

    @property
    def error(self) -> float | None:
        """The simulated step's relative error against the measured
        median: positive where it predicts too long a step."""
        if self.predicted_s is None or not self.timings:
            return None
        measured = statistics.median(self.timings)
        return (self.predicted_s - measured) / measured if measured else None

    @property
    def passed(self) -> bool:
        return self.checks is None or all(c.passed for c in self.checks)

    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "seed": self.seed,
            "processes": self.processes,
            "inputs": [t.to_json() for t in self.inputs],
            "outputs": [t.to_json() for t in self.outputs],
            "check": None,
            "timing": None,
        }
        if self.checks is not None:
            d["check"] = {"passed": self.passed,
                          "outputs": [c.to_json() for c in self.checks]}
            if self.reference_note:
                d["check"]["reference_note"] = self.reference_note
        if self.timings:
            d["timing"] = {"runs": len(self.timings),
                           "median_s": statistics.median(self.timings),
                           "min_s": min(self.timings)}
            if self.predicted_s is not None:
                d["timing"]["predicted_s"] = self.predicted_s
                d["timing"]["error"] = self.error
        if self.saved:
            d["saved"] = self.saved
        return d

    def render_text_lines(self, fold: bool = False) -> list[str]:
        """The run's tables; `fold` (a terminal's text) cuts long tables and
        leaves the layouts out."""
        limit = FOLDED_ROWS if fold else None
        lines = ["", f"run: seed {self.seed}, {self.processes} "
                 f"process{'es' if self.processes > 1 else ''}", "", "inputs"]
        lines += table(["name", "type", "sharding", "per device", "source",
                        "checksum"],
                       [[t.name, format_shape(t.info.dtype, t.info.shape),
                         t.info.sharding_label,
                         format_shape(t.info.dtype, t.info.local_shape),
                         t.origin or "", t.checksum] for t in self.inputs[:limit]])
        lines += fold_note(len(self.inputs[:limit]), len(self.inputs), "inputs")
        lines += ["", "outputs"]
        lines += table(["#", "name", "type", "sharding", "per device", "checksum"],
                       [[str(t.index), t.name, format_shape(t.info.dtype, t.info.shape),
                         t.info.sharding_label,
                         format_shape(t.info.dtype, t.info.local_shape),
                         t.checksum] for t in self.outputs[:limit]])
        lines += fold_note(len(self.outputs[:limit]), len(self.outputs), "outputs")
        for t in self.outputs:
            if t.digest.nan or t.digest.inf:
                size = math.prod(t.info.shape)
                what = ", ".join(f"{n} {label}" for n, label in
                                 ((t.digest.nan, "NaN"),
                                  (t.digest.inf, "infinite")) if n)
                lines.append(f"warning: output {t.index} ({t.name}) has {what} "
                             f"of {size} elements")
        if self.checks is not None:
            lines += self._check_lines()
        if self.timings:
            lines += ["", f"timing: {len(self.timings)} runs after a warm-up: "
                      f"median {_ms(statistics.median(self.timings))}, "
                      f"min {_ms(min(self.timings))}"]
            if self.predicted_s is not None:
                lines.append(f"  simulated step {_ms(self.predicted_s)}: "
                             f"{self.error:+.1%} against the median")
        if self.saved:
            lines += ["", f"outputs saved to {self.saved}"]
        tensors = list(self.inputs) + list(self.outputs)
        if fold:
            lines += ["", f"layout: where each of the {len(tensors)} inputs and "
                      f"outputs lives is left out (--full shows it; irshard "
                      f"show draws it)"]
        else:
            lines += ["", "layout"] + layout.layout_lines(tensors)
        return lines

    def _check_lines(self) -> list[str]:
        """The check against one device: its verdict, a row per output,
        the legend and the warnings."""
        verdict = "passed" if self.passed else "FAILED"
        references = sorted({c.reference for c in self.checks})
        lines = ["", f"check against one device: {verdict}"]
        if self.reference_note:
            lines.append(f"  reference: {self.reference_note}")
        rows = []
        for c in self.checks:
            at = (str(list(c.worst_at)) if c.worst_at is not None
                  and c.worst_error else "-")
            if c.not_compared:
                rows.append([str(c.index), c.name, "-", "-", "-",
                             c.reference, "-",
                             f"not compared: {c.not_compared}"])
                continue
            rows.append([str(c.index), c.name, f"{c.worst_error:.3g}",
                         f"{c.worst_allowed:.3g}", at,
                         f"{c.reference} ({c.precision})" if c.precision
                         else c.reference,
                         f"{c.reference_error:.3g}" if c.reference == "float64"
                         else "-",
                         "ok" if c.passed else "MISMATCH"])
        lines += table(["#", "name", "error", "allowed", "at", "reference",
                        "ref error", "result"], rows)
        lines += [f"  {line}" for line in _check_legend(references)]
        lines += [f"  ({p}): the program computes it in {p}: {p} tolerances; "
                  f"a float64 run keeps its {p} casts and is no truth"
                  for p in sorted({c.precision for c in self.checks
                                   if c.precision})]
        lines += [f"warning: {c.nan_warning}" for c in self.checks
                  if c.nan_warning]
        return lines


def _check_legend(references: Sequence[str]) -> list[str]:
    """How the 'allowed' column was computed (docs/guides/running.md)."""
    lines = []
    if "float64" in references:
        lines.append("float64: error against the function run in float64 (t); "
                     "allowed atol + rtol|t| + 4 x ref error")
        lines.append("  (ref error: the single-device result's own worst "
                     "error against t)")
    if "unsharded" in references:
        lines.append("unsharded: error against the single-device result (e); "
                     "allowed atol + rtol (|e| + max|e|) + 4 s")
        lines.append("  (s: how far the element moves when the float inputs "
                     "move by a few units of roundoff; ref error: its largest)")
    return lines


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.3f} ms"


# ---------------------------------------------------------------------------


def run(lowered: StableHLO, compiled: Optimized, options: RunOptions) -> RunResult:
    """Executes the optimized program on its mesh (and checks it)."""
    import jax
    info = compiled.info
    exe = compiled.compiled
    ins, outs = placing.placed(compiled)
    inputs.check_named([d.name for d in info.inputs], options)
    given = inputs.given_values(info.inputs, options)
    arguments, sources, origins = [], [], []
    for i, t in enumerate(ins):
        source, origin = inputs.input_source(i, t.decl, options, given)
        sources.append(source)
        origins.append(origin)
        arguments.append(jax.make_array_from_callback(t.decl.shape, t.sharding,
                                                      source))

    def fresh() -> list[Any]:
        """The arguments for one execution: a donated input's buffer is
        XLA's after a run, so each run gets the same values anew."""
        if not any(d.donated for d in info.inputs):
            return arguments
        return [jax.make_array_from_callback(t.decl.shape, t.sharding, source)
                for t, source in zip(ins, sources)]

    outputs = _execute(exe, fresh(), info.outputs, [t.sharding for t in outs])
    timings = []
    if options.repeat:
        steady = timing.steady(exe, fresh, info, outs)
        timings = timing.time_runs(exe, steady, options.repeat, options.progress)
    if options.trace:
        timing.profile(exe, fresh, options.trace)

    input_runs = [TensorRun(t, inputs.digest(array), origin)
                  for t, array, origin in zip(ins, arguments, origins)]
    output_runs = [TensorRun(t, inputs.digest(array)) for t, array in zip(outs, outputs)]

    values = None
    if options.check or options.save or options.keep_values:
        values = [backend.gather(a) for a in outputs]
    checks = note = None
    if options.check:
        checks, note = check.check(lowered, info, sources, values, options,
                                   lowered.reference)
    saved = None
    if options.save and backend.process_index() == 0:
        _save(options.save, info.outputs, values)
        saved = options.save
    return RunResult(options.seed, jax.process_count(), tuple(input_runs),
                     tuple(output_runs), checks, tuple(timings), saved,
                     tuple(values) if options.keep_values else None,
                     reference_note=note)


def _execute(exe, arguments, decls, shardings):
    import jax
    per_output = backend.execute(exe, arguments)
    return [jax.make_array_from_single_device_arrays(decl.shape, sharding, arrays)
            for decl, sharding, arrays in zip(decls, shardings, per_output)]


def _save(path: str, decls: Sequence[TensorDecl], values) -> None:
    with files.output(path, binary=True, option="--save") as f:
        np.savez(f, **{d.name: v for d, v in zip(decls, values)})


@dataclass(frozen=True)
class RunOutput(Rendered):
    """A run's report as it is written: the compile report with the run's
    section (text: the collectives, then the run's tables, folded on a
    terminal; JSON: the report's object plus `run`; the HTML page), or the
    simulated step as a trace (`compiled`: the executable that ran)."""

    FORMATS = ("text", "json", "html", "trace")
    report: Any
    result: RunResult
    compiled: Any = None
    fold: bool = False
    group_by: str | None = None

    def render_text(self) -> str:
        return "\n".join(render_text_lines(self.report, tensors=False,
                                           fold=self.fold, group_by=self.group_by)
                         + self.result.render_text_lines(self.fold)) + "\n"

    def render_json(self) -> str:
        body = self.report.to_json()
        body["run"] = self.result.to_json()
        return dumps_json(body) + "\n"

    def render_html(self) -> str:
        return htmlreport.render_report(
            self.report, pageparts.page_parts(self.report, self.compiled, self.result),
            self.result)

    def render_trace(self) -> str:
        return output.trace(self.compiled, self.report)
