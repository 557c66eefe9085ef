"""`irshard suggest`: changes that remove or shrink the costliest
collectives, each verified by recompiling.

Candidates come from the explanations (`explain`) of the costliest
collectives (by estimated time, else bytes per run) and from XLA's
findings:

- an input the collective reads, sharded as its reader needs it, or with
  the collective's mesh axis on another dimension;
- an input a partial sum reads sharded over the summed axis, the same way;
- the op it reads, constrained at its line to the sharding the reader
  needs (`--constrain OP@FILE:LINE=SPEC`);
- an output read through the collective, left as computed (`--out-shard`);
- for an involuntary full rematerialization, the inputs sharded as the op
  wants them, or the op kept in its operands' sharding.

Each candidate is compiled from the program already traced (the StableHLO
with other shardings or constraints: JAX does not trace again), in this
process or, where compiling dominates, in parallel processes running the
same command with the candidate's flags appended. A candidate helps when
it takes less estimated time per run (or, with no estimate, moves fewer
bytes), or removes a finding without taking longer; every number shown is
from its compile.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from irshard.collectives import explain
from irshard.collectives.values import PRIMITIVE_OPS
from irshard.core import tree
from irshard.core.errors import IrshardError
from irshard.core.specs import MeshSpec, ShardingSpec, check_sharding, parse_sharding
from irshard.loading.leaves import parse_rules
from irshard.reporting.diff import Side
from irshard.reporting.text import human_bytes, human_time
from irshard.reporting.writer import dumps_json
from irshard.strategy import fitting, trying

SCHEMA = 1


@dataclass(frozen=True)
class Suggestion:
    """A change to the command: its flags and what they do to the module."""

    flags: tuple[str, ...]
    description: str
    inputs: tuple[tuple[int, str], ...] = ()       # input index -> spec text
    outputs: tuple[tuple[int, str], ...] = ()      # output index -> spec text
    constraints: tuple[tuple[str, str], ...] = ()  # (match, spec text)
    memory: bool = False          # proposed for a program that does not fit

    @property
    def command_text(self) -> str:
        return " ".join(shlex.quote(f) for f in self.flags)


@dataclass(frozen=True)
class Options:
    """What the user's command already says, so that a candidate's flags
    work appended to it."""

    shards: tuple[str, ...] = ()          # --shard PATTERN=SPEC
    out_shards: tuple[str, ...] = ()      # --out-shard INDEX=SPEC
    is_module: bool = False               # a .mlir file: inputs by arg name

    def input_flag(self, path: str) -> str:
        """`--shard`, unless a rule of the command matches the input (the
        first rule that matches applies): then `--override-shard`."""
        rules = parse_rules(self.shards)
        return "--override-shard" if tree.first_match(rules, path) else "--shard"

    def output_given(self, index: int) -> bool:
        return any(item.split("=", 1)[0].strip() == str(index)
                   for item in self.out_shards)


def spec_text(entries: Sequence[str]) -> str:
    return ",".join(entries)


def _cost(c: dict[str, Any]) -> tuple[float, int]:
    runs = c.get("executions") or 1
    return (c.get("time_s") or 0.0) * runs, c["bytes"] * runs


def costliest(report: dict[str, Any], top: int) -> list[dict[str, Any]]:
    """The `top` collectives that cost the most per run (time, then bytes)."""
    ranked = sorted(enumerate(report["collectives"]),
                    key=lambda ic: (tuple(-x for x in _cost(ic[1])), ic[0]))
    return [c for _, c in ranked[:top]]


# ---------------------------------------------------------------------------
# Candidates


class _Builder:
    def __init__(self, report: dict[str, Any], mesh: MeshSpec, options: Options):
        self.report = report
        self.mesh = mesh
        self.options = options
        self.inputs = {t["name"]: (i, t) for i, t in enumerate(report["inputs"])}
        self.found: list[Suggestion] = []
        self.seen: set[tuple[str, ...]] = set()

    def add(self, candidate: Suggestion) -> None:
        if candidate.flags and candidate.flags not in self.seen:
            self.seen.add(candidate.flags)
            self.found.append(candidate)

    def input_change(self, changes: Sequence[tuple[str, Sequence[str]]],
                     description: str, memory: bool = False) -> None:
        """Inputs (by name) given new shardings, where they fit."""
        flags: list[str] = []
        inputs = []
        for name, entries in changes:
            if name not in self.inputs:
                return
            index, info = self.inputs[name]
            if info.get("sharding") is not None and list(entries) == info["sharding"]:
                return
            if not self.fits(entries, info["shape"]):
                return
            flags += [self.options.input_flag(name), f"{name}={spec_text(entries)}"]
            inputs.append((index, spec_text(entries)))
        if inputs:
            self.add(Suggestion(tuple(flags), description, inputs=tuple(inputs),
                                memory=memory))

    def fits(self, entries: Sequence[str], shape: Sequence[int]) -> bool:
        if len(entries) != len(shape):
            return False
        try:
            check_sharding(parse_sharding(spec_text(entries)), tuple(shape),
                           self.mesh, "candidate")
        except IrshardError:
            return False
        return True

    def moved(self, entries: Sequence[str], shape: Sequence[int],
              axes: Sequence[str]) -> list[tuple[list[str], str]]:
        """`entries` with each of `axes` taken off its dimension: dropped
        (replicated), or onto each other dimension it divides."""
        result = []
        spec = ShardingSpec.of_entries(entries)
        for axis in axes:
            here = next((d for d, dim in enumerate(spec.dims) if axis in dim.axes),
                        None)
            if here is None:
                continue
            base = spec.without([axis])
            result.append((list(base.entries()), f"without {axis}"))
            for d in range(len(entries)):
                if d == here:
                    continue
                other = list(base.with_axes(d, [axis]).entries())
                if self.fits(other, shape):
                    result.append((other, f"{axis} on dimension {d}"))
        return result

    def from_memory(self) -> None:
        """For a program that does not fit (`fitting.memory_changes`)."""
        for description, changes in fitting.memory_changes(
                self.inputs, self.mesh.names, self.fits):
            self.input_change(changes, description, memory=True)

    def from_collective(self, c: dict[str, Any]) -> None:
        why = c.get("why") or {}
        operand = why.get("operand") or {}
        needed = why.get("needed") or {}
        axes = [a.split(":")[0] for a in c.get("mesh_axes") or ()]
        where = _where(c)
        reads = [operand] + list(why.get("combined", [])[1:])
        for value in reads:
            self.from_value(value, needed, axes, c, where)
        # An output read through the collective: leave it as computed.
        reader = needed.get("op") or ""
        if reader.startswith("output ") and operand.get("sharding"):
            name = reader[len("output "):]
            outputs = [i for i, t in enumerate(self.report.get("outputs", []))
                       if t.get("name") == name]
            if outputs and not self.options.output_given(outputs[0]):
                spec = spec_text(operand["sharding"])
                self.add(Suggestion(("--out-shard", f"{outputs[0]}={spec}"),
                                    f"output {name} left sharded {spec}, as it "
                                    f"is computed, instead of gathered ({where})",
                                    outputs=((outputs[0], spec),)))

    def from_value(self, value, needed, axes, c, where) -> None:
        name = value.get("value") or ""
        spec = value.get("sharding")
        want = needed.get("sharding")
        if name.startswith("input ") and spec is not None:
            path = name[len("input "):]
            _, info = self.inputs.get(path, (None, None))
            if info is None:
                return
            if want is not None and c["kind"] != "collective-permute":
                self.input_change([(path, want)],
                                  f"input {path} sharded {spec_text(want)}, as "
                                  f"{_reader(needed)} needs it ({where})")
            for entries, how in self.moved(spec, info["shape"], axes):
                self.input_change([(path, entries)],
                                  f"input {path} sharded {spec_text(entries)} "
                                  f"({how}) ({where})")
        elif spec is not None and value.get("source") and want \
                and _is_op(name) and len(want) == len(spec) \
                and c["kind"] != "collective-permute":
            # (A scalar has no sharding to constrain it to: `op@f:7=`.)
            src = value["source"]
            match = f"{_op_name(name)}@{src['file']}:{src['line']}"
            self.add(Suggestion(("--constrain", f"{match}={spec_text(want)}"),
                                f"{name} at {src['file']}:{src['line']} computed "
                                f"{spec_text(want)}, as {_reader(needed)} needs "
                                f"it ({where})",
                                constraints=((match, spec_text(want)),)))
        # A partial sum: what it sums over, without the summed axis there.
        for over in value.get("sums_over", []):
            over_name = over.get("value") or ""
            if over_name.startswith("input ") and over.get("sharding"):
                path = over_name[len("input "):]
                _, info = self.inputs.get(path, (None, None))
                if info is not None:
                    for entries, how in self.moved(over["sharding"], info["shape"],
                                                   axes):
                        self.input_change([(path, entries)],
                                          f"input {path} sharded "
                                          f"{spec_text(entries)} ({how}), so "
                                          f"{name} sums nothing over "
                                          f"{'+'.join(axes)} ({where})")

    def from_finding(self, f: dict[str, Any]) -> None:
        """An involuntary full rematerialization: the inputs sharded as the
        op wants them (all those sharded as its operands are), or the op
        kept in its operands' sharding."""
        if f.get("kind") != "involuntary-remat":
            return
        source, target = f.get("from"), f.get("to")
        if not source or not target or "{" in source + target:
            return
        before = source.split(",") if source != "replicated" else None
        after = target.split(",") if target != "replicated" else None
        where = f"{f['source']['file']}:{f['source']['line']}" if f.get("source") else "?"
        if before is not None:
            rank = len(before)
            after = after or ["_"] * rank
            same = [(name, after) for name, (_, info) in self.inputs.items()
                    if info.get("sharding") == before and len(info["shape"]) == rank]
            if same:
                names = ", ".join(n for n, _ in same)
                self.input_change(same, f"input{'s' if len(same) > 1 else ''} "
                                        f"{names} sharded {spec_text(after)}, as "
                                        f"{f.get('op') or 'the op'} at {where} "
                                        f"wants them: no rematerialization")
        if f.get("source") and f.get("op") and before is not None:
            match = f"{f['op']}@{f['source']['file']}:{f['source']['line']}"
            self.add(Suggestion(("--constrain", f"{match}={source}"),
                                f"{f['op']} at {where} computed {source}, as its "
                                f"operands are",
                                constraints=((match, source),)))


