"""One function per command, under the command line and the Python API
alike. Each takes a resolved program (the `stablehlo` stage: from a file by
`frontend.load`, from a function by `irshard.api`) or a path, and typed
options, and returns a value that writes its own JSON and text. The command
line parses its arguments into those options and prints what comes back
(`commands`); the API checks its arguments and calls the same function.

    compile      compile_program(lowered, ReportOptions)
    run          run_program(lowered, RunOptions, ReportOptions)
    show         show_program(lowered)
    collectives  collectives_of(path, stage, mesh)
    diff         diff_paths(a, b, module, stage)
    suggest      suggest_program(lowered, rules, command)
    search       searching.search_program(programs, placement, SearchOptions)
    devices      devices_of(count, cluster, platform)
    calibrate    calibrate_devices(mesh, sizes, repeats, platform)
    opt          ir.opt.opt
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterator, Sequence

from irshard import REPORT_STAGES, STAGES
from irshard.core import collector
from irshard.core.errors import UsageError
from irshard.core.rendering import Rendered
from irshard.core.specs import MeshSpec


def _quiet(_: str) -> None:
    pass


@dataclass(frozen=True)
class ReportOptions:
    """What `compile` and `run` report: the stage the report reads
    (`optimized`, what runs, or `partitioned`), each collective's why
    (`explain`), the IR of the stages asked for (`emits`, with source
    locations under `debug_info`), the budgets the report is held to
    (`budget.Budget`s)."""

    stage: str = "optimized"
    explain: bool = False
    # Each cause `explain` names confirmed by a recompile without it.
    verify: bool = False
    # How many of those recompiles run at once.
    jobs: int = 1
    emits: tuple[str, ...] = ()
    debug_info: bool = False
    budgets: tuple[Any, ...] = ()

    def __post_init__(self) -> None:
        for stage in self.emits:
            if stage not in STAGES:
                raise UsageError(f"unknown stage '{stage}'; stages are "
                                 f"{', '.join(STAGES)}")
        if self.stage not in REPORT_STAGES:
            what = ("unknown stage" if self.stage not in STAGES
                    else "the report reads HLO, not stage")
            raise UsageError(f"{what} '{self.stage}'; --stage is one of "
                             f"{', '.join(REPORT_STAGES)}")
        # In the pipeline's order, whatever order they were asked in.
        object.__setattr__(self, "emits",
                           tuple(s for s in STAGES if s in self.emits))


@dataclass(frozen=True)
class CompileOutcome:
    """What `compile` made: the compiled program (None when only MLIR
    stages were asked for), its report (None when only IR was asked for
    and no budget), the IR of the stages asked for, and the budget error
    to end with."""

    compiled: Any
    report: Any
    texts: tuple[tuple[str, str], ...] = ()
    breach: Exception | None = None

    def ir_text(self) -> str:
        from irshard.stages import output
        return output.join_stages(self.texts)


@dataclass(frozen=True)
class RunOutcome(CompileOutcome):
    """What `run` made: `compile`'s, and how the program ran (`result`,
    each output checked against one device where asked)."""

    result: Any = None

    def failure(self) -> Exception | None:
        """The error to end with: a check's mismatch, else a budget's."""
        from irshard.running import check
        return check.failure(self.result.checks) or self.breach


def held_to(report, budgets: Sequence[Any]):
    """The report with its budgets' outcomes (JSON `budgets`), and the
    error to end with when one is exceeded."""
    from irshard.reporting import budget
    if not budgets:
        return report, None
    outcomes = budget.evaluate(report, budgets)
    return budget.recorded(report, outcomes), budget.breach_error(outcomes)


@collector.sparing
def compile_program(lowered, options: ReportOptions = ReportOptions(), *,
                    note: Callable[[str], None] = _quiet) -> CompileOutcome:
    """`irshard compile`: the program partitioned and compiled, the report
    of the stage read, held to its budgets; propagation's notes to `note`."""
    from irshard.stages import output
    texts, compiled = output.emit(lowered, options.emits, options.stage,
                                  options.debug_info, explain=options.explain,
                                  note=note)
    if options.emits and not options.budgets:
        return CompileOutcome(compiled, None, tuple(texts))
    report = output.report(lowered, compiled, options.stage, options.explain,
                           options.verify, options.jobs)
    report, breach = held_to(report, options.budgets)
    return CompileOutcome(compiled, report, tuple(texts), breach)


@collector.sparing
def run_program(lowered, run, options: ReportOptions = ReportOptions(), *,
                note: Callable[[str], None] = _quiet,
                stage: Callable[[str], None] = _quiet) -> RunOutcome:
    """`irshard run`: the program compiled as `compile_program` compiles it,
    run on its mesh with `run` (`execution.RunOptions`), its report with the
    run's predicted times; `stage` hears `compiling`, `running` and
    `writing` as each starts."""
    from irshard.running import execution
    from irshard.stages import output
    stage("compiling")
    texts, compiled = output.emit(lowered, options.emits, options.stage,
                                  options.debug_info, compile_anyway=True,
                                  explain=options.explain,
                                  note=note)
    stage("running")
    result = execution.run(lowered, compiled, run)
    stage("writing")
    report = output.report(lowered, compiled, options.stage, options.explain,
                           options.verify, options.jobs)
    result = result.predicted_by(report)
    report, breach = held_to(report, options.budgets)
    return RunOutcome(compiled, report, tuple(texts), breach, result)


