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
    search       search_program(programs, placement, SearchOptions)
    devices      devices_of(count, cluster, platform)
    calibrate    calibrate_devices(mesh, sizes, repeats, platform)
    opt          ir.opt.opt
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterator, Sequence

from irshard import REPORT_STAGES, STAGES
from irshard.core import collector
from irshard.core.errors import IrshardError, UsageError
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
                           options.verify)
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
                           options.verify)
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
class SearchOptions:
    """How a search runs: the devices (or the target's) and the mesh axes
    to factor them over, the wall-clock budget and the most candidates to
    compile, the memory limit (bytes per device; the target's capacity
    where None), how many compiles run at once (`jobs`; None: half the
    cores, or on a Ray cluster as many as it has CPUs) and on which Ray
    cluster (`ray`: an address, or `local`), where compiled candidates are
    cached (None: nowhere), and whether a progress line is drawn."""

    devices: int | None = None
    axes: tuple[str, ...] = ("data", "fsdp", "tensor")
    budget_s: float = 600.0
    max_candidates: int | None = None
    memory_limit: int | None = None
    jobs: int | None = 1
    ray: str | None = None
    cache_dir: str | None = None
    progress: bool = False


def knob_combinations(knob_space: Sequence[tuple[str, Sequence[Any]]]
                      ) -> list[tuple[tuple[str, Any], ...]]:
    """Every combination of the knobs' values, the first knob's slowest."""
    import itertools
    names = [k for k, _ in knob_space]
    return [tuple(zip(names, values))
            for values in itertools.product(*[v for _, v in knob_space])]


def search_program(programs, placement, options: SearchOptions, *,
                   command: Sequence[str], compile_change=None,
                   fixed_mesh: bool = False, factory: str | None = None,
                   knob_space: Sequence[tuple[str, Sequence[Any]]] = (),
                   cache_salt: str = "", per: str | None = None, hosting=None):
    """`irshard search`: the strategies (and knobs) for a loaded program,
    compiled by the decision engine as `irshard compile COMMAND FLAGS` in
    processes of their own (or on a Ray cluster), or, where
    `compile_change(change, explain)` is given (the Python API), in this
    process. `programs` are `(knobs, Program or why the factory rejects
    them)` for each knob combination (one, with no knobs, for a program as
    it is); their leaves give the rules. `per` names the knob whose value
    is what a step does (candidates are ranked by the step per unit of
    it); `hosting` (`hosting.Hosting`) traces the programs again for
    their bounds (none where None)."""
    from irshard.strategy import compilers, search
    from irshard.strategy import rules as rulesets
    target = placement.target
    on_device = target.kind != "cpu"
    devices = search.device_count(target, options.devices)
    space = search.Space(
        tuple((knobs, found if isinstance(found, str) else
               None if fixed_mesh else rulesets.Structure(search.leaves_of(found)))
              for knobs, found in programs),
        devices, tuple(options.axes),
        placement.profile.hbm_bytes if on_device else None, search.element_bytes)
    judge = (search.work_of(per),
             _bounds(programs, hosting, devices) if hosting is not None else None)
    if options.ray is not None and compile_change is None:
        # Ray's processes are stopped as an interruption unwinds, not left.
        from irshard.core import interrupts
        with interrupts.unwinding():
            from irshard.strategy import raycompile
            source = next(p for _, p in programs if not isinstance(p, str)).source
            compiler = raycompile.RayCluster(command, options.ray, source,
                                             options.jobs)
            try:
                return _searched(space, compiler, _explainer(compiler, command),
                                 options, command, cache_salt, target, factory,
                                 knob_space, per, judge)
            finally:
                compiler.close()
    if compile_change is not None:
        compiler: compilers.Compiler = compilers.Calls(compile_change)
        explain = lambda o: compile_change(o.change, True)  # noqa: E731
    else:
        compiler = compilers.Processes(command, options.jobs or compilers.default_jobs())
        explain = _explainer(compiler, command)
    return _searched(space, compiler, explain, options, command, cache_salt,
                     target, factory, knob_space, per, judge)


def _bounds(programs, hosting, devices: int):
    """Each knob combination's `engine.Bound`, traced again when first
    asked (None where the target has no rates or the tracing fails)."""
    from irshard.backend import flops
    from irshard.strategy import engine
    from irshard.timemodel import rates as compute_rates
    found = compute_rates.rates(hosting.placement, devices)
    if found is None:
        return None
    rate = found.fastest_products(hosting.placement.profile.peak_flops)
    loaded = {knobs: p for knobs, p in programs if not isinstance(p, str)}
    known: dict[Any, Any] = {}

    def bound(change):
        if change.knobs not in known:
            known[change.knobs] = None
            program = loaded.get(change.knobs)
            if program is not None:
                try:
                    with hosting.visible():
                        stage = hosting.trace(program)
                    known[change.knobs] = engine.Bound(
                        flops.product_flops(stage.module), devices, rate)
                except IrshardError:
                    pass
        return known[change.knobs]
    return bound


def _searched(space, compiler, explain, options: SearchOptions,
              command: Sequence[str], cache_salt: str, target, factory,
              knob_space, per=None, judge=(None, None)):
    """The search of `space` by the decision engine over `compiler`."""
    import time

    from irshard.strategy import compilers, engine, search
    cache = compilers.Cache(options.cache_dir, cache_salt) \
        if options.cache_dir is not None else None
    progress = engine.Progress(0, compiler.jobs, options.progress)
    budget_s = min(options.budget_s, search.MAX_BUDGET_S)
    decider = engine.Engine(
        compiler, cache=cache, argv=lambda change: [*command, *change.flags()],
        limit=options.memory_limit, deadline=time.monotonic() + budget_s,
        max_candidates=options.max_candidates,
        same=search.same_program(space.structure), progress=progress,
        work=judge[0], bound=judge[1])
    return search.search(space, decider, command=command,
                         target=target.text if target.kind != "cpu" else "cpu",
                         budget_s=budget_s, explain=explain, factory=factory,
                         knob_space=knob_space, per=per)


def _explainer(compiler, command: Sequence[str]):
    """The report of an outcome's change with each collective's why: its
    command compiled again with `--explain`."""
    from irshard.reporting.report import CollectiveReport

    def explain(outcome):
        found = compiler.compile_all([(0, [*outcome.change.flags(), "--explain"])])
        return found[0] if isinstance(found[0], CollectiveReport) else None
    return explain


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