def _is_op(name: str) -> bool:
    """An op's name (`add`, `dot_general`), not `the result of ...`."""
    return name.replace("_", "").replace("-", "").isalnum()


def _where(c: dict[str, Any]) -> str:
    src = c.get("source")
    at = f" at {src['file']}:{src['line']}" if src else ""
    return f"{c['name']}{at}"


def _reader(needed: dict[str, Any]) -> str:
    op = needed.get("op") or "its reader"
    src = needed.get("source")
    return f"{op} at {src['file']}:{src['line']}" if src else op


def _op_name(primitive: str) -> str:
    """The StableHLO op a JAX primitive lowers to (`reduce_sum` -> reduce)."""
    return PRIMITIVE_OPS.get(primitive, (primitive,))[0]


def candidates(report: dict[str, Any], mesh: MeshSpec, options: Options,
               top: int = 3, limit: int = 16) -> list[Suggestion]:
    """Changes worth compiling, for the `top` costliest collectives and
    every finding, at most `limit`."""
    builder = _Builder(report, mesh, options)
    # A program that does not fit: first what would bring it under.
    if (report.get("memory") or {}).get("fits") is False:
        builder.from_memory()
    for f in report.get("findings", []):
        builder.from_finding(f)
    for c in costliest(report, top):
        builder.from_collective(c)
    return builder.found[:limit]


