"""What `irshard suggest` found: each candidate's figures against the
baseline and what it does, the ones that help first, as text, JSON and
an HTML page."""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import Any, Sequence

from irshard.core.rendering import Rendered
from irshard.reporting.cells import human_bytes, human_time, table
from irshard.reporting.report import CollectiveReport
from irshard.reporting.writer import dumps_json
from irshard.strategy import verdict
from irshard.strategy.engine import Outcome
from irshard.strategy.verdict import Figures

# The JSON schema of suggest's result.
SCHEMA = 1


@dataclass(frozen=True)
class Suggestions(Rendered):
    """The baseline and every change tried, each judged against it by the
    one verdict."""

    command: tuple[str, ...]
    baseline: CollectiveReport
    outcomes: tuple[Outcome, ...]
    targets: tuple[str, ...]          # the collectives looked at
    limit: int | None = None          # the memory limit the verdict used

    @property
    def base(self) -> Figures:
        return Figures.of(self.baseline, self.limit)

    def helps(self, outcome: Outcome) -> bool:
        return outcome.figures is not None and verdict.better(outcome.figures, self.base)

    def helpful(self) -> list[Outcome]:
        """The changes that help, the best first (the verdict's order)."""
        found = [o for o in self.outcomes if self.helps(o)]
        return [found[i] for i in verdict.rank([o.figures for o in found])]

    def _entry(self, outcome: Outcome) -> dict[str, Any]:
        base, after = self.base, outcome.figures
        entry: dict[str, Any] = {
            "change": outcome.change.flags(), "description": outcome.change.description,
            "step_s": after.step_s,
            "delta_step_s": after.step_s - base.step_s
            if after.step_s is not None and base.step_s is not None else None,
            "memory_bytes": after.memory_bytes,
            "delta_memory_bytes": after.memory_bytes - base.memory_bytes
            if after.memory_bytes is not None and base.memory_bytes is not None
            else None,
            "bytes_per_run": after.bytes_per_step,
            "delta_bytes_per_run": after.bytes_per_step - base.bytes_per_step}
        totals = outcome.report.totals()
        if "time_s" in totals:
            entry["time_s"] = totals["time_s"]
        entry.update(fits=after.fits, collectives=after.collectives,
                     findings=after.findings)
        effects = verdict.effects(self.baseline, outcome.report)
        entry["effects"] = [verdict.effect_text(e) for e in effects]
        entry["removes"] = [{"kind": e["kind"], "count": e["count"],
                             "source": e["source"]}
                            for e in effects if e["effect"] == "removes"]
        if self.helps(outcome):
            entry["why"] = verdict.why_better(after, base)
        return entry

    def to_json(self) -> dict[str, Any]:
        rejected = []
        for o in self.outcomes:
            if o.report is None:
                rejected.append({"change": o.change.flags(), "status": o.status,
                                 "reason": o.reason or "failed"})
            elif not self.helps(o):
                e = self._entry(o)
                rejected.append({"change": e["change"], "status": "ok",
                                 "reason": "does not fit" if e["fits"] is False
                                 else "no better than the baseline",
                                 **{k: e[k] for k in ("step_s", "delta_step_s",
                                                      "memory_bytes",
                                                      "delta_bytes_per_run")}})
        base = self.base.to_json()
        totals = self.baseline.totals()
        if "time_s" in totals:
            base["time_s"] = totals["time_s"]
        return {"schema": SCHEMA, "command": list(self.command),
                "baseline": base, "error_band": self.base.band,
                "looked_at": list(self.targets),
                "tried": len(self.outcomes),
                "suggestions": [self._entry(o) for o in self.helpful()],
                "rejected": rejected}

    def render_json(self) -> str:
        return dumps_json(self.to_json()) + "\n"

    def render_text(self) -> str:
        base = self.base
        lines = [f"baseline: {base.collectives} collectives, "
                 f"{human_bytes(base.bytes_per_step)} per step"
                 + (f", step {human_time(base.step_s)}" if base.step_s is not None else "")
                 + (f", memory {human_bytes(base.memory_bytes)}"
                    if base.memory_bytes is not None else "")
                 + (" (does not fit: a change helps only by fitting)"
                    if base.fits is False else "")
                 + (f", {base.findings} finding{'s' if base.findings != 1 else ''}"
                    if base.findings else ""),
                 f"looked at: {', '.join(self.targets) or 'nothing'}"]
        helpful = self.helpful()
        lines.append(f"tried {len(self.outcomes)} change"
                     f"{'s' if len(self.outcomes) != 1 else ''}, "
                     f"{len(helpful)} help" + (":" if helpful else ""))
        if helpful:
            lines += [""] + figures_table(
                [("baseline", base)] + [(str(n), o.figures)
                                        for n, o in enumerate(helpful, 1)], base.band)
        for n, o in enumerate(helpful, 1):
            flags = o.change.flags()
            if len(flags) > 8:
                # A sharding for each of many inputs: the first few here.
                flags = flags[:6] + [f"... ({len(flags) // 2} inputs in all; "
                                     f"--format json lists every flag)"]
            change = " ".join(shlex.quote(f) if not f.startswith("... (") else f
                              for f in flags)
            lines += ["", f"{n}. {change}", f"   {o.change.description}",
                      f"   better: {verdict.why_better(o.figures, base)}"]
            done = [verdict.effect_text(e)
                    for e in verdict.effects(self.baseline, o.report)]
            if o.figures.findings < base.findings:
                lost = base.findings - o.figures.findings
                done.append(f"removes {lost} finding{'s' if lost != 1 else ''}")
            if done:
                lines.append("   " + "; ".join(done))
        failed = [o for o in self.outcomes if o.report is None]
        if failed:
            lines += ["", f"{len(failed)} change{'s' if len(failed) != 1 else ''} "
                          f"did not compile:"]
            lines += [f"  {o.change.command_text}: {o.reason}" for o in failed]
        if self.command:
            lines += ["", "each change is appended to: irshard compile "
                      + " ".join(shlex.quote(a) for a in self.command)]
        return "\n".join(lines) + "\n"


def figures_table(rows: Sequence[tuple[str, Figures]], band: float) -> list[str]:
    """The verdict's table: each row's step, memory peak, bytes and
    collectives, `*` on the Pareto front of step against memory."""
    front = verdict.pareto([f for _, f in rows])
    body = [[name + (" *" if i in front else ""),
             human_time(f.step_s) if f.step_s is not None else "-",
             (human_bytes(f.memory_bytes) if f.memory_bytes is not None else "-")
             + ("" if f.fits is not False else " (does not fit)"),
             human_bytes(f.bytes_per_step), str(f.collectives)]
            for i, (name, f) in enumerate(rows)]
    return table(["", "step", "peak memory", "bytes/step", "collectives"], body) + [
        f"  (* on the Pareto front of step against memory; steps within "
        f"±{band:.0%}, the time model's error band, tie)"]
