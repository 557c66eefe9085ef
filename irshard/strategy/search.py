"""`irshard search`: the sharding strategy for a program and a target,
found by compiling the candidates for real.

Candidates are mesh shapes that factor the device count over the named
axes (`data`, `fsdp`, `tensor` by default; `sequence`, `expert` when
asked), each with the rules its axes' roles give the program's leaves
(`rules.build_rules`): pure data parallel, FSDP (with each weight sharded
over its model dimension, or over its other one), Megatron tensor
parallel, FSDP+TP (the canonical strategies), then their combinations
(`candidates`), then local moves from `suggest`'s explanations of the best
so far. A candidate that cannot gain anything (an
axis that shards nothing), or whose arguments alone exceed a device's
memory, is pruned before compiling; the rest are compiled as `irshard
compile` compiles them (in this process, or in `jobs` processes running
that command), cached by candidate, within a wall-clock budget. Every
ranked number is from a compile: the simulated step, memory per device
against capacity, collective bytes per step.
"""

from __future__ import annotations

import math
import shlex
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from irshard.core.errors import BackendError, UsageError
from irshard.reporting.text import human_bytes, human_time, table
from irshard.reporting.writer import dumps_json
from irshard.strategy import rules as rulesets
from irshard.strategy.candidates import Candidate, Pruned, candidates
from irshard.strategy.compiling import Cache, Processes

SCHEMA = 1


# ---------------------------------------------------------------------------
# Outcomes


@dataclass(frozen=True)
class SearchOutcome:
    candidate: Candidate
    status: str                      # ok, does not fit, failed, pruned, skipped
    report: dict[str, Any] | None = None
    reason: str | None = None
    seconds: float = 0.0             # the compile's wall time (0: cached)
    cached: bool = False

    @property
    def numbers(self) -> dict[str, Any]:
        """The ranked numbers, all from the compile's report."""
        if self.report is None:
            return {}
        from irshard.reporting.diff import Side
        report = self.report
        step = report.get("step") or {}
        totals = Side("", report).totals()
        memory = report.get("memory") or {}
        return {"step_s": step.get("step_s"),
                "compute_s": step.get("compute_s"),
                "exposed_comm_s": step.get("exposed_comm_s"),
                "memory_bytes": totals.get("memory_bytes"),
                "capacity_bytes": memory.get("capacity_bytes"),
                "fits": memory.get("fits"),
                "bytes_per_step": totals["bytes_per_run"],
                "collectives": totals["count"]}

    @property
    def fits(self) -> bool:
        return self.status == "ok" and self.numbers.get("fits") is not False


def _rank_key(outcome: SearchOutcome, order: int) -> tuple[Any, ...]:
    n = outcome.numbers
    step = n.get("step_s")
    return (0 if outcome.fits else 1,
            step if step is not None else math.inf,
            n.get("memory_bytes") or 0, n.get("bytes_per_step") or 0, order)


def ranked(outcomes: Sequence[SearchOutcome]) -> list[SearchOutcome]:
    """The compiled outcomes, best first: those that fit by simulated
    step (then memory, bytes, the order tried), then those that do not."""
    order = {id(o): i for i, o in enumerate(outcomes)}
    return sorted((o for o in outcomes if o.report is not None),
                  key=lambda o: _rank_key(o, order[id(o)]))


def _outcome_of(candidate: Candidate, result: Any, seconds: float,
                cached: bool = False) -> SearchOutcome:
    if isinstance(result, dict):
        fits = (result.get("memory") or {}).get("fits")
        return SearchOutcome(candidate, "does not fit" if fits is False else "ok",
                             result, None, seconds, cached)
    reason = result if isinstance(result, str) else str(result)
    status = "does not fit" if "RESOURCE_EXHAUSTED" in reason \
        or "Ran out of memory" in reason else "failed"
    return SearchOutcome(candidate, status, None, reason, seconds, cached)


# ---------------------------------------------------------------------------
# The search


