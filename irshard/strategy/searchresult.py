"""What `irshard search` found: the candidates ranked by the one verdict,
the winner and why it beats the runner-up, the Pareto front, what was
pruned or failed, as text, JSON and an HTML page."""

from __future__ import annotations

import re
import shlex
from collections import Counter
from dataclasses import dataclass
from typing import Any, Sequence

from irshard.core.knobs import knob_text
from irshard.core.rendering import Rendered
from irshard.reporting.cells import human_bytes, human_time, table
from irshard.reporting.writer import dumps_json
from irshard.strategy import verdict
from irshard.strategy.change import Change
from irshard.strategy.engine import Outcome

# The JSON schema of a search's result.
SCHEMA = 2


def best_of(outcomes: Sequence[Outcome]) -> Outcome | None:
    ranked = rank(outcomes)
    return ranked[0] if ranked and ranked[0].fits else None


def rank(outcomes: Sequence[Outcome]) -> list[Outcome]:
    """The compiled outcomes, best first, by the one verdict."""
    compiled = [o for o in outcomes if o.figures is not None]
    return [compiled[i] for i in verdict.rank([o.figures for o in compiled])]


@dataclass(frozen=True)
class SearchResult(Rendered):
    FORMATS = ("text", "json", "html")

    command: tuple[str, ...]            # the program's options, as compile takes them
    target: str
    devices: int
    axes: tuple[str, ...]
    outcomes: tuple[Outcome, ...]       # every candidate, in the order considered
    seconds: float
    budget_s: float
    factory: str | None = None
    knob_space: tuple[tuple[str, tuple[Any, ...]], ...] = ()
    limit: int | None = None
    per: str | None = None              # the knob whose value is a step's work
    notes: tuple[str, ...] = ()

    def ranked(self) -> list[Outcome]:
        return rank(self.outcomes)

    @property
    def band(self) -> float:
        bands = [o.figures.band for o in self.outcomes if o.figures is not None]
        return max(bands) if bands else verdict.DEFAULT_BAND

    @property
    def winner(self) -> Outcome | None:
        return best_of(self.outcomes)

    @property
    def baseline(self) -> Outcome | None:
        """What the winner is measured against: the program as given (a
        factory's first knobs) with pure data parallelism where that was
        compiled, else the first candidate compiled."""
        compiled = [o for o in self.outcomes if o.figures is not None]
        first_knobs = self.outcomes[0].change.knobs if self.outcomes else ()
        plain = [o for o in compiled if o.change.knobs == first_knobs
                 and o.change.strategy in ("DP", "")]
        return plain[0] if plain else (compiled[0] if compiled else None)

    def counts(self) -> dict[str, int]:
        return dict(Counter(o.status for o in self.outcomes))

    def args(self, change: Change) -> list[str]:
        """The `irshard compile` arguments that reproduce `change`."""
        return [*self.command, *change.flags()]

    def command_text(self, change: Change) -> str:
        return "irshard compile " + " ".join(shlex.quote(a) for a in self.args(change))

    def runner_up(self) -> Outcome | None:
        """The best candidate that fits with another mesh, rules or knobs
        than the winner's (a move of the winner that only adds a
        constraint is the same strategy)."""
        winner = self.winner
        if winner is None:
            return None
        same = (winner.change.mesh, winner.change.rules, winner.change.knobs)
        return next((o for o in self.ranked() if o.fits and
                     (o.change.mesh, o.change.rules, o.change.knobs) != same), None)

    def why(self) -> Any:
        """The winner against the runner-up: `irshard diff` of the two."""
        win, second = self.winner, self.runner_up()
        if win is None or second is None:
            return None
        from irshard.reporting import diff
        return diff.compare(
            diff.Side(second.report.source, second.report,
                      f"runner-up {second.change.name}"),
            diff.Side(win.report.source, win.report, f"winner {win.change.name}"))

    # -----------------------------------------------------------------
    # Output

    def _entry(self, outcome: Outcome, rank: int | None,
               front: set[int] | None = None) -> dict[str, Any]:
        c = outcome.change
        entry: dict[str, Any] = {
            "rank": rank, "strategy": c.strategy or None, "origin": c.origin,
            "label": c.name, "description": c.description,
            "mesh": [{"name": n, "size": s} for n, s in c.mesh or ()],
            "rules": [[p, s] for p, s in c.rules],
            "knobs": {k: v for k, v in c.knobs},
            "args": self.args(c), "status": outcome.status}
        if c.constraints:
            entry["constraints"] = [[m, s] for m, s in c.constraints]
        if outcome.figures is not None:
            entry.update(outcome.figures.to_json())
            step = outcome.report.step
            if step is not None:
                entry.update(compute_s=step.compute_s,
                             exposed_comm_s=step.exposed_comm_s)
            entry["pareto"] = front is not None and id(outcome) in front
        if outcome.bound is not None:
            entry["bound_s"] = outcome.bound.step_s
        if outcome.reason:
            entry["reason"] = outcome.reason
        return entry

    def _front(self, ranked: Sequence[Outcome]) -> set[int]:
        return {id(ranked[i]) for i in verdict.pareto([o.figures for o in ranked])}

    def to_json(self) -> dict[str, Any]:
        ranked = self.ranked()
        front = self._front(ranked)
        numbers = {id(o): i + 1 for i, o in enumerate(ranked)}
        entries = [self._entry(o, i + 1, front) for i, o in enumerate(ranked)]
        entries += [self._entry(o, None) for o in self.outcomes if o.figures is None]
        winner, baseline = self.winner, self.baseline
        why = self.why()
        return {
            "schema": SCHEMA,
            "command": list(self.command), "target": self.target,
            "devices": self.devices, "axes": list(self.axes),
            "factory": self.factory,
            "knobs": {k: list(v) for k, v in self.knob_space},
            "per": self.per, "notes": list(self.notes),
            "error_band": self.band, "memory_limit": self.limit,
            "counts": self.counts(),
            "compiled": sum(1 for o in self.outcomes if o.figures is not None),
            "budget_s": self.budget_s,
            "winner": self._entry(winner, numbers[id(winner)], front)
            if winner is not None else None,
            "baseline": self._entry(baseline, numbers[id(baseline)], front)
            if baseline is not None else None,
            "why": why.to_json() if why is not None else None,
            "candidates": entries,
        }

    def render_json(self) -> str:
        return dumps_json(self.to_json()) + "\n"

    def timing_note(self) -> str:
        """How long the search took: not part of the report, which the
        same search gives byte for byte again."""
        cached = sum(1 for o in self.outcomes if o.cached)
        compiled = sum(1 for o in self.outcomes if o.status == "ok" and not o.cached)
        return (f"searched in {self.seconds:.1f} s: {compiled} compiled"
                + (f", {cached} from the cache" if cached else ""))

    def summary(self) -> str:
        """Every candidate counted by what became of it."""
        counts = self.counts()
        parts = [f"{counts.get('ok', 0)} compiled"]
        for status in ("failed", "invalid", "duplicate", "pruned", "not reached"):
            if counts.get(status):
                parts.append(f"{counts[status]} {status}")
        n = len(self.outcomes)
        return f"{n} candidate{'' if n == 1 else 's'}: " + ", ".join(parts)

    def render_text(self) -> str:
        lines = [f"search: {self.summary()}; {self.target}, {self.devices} "
                 f"devices, axes {','.join(self.axes)}"
                 + (f"; knobs of {self.factory}: " + ", ".join(
                     f"{k}={','.join(knob_text(v) for v in vs)}"
                     for k, vs in self.knob_space) if self.factory else ""), ""]
        ranked = self.ranked()
        front = self._front(ranked)
        baseline = self.baseline
        rows = []
        for i, o in enumerate(ranked, 1):
            f = o.figures
            mark = (" *" if id(o) in front else "") + (" (baseline)" if o is baseline
                                                        else "")
            rows.append([f"{i}{mark}", o.change.name,
                         _t(f.step_s), *([_t(f.rate)] if self.per else []),
                         (human_bytes(f.memory_bytes) if f.memory_bytes is not None
                          else "-") + ("" if f.fits is not False else " (does not fit)"),
                         human_bytes(f.bytes_per_step), str(f.collectives),
                         o.change.origin])
        if rows:
            lines += table(["rank", "candidate", "step",
                            *([f"step/{self.per}"] if self.per else []),
                            "peak memory", "bytes/step", "collectives", "origin"], rows)
            step = f"the step per {self.per}" if self.per else "the step"
            lines.append(f"  (* on the Pareto front of {step} against memory; "
                         f"where {step} is within ±{self.band:.0%} of another's, "
                         f"the time model's error band, the two tie, broken by "
                         f"memory, then bytes)")
        lines += [f"note: {n}" for n in self.notes]
        lines += self._winner_lines()
        lines += self._unranked_lines()
        return "\n".join(lines) + "\n"

    def _winner_lines(self) -> list[str]:
        winner = self.winner
        if winner is None:
            return ["", "no candidate compiled and fit"]
        c = winner.change
        lines = ["", f"winner: {c.name}"]
        if c.description and c.description != c.name:
            lines.append(f"  {c.description}")
        baseline = self.baseline
        if baseline is not None and baseline is not winner:
            lines.append(f"  against the baseline ({baseline.change.name}): "
                         + (verdict.why_better(winner.figures, baseline.figures)
                            if verdict.better(winner.figures, baseline.figures)
                            else "no better by the verdict; the baseline ties"))
        if c.rules:
            lines.append("  rules: " + " ".join(
                shlex.quote(f"--shard={p}={s}") for p, s in c.rules))
            lines.append(f"  python: rules={list(c.rules)!r}"
                         + (f", constraints={list(c.constraints)!r}"
                            if c.constraints else ""))
        if c.knobs:
            lines.append(f"  knobs: {c.knobs_text}")
        lines.append(f"  reproduce: {self.command_text(c)}")
        why = self.why()
        if why is not None:
            lines += ["", "why it beats the runner-up (irshard diff runner-up winner):"]
            lines += ["  " + l if l else "" for l in
                      why.render_text().rstrip("\n").split("\n")]
        return lines

    def _unranked_lines(self) -> list[str]:
        rest = [o for o in self.outcomes if o.figures is None]
        if not rest:
            return []
        lines = ["", "not ranked"]
        failed = [o for o in rest if o.status in ("failed", "invalid")]
        by_reason: dict[tuple[str, str], list[Outcome]] = {}
        for o in failed:
            # A factory's reason without the call that names the knobs (the
            # candidates are listed after it).
            reason = o.reason or ""
            if o.status == "invalid" and re.match(r"\w+\(.*?\) raised: ", reason):
                reason = reason.split(" raised: ", 1)[1]
            by_reason.setdefault((o.status, reason), []).append(o)
        for (status, reason), group in by_reason.items():
            names = ", ".join(o.change.name for o in group[:3]) + (
                f" and {len(group) - 3} more" if len(group) > 3 else "")
            lines.append(f"  {status} ({len(group)}): {reason} [{names}]")
        for o in rest:
            if o.status not in ("failed", "invalid"):
                lines.append(f"  {o.change.name}: {o.status}: {o.reason}")
        return lines

    def render_html(self) -> str:
        from irshard.reporting import htmlreport
        return htmlreport.render_search(self)


def _t(seconds: float | None) -> str:
    return human_time(seconds) if seconds is not None else "-"
