"""The one verdict of every decision command: which of two compiled
programs is better, and what a change did.

A program must first fit the memory limit (the target's capacity, or the
limit the user gave). Among those that fit, the simulated step decides
(per unit of work, where candidates do different work: a search `--per`
a batch knob ranks by the step per example); a
difference within the time model's stated error band (`Step.error_band`,
from the target's profile) is a tie, broken by the memory peak, then the
bytes the collectives move per step. `rank` orders outcomes so; `pareto`
marks those no other beats on both the step and the memory; `effects` says
what a change did to the collectives, line by line, in words ("the
all-reduce at mlp.py:6 becomes an all-gather of the same bytes").
`suggest`, `search` and the API all judge with this module.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

from irshard.reporting.diff import groups
from irshard.reporting.report import CollectiveReport
from irshard.reporting.cells import human_bytes, human_time

# The band where no profile states one.
DEFAULT_BAND = 0.1


@dataclass(frozen=True)
class Figures:
    """What the verdict reads of one compiled program."""

    step_s: float | None
    memory_bytes: int | None
    bytes_per_step: int
    collectives: int
    findings: int
    fits: bool | None        # None: no limit known
    band: float = DEFAULT_BAND
    work: float = 1.0        # what the step does, in the units ranked by

    @property
    def rate(self) -> float | None:
        """The simulated step per unit of work (the step itself where the
        work is one)."""
        return self.step_s / self.work if self.step_s is not None else None

    @classmethod
    def of(cls, report: CollectiveReport, limit: int | None = None,
           work: float = 1.0) -> "Figures":
        """`report`'s figures; `limit` (bytes per device) replaces the
        target's capacity where given; `work` is what one step does."""
        totals = report.totals()
        memory = report.memory
        used = memory.in_use if memory is not None else None
        capacity = limit if limit is not None else (
            memory.capacity_bytes if memory is not None else None)
        step = report.step
        band = step.error_band if step is not None and step.error_band else DEFAULT_BAND
        return cls(step.step_s if step is not None else None, used,
                   totals["bytes_per_run"], totals["count"], len(report.findings),
                   None if capacity is None or used is None else used <= capacity,
                   band, work)

    def to_json(self) -> dict[str, Any]:
        found = {"step_s": self.step_s, "memory_bytes": self.memory_bytes,
                 "fits": self.fits, "bytes_per_run": self.bytes_per_step,
                 "collectives": self.collectives, "findings": self.findings}
        if self.work != 1.0:
            found.update(work=self.work, step_per_unit_s=self.rate)
        return found


def _ties(a: float, b: float, band: float) -> bool:
    """Whether two simulated steps are within the model's error band."""
    return abs(a - b) <= band * min(a, b)


def compare(a: Figures, b: Figures) -> int:
    """-1 where `a` is better than `b`, 1 where worse, 0 where the verdict
    cannot tell them apart."""
    if (a.fits is False) != (b.fits is False):
        return -1 if b.fits is False else 1
    sa = a.rate if a.rate is not None else math.inf
    sb = b.rate if b.rate is not None else math.inf
    band = max(a.band, b.band)
    if not (math.isfinite(sa) and math.isfinite(sb) and _ties(sa, sb, band)):
        if sa != sb:
            return -1 if sa < sb else 1
    for x, y in ((a.memory_bytes, b.memory_bytes), (a.bytes_per_step, b.bytes_per_step)):
        if x is not None and y is not None and x != y:
            return -1 if x < y else 1
    return 0


def better(a: Figures, b: Figures) -> bool:
    return compare(a, b) < 0


def rank(figures: Sequence[Figures]) -> list[int]:
    """The indices of `figures`, best first: those that fit, by simulated
    step, where steps within the band of the group's fastest are one group,
    ordered by memory peak, then bytes, then step; then those that do not
    fit, the same way. Ties keep their given order."""
    order = sorted(range(len(figures)), key=lambda i: (
        figures[i].fits is False,
        figures[i].rate if figures[i].rate is not None else math.inf, i))
    result: list[int] = []
    start = 0
    while start < len(order):
        first = figures[order[start]]
        end = start + 1
        while end < len(order):
            f = figures[order[end]]
            if (f.fits is False) != (first.fits is False) or first.rate is None \
                    or f.rate is None \
                    or not _ties(first.rate, f.rate, max(first.band, f.band)):
                break
            end += 1
        group = order[start:end]
        group.sort(key=lambda i: (
            figures[i].memory_bytes if figures[i].memory_bytes is not None else math.inf,
            figures[i].bytes_per_step,
            figures[i].rate if figures[i].rate is not None else math.inf, i))
        result += group
        start = end
    return result