@dataclass(frozen=True)
class ProgramLayout(Rendered):
    """`irshard show`: where every input and output of the compiled program
    lives (`stages.placing.Placed`: its report row, its JSON sharding and
    which device holds which block)."""

    info: Any
    inputs: tuple[Any, ...]
    outputs: tuple[Any, ...]

    def render_text(self) -> str:
        from irshard.reporting import layout
        return layout.show_text(self.info, self.inputs, self.outputs)

    def render_json(self) -> str:
        from irshard.reporting import layout
        return layout.show_json(self.info, self.inputs, self.outputs)


def show_program(lowered) -> ProgramLayout:
    """`irshard show`: the program compiled, its inputs and outputs placed
    on its devices, nothing run."""
    from irshard.stages import placing
    compiled = lowered.compile()
    inputs, outputs = placing.placed(compiled)
    return ProgramLayout(compiled.info, tuple(inputs), tuple(outputs))


@dataclass(frozen=True)
class ModuleReports(Rendered):
    """`irshard collectives`: the report of each module of an HLO file, a
    serialized module or an XLA dump directory, and the modules left out
    for running on another number of devices than the mesh asked for; the
    text sums the collectives by `group_by` too."""

    FORMATS = ("text", "json", "html")
    path: str
    stage: str
    mesh: MeshSpec | None
    reports: tuple[Any, ...]
    skipped: tuple[tuple[str, int], ...] = ()
    group_by: str | None = None

    def pieces_text(self) -> Iterator[str]:
        from irshard.stages import output
        return output.modules_text(self)

    def render_text(self) -> str:
        return "".join(self.pieces_text())

    def pieces_json(self) -> Iterator[str]:
        from irshard.stages import output
        return output.modules_json(self)

    def render_json(self) -> str:
        return "".join(self.pieces_json())

    def render_html(self) -> str:
        from irshard.stages import output
        return output.modules_html(self)


def collectives_of(path: str, stage: str = "optimized",
                   mesh: MeshSpec | None = None) -> ModuleReports:
    """`irshard collectives PATH`: the modules' reports (those that run on
    `mesh`'s device count, when given)."""
    from irshard import backend
    from irshard.collectives import dumps
    if stage not in REPORT_STAGES:
        raise UsageError(f"unknown stage '{stage}'; --stage is one of "
                         f"{', '.join(REPORT_STAGES)}")
    backend.configure(1, "cpu")
    reports, skipped = dumps.reports(path, stage, mesh)
    return ModuleReports(path, stage, mesh, tuple(reports), tuple(skipped))


def diff_paths(a: str, b: str, module: str | None = None,
               stage: str = "optimized"):
    """`irshard diff`: two reports (JSON reports, HLO files or XLA dump
    folders) compared by source line and kind."""
    from irshard.collectives import dumps
    from irshard.reporting import diff
    return diff.compare(dumps.load_side(a, module, stage),
                        dumps.load_side(b, module, stage))


def suggest_program(lowered, shards: Sequence[str], out_shards: Sequence[str],
                    command: Sequence[str], *, is_module: bool = False,
                    top: int = 3, max_candidates: int = 16,
                    jobs: int | str = "auto"):
    """`irshard suggest`: changes that would remove the program's costliest
    collectives, each compiled (`strategy.suggest.suggest_for`); `shards`
    and `out_shards` are the rules the program was made with, `command` the
    command line that makes it (empty from Python: every candidate is
    compiled in this process)."""
    from irshard.strategy import suggest
    options = suggest.Options(shards=tuple(shards), out_shards=tuple(out_shards),
                              is_module=is_module)
    return suggest.suggest_for(lowered, options, tuple(command), top=top,
                               max_candidates=max_candidates,
                               jobs=jobs if command else 1)


@dataclass(frozen=True)
class DeviceListing(Rendered):
    """`irshard devices`: the platform, each process's devices, the list
    (as JAX lists them)."""

    listing: dict[str, Any]

    def render_text(self) -> str:
        from irshard.reporting import layout
        return layout.devices_text(self.listing)

    def render_json(self) -> str:
        from irshard.reporting.writer import dumps_json
        return dumps_json(self.listing) + "\n"


def devices_of(count: int, cluster=None, platform: str = "cpu",
               timeout: float | None = None) -> DeviceListing | None:
    """`irshard devices`: the devices of this process (`count` simulated
    ones on a CPU) and, in a run of several, the others' (None in a process
    other than the first, which reports)."""
    from irshard.running import launch
    found = launch.devices(count, cluster, platform, timeout)
    return DeviceListing(found) if found is not None else None


@dataclass(frozen=True)
class Calibration(Rendered):
    """`irshard calibrate`: each collective kind measured on the devices
    present, the link model fitted with its error on held-out sizes, and
    the compute rates (`measuring.calibrate.calibrate`'s result)."""

    result: dict[str, Any]

    def render_text(self) -> str:
        from irshard.measuring import calibrate
        return calibrate.render_text(self.result)

    def render_json(self) -> str:
        from irshard.reporting.writer import dumps_json
        return dumps_json(self.result) + "\n"

    def profile_json(self) -> str:
        """The fitted profile, as `--profile PATH` reads it back."""
        from irshard.measuring import calibrate
        return calibrate.profile_json(self.result)


def calibrate_devices(mesh: MeshSpec, sizes: Sequence[int] | None = None,
                      repeats: int = 5, platform: str = "cpu", *,
                      note: Callable[[str], None] = _quiet) -> Calibration:
    """`irshard calibrate`: the plan checked (its length told to `note`
    when over a minute), then measured and fitted."""
    from irshard.measuring import calibrate
    return Calibration(calibrate.calibrate_host(mesh, sizes, repeats, note=note,
                                                platform=platform))