# ---------------------------------------------------------------------------
# Compiling candidates


# ---------------------------------------------------------------------------
# Results


def _summary(report: dict[str, Any]) -> dict[str, Any]:
    totals = Side("", report).totals()
    totals["findings"] = len(report.get("findings", []))
    memory = report.get("memory") or {}
    if "fits" in memory:
        totals["fits"] = memory["fits"]
    return totals


def _removes(before: dict[str, Any], after: dict[str, Any]) -> list[dict[str, Any]]:
    """Collectives fewer after than before, by line and kind."""
    a, b = Side("", before).groups(), Side("", after).groups()
    removed = []
    for key in sorted(a):
        fewer = a[key].count - (b[key].count if key in b else 0)
        if fewer > 0:
            file, line, kind = key
            removed.append({"kind": kind, "count": fewer,
                            "source": None if file == "-" else
                            {"file": file, "line": line}})
    return removed


@dataclass(frozen=True)
class SuggestionOutcome:
    candidate: Suggestion
    report: dict[str, Any] | None
    error: str | None = None


@dataclass(frozen=True)
class Suggestions:
    command: tuple[str, ...]
    baseline: dict[str, Any]
    outcomes: tuple[SuggestionOutcome, ...]
    targets: tuple[str, ...]          # the collectives looked at

    def _entry(self, outcome: SuggestionOutcome) -> dict[str, Any]:
        base = _summary(self.baseline)
        after = _summary(outcome.report)
        entry = {"change": list(outcome.candidate.flags),
                 "description": outcome.candidate.description,
                 "bytes_per_run": after["bytes_per_run"],
                 "delta_bytes_per_run": after["bytes_per_run"] - base["bytes_per_run"]}
        if "time_s" in after and "time_s" in base:
            entry["time_s"] = after["time_s"]
            entry["delta_time_s"] = after["time_s"] - base["time_s"]
        if "memory_bytes" in after:
            entry["memory_bytes"] = after["memory_bytes"]
            entry["delta_memory_bytes"] = after["memory_bytes"] - base.get(
                "memory_bytes", 0)
        if "fits" in after:
            entry["fits"] = after["fits"]
        entry["collectives"] = after["count"]
        entry["findings"] = after["findings"]
        entry["removes"] = _removes(self.baseline, outcome.report)
        return entry

    def helps(self, outcome: SuggestionOutcome) -> bool:
        if outcome.report is None:
            return False
        base, after = _summary(self.baseline), _summary(outcome.report)
        if base.get("fits") is False:
            # What does not fit helps only by fitting.
            return after.get("fits") is True
        if after.get("fits") is False and base.get("fits") is not False:
            return False
        if "time_s" in base and "time_s" in after:
            slack = 1e-3 * base["time_s"]
            if after["time_s"] < base["time_s"] - slack:
                return True
            return (after["time_s"] <= base["time_s"] + slack
                    and (after["findings"] < base["findings"]
                         or after["bytes_per_run"] < base["bytes_per_run"]))
        return (after["bytes_per_run"] < base["bytes_per_run"]
                or (after["findings"] < base["findings"]
                    and after["bytes_per_run"] <= base["bytes_per_run"]))

    def helpful(self) -> list[dict[str, Any]]:
        entries = [self._entry(o) for o in self.outcomes if self.helps(o)]
        entries.sort(key=lambda e: (e.get("delta_time_s", 0.0),
                                    e["delta_bytes_per_run"], e["findings"],
                                    e["change"]))
        return entries

    def to_json(self) -> dict[str, Any]:
        rejected = []
        for o in self.outcomes:
            if o.report is None:
                rejected.append({"change": list(o.candidate.flags),
                                 "reason": o.error or "failed"})
            elif not self.helps(o):
                e = self._entry(o)
                rejected.append({"change": e["change"], "reason": "does not help"
                                 if e.get("fits", True) else "does not fit",
                                 "delta_bytes_per_run": e["delta_bytes_per_run"],
                                 **({"memory_bytes": e["memory_bytes"]}
                                    if "memory_bytes" in e else {}),
                                 **({"delta_time_s": e["delta_time_s"]}
                                    if "delta_time_s" in e else {})})
        return {"schema": SCHEMA, "command": list(self.command),
                "baseline": _summary(self.baseline),
                "looked_at": list(self.targets),
                "tried": len(self.outcomes),
                "suggestions": self.helpful(),
                "rejected": rejected}

    def render_json(self) -> str:
        return dumps_json(self.to_json()) + "\n"

    def render_text(self) -> str:
        base = _summary(self.baseline)
        time = f", {human_time(base['time_s'])}" if "time_s" in base else ""
        memory = f", memory {human_bytes(base['memory_bytes'])}" \
            if "memory_bytes" in base else ""
        if base.get("fits") is False:
            memory += " (does not fit: a change helps only by fitting)"
        findings = base["findings"]
        lines = [f"baseline: {base['count']} collectives, "
                 f"{human_bytes(base['bytes_per_run'])} per run{time}{memory}"
                 + (f", {findings} finding{'s' if findings != 1 else ''}"
                    if findings else ""),
                 f"looked at: {', '.join(self.targets) or 'nothing'}"]
        helpful = self.helpful()
        lines.append(f"tried {len(self.outcomes)} change"
                     f"{'s' if len(self.outcomes) != 1 else ''}, "
                     f"{len(helpful)} help" + (":" if helpful else ""))
        for n, e in enumerate(helpful, 1):
            flags = e["change"]
            if len(flags) > 8:
                # A sharding for each of many inputs: the first few here.
                flags = flags[:6] + [f"... ({len(e['change']) // 2} inputs in "
                                     f"all; --format json lists every flag)"]
            change = " ".join(shlex.quote(f) if not f.startswith("... (") else f
                              for f in flags)
            lines += ["", f"{n}. {change}", f"   {e['description']}"]
            parts = [f"bytes per run {human_bytes(base['bytes_per_run'])} -> "
                     f"{human_bytes(e['bytes_per_run'])}"]
            if "time_s" in e:
                parts.append(f"time {human_time(base['time_s'])} -> "
                             f"{human_time(e['time_s'])}")
            if "memory_bytes" in e:
                fits = "" if e.get("fits", True) else " (does not fit)"
                if base.get("fits") is False and e.get("fits"):
                    fits = " (fits)"
                parts.append(f"memory {human_bytes(base.get('memory_bytes', 0))} -> "
                             f"{human_bytes(e['memory_bytes'])}{fits}")
            lines.append("   " + ", ".join(parts))
            removed = [f"{r['count']} {r['kind']}"
                       + (f" at {r['source']['file']}:{r['source']['line']}"
                          if r["source"] else "") for r in e["removes"]]
            if e["findings"] < findings:
                removed.append(f"{findings - e['findings']} finding"
                               f"{'s' if findings - e['findings'] != 1 else ''}")
            if removed:
                lines.append("   removes " + "; ".join(removed))
        failed = [o for o in self.outcomes if o.report is None]
        if failed:
            lines += ["", f"{len(failed)} change{'s' if len(failed) != 1 else ''} "
                          f"did not compile:"]
            lines += [f"  {o.candidate.command_text}: {o.error}" for o in failed]
        if self.command:
            lines += ["", "each change is appended to: irshard compile "
                      + " ".join(shlex.quote(a) for a in self.command)]
        return "\n".join(lines) + "\n"


