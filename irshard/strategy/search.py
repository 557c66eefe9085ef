"""`irshard search`: the sharding strategy (and, for a program factory, the
knobs) for a program and a target, found by compiling the candidates for
real and judging them by the one verdict (`verdict`).

Candidates are mesh shapes that factor the device count over the named
axes (`data`, `fsdp`, `tensor` by default; `sequence`, `expert` when
asked), each with the rules its axes' roles give the program's leaves
(`rules.build_rules`): pure data parallel, FSDP (with each weight sharded
over its model dimension, or over its other one), Megatron tensor
parallel, FSDP+TP (the canonical strategies), then their combinations
(`candidates`), then local moves from `suggest`'s explanations of the best
so far; a factory's knob combinations multiply them, or stand alone where
the mesh is fixed. A candidate that cannot gain anything (an axis that
shards nothing), or whose arguments alone exceed a device's memory, is
pruned before compiling; two that shard every leaf alike are one. The rest
are compiled by the decision engine (`engine`: in this process, in
processes of their own, or on a Ray cluster), cached by what decides the
compile, within a wall-clock budget and a candidate limit. Every ranked
number is from a compile: the simulated step, the memory peak against the
limit, the bytes the collectives move per step.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Any, Sequence

from irshard.core.errors import BackendError, UsageError
from irshard.strategy import rules as rulesets
from irshard.strategy.candidates import candidates
from irshard.core.knobs import knob_text
from irshard.strategy.change import Change
from irshard.strategy.engine import Engine, Outcome, Progress, same_error
from irshard.strategy.searchresult import SearchResult, best_of

# The longest budget a search takes (a longer one is a week: JSON has no
# Infinity).
MAX_BUDGET_S = 7 * 24 * 3600.0


# ---------------------------------------------------------------------------
# The search


@dataclass(frozen=True)
class Space:
    """What a search ranges over: for each of the factory's knob
    combinations (one, empty, for a program as it is) the program's leaves
    (for the rules; None where the mesh and rules are fixed), or why the
    factory rejects the combination; the devices and the mesh axes to
    factor them over; and the capacity that prunes candidates whose
    arguments alone exceed it."""

    programs: tuple[tuple[tuple[tuple[str, Any], ...],
                          "rulesets.Structure | str | None"], ...]
    devices: int
    axes: tuple[str, ...]
    capacity: int | None = None
    element_bytes: Any = None

    @property
    def structure(self) -> rulesets.Structure | None:
        """The first valid combination's leaves (what tells two rule sets
        apart)."""
        return next((s for _, s in self.programs
                     if isinstance(s, rulesets.Structure)), None)


def _strategies(space: Space, structure) -> tuple[list[Change], list[Outcome]]:
    """The mesh-and-rules candidates (one, as given, where the mesh is
    fixed) and those pruned before compiling."""
    if structure is None:
        return [Change("as given", origin="canonical")], []
    kept, pruned = candidates(structure, space.devices, space.axes,
                              space.capacity, space.element_bytes)
    return kept, [Outcome(p.change, "pruned", reason=p.reason) for p in pruned]


def _with_knobs(change: Change, knobs: tuple[tuple[str, Any], ...]) -> Change:
    if not knobs:
        return change
    text = " ".join(f"{k}={knob_text(v)}" for k, v in knobs)
    description = text if change.description == "as given" \
        else f"{change.description}, {text}"
    return replace(change, knobs=knobs, description=description,
                   origin="knobs" if change.origin == "canonical" and
                   change.mesh is None else change.origin)


def same_program(structure: rulesets.Structure | None):
    """Which candidates are one program: the same mesh, knobs and
    constraints, and the same sharding of every leaf, whatever rules say
    it."""
    def key(change: Change) -> Any:
        specs = tuple(sorted(rulesets.specs_of(structure, change.rules).items())) \
            if structure is not None and change.rules else change.rules
        return (change.mesh, specs, change.overrides, change.outputs,
                change.constraints, tuple((k, repr(v)) for k, v in change.knobs))
    return key


def moves(best: Outcome, explained, limit: int) -> list[Change]:
    """Local moves from `suggest`'s explanations of `best`'s collectives
    (`explained`, its report with each collective's why): an input sharded
    as the collective's reader needs it, as a rule for its path ahead of the
    others, or an op constrained at its line."""
    from irshard.core.specs import parse_mesh
    from irshard.strategy import suggest
    change = best.change
    options = suggest.Options(shards=tuple(f"{p}={s}" for p, s in change.rules))
    mesh = parse_mesh(change.mesh_text) if change.mesh else explained.mesh
    found = suggest.candidates(explained, mesh, options, top=3, limit=4 * limit)
    names = [t.name for t in explained.inputs]
    result = []
    for proposed in found:
        if proposed.outputs or not (proposed.inputs or proposed.constraints):
            continue
        added = tuple((names[i], spec) for i, spec in proposed.inputs if i < len(names))
        rules = added + tuple(r for r in change.rules
                              if r[0] not in {p for p, _ in added})
        constraints = change.constraints + tuple(
            c for c in proposed.constraints if c not in change.constraints)
        result.append(replace(change, rules=rules, constraints=constraints,
                              origin="move", label=f"{change.name}, move "
                              f"{len(result) + 1}",
                              description=f"{change.name}, then "
                                          f"{proposed.description}"))
        if len(result) >= limit:
            break
    return result


def run_search(space: Space, engine: Engine, *, move_rounds: int = 2,
               moves_per_round: int = 4,
               explain=None) -> list[Outcome]:
    """Every candidate's outcome, in the order considered: the strategies
    times the knobs, then local moves around the best (`explain(outcome)`
    gives its report with each collective's why, or None)."""
    outcomes: list[Outcome] = []
    todo: list[Change] = []
    for knobs, structure in space.programs:
        if isinstance(structure, str):
            # The factory rejects these knobs: nothing to compile.
            outcomes.append(Outcome(_with_knobs(Change("as given"), knobs),
                                    "invalid", reason=structure))
            continue
        strategies, pruned = _strategies(space, structure)
        outcomes += [replace(o, change=_with_knobs(o.change, knobs)) for o in pruned]
        todo += [_with_knobs(s, knobs) for s in strategies]
    # The knob combinations whose bound is least first: the likeliest to
    # win, and what lets the bound prune the rest.
    todo.sort(key=engine.least)
    if engine.progress is not None:
        engine.progress.total = len(todo)
        engine.progress.update()
    outcomes = outcomes + engine.evaluate(todo)
    for _ in range(move_rounds if explain is not None else 0):
        best = best_of(outcomes)
        if best is None or time.monotonic() >= engine.deadline:
            break
        explained = explain(best)
        if explained is None:
            break
        found = moves(best, explained, moves_per_round)
        if not found:
            break
        if engine.progress is not None:
            engine.progress.total += len(found)
        more = engine.evaluate(found)
        outcomes += more
        if best_of(outcomes) is best:
            break
    return outcomes


def check_some_compiled(outcomes: Sequence[Outcome]) -> None:
    """A search whose every compile failed (the program's own error, most
    often, the same for every candidate) is that error, not a report of
    failures."""
    found = same_error(outcomes)
    if found is not None:
        message, code = found
        raise (UsageError if code == 2 else BackendError)(f"search: {message}")


# ---------------------------------------------------------------------------
# Options


def parse_duration(text: str) -> float:
    """`--budget-time`: seconds, or with a unit: 90s, 10m, 1h; at most
    `MAX_BUDGET_S`."""
    import re
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(s|m|h)?\s*", text or "")
    seconds = float(m.group(1)) * {"s": 1, None: 1, "m": 60, "h": 3600}[m.group(2)] \
        if m is not None else 0.0
    if not 0 < seconds <= MAX_BUDGET_S:
        shown = text if len(text or "") <= 40 else text[:37] + "..."
        raise UsageError(f"--budget-time '{shown}': give a positive duration "
                         f"up to a week ({MAX_BUDGET_S:.0f} s), such as 600, "
                         f"90s, 10m or 1h")
    return seconds


def work_of(per: str | None):
    """What a candidate's step does: the value of knob `per` (1 where
    None)."""
    def work(change: Change) -> float:
        if per is None:
            return 1.0
        return float(dict(change.knobs)[per])
    return work


def check_per(per: str | None, knob_space: Sequence[tuple[str, Sequence[Any]]],
              option: str = "--per") -> None:
    """`per` names a searched knob whose every value is a positive number
    (`option` says how it was given: `--per`, or the API's `per=`)."""
    if per is None:
        return
    values = dict(knob_space)
    api = option.endswith("=")
    given = f"{option}{per!r}" if api else f"{option} {per}"
    if per not in values:
        searched = ", ".join(values) or "none"
        how = f"knobs={{{per!r}: [...]}}" if api else f"--knob {per}=V1,V2,..."
        raise UsageError(f"{given}: rank per a knob that is searched "
                         f"({how}); searched: {searched}")
    wrong = [v for v in values[per] if isinstance(v, bool)
             or not isinstance(v, (int, float)) or not v > 0]
    if wrong:
        raise UsageError(f"{given}: its values must be positive numbers "
                         f"(a step's work: examples, tokens); not {wrong[0]!r}")


def leaves_of(program) -> list[rulesets.LeafShape]:
    return [rulesets.LeafShape(leaf.path, tuple(leaf.type.shape), leaf.type.dtype.name)
            for leaf in program.inputs]


def element_bytes(name: str) -> int:
    from irshard.core.dtypes import lookup_dtype
    dtype = lookup_dtype(name)
    return dtype.itemsize if dtype is not None else 4


def device_count(target, devices: int | None, option: str = "--devices") -> int:
    """The devices searched for: the target's, or `devices` CPU devices."""
    count = target.num_devices
    if count is not None and devices is not None and devices != count:
        raise UsageError(f"{option} {devices} disagrees with target "
                         f"{target.text}, which has {count} devices; give one")
    count = count if count is not None else devices
    if count is None:
        raise UsageError(f"give {option} N (simulated CPU devices) or a target "
                         f"(e.g. tpu-v5e:4x4) to search for")
    return count


def search(space: Space, engine: Engine, *, command: Sequence[str], target: str,
           budget_s: float, explain=None, factory: str | None = None,
           knob_space: Sequence[tuple[str, Sequence[Any]]] = (),
           per: str | None = None) -> SearchResult:
    """The search over `space`, compiled by `engine`; `budget_s` (what it
    was given, a week at most) is reported."""
    budget_s = min(budget_s, MAX_BUDGET_S)
    started = time.monotonic()
    try:
        outcomes = run_search(space, engine, explain=explain)
    finally:
        if engine.progress is not None:
            engine.progress.close()
    check_some_compiled(outcomes)
    return SearchResult(tuple(command), target, space.devices, space.axes,
                        tuple(outcomes), time.monotonic() - started, budget_s,
                        factory, tuple((k, tuple(v)) for k, v in knob_space),
                        engine.limit, per,
                        (engine.undercut,) if engine.undercut else ())


def progress(total: int, jobs: int, enabled: bool) -> Progress:
    return Progress(total, jobs, enabled)
