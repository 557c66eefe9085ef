"""Collective budgets: limits a report is held to, as regression tests.

    budget    := QUANTITY ['@' AXES] OP NUMBER [UNIT]
    QUANTITY  := KIND | collectives | bytes | wire_bytes | time | step | memory
               | remat
    AXES      := AXIS ('+' AXIS)*
    OP        := '<=' | '<' | '=='
    UNIT      := KiB | MiB | GiB | us | ms | s

A collective kind (`all-gather`) counts those collectives, `collectives`
counts all; `bytes` and `wire_bytes` are per run (bytes x executions);
`time` is the estimated seconds per run (where the report has times);
`step` is the step simulated in the executable's schedule (compute and the
communication it does not hide); `memory` is bytes per device (arguments + outputs + temporaries, less what
outputs alias); `remat` counts XLA's involuntary full rematerializations
(where the report has findings). `@AXES` counts only the collectives whose
groups span every named mesh axis (`bytes@fsdp`, `all-gather@fsdp+tp`).

Pure Python: nothing here imports JAX.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, Sequence

from irshard.core.errors import BudgetExceeded, SpecError, UsageError
from irshard.core.schema import COLLECTIVE_KINDS
from irshard.core.textinput import repeated
from irshard.reporting import peak
from irshard.reporting.parts import BudgetOutcome
from irshard.reporting.cells import human_bytes, human_time

KINDS = COLLECTIVE_KINDS
QUANTITIES = KINDS + ("collectives", "bytes", "wire_bytes", "time", "step",
                      "memory", "peak", "remat")
# Quantities of the whole program, not sums over collectives.
_WHOLE = ("step", "memory", "remat")
# `peak@KIND`: the memory peak's buffers of those kinds.
_BYTES = ("bytes", "wire_bytes", "memory", "peak")
UNITS = {"": 1, "B": 1, "KiB": 2 ** 10, "MiB": 2 ** 20, "GiB": 2 ** 30,
         "us": 1e-6, "ms": 1e-3, "s": 1.0}
_BYTE_UNITS = ("B", "KiB", "MiB", "GiB")
_TIME_UNITS = ("us", "ms", "s")
_EXPR = re.compile(r"\s*([a-z_\-]+)\s*(?:@\s*([A-Za-z0-9_+:()\s\-]+?))?\s*"
                   r"(<=|==|<)\s*([0-9]+(?:\.[0-9]*)?(?:[eE][+-]?[0-9]+)?)\s*"
                   r"([A-Za-z]*)\s*\Z")
_HELP = ("expected QUANTITY[@AXES] OP NUMBER[UNIT], e.g. 'all-gather@fsdp<=2', "
         "'bytes<=64MiB' or 'peak@activation<=4GiB'")


@dataclass(frozen=True)
class Budget:
    text: str
    quantity: str
    axes: tuple[str, ...]
    op: str
    limit: float

    def holds(self, value: float) -> bool:
        return {"<=": value <= self.limit, "<": value < self.limit,
                "==": value == self.limit}[self.op]


def parse_budget(text: str) -> Budget:
    if not isinstance(text, str):
        raise SpecError(f"budget {text!r}: a budget is a string, not "
                        f"{type(text).__name__}: {_HELP}")
    m = _EXPR.match(text)
    if not m:
        raise SpecError(f"budget {text!r}: {_HELP}")
    quantity, axes, op, number, unit = m.groups()
    if quantity not in QUANTITIES:
        raise SpecError(f"budget '{text}': unknown quantity '{quantity}'; "
                        f"quantities are {', '.join(QUANTITIES)}")
    if unit not in UNITS:
        raise SpecError(f"budget '{text}': unknown unit '{unit}'; units are "
                        f"KiB, MiB, GiB (bytes) and us, ms, s (time)")
    is_bytes = quantity in _BYTES
    if unit and ((unit in _BYTE_UNITS) != is_bytes
                 or (unit in _TIME_UNITS) != (quantity in ("time", "step"))):
        raise SpecError(f"budget '{text}': '{quantity}' is not measured in "
                        f"{unit}")
    names = tuple(a.strip() for a in axes.split("+")) if axes else ()
    if quantity == "peak":
        unknown = [k for k in names if k not in peak.KINDS]
        if unknown:
            raise SpecError(f"budget '{text}': '{unknown[0]}' is not a kind of "
                            f"buffer; peak@KIND takes {', '.join(peak.KINDS)}")
    if axes and quantity in _WHOLE:
        raise SpecError(f"budget '{text}': '{quantity}' is not per mesh axis")
    twice = repeated(names)
    if twice:
        raise SpecError(f"budget '{text}': mesh axis '{twice[0]}' is named "
                        f"twice; name each axis once, e.g. "
                        f"'{quantity}@{'+'.join(dict.fromkeys(names))}'")
    limit = float(number) * UNITS[unit]
    if not math.isfinite(limit) or limit > 2.0 ** 63:
        raise SpecError(f"budget '{text}': {number}{unit} is beyond any "
                        f"report's values; give a limit below 2^63")
    counts = quantity in KINDS + ("collectives", "remat")
    if counts and limit != int(limit):
        raise SpecError(f"budget '{text}': '{quantity}' is a count; "
                        f"give a whole number, e.g. '{quantity}"
                        f"{'@' + axes.strip() if axes else ''}{op}"
                        f"{math.floor(limit)}'")
    return Budget(text.strip(), quantity, names, op, limit)


def _spans(collective, axes: Sequence[str]) -> bool:
    spanned = {a.split(":")[0] for a in collective.mesh_axes or ()}
    return all(a in spanned for a in axes)


def counted(report, budget: Budget) -> list:
    """The collectives a budget counts: those of its kind (every kind for
    the other quantities) whose groups span its axes; none for `step`,
    `memory` and `remat`, which are not sums over collectives."""
    if budget.quantity in _WHOLE + ("peak",):
        return []
    kind = budget.quantity if budget.quantity in KINDS else None
    return [c for c in report.collectives
            if (kind is None or c.kind == kind) and _spans(c, budget.axes)]


def measure(report, budget: Budget) -> float:
    """The report's value of the budget's quantity."""
    if budget.quantity == "peak":
        found = report.memory.peak if report.memory is not None else None
        if not found:
            raise UsageError(f"budget '{budget.text}': this report has no "
                             f"memory peak (XLA's buffer assignment was not "
                             f"read: an executable from the compilation cache)")
        return sum(b.bytes for b in found.buffers
                   if not budget.axes or b.kind in budget.axes)
    if budget.axes and report.mesh is not None:
        unknown = [a for a in budget.axes if a not in report.mesh.names]
        if unknown:
            raise SpecError(f"budget '{budget.text}': the mesh has no axis "
                            f"'{unknown[0]}'; its axes are "
                            f"{', '.join(report.mesh.names)}")
    chosen = counted(report, budget)
    q = budget.quantity
    if q in KINDS or q == "collectives":
        return len(chosen)
    if q in ("bytes", "wire_bytes"):
        return sum(getattr(c, q) * c.executions for c in chosen)
    if q == "memory":
        m = report.memory
        if not m:
            raise UsageError(f"budget '{budget.text}': this report has no "
                             f"memory analysis")
        return m.in_use
    if q == "time":
        times = [getattr(c, "time_s", None) for c in chosen]
        if any(t is None for t in times):
            raise UsageError(f"budget '{budget.text}': this report has no "
                             f"times; compile for a target with a hardware "
                             f"profile (--target)")
        return sum(t * c.executions for t, c in zip(times, chosen))
    if q == "step":
        step = getattr(report, "step", None)
        if step is None:
            raise UsageError(f"budget '{budget.text}': this report has no "
                             f"simulated step; compile the program for a "
                             f"target whose profile has compute rates")
        return step.step_s
    findings = getattr(report, "findings", None)
    if findings is None:
        raise UsageError(f"budget '{budget.text}': this report has no findings")
    return sum(1 for f in findings if f.kind == "involuntary-remat")


@dataclass(frozen=True)
class BudgetCheck:
    budget: Budget
    value: float

    @property
    def passed(self) -> bool:
        return self.budget.holds(self.value)

    def describe(self) -> str:
        b = self.budget
        over = f" over {'+'.join(b.axes)}" if b.axes else ""
        if b.quantity in KINDS or b.quantity == "collectives":
            n = int(self.value)
            what = "collective" if b.quantity == "collectives" else b.quantity
            shown = f"{n} {what}{'' if n == 1 else 's'}{over}"
        elif b.quantity == "peak":
            of = f" of {'+'.join(b.axes)}" if b.axes else ""
            shown = f"{int(self.value)} bytes{of} per device at the memory " \
                    f"peak ({_human(self.value)})"
        elif b.quantity in _BYTES:
            per = " per device" if b.quantity == "memory" else " per run"
            shown = f"{int(self.value)} {b.quantity.replace('_', ' ')}" \
                    f"{over}{per} ({_human(self.value)})"
        elif b.quantity == "time":
            shown = f"{self.value * 1e3:.3g} ms{over} per run"
        elif b.quantity == "step":
            shown = f"{self.value * 1e3:.3g} ms simulated step"
        else:
            n = int(self.value)
            shown = f"{n} involuntary rematerialization{'' if n == 1 else 's'}"
        return f"{b.text}: {shown}"

    def outcome(self) -> BudgetOutcome:
        return BudgetOutcome(self.budget.text, self.value, self.budget.limit,
                             self.passed)

    def to_json(self) -> dict[str, Any]:
        return self.outcome().to_json()


def recorded(report, outcomes: Sequence[BudgetCheck]):
    """The report carrying its budgets' outcomes (JSON and text `budgets`)."""
    import dataclasses
    return dataclasses.replace(
        report, budgets=tuple(o.outcome() for o in outcomes))