def _fits(report: dict[str, Any] | None) -> bool:
    return bool(report) and (report.get("memory") or {}).get("fits") is True


def _peak_bytes(outcome: SuggestionOutcome) -> float:
    return _summary(outcome.report).get("memory_bytes", float("inf")) \
        if outcome.report is not None else float("inf")


def combined(first: Suggestion, then: Suggestion, report: dict[str, Any],
             options: Options) -> Suggestion:
    """`then` applied on top of `first`: an input both change takes
    `then`'s sharding."""
    names = {i: t["name"] for i, t in enumerate(report["inputs"])}
    inputs = dict(first.inputs)
    inputs.update(then.inputs)
    flags: list[str] = []
    for index, spec in sorted(inputs.items()):
        flags += [options.input_flag(names[index]), f"{names[index]}={spec}"]
    return Suggestion(tuple(flags), f"{first.description}; {then.description}",
                      inputs=tuple(sorted(inputs.items())), memory=True)


def suggest(baseline: dict[str, Any], found: Sequence[Suggestion],
            compile_one: Callable[[Suggestion], dict[str, Any]] | None,
            compile_many: Callable[[Sequence[Suggestion]], list[Any]] | None,
            command: Sequence[str], top: int, mesh: MeshSpec | None = None,
            options: Options | None = None, limit: int = 16,
            rounds: int = 2) -> Suggestions:
    """Compiles each candidate and keeps what it did. For a program that
    does not fit, where no change alone makes it fit, the change that left
    the least memory is combined with each change proposed on top of it,
    and so on for `rounds` more rounds."""
    outcomes = _compiled(found, compile_one, compile_many)
    if _fits(baseline) or not (baseline.get("memory") or {}).get("capacity_bytes") \
            or mesh is None or options is None:
        rounds = 0
    tried = {o.candidate.flags for o in outcomes}
    for _ in range(rounds):
        if any(_fits(o.report) for o in outcomes):
            break
        best = min((o for o in outcomes if o.report is not None and o.candidate.memory),
                   key=_peak_bytes, default=None)
        if best is None:
            break
        builder = _Builder(best.report, mesh, options)
        builder.from_memory()
        more = [c for c in (combined(best.candidate, then, best.report, options)
                            for then in builder.found) if c.flags not in tried][:limit]
        if not more:
            break
        tried.update(c.flags for c in more)
        outcomes += _compiled(more, compile_one, compile_many)
    targets = tuple(_where(c) for c in costliest(baseline, top))
    return Suggestions(tuple(command), baseline, tuple(outcomes), targets)


