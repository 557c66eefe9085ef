"""Each collective's cause confirmed by a counterfactual (`--verify`).

`--explain` names the decisions that may have made a collective
(`why.causes`, most likely first): a constraint, an input's or output's
sharding, an op's kind. Here each decision the program can be recompiled
without is removed or relaxed in the traced module, the module is
partitioned and compiled again as the report's was, and the collective is
looked for at its line:

- a sharding constraint (or explicit-mode reshard) at a line: dropped, its
  result replaced by its operand;
- an input's sharding: every dimension left open for propagation (`?`);
- an output's sharding: removed, XLA chooses it;
- where each of a collective's decisions alone is refuted, all of them at
  once (`together`: both operands of a partial sum, a weight's sharding
  and the constraint that repeats it).

Its verdict is `confirmed` where the collective goes (fewer of its kind
and axes at its line), `changed` where it becomes another collective there
or moves other bytes, `not confirmed` where it stays; a collective's causes
are tried in order until one holds. An op's own property (a gather along a
sharded dimension) has no counterfactual and keeps no verdict. Each
decision is recompiled once, however many collectives name it.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from typing import Any, Callable, Sequence

from irshard.core.frames import UserCode
from irshard.reporting.why import CHANGED, CONFIRMED, NOT_CONFIRMED, Cause, Origin

# The decisions a recompile can remove.
VERIFIABLE = ("constraint", "input", "output", "together")


def _key(c) -> tuple:
    where = (c.source.file, c.source.line) if c.source is not None else None
    return c.kind, where, tuple(sorted(c.mesh_axes or ()))


def _at_line(report, source) -> Counter:
    if source is None:
        return Counter()
    return Counter(c.kind for c in report.collectives if c.source is not None
                   and (c.source.file, c.source.line) == (source.file, source.line))


def verdict(c, baseline, without, decision_kind: str = "") -> tuple[str, str]:
    """(verdict, what the recompile showed) for collective `c` of
    `baseline`, against the report compiled `without` its cause."""
    key = _key(c)
    before = [x for x in baseline.collectives if _key(x) == key]
    after = [x for x in without.collectives if _key(x) == key]
    where = f" at {c.source.file}:{c.source.line}" if c.source else ""
    what = f"the {c.kind}{where}"
    it = "them" if decision_kind == "together" else "it"
    if len(after) < len(before):
        new = _at_line(without, c.source) - _at_line(baseline, c.source)
        if new:
            became = ", ".join(f"{n} {kind}" for kind, n in sorted(new.items()))
            return CHANGED, f"without {it}, {what} becomes {became}"
        gone = "goes" if not after else f"goes ({len(before)} -> {len(after)})"
        return CONFIRMED, f"without {it}, {what} {gone}"
    moved = sum(x.bytes * x.executions for x in before)
    moved_after = sum(x.bytes * x.executions for x in after)
    if moved_after != moved:
        return CHANGED, (f"without {it}, {what} moves {moved_after} bytes "
                         f"instead of {moved}")
    return NOT_CONFIRMED, f"without {it}, {what} stays"


def counterfactual(lowered, decision: Origin, users: UserCode):
    """The traced module (`lowered`, the StableHLO stage) without
    `decision` (each of its parts, for `together`), as a stage to compile,
    and the decision as removed (under explicit axes, the first constraint
    of the chain that made the sharding: the `reshard`); None where it
    has nothing to remove."""
    from irshard.backend import shardy
    module = shardy.clone_module(lowered.module)
    removed = []
    for part in decision.parts or (decision,):
        done = _remove(module, part, lowered.info, users)
        if done is None:
            return None
        removed.append(done)
    if decision.parts:
        decision = dataclasses.replace(decision, parts=tuple(removed))
    else:
        decision = removed[0]
    return dataclasses.replace(lowered, module=module), decision


def _remove(module, decision: Origin, info, users: UserCode) -> Origin | None:
    """Removes or relaxes `decision` in `module` (see the module
    docstring); the decision as removed, or None where there is nothing
    of it."""
    from irshard.backend import edits
    from irshard.collectives.origins import PropagationSites
    if decision.kind == "constraint":
        if decision.source is None:
            return None
        line = (decision.source.file, decision.source.line)
        sites = PropagationSites(module.operation.opview, info, users)

        def there(operation) -> bool:
            found = sites.source(operation)
            return found is not None and (found.file, found.line) == line

        explicit = info.mesh is not None and bool(info.mesh.explicit)
        dropped = edits.drop_constraints(module, there, upstream=explicit)
        if not dropped:
            return None
        if explicit:
            # Under explicit axes the shardings are in the types: the
            # outputs' follow the constraint, and are left to XLA.
            for index in range(len(info.outputs)):
                edits.open_boundary(module, "output", index)
            from irshard.backend import locations
            first = users.choose(locations.frames(dropped[-1][1]))
            if first is not None and first != decision.source:
                decision = dataclasses.replace(decision, source=first)
        return decision
    kind = decision.kind
    decls = info.inputs if kind == "input" else info.outputs
    names = [t.name for t in decls]
    if decision.name not in names:
        return None
    chosen = {decision.name}
    if kind == "input":
        # An input's rule is one decision: every input it gave its sharding;
        # and an input no rule sharded is one with those that mirror it.
        own = decls[names.index(decision.name)]
        chosen |= {t.name for t in decls if (own.rule is not None and t.rule == own.rule)
                   or _mirrors(t, own)}
    for name in sorted(chosen):
        if not edits.open_boundary(module, kind, names.index(name)) \
                and name == decision.name:
            return None
    return decision


def _mirrors(other, decl) -> bool:
    """Whether input `other` mirrors `decl`, which no rule of irshard's
    sharded (a jitted object's own `in_shardings`): the same shape and
    sharding, and a path that ends as `decl`'s does but for its first
    segments (`opt_state/mu/layers/0/w` for `params/layers/0/w`), as the
    optimizer state a training step carries for each parameter does; they
    are one decision, since either pins the other's sharding."""
    if other is decl or decl.rule is not None or other.shape != decl.shape \
            or other.sharding != decl.sharding:
        return False
    mine, theirs = decl.name.split("/"), other.name.split("/")
    common = 0
    while common < min(len(mine), len(theirs)) and \
            mine[-1 - common] == theirs[-1 - common]:
        common += 1
    return common >= max(2, min(len(mine), len(theirs)) - 2)


def _together(causes: Sequence[Cause]) -> tuple[Cause, ...]:
    """The cause tried where each of `causes` alone is refuted: all their
    decisions that a recompile can remove, at once (none for fewer than
    two)."""
    parts = tuple(x.decision for x in causes if x.decision.kind in VERIFIABLE)
    if len(parts) < 2:
        return ()
    side = "needed" if any(x.side == "needed" for x in causes
                           if x.decision in parts) else "operand"
    return (Cause(Origin("together", "", parts=parts), side),)


def verified(report, lowered, stage: str,
             compile_report: Callable[[Any], Any] | None = None):
    """`report` (explained) with each collective's causes tried in order
    until one holds; a note says how many recompiles that took.
    `compile_report(stage)` compiles a counterfactual stage to the report
    of `stage` (partitioned or optimized)."""
    users = UserCode(lowered.info.user_dir)
    compile_report = compile_report or (lambda s: _report(s, stage))
    without: dict[str, Any] = {}
    failed: dict[str, str] = {}
    named: dict[str, Origin] = {}

    def report_without(decision: Origin):
        key = decision.key()
        if key not in without and key not in failed:
            made = counterfactual(lowered, decision, users)
            if made is None:
                failed[key] = "the program has nothing of it to remove"
            else:
                named[key] = made[1]
                try:
                    without[key] = compile_report(made[0])
                except Exception as e:     # a counterfactual the compiler refuses
                    failed[key] = f"the recompile without it failed: {e}".split("\n")[0]
        return without.get(key), failed.get(key), named.get(key, decision)

    collectives = []
    for c in report.collectives:
        if c.why is None or not c.why.causes:
            collectives.append(c)
            continue
        causes = []
        held = False
        together = _together(c.why.causes)
        for cause in (*c.why.causes, *together):
            if cause in together and held:
                break
            if held or cause.decision.kind not in VERIFIABLE:
                causes.append(cause)
                continue
            other, reason, decision = report_without(cause.decision)
            if other is None:
                causes.append(dataclasses.replace(cause, verdict=NOT_CONFIRMED,
                                                  seen=reason))
                continue
            outcome, seen = verdict(c, report, other, cause.decision.kind)
            causes.append(dataclasses.replace(cause, decision=decision,
                                              verdict=outcome, seen=seen))
            held = outcome in (CONFIRMED, CHANGED)
        collectives.append(dataclasses.replace(c, why=c.why.with_causes(tuple(causes))))
    count = len(without)
    note = (f"--verify: {count} recompile{'s' if count != 1 else ''}, each without "
            f"a decision named as a cause (or all of a collective's at once)")
    return findings_caused(dataclasses.replace(
        report, collectives=tuple(collectives), notes=report.notes + (note,)))


def _report(stage_, read: str):
    compiled = stage_.compile(partitioned=read == "partitioned")
    return compiled.partitioned().report() if read == "partitioned" \
        else compiled.report()


def findings_caused(report):
    """`report` with each finding given the cause of the collectives XLA
    made at its line (the demanding side's first, else any)."""
    found = []
    for f in report.findings:
        there = [c.why.cause for c in report.collectives
                 if c.why is not None and c.why.cause is not None
                 and f.source is not None and c.source is not None
                 and (c.source.file, c.source.line) == (f.source.file, f.source.line)]
        there.sort(key=lambda cause: cause.side != "needed")
        found.append(dataclasses.replace(f, cause=there[0]) if there else f)
    return dataclasses.replace(report, findings=tuple(found))
