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

Each candidate is a `Change`, compiled by the decision engine (`engine`)
from the program already traced (the StableHLO with other shardings or
constraints: JAX does not trace again), in this process or, where
compiling dominates, in parallel processes running the same command with
the candidate's flags appended. A candidate helps when the one verdict
(`verdict`) puts it ahead of the baseline: it fits where the baseline does
not, or its simulated step is shorter beyond the model's error band, or the
steps tie and it needs less memory, or moves fewer bytes; `search` judges
the same way. What it does is said as it is (`verdict.effects`): a
collective it turns into another "becomes" that one. Every number shown is
from its compile.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from irshard.collectives.values import PRIMITIVE_OPS
from irshard.core import tree
from irshard.core.errors import IrshardError
from irshard.core.specs import MeshSpec, ShardingSpec, check_sharding, parse_sharding
from irshard.loading.leaves import parse_rules
from irshard.reporting.parts import Finding
from irshard.reporting.report import Collective, CollectiveReport
from irshard.reporting.why import Value
from irshard.strategy import fitting
from irshard.strategy.change import Change
from irshard.strategy.engine import Engine
from irshard.strategy.suggestions import Suggestions
from irshard.strategy.verdict import Figures



@dataclass(frozen=True)
class Options:
    """What the user's command already says, so that a candidate's flags
    work appended to it."""

    shards: tuple[str, ...] = ()          # --shard PATTERN=SPEC
    out_shards: tuple[str, ...] = ()      # --out-shard INDEX=SPEC
    is_module: bool = False               # a .mlir file: inputs by arg name

    def overrides(self, path: str) -> bool:
        """Whether a rule of the command matches the input (the first rule
        that matches applies): its change is then an `--override-shard`."""
        return bool(tree.first_match(parse_rules(self.shards), path))

    def output_given(self, index: int) -> bool:
        return any(item.split("=", 1)[0].strip() == str(index)
                   for item in self.out_shards)


def spec_text(entries: Sequence[str]) -> str:
    return ",".join(entries)


def _cost(c: Collective) -> tuple[float, int]:
    return (c.time_s or 0.0) * c.executions, c.bytes * c.executions


def costliest(report: CollectiveReport, top: int) -> list[Collective]:
    """The `top` collectives that cost the most per run (time, then bytes)."""
    ranked = sorted(enumerate(report.collectives),
                    key=lambda ic: (tuple(-x for x in _cost(ic[1])), ic[0]))
    return [c for _, c in ranked[:top]]


# ---------------------------------------------------------------------------
# Candidates