def breach_lines(report, outcomes: Sequence[BudgetCheck]) -> list[str]:
    """Every exceeded budget, each followed by where its value comes from
    (indented): what a test failure shows."""
    failed = [o for o in outcomes if not o.passed]
    lines = [f"{len(failed)} of {len(outcomes)} collective budgets exceeded:"]
    for o in failed:
        lines.append(f"  {o.describe()}")
        lines += [f"    {line}" for line in culprits(report, o)]
    return lines


def culprits(report, outcome: BudgetCheck, limit: int = 10) -> list[str]:
    """Where a budget's value comes from, largest share first: for sums
    over collectives one line per source line (its collectives by kind and
    their bytes per run), for `memory` its parts, for `remat` each
    rematerialization. At most `limit` lines, then how many more."""
    q = outcome.budget.quantity
    m = report.memory
    if q == "memory" and m is not None and m.peak:
        q = "peak"                     # what holds it, by the peak's rows
    if q == "memory":
        if m is None:
            return []
        return [f"arguments {human_bytes(m.argument_bytes)}, outputs "
                f"{human_bytes(m.output_bytes)}, temp "
                f"{human_bytes(m.temp_bytes)}"
                + (f", less {human_bytes(m.alias_bytes)} donated"
                   if m.alias_bytes else "")]
    if q == "peak":
        found = m.peak.to_json() if m is not None and m.peak else {"buffers": []}
        lines = [f"{where if where != '-' else what}: {human_bytes(n)} {kind}"
                 + (f" ({what})" if where != "-" else "")
                 for n, kind, what, _, where in peak.rows(found)
                 if outcome.budget.quantity != "peak" or not outcome.budget.axes
                 or kind in outcome.budget.axes]
        if len(lines) > limit:
            lines = lines[:limit] + [f"... and {len(lines) - limit} more"]
        return lines
    if q == "step":
        s = report.step
        return [f"compute {human_time(s.compute_s)}, exposed communication "
                f"{human_time(s.exposed_comm_s)}"]
    if q == "remat":
        lines = [f.describe() for f in getattr(report, "findings", ())
                 if f.kind == "involuntary-remat"]
    else:
        share = {"bytes": lambda c: c.bytes * c.executions,
                 "wire_bytes": lambda c: c.wire_bytes * c.executions,
                 "time": lambda c: (c.time_s or 0.0) * c.executions
                 }.get(q, lambda c: 1)
        where: dict[str, list] = {}
        for c in counted(report, outcome.budget):
            where.setdefault(str(c.source) if c.source else "(no source line)",
                             []).append(c)
        ranked = sorted(where.items(),
                        key=lambda kv: (-sum(share(c) for c in kv[1]), kv[0]))
        lines = []
        for source, found in ranked:
            kinds: dict[str, int] = {}
            for c in found:
                kinds[c.kind] = kinds.get(c.kind, 0) + 1
            what = ", ".join(f"{n} {k}" for k, n in sorted(kinds.items()))
            moved = sum(c.bytes * c.executions for c in found)
            text = f"{source}: {what}, {human_bytes(moved)} per run"
            if q == "time":
                text += f", {human_time(sum(share(c) for c in found))}"
            lines.append(text)
    if len(lines) > limit:
        lines = lines[:limit] + [f"... and {len(lines) - limit} more"]
    return lines


def _human(n: float) -> str:
    return human_bytes(int(n))


def evaluate(report, budgets: Sequence[str | Budget]) -> list[BudgetCheck]:
    parsed = [b if isinstance(b, Budget) else parse_budget(b) for b in budgets]
    return [BudgetCheck(b, measure(report, b)) for b in parsed]


def breach_error(outcomes: Sequence[BudgetCheck]) -> BudgetExceeded | None:
    """The error listing every breach, or None when all budgets hold."""
    failed = [o for o in outcomes if not o.passed]
    if not failed:
        return None
    head = (f"budget exceeded: {failed[0].describe()}" if len(failed) == 1
            else f"{len(failed)} of {len(outcomes)} budgets exceeded")
    lines = [head] + ([o.describe() for o in failed] if len(failed) > 1 else [])
    return BudgetExceeded("\n".join(lines), [o.describe() for o in failed])


def check(report, budgets: Sequence[str | Budget]) -> list[BudgetCheck]:
    """Raises `BudgetExceeded` listing every breach; returns the outcomes."""
    outcomes = evaluate(report, budgets)
    error = breach_error(outcomes)
    if error is not None:
        raise error
    return outcomes

