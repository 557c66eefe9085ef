"""The decision engine under `suggest`, `search` and the API: candidates
(`Change`s), compiled by one compiler (`compilers`: in this process, in
worker processes, on a Ray cluster), read as typed reports, judged by one
verdict (`verdict`).

`Engine.evaluate` takes candidates in the order they are worth compiling
and gives each an `Outcome`: compiled (`ok`), `failed` (the compile's own
error line), `invalid` (a factory that rejects its knobs), `duplicate` (the
same effective program as a candidate before it: compiled once, listed
once), `pruned` (judged before compiling: a bound it cannot beat, arguments
that cannot fit), or `not reached` (the time budget or the candidate limit
ran out first). Compiled reports are cached by what decides the compile.

The bound (`Bound`) is the least step any sharding of a candidate's program
can take: the products it must compute (`backend.flops`, counted from its
StableHLO before partitioning, shared by every device) at the fastest
product rate the time model knows, with no communication at all. A
candidate whose bound, per unit of work, is slower than the best compiled
so far beyond the model's error band cannot win, and is not compiled.
Every compiled candidate checks the bound against its own simulated step:
one that undercuts its bound turns pruning off for the rest of the search,
and the result says so.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Sequence

from irshard.loading.fromfile import INVALID_KNOBS
from irshard.reporting.report import CollectiveReport
from irshard.reporting.cells import human_time
from irshard.strategy.change import Change
from irshard.strategy.compilers import Cache, Compiler
from irshard.strategy.verdict import Figures

STATUSES = ("ok", "failed", "invalid", "duplicate", "pruned", "not reached")
# What a factory's error line starts with when it rejects its knobs: the
# candidate is invalid, not failed.
INVALID = INVALID_KNOBS


@dataclass(frozen=True)
class Bound:
    """The least step a program can take on `devices` devices: its
    `flops` of products at `rate` (flops per second per device), no
    communication."""

    flops: float
    devices: int
    rate: float

    @property
    def step_s(self) -> float:
        return self.flops / (self.devices * self.rate)


@dataclass(frozen=True)
class Outcome:
    """What became of one candidate."""

    change: Change
    status: str
    report: CollectiveReport | None = None
    reason: str | None = None
    seconds: float = 0.0             # the compile's wall time (0: cached)
    cached: bool = False
    figures: Figures | None = None
    exit_code: int = 0               # a failure's `irshard compile` status
    bound: Bound | None = None

    @property
    def fits(self) -> bool:
        return self.status == "ok" and self.figures is not None \
            and self.figures.fits is not False


@dataclass
class Progress:
    """The engine's progress on a terminal's stderr: done, running and
    failed candidates, and the time left at the pace so far."""

    total: int
    jobs: int = 1
    enabled: bool = False
    label: str = "compiled"
    done: int = 0
    failed: int = 0
    seconds: list[float] = field(default_factory=list)
    best: str = ""

    def update(self, outcome: Outcome | None = None, best: str = "") -> None:
        if outcome is not None:
            self.done += 1
            self.failed += outcome.status in ("failed", "invalid")
            if not outcome.cached and outcome.status in ("ok", "failed", "invalid"):
                self.seconds.append(outcome.seconds)
        if best:
            self.best = best
        if not self.enabled:
            return
        left = max(0, self.total - self.done)
        running = min(self.jobs, left)
        eta = ""
        if self.seconds and left:
            typical = sorted(self.seconds)[len(self.seconds) // 2]
            eta = f", about {human_time(typical * math.ceil(left / self.jobs))} left"
        width = 24
        filled = width * self.done // max(1, self.total)
        sys.stderr.write(f"\rirshard: [{'#' * filled}{'.' * (width - filled)}] "
                         f"{self.done}/{self.total} {self.label}, {running} running"
                         + (f", {self.failed} failed" if self.failed else "")
                         + eta + self.best + "\x1b[K")
        sys.stderr.flush()

    def close(self) -> None:
        if self.enabled:
            sys.stderr.write("\r\x1b[K")
            sys.stderr.flush()


class Engine:
    """Compiles candidates with `compiler` and judges each against the
    memory `limit` (bytes per device; the target's capacity where None).

    `argv(change)` is what a cached report is keyed by (the compile's
    arguments); `same(change)` says which candidates are one program (the
    same mesh and the same effective shardings: `search` works them out
    from the program's leaves), by default the change's own key. The
    engine stops at `deadline` (`time.monotonic()`) and after
    `max_candidates` compiles (a report from the cache counts as one).
    `work(change)` is what a candidate's step does (1 unless the search
    ranks per unit of a knob); `bound(change)` its `Bound`, or None where
    none is known (see the module docstring)."""

    def __init__(self, compiler: Compiler, *, cache: Cache | None = None,
                 argv: Callable[[Change], Sequence[str]] | None = None,
                 limit: int | None = None, deadline: float = math.inf,
                 max_candidates: int | None = None,
                 same: Callable[[Change], Any] | None = None,
                 progress: Progress | None = None,
                 work: Callable[[Change], float] | None = None,
                 bound: Callable[[Change], Bound | None] | None = None):
        self.compiler, self.cache, self.argv = compiler, cache, argv
        self.limit, self.deadline = limit, deadline
        self.max_candidates = max_candidates
        self.same = same or (lambda change: change.key)
        self.progress = progress
        self.work = work or (lambda change: 1.0)
        self.bound = bound
        self.seen: dict[Any, Change] = {}
        self.compiled = 0
        self.best: Figures | None = None     # the fastest that fits, per unit
        self.best_name = ""
        # A compiled candidate faster than its bound: pruning is off.
        self.undercut: str | None = None

    def _cache_argv(self, change: Change) -> Sequence[str] | None:
        return self.argv(change) if self.cache is not None and self.argv else None

    def outcome(self, change: Change, result: Any, seconds: float,
                cached: bool = False) -> Outcome:
        if isinstance(result, CollectiveReport):
            return Outcome(change, "ok", result, None, seconds, cached,
                           Figures.of(result, self.limit, self.work(change)),
                           bound=self._bound(change))
        reason = str(result)
        status = "invalid" if reason.startswith(INVALID) else "failed"
        return Outcome(change, status, None, reason.removeprefix(INVALID), seconds,
                       exit_code=getattr(result, "exit_code", 2))

    def evaluate(self, changes: Sequence[Change]) -> list[Outcome]:
        """Each candidate's outcome, in the order given (see the module
        docstring)."""
        found: dict[int, Outcome] = {}
        todo: list[tuple[int, Change]] = []
        for i, change in enumerate(changes):
            key = self.same(change)
            if key in self.seen:
                first = self.seen[key]
                found[i] = Outcome(change, "duplicate",
                                   reason=f"the same program as {first.name}")
                continue
            self.seen[key] = change
            # A report from the cache counts as a compile: the same search
            # again reaches the same candidates, and reports the same.
            if self.max_candidates is not None and \
                    self.compiled + len(todo) >= self.max_candidates:
                found[i] = Outcome(change, "not reached", reason="past --max-candidates")
                continue
            argv = self._cache_argv(change)
            hit = self.cache.get(argv) if argv is not None else None
            if hit is not None:
                self.compiled += 1
                found[i] = self.outcome(change, hit, 0.0, cached=True)
                if self.undercut is None:
                    self.undercut = _undercut(found[i])
                self._tell(found[i])
                continue
            todo.append((i, change))

        def done(i: int, result: Any, seconds: float) -> None:
            change = changes[i]
            outcome = self.outcome(change, result, seconds)
            if outcome.report is not None and self.cache is not None:
                argv = self._cache_argv(change)
                if argv is not None:
                    self.cache.put(argv, outcome.report)
            found[i] = outcome
            if self.undercut is None:
                self.undercut = _undercut(outcome)
            self._tell(outcome)

        def skip(i: int) -> bool:
            # Judged on what the candidates before it in the order gave, as
            # far as they have finished: a best among fewer is no better,
            # so what prunes now prunes when all are in (`_settled`).
            pruned = self._pruned(changes[i], self._best_before(i, found))
            if pruned is not None:
                found[i] = pruned
                self._tell(pruned)
                self.compiled -= 1
            return pruned is not None

        self.compiled += len(todo)
        for i in self.compiler.run(todo, self.deadline, done, skip):
            found[i] = Outcome(changes[i], "not reached",
                               reason="the time budget ran out")
        return self._settled([found[i] for i in range(len(changes))])

    def least(self, change: Change) -> float:
        """The least step per unit of work `change` can take (0 where no
        bound is known)."""
        bound = self._bound(change)
        return bound.step_s / self.work(change) if bound is not None else 0.0

    def _bound(self, change: Change) -> Bound | None:
        return self.bound(change) if self.bound is not None else None

    def _best_before(self, i: int, found: dict[int, Outcome]
                     ) -> tuple[Figures, str] | None:
        """The fastest per unit of work that fits among the candidates of
        earlier calls and those before position `i` that have finished
        (the first of equals)."""
        best = (self.best, self.best_name) if self.best is not None else None
        for j in range(i):
            o = found.get(j)
            if o is not None and o.fits and o.figures.rate is not None and \
                    (best is None or o.figures.rate < best[0].rate):
                best = (o.figures, o.change.name)
        return best

    def _settled(self, outcomes: list[Outcome]) -> list[Outcome]:
        """The outcomes as the order decides them, whatever order the
        compiles finished in: a candidate the bound rules out against the
        best of all before it is pruned (one compiled while those were
        still running is judged so too, its compile set aside), each
        pruned one names that best, and the bound is checked against every
        step in order. The same candidates give the same outcomes with one
        compile at a time or many."""
        found = dict(enumerate(outcomes))
        if self.undercut is not None:
            # Named by the first in the order, whichever finished first.
            self.undercut = next(filter(None, map(_undercut, outcomes)),
                                 self.undercut)
        for i, o in enumerate(outcomes):
            if o.status in ("ok", "failed", "pruned") and \
                    (o.status != "pruned" or o.bound is not None):
                judged = self._pruned(o.change, self._best_before(i, found))
                if judged is not None:
                    found[i] = judged
                elif o.status == "pruned" and o.bound is not None:
                    # Pruned before the bound was found wanting.
                    found[i] = replace(o, reason=o.reason + " (pruned before a "
                                       "step undercut its bound)")
        settled = [found[i] for i in range(len(outcomes))]
        best = self._best_before(len(settled), found)
        if best is not None:
            self.best, self.best_name = best
        return settled

    def _pruned(self, change: Change, best: tuple[Figures, str] | None
                ) -> Outcome | None:
        """`change` judged without compiling it, where its bound cannot
        beat `best` (None: compile it)."""
        if best is None or self.undercut is not None or self.bound is None:
            return None
        figures, name = best
        bound = self.bound(change)
        if bound is None:
            return None
        least = bound.step_s / self.work(change)
        if least <= figures.rate * (1 + figures.band):
            return None
        per = "" if self.work(change) == 1.0 and figures.work == 1.0 \
            else " per unit of work"
        return Outcome(change, "pruned", bound=bound, reason=(
            f"its products alone ({bound.flops:.3g} flops over {bound.devices} "
            f"devices at {bound.rate:.3g}/s) take {human_time(least)}{per}, "
            f"beyond the error band of {name}'s {human_time(figures.rate)}"))

    def _tell(self, outcome: Outcome) -> None:
        if self.progress is not None:
            self.progress.update(outcome)


def _undercut(outcome: Outcome) -> str | None:
    """What to say where a compiled step is shorter than its bound (the
    bound is then wrong, and nothing more is pruned)."""
    o = outcome
    if o.status != "ok" or o.bound is None or o.figures.step_s is None \
            or not o.figures.step_s < o.bound.step_s * (1 - 1e-9):
        return None
    return (f"{o.change.name}'s simulated step ({human_time(o.figures.step_s)}) "
            f"undercuts its bound ({human_time(o.bound.step_s)}): nothing was "
            f"pruned after it")


def same_error(outcomes: Sequence[Outcome]) -> tuple[str, int] | None:
    """Where every compile failed alike (the program's own error, most
    often, the same for every candidate): that error and its exit status."""
    failed = [o for o in outcomes if o.status in ("ok", "failed", "invalid")]
    if not failed or any(o.status != "failed" for o in failed):
        return None
    reasons = list(dict.fromkeys(o.reason or "" for o in failed))
    codes = {o.exit_code for o in failed}
    code = 2 if codes == {2} else 3
    if len(reasons) == 1:
        return f"every candidate failed to compile ({len(failed)} tried): " \
               f"{reasons[0]}", code
    first = failed[0]
    return (f"every candidate failed to compile ({len(failed)} tried, "
            f"{len(reasons)} different errors); the first, "
            f"{first.change.name}: "
            f"{first.reason}", code)