class _Builder:
    def __init__(self, report: CollectiveReport, mesh: MeshSpec, options: Options):
        self.report = report
        self.mesh = mesh
        self.options = options
        self.inputs = {t.name: (i, t) for i, t in enumerate(report.inputs)}
        self.found: list[Change] = []
        self.seen: set[tuple[Any, ...]] = set()

    def add(self, candidate: Change) -> None:
        if candidate.flags() and candidate.key not in self.seen:
            self.seen.add(candidate.key)
            self.found.append(candidate)

    def input_change(self, changes: Sequence[tuple[str, Sequence[str]]],
                     description: str, memory: bool = False) -> None:
        """Inputs (by name) given new shardings, where they fit."""
        rules, overrides, inputs = [], [], []
        for name, entries in changes:
            if name not in self.inputs:
                return
            index, info = self.inputs[name]
            if info.sharding is not None and tuple(entries) == info.sharding:
                return
            if not self.fits(entries, info.shape):
                return
            (overrides if self.options.overrides(name) else rules).append(
                (name, spec_text(entries)))
            inputs.append((index, spec_text(entries)))
        if inputs:
            self.add(Change(description, rules=tuple(rules),
                            overrides=tuple(overrides), inputs=tuple(inputs),
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

    def from_collective(self, c: Collective) -> None:
        why = c.why
        if why is None:
            return
        needed = why.needed
        axes = [a.split(":")[0] for a in c.mesh_axes or ()]
        where = _where(c)
        reads = ([why.operand] if why.operand else []) + list(why.combined[1:])
        for value in reads:
            self.from_value(value, needed, axes, c, where)
        # An output read through the collective: leave it as computed.
        reader = needed.what if needed is not None else ""
        operand = why.operand
        if reader.startswith("output ") and operand is not None \
                and operand.sharding is not None:
            name = reader[len("output "):]
            outputs = [i for i, t in enumerate(self.report.outputs) if t.name == name]
            if outputs and not self.options.output_given(outputs[0]):
                spec = spec_text(operand.sharding)
                self.add(Change(f"output {name} left sharded {spec}, as it is "
                                f"computed, instead of gathered ({where})",
                                outputs=((outputs[0], spec),)))

    def from_value(self, value: Value, needed: Value | None, axes: Sequence[str],
                   c: Collective, where: str) -> None:
        name, spec = value.what, value.sharding
        want = needed.sharding if needed is not None else None
        if name.startswith("input ") and spec is not None:
            path = name[len("input "):]
            _, info = self.inputs.get(path, (None, None))
            if info is None:
                return
            if want is not None and c.kind != "collective-permute":
                self.input_change([(path, want)],
                                  f"input {path} sharded {spec_text(want)}, as "
                                  f"{_reader(needed)} needs it ({where})")
            for entries, how in self.moved(spec, info.shape, axes):
                self.input_change([(path, entries)],
                                  f"input {path} sharded {spec_text(entries)} "
                                  f"({how}) ({where})")
        elif spec is not None and value.source is not None and want \
                and _is_op(name) and len(want) == len(spec) \
                and c.kind != "collective-permute":
            # (A scalar has no sharding to constrain it to: `op@f:7=`.)
            src = value.source
            match = f"{_op_name(name)}@{src.file}:{src.line}"
            self.add(Change(f"{name} at {src.file}:{src.line} computed "
                            f"{spec_text(want)}, as {_reader(needed)} needs it "
                            f"({where})", constraints=((match, spec_text(want)),)))
        # A partial sum: what it sums over, without the summed axis there.
        for over in value.sums:
            if over.what.startswith("input ") and over.sharding is not None:
                path = over.what[len("input "):]
                _, info = self.inputs.get(path, (None, None))
                if info is not None:
                    for entries, how in self.moved(over.sharding, info.shape, axes):
                        self.input_change([(path, entries)],
                                          f"input {path} sharded "
                                          f"{spec_text(entries)} ({how}), so "
                                          f"{name} sums nothing over "
                                          f"{'+'.join(axes)} ({where})")

    def from_finding(self, f: Finding) -> None:
        """An involuntary full rematerialization: the inputs sharded as the
        op wants them (all those sharded as its operands are), or the op
        kept in its operands' sharding."""
        if f.kind != "involuntary-remat":
            return
        source, target = f.from_sharding, f.to_sharding
        if not source or not target or "{" in source + target:
            return
        before = source.split(",") if source != "replicated" else None
        after = target.split(",") if target != "replicated" else None
        where = f"{f.source.file}:{f.source.line}" if f.source else "?"
        if before is not None:
            rank = len(before)
            after = after or ["_"] * rank
            same = [(name, after) for name, (_, info) in self.inputs.items()
                    if info.sharding == tuple(before) and len(info.shape) == rank]
            if same:
                names = ", ".join(n for n, _ in same)
                self.input_change(same, f"input{'s' if len(same) > 1 else ''} "
                                        f"{names} sharded {spec_text(after)}, as "
                                        f"{f.op or 'the op'} at {where} "
                                        f"wants them: no rematerialization")
        if f.source is not None and f.op and before is not None:
            match = f"{f.op}@{f.source.file}:{f.source.line}"
            self.add(Change(f"{f.op} at {where} computed {source}, as its operands "
                            f"are", constraints=((match, source),)))


def _is_op(name: str) -> bool:
    """An op's name (`add`, `dot_general`), not `the result of ...`."""
    return name.replace("_", "").replace("-", "").isalnum()


def _where(c: Collective) -> str:
    at = f" at {c.source.file}:{c.source.line}" if c.source else ""
    return f"{c.name}{at}"


def _reader(needed: Value | None) -> str:
    op = (needed.what if needed is not None else "") or "its reader"
    src = needed.source if needed is not None else None
    return f"{op} at {src.file}:{src.line}" if src else op


def _op_name(primitive: str) -> str:
    """The StableHLO op a JAX primitive lowers to (`reduce_sum` -> reduce)."""
    return PRIMITIVE_OPS.get(primitive, (primitive,))[0]


def candidates(report: CollectiveReport, mesh: MeshSpec, options: Options,
               top: int = 3, limit: int = 16) -> list[Change]:
    """Changes worth compiling, for the `top` costliest collectives and
    every finding, at most `limit`."""
    builder = _Builder(report, mesh, options)
    # A program that does not fit: first what would bring it under.
    if report.memory is not None and report.memory.fits is False:
        builder.from_memory()
    for f in report.findings:
        builder.from_finding(f)
    for c in costliest(report, top):
        builder.from_collective(c)
    return builder.found[:limit]


def combined(first: Change, then: Change, report: CollectiveReport,
             options: Options) -> Change:
    """`then` applied on top of `first`: an input both change takes
    `then`'s sharding."""
    names = {i: t.name for i, t in enumerate(report.inputs)}
    inputs = dict(first.inputs)
    inputs.update(then.inputs)
    rules, overrides = [], []
    for index, spec in sorted(inputs.items()):
        (overrides if options.overrides(names[index]) else rules).append(
            (names[index], spec))
    return Change(f"{first.description}; {then.description}", rules=tuple(rules),
                  overrides=tuple(overrides), inputs=tuple(sorted(inputs.items())),
                  memory=True)


# ---------------------------------------------------------------------------
# Results


def suggest(engine: Engine, baseline: CollectiveReport, found: Sequence[Change],
            command: Sequence[str], top: int, mesh: MeshSpec | None = None,
            options: Options | None = None, limit: int = 16,
            rounds: int = 2) -> Suggestions:
    """Compiles each candidate and keeps what it did. For a program that
    does not fit, where no change alone makes it fit, the change that left
    the least memory is combined with each change proposed on top of it,
    and so on for `rounds` more rounds."""
    outcomes = engine.evaluate(found)
    base = Figures.of(baseline, engine.limit)
    if base.fits is not False or mesh is None or options is None:
        rounds = 0
    for _ in range(rounds):
        if any(o.fits for o in outcomes):
            break
        best = min((o for o in outcomes if o.report is not None and o.change.memory),
                   key=lambda o: o.figures.memory_bytes or 0, default=None)
        if best is None:
            break
        builder = _Builder(best.report, mesh, options)
        builder.from_memory()
        more = [combined(best.change, then, best.report, options)
                for then in builder.found][:limit]
        if not more:
            break
        outcomes += [o for o in engine.evaluate(more) if o.status != "duplicate"]
    targets = tuple(_where(c) for c in costliest(baseline, top))
    return Suggestions(tuple(command), baseline, tuple(outcomes), targets,
                       engine.limit)


def suggest_for(lowered, options: Options, argv: Sequence[str], *, top: int,
                max_candidates: int, jobs: int | str = "auto",
                memory_limit: int | None = None) -> Suggestions:
    """`irshard suggest`: the program compiled once (the baseline, with each
    collective's why), candidates made from its costliest collectives (each
    a change to `argv`, the command that makes the program, whose rules
    `options` holds), each compiled by the engine in this process or in
    `jobs` others (`auto`: others when a compile takes seconds and there
    are cores to share; never without a command line to run)."""
    import os
    import time

    from irshard.collectives import explain
    from irshard.strategy import compilers
    started = time.perf_counter()
    compiled = lowered.compile(partitioned=True)
    compile_s = time.perf_counter() - started
    baseline = explain.explained(compiled.report(), lowered, compiled)
    mesh = lowered.info.mesh
    found = candidates(baseline, mesh, options, top, max_candidates)
    if jobs == "auto":
        # Other processes trace the program again (seconds each): worth it
        # when compiling takes longer, and there are cores to share.
        cores = os.cpu_count() or 1
        jobs = min(cores, len(found)) if cores > 1 and compile_s > 5 \
            and len(found) > 1 else 1
    compiler = compilers.Processes(argv, jobs) if jobs > 1 and argv \
        else compilers.Traced(lowered)
    engine = Engine(compiler, limit=memory_limit)
    try:
        return suggest(engine, baseline, found, argv, top, mesh, options,
                       max_candidates)
    finally:
        compiler.close()