@dataclass
class Progress:
    """A progress line on a terminal's stderr."""

    total: int
    enabled: bool
    done: int = 0
    best: str = ""

    def update(self, outcome: SearchOutcome | None = None,
               best: SearchOutcome | None = None) -> None:
        if outcome is not None:
            self.done += 1
        if best is not None:
            self.best = (f", best {best.candidate.strategy} "
                         f"{best.candidate.mesh_text} "
                         f"{human_time(best.numbers['step_s'])}")
        if not self.enabled:
            return
        width = 24
        filled = width * self.done // max(1, self.total)
        sys.stderr.write(f"\rirshard: search [{'#' * filled}{'.' * (width - filled)}] "
                         f"{self.done}/{self.total} compiled{self.best}\x1b[K")
        sys.stderr.flush()

    def close(self) -> None:
        if self.enabled:
            sys.stderr.write("\r\x1b[K")
            sys.stderr.flush()


@dataclass
class Search:
    """The search's state: what was tried, in the order tried."""

    structure: rulesets.Structure
    compile_one: Callable[[Candidate, bool], Any] | None
    processes: Processes | None
    cache: Cache
    deadline: float
    progress: Progress
    outcomes: list[SearchOutcome] = field(default_factory=list)
    explained: dict[tuple[Any, ...], dict[str, Any]] = field(default_factory=dict)

    def _finish(self, candidate: Candidate, explain: bool, result: Any,
                seconds: float, cached: bool = False) -> None:
        if not cached and isinstance(result, dict):   # a failure is tried again
            self.cache.put(self._cache_key(candidate, explain), result)
        if explain:
            if isinstance(result, dict):
                self.explained[candidate.key] = result
            return
        outcome = _outcome_of(candidate, result, seconds, cached)
        self.outcomes.append(outcome)
        self.progress.update(outcome, self.best())

    def _cache_key(self, candidate: Candidate, explain: bool) -> list[str]:
        return candidate.flags() + (["--explain"] if explain else [])

    def compile(self, work: Sequence[Candidate], explain: bool = False) -> list[Candidate]:
        """Compiles what is not cached; returns what the deadline left."""
        todo = []
        for candidate in work:
            hit = self.cache.get(self._cache_key(candidate, explain))
            if hit is not None:
                self._finish(candidate, explain, hit, 0.0, cached=True)
            else:
                todo.append(candidate)
        if self.processes is not None:
            return [c for c, _ in self.processes.run(
                [((c, explain), self._cache_key(c, explain)) for c in todo],
                self.deadline,
                lambda key, result, seconds: self._finish(*key, result, seconds))]
        left = []
        for candidate in todo:
            # A compile here cannot be stopped: one that would not finish
            # in time (as long as the typical compile so far) is not begun.
            if time.monotonic() + self.typical_compile_s() >= self.deadline:
                left.append(candidate)
                continue
            started = time.monotonic()
            result = self.compile_one(candidate, explain)
            self._finish(candidate, explain, result, time.monotonic() - started)
        return left

    def typical_compile_s(self) -> float:
        """The median wall time of the compiles that produced a report."""
        times = sorted(o.seconds for o in self.outcomes
                       if o.report is not None and not o.cached)
        return times[len(times) // 2] if times else 0.0

    def ranked(self) -> list[SearchOutcome]:
        return ranked(self.outcomes)

    def best(self) -> SearchOutcome | None:
        ranked = self.ranked()
        return ranked[0] if ranked and ranked[0].fits else None


def moves(best: SearchOutcome, explained: dict[str, Any], limit: int) -> list[Candidate]:
    """Local moves from `suggest`'s explanations of `best`'s collectives:
    an input sharded as the collective's reader needs it, as a rule for its
    path ahead of the others."""
    from irshard.core.specs import parse_mesh
    from irshard.strategy import suggest
    candidate = best.candidate
    options = suggest.Options(shards=tuple(f"{p}={s}" for p, s in candidate.rules))
    found = suggest.candidates(explained, parse_mesh(candidate.mesh_text), options,
                               top=3, limit=4 * limit)
    inputs = explained.get("inputs", [])
    result = []
    for change in found:
        if change.outputs or not (change.inputs or change.constraints):
            continue
        added = tuple((inputs[i]["name"], spec) for i, spec in change.inputs
                      if i < len(inputs))
        rules = added + tuple(r for r in candidate.rules
                              if r[0] not in {p for p, _ in added})
        constraints = candidate.constraints + tuple(
            c for c in change.constraints if c not in candidate.constraints)
        result.append(Candidate(candidate.strategy, candidate.mesh, rules, "move",
                                change.description, constraints))
        if len(result) >= limit:
            break
    return result


@dataclass(frozen=True)
class SearchResult:
    command: tuple[str, ...]            # the program's options, as compile takes them
    target: str
    devices: int
    axes: tuple[str, ...]
    outcomes: tuple[SearchOutcome, ...]       # compiled, in the order compiled
    pruned: tuple[Pruned, ...]
    skipped: tuple[Candidate, ...]
    seconds: float
    budget_s: float

    def ranked(self) -> list[SearchOutcome]:
        return ranked(self.outcomes)

    @property
    def winner(self) -> SearchOutcome | None:
        ranked = self.ranked()
        return ranked[0] if ranked and ranked[0].fits else None

    def best_canonical(self) -> SearchOutcome | None:
        return next((o for o in self.ranked()
                     if o.fits and o.candidate.origin == "canonical"), None)

    def args(self, candidate: Candidate) -> list[str]:
        """The `irshard compile` arguments that reproduce `candidate`."""
        return [*self.command, *candidate.flags()]

    def command_text(self, candidate: Candidate) -> str:
        return "irshard compile " + " ".join(shlex.quote(a) for a in self.args(candidate))

    def runner_up(self) -> SearchOutcome | None:
        """The best candidate that fits with another mesh or other rules
        than the winner's (a move of the winner that only adds a
        constraint is the same strategy)."""
        winner = self.winner
        if winner is None:
            return None
        same = (winner.candidate.mesh, winner.candidate.rules)
        return next((o for o in self.ranked() if o.fits
                     and (o.candidate.mesh, o.candidate.rules) != same), None)

    def why(self) -> Any:
        """The winner against the runner-up: `irshard diff` of the two."""
        win, second = self.winner, self.runner_up()
        if win is None or second is None:
            return None
        from irshard.reporting import diff
        return diff.compare(
            diff.Side(second.report.get("source") or "-", second.report,
                      f"runner-up {second.candidate.strategy} "
                      f"{second.candidate.mesh_text}"),
            diff.Side(win.report.get("source") or "-", win.report,
                      f"winner {win.candidate.strategy} {win.candidate.mesh_text}"))

    # -----------------------------------------------------------------
    # Output

    def _entry(self, outcome: SearchOutcome, rank: int | None) -> dict[str, Any]:
        c = outcome.candidate
        entry: dict[str, Any] = {
            "rank": rank, "strategy": c.strategy, "origin": c.origin,
            "mesh": [{"name": n, "size": s} for n, s in c.mesh],
            "rules": [[p, s] for p, s in c.rules],
            "args": self.args(c), "status": outcome.status}
        if c.change:
            entry["change"] = c.change
        if c.constraints:
            entry["constraints"] = [[m, s] for m, s in c.constraints]
        numbers = outcome.numbers
        for key in ("step_s", "compute_s", "exposed_comm_s", "memory_bytes",
                    "capacity_bytes", "fits", "bytes_per_step", "collectives"):
            if key in numbers:
                entry[key] = numbers[key]
        if outcome.reason:
            entry["reason"] = outcome.reason
        return entry

    def to_json(self) -> dict[str, Any]:
        ranked = self.ranked()
        entries = [self._entry(o, i + 1) for i, o in enumerate(ranked)]
        entries += [self._entry(o, None) for o in self.outcomes
                    if o.report is None]
        entries += [self._entry(SearchOutcome(p.candidate, "pruned",
                                              reason=p.reason), None)
                    for p in self.pruned]
        entries += [self._entry(SearchOutcome(c, "skipped",
                                              reason="the time budget ran out"), None)
                    for c in self.skipped]
        winner, canonical = self.winner, self.best_canonical()
        why = self.why()
        return {
            "schema": SCHEMA,
            "command": list(self.command), "target": self.target,
            "devices": self.devices, "axes": list(self.axes),
            "compiled": len(self.outcomes),
            "budget_s": self.budget_s,
            "winner": entries[0] if winner is not None else None,
            "best_canonical": self._entry(canonical, ranked.index(canonical) + 1)
            if canonical is not None else None,
            "why": why.to_json() if why is not None else None,
            "candidates": entries,
        }

    def render_json(self) -> str:
        return dumps_json(self.to_json()) + "\n"

    def timing_note(self) -> str:
        """How long the search took: not part of the report, which the
        same search gives byte for byte again."""
        cached = sum(1 for o in self.outcomes if o.cached)
        return (f"searched in {self.seconds:.0f} s: {len(self.outcomes)} "
                f"compiled" + (f" ({cached} from the cache)" if cached else "")
                + (f", {len(self.skipped)} left by the {self.budget_s:g} s budget"
                   if self.skipped else ""))

    def render_text(self) -> str:
        lines = [f"search: {len(self.outcomes)} candidates compiled"
                 + f", {len(self.pruned)} pruned"
                 + (f", {len(self.skipped)} left by the time budget"
                    if self.skipped else "")
                 + f"; {self.target}, {self.devices} devices, "
                 f"axes {','.join(self.axes)}", ""]
        rows = []
        for i, o in enumerate(self.ranked(), 1):
            n = o.numbers
            fit = "" if n.get("fits") is None else ("yes" if n["fits"] else "NO")
            rows.append([str(i), o.candidate.strategy, o.candidate.mesh_text,
                         _t(n.get("step_s")), _t(n.get("compute_s")),
                         _t(n.get("exposed_comm_s")),
                         human_bytes(n["memory_bytes"]) if n.get("memory_bytes")
                         is not None else "-", fit,
                         human_bytes(n["bytes_per_step"]), o.candidate.origin])
        if rows:
            lines += table(["rank", "strategy", "mesh", "step", "compute",
                            "exposed comm", "memory", "fits", "bytes/step",
                            "origin"], rows)
        winner = self.winner
        if winner is None:
            lines += ["", "no candidate compiled and fit"]
        else:
            c = winner.candidate
            lines += ["", f"winner: {c.strategy} on {c.mesh_text}"
                      + (f" ({c.change})" if c.change else "")]
            canonical = self.best_canonical()
            if canonical is not None and canonical is not winner:
                lines.append(f"  best canonical strategy: {canonical.candidate.strategy} "
                             f"on {canonical.candidate.mesh_text}, "
                             f"{human_time(canonical.numbers['step_s'])}")
            lines.append("  rules: " + " ".join(
                shlex.quote(f"--shard={p}={s}") for p, s in c.rules))
            lines.append(f"  python: rules={list(c.rules)!r}"
                         + (f", constraints={list(c.constraints)!r}"
                            if c.constraints else ""))
            lines.append(f"  reproduce: {self.command_text(c)}")
            why = self.why()
            if why is not None:
                lines += ["", "why it beats the runner-up (irshard diff runner-up "
                          "winner):"]
                lines += ["  " + l if l else "" for l in
                          why.render_text().rstrip("\n").split("\n")]
        failed = [o for o in self.outcomes if o.report is None]
        if failed or self.pruned or self.skipped:
            lines += ["", "not ranked"]
            for o in failed:
                lines.append(f"  {o.candidate.strategy} {o.candidate.mesh_text}: "
                             f"{o.status}: {o.reason}")
            for p in self.pruned:
                lines.append(f"  {p.candidate.strategy} {p.candidate.mesh_text}: "
                             f"pruned: {p.reason}")
            for c in self.skipped:
                lines.append(f"  {c.strategy} {c.mesh_text}: skipped: the time "
                             f"budget ran out")
        return "\n".join(lines) + "\n"

    def render_html(self) -> str:
        from irshard.reporting import htmlreport
        return htmlreport.render_search(self)


def _t(seconds: float | None) -> str:
    return human_time(seconds) if seconds is not None else "-"


# The longest budget a search takes (a longer one is a week: JSON has no
# Infinity).
MAX_BUDGET_S = 7 * 24 * 3600.0


def run_search(structure: rulesets.Structure, *, command: Sequence[str], target: str,
               devices: int, axes: Sequence[str], capacity: int | None,
               element_bytes: Callable[[str], int],
               compile_one: Callable[[Candidate, bool], Any] | None,
               processes: Processes | None, cache: Cache, budget_s: float,
               show_progress: bool, move_rounds: int = 2,
               moves_per_round: int = 4) -> SearchResult:
    """Compiles the candidates, then local moves around the best."""
    budget_s = min(budget_s, MAX_BUDGET_S)
    started = time.monotonic()
    kept, pruned = candidates(structure, devices, axes, capacity, element_bytes)
    progress = Progress(len(kept), show_progress)
    search = Search(structure, compile_one, processes, cache,
                    started + budget_s, progress)
    progress.update()
    skipped: list[Candidate] = []
    try:
        skipped += search.compile(kept)
        tried = {o.candidate.key for o in search.outcomes}
        for _ in range(move_rounds):
            best = search.best()
            if best is None or time.monotonic() >= search.deadline:
                break
            if best.candidate.key not in search.explained:
                search.compile([best.candidate], explain=True)
            explained = search.explained.get(best.candidate.key)
            if explained is None:
                break
            found = [m for m in moves(best, explained, moves_per_round)
                     if m.key not in tried]
            if not found:
                break
            tried.update(m.key for m in found)
            progress.total += len(found)
            skipped += search.compile(found)
            if search.best() is best:
                break
    finally:
        progress.close()
    _check_some_compiled(search.outcomes)
    return SearchResult(tuple(command), target, devices, tuple(axes),
                        tuple(search.outcomes), tuple(pruned), tuple(skipped),
                        time.monotonic() - started, budget_s)


def _check_some_compiled(outcomes: Sequence[SearchOutcome]) -> None:
    """A search whose every compile failed (the program's own error, most
    often, the same for every candidate) is that error, not a report of
    failures."""
    if not outcomes or any(o.status != "failed" for o in outcomes):
        return
    reasons = list(dict.fromkeys(o.reason or "" for o in outcomes))
    codes = {getattr(o.reason, "exit_code", 2) for o in outcomes}
    error = BackendError if codes != {2} else UsageError
    if len(reasons) == 1:
        raise error(f"search: every candidate failed to compile "
                    f"({len(outcomes)} tried): {reasons[0]}")
    first = outcomes[0]
    raise error(f"search: every candidate failed to compile ({len(outcomes)} "
                f"tried, {len(reasons)} different errors); the first, "
                f"--mesh {first.candidate.mesh_text}: {first.reason}")


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


def leaves_of(program) -> list[rulesets.LeafShape]:
    return [rulesets.LeafShape(leaf.path, tuple(leaf.type.shape), leaf.type.dtype.name)
            for leaf in program.inputs]


def element_bytes(name: str) -> int:
    from irshard.core.specs import lookup_dtype
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


def search_program(program, placement, *, devices: int, axes: Sequence[str],
                   command: Sequence[str],
                   compile_one: Callable[[Candidate, bool], Any] | None,
                   processes: Processes | None, cache: Cache, budget_s: float,
                   show_progress: bool = False) -> SearchResult:
    """The search over a loaded program's leaves, for `placement`."""
    target = placement.target
    on_device = target.kind != "cpu"
    return run_search(rulesets.Structure(leaves_of(program)), command=command,
                      target=target.text if on_device else "cpu", devices=devices,
                      axes=axes, capacity=placement.profile.hbm_bytes
                      if on_device else None, element_bytes=element_bytes,
                      compile_one=compile_one, processes=processes, cache=cache,
                      budget_s=budget_s, show_progress=show_progress)