def _compiled(found: Sequence[Suggestion],
              compile_one: Callable[[Suggestion], dict[str, Any]] | None,
              compile_many: Callable[[Sequence[Suggestion]], list[Any]] | None
              ) -> list[SuggestionOutcome]:
    outcomes = []
    if compile_many is not None:
        for candidate, result in zip(found, compile_many(found)):
            if isinstance(result, dict):
                outcomes.append(SuggestionOutcome(candidate, result))
            else:
                outcomes.append(SuggestionOutcome(candidate, None, str(result)))
    else:
        for candidate in found:
            try:
                outcomes.append(SuggestionOutcome(candidate, compile_one(candidate)))
            except IrshardError as e:
                outcomes.append(SuggestionOutcome(candidate, None,
                                                  str(e).splitlines()[0] if str(e) else
                                                  type(e).__name__))
    return outcomes


def suggest_for(lowered, options: Options, argv: Sequence[str], *, top: int,
                max_candidates: int, jobs: int | str = "auto") -> Suggestions:
    """`irshard suggest`: the program compiled once (the baseline, with each
    collective's why), candidates made from its costliest collectives (each
    a change to `argv`, the command that makes the program, whose rules
    `options` holds), each compiled in this process or in `jobs` others
    (`auto`: others when a compile takes seconds and there are cores to
    share; never without a command line to run)."""
    import os
    import time

    started = time.perf_counter()
    compiled = lowered.compile(partitioned=True)
    compile_s = time.perf_counter() - started
    baseline = explain.explained(compiled.report(), lowered, compiled).to_json()
    mesh = lowered.info.mesh
    found = candidates(baseline, mesh, options, top, max_candidates)
    if jobs == "auto":
        # Other processes trace the program again (seconds each): worth it
        # when compiling takes longer, and there are cores to share.
        cores = os.cpu_count() or 1
        jobs = min(cores, len(found)) if cores > 1 and compile_s > 5 \
            and len(found) > 1 else 1
    many = trying.compile_in_processes(argv, jobs) if jobs > 1 else None
    one = trying.compile_in_process(lowered) if many is None else None
    return suggest(baseline, found, one, many, argv, top, mesh, options,
                   max_candidates)
