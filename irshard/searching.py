"""`irshard search` as one library call: the strategies (and a factory's
knobs) for a loaded program, compiled by the decision engine (in this
process, in processes of their own, or on a Ray cluster) and ranked by the
one verdict; what the command line and `irshard.search` both call."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from irshard.core.errors import IrshardError


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
    try:
        return _searched(space, compiler, explain, options, command, cache_salt,
                         target, factory, knob_space, per, judge)
    finally:
        compiler.close()


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
    if cache is not None and explain is not None:
        explain = _cached_explain(explain, cache, command)
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


def _cached_explain(explain, cache, command: Sequence[str]):
    """`explain` answered from the cache where it holds the outcome's
    explained report (kept under its command with `--explain`): the same
    search again compiles nothing."""
    def cached(outcome):
        argv = [*command, *outcome.change.flags(), "--explain"]
        hit = cache.get(argv)
        if hit is None:
            hit = explain(outcome)
            if hit is not None:
                cache.put(argv, hit)
        return hit
    return cached


def _explainer(compiler, command: Sequence[str]):
    """The report of an outcome's change with each collective's why: its
    command compiled again with `--explain`."""
    from irshard.reporting.report import CollectiveReport

    def explain(outcome):
        found = compiler.compile_all([(0, [*outcome.change.flags(), "--explain"])])
        return found[0] if isinstance(found[0], CollectiveReport) else None
    return explain