def pareto(figures: Sequence[Figures]) -> set[int]:
    """The indices no other figure beats on both the simulated step and the
    memory peak (the front of step against memory), among those that fit."""
    fitting = [i for i, f in enumerate(figures)
               if f.fits is not False and f.rate is not None
               and f.memory_bytes is not None]
    front = set()
    for i in fitting:
        a = figures[i]
        if not any(figures[j].rate <= a.rate and figures[j].memory_bytes <= a.memory_bytes
                   and (figures[j].rate < a.rate
                        or figures[j].memory_bytes < a.memory_bytes)
                   for j in fitting if j != i):
            front.add(i)
    return front


def why_better(a: Figures, b: Figures) -> str:
    """In words, why `a` beats `b` (as `compare` decided)."""
    if (a.fits is False) != (b.fits is False):
        return "it fits the memory limit"
    if a.rate is not None and b.rate is not None \
            and not _ties(a.rate, b.rate, max(a.band, b.band)):
        if a.work != 1.0 or b.work != 1.0:
            return f"its simulated step per unit of work is shorter " \
                   f"({human_time(a.rate)} against {human_time(b.rate)})"
        return f"its simulated step is shorter ({human_time(a.step_s)} against " \
               f"{human_time(b.step_s)})"
    if a.memory_bytes is not None and b.memory_bytes is not None \
            and a.memory_bytes != b.memory_bytes:
        return f"the steps tie within the model's error band (±{max(a.band, b.band):.0%}) " \
               f"and it needs less memory ({human_bytes(a.memory_bytes)} against " \
               f"{human_bytes(b.memory_bytes)})"
    return f"the steps tie within the model's error band (±{max(a.band, b.band):.0%}) " \
           f"and it moves fewer bytes ({human_bytes(a.bytes_per_step)} against " \
           f"{human_bytes(b.bytes_per_step)})"


def _at(file: str, line: int) -> str:
    return "" if file == "-" else f" at {file}:{line}"


def _bytes_word(a: int, b: int) -> str:
    if a == b:
        return "of the same bytes"
    return f"of {human_bytes(b)} instead of {human_bytes(a)}"


def effects(before: CollectiveReport, after: CollectiveReport) -> list[dict[str, Any]]:
    """What the change from `before` to `after` did to the collectives, by
    line: where fewer of one kind and more of another run at the same line,
    the one `becomes` the other; the rest are `removes` and `adds`. Each
    says how many collectives and how many bytes per step."""
    a, b = groups(before), groups(after)

    def delta(key, one, other) -> tuple[int, int]:
        g, h = one.get(key), other.get(key)
        return ((g.count if g else 0) - (h.count if h else 0),
                (g.bytes_per_run if g else 0) - (h.bytes_per_run if h else 0))

    lines = sorted({(f, l) for f, l, _ in a} | {(f, l) for f, l, _ in b})
    found: list[dict[str, Any]] = []
    for file, line in lines:
        kinds = sorted({k for f, l, k in a if (f, l) == (file, line)}
                       | {k for f, l, k in b if (f, l) == (file, line)})
        gone = [(k, *delta((file, line, k), a, b)) for k in kinds
                if delta((file, line, k), a, b)[0] > 0]
        came = [(k, *delta((file, line, k), b, a)) for k in kinds
                if delta((file, line, k), b, a)[0] > 0]
        source = None if file == "-" else {"file": file, "line": line}
        while gone and came:
            (k1, n1, b1), (k2, n2, b2) = gone.pop(0), came.pop(0)
            found.append({"effect": "becomes", "kind": k1, "count": n1, "to": k2,
                          "to_count": n2, "source": source,
                          "bytes_per_run": b1, "to_bytes_per_run": b2})
        found += [{"effect": "removes", "kind": k, "count": n, "source": source,
                   "bytes_per_run": nbytes} for k, n, nbytes in gone]
        found += [{"effect": "adds", "kind": k, "count": n, "source": source,
                   "bytes_per_run": nbytes} for k, n, nbytes in came]
    return found


def _counted(count: int, kind: str) -> str:
    return f"the {kind}" if count == 1 else f"{count} {kind}"


def effect_text(effect: dict[str, Any]) -> str:
    src = effect["source"]
    at = _at(src["file"], src["line"]) if src else ""
    if effect["effect"] == "becomes":
        verb = "becomes" if effect["count"] == 1 else "become"
        to = effect["to"]
        article = ("an" if to[0] in "aeiou" else "a") if effect["to_count"] == 1 \
            else str(effect["to_count"])
        return (f"{_counted(effect['count'], effect['kind'])}{at} {verb} {article} "
                f"{to} " + _bytes_word(effect["bytes_per_run"],
                                       effect["to_bytes_per_run"]))
    return f"{effect['effect']} {effect['count']} {effect['kind']}{at}"
