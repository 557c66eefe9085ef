"""Each collective's cause confirmed by a counterfactual (`--verify`).

`--explain` names the decisions that may have made a collective
(`why.causes`, most likely first): a constraint, an input's or output's
sharding, an op's kind. Here each decision the program can be recompiled
without is removed or relaxed in the traced module, the module is
partitioned and compiled again as the report's was, and the collective is
looked for at its line:

- a sharding constraint (or explicit-mode reshard) at a line: dropped, its
  result replaced by its operand (a constraint made through a helper is
  named at the line that called the helper, and only that call's
  constraints are dropped);
- an input's sharding: every dimension left open for propagation (`?`);
  for a jitted step's own `in_shardings`, with the outputs that hand the
  input back with the same sharding (donated into, or the same path in
  the returned state), whose `out_shardings` repeat the decision;
- an output's sharding: removed, XLA chooses it;
- an op whose kind forces the layout (a sort or scan along a sharded
  dimension, a scatter or update at traced positions, a callback): taken
  out, each result replaced by its operand of the same type (an op with
  none, a gather or a reshape, is not recompiled and keeps no verdict);
- where each of a collective's decisions alone is refuted, all of them at
  once (`together`: both operands of a partial sum, a weight's sharding
  and the constraint that repeats it).

Its verdict is `confirmed` where the collective goes (fewer of its kind
and axes at its line), `changed` where it becomes another collective there
or moves other bytes, `not confirmed` where it stays; a collective's causes
are tried in order until one holds. Each decision is recompiled once,
however many collectives name it.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from typing import Any, Callable, Sequence

from irshard.collectives import mirrors
from irshard.collectives.mirrors import same_path_end
from irshard.core import threads
from irshard.core.frames import UserCode
from irshard.reporting.why import CHANGED, CONFIRMED, NOT_CONFIRMED, Cause, Origin

# The decisions a recompile can remove.
VERIFIABLE = ("constraint", "input", "output", "op", "together")
# Why a decision was not recompiled: the program has none of it to remove
# (for an op: none whose results have operands of their types).
NOTHING = "the program has nothing of it to remove"
# An op's primitive as the StableHLO ops it lowers to, where the names differ.
_OP_FORMS = {"pure_callback": ("custom_call",), "io_callback": ("custom_call",)}


def _pass(c) -> str:
    """The part of the program a collective's op is in, by JAX's name for
    it: `jit(step)/jvp()` for the forward pass, `jit(step)/transpose(jvp())`
    for the backward (one line makes both; a recompile that removes the
    backward's collective and adds one to the forward has not kept it)."""
    return (c.op_name or "").rpartition("/")[0]


def _key(c) -> tuple:
    where = (c.source.file, c.source.line) if c.source is not None else None
    return c.kind, where, _pass(c), tuple(sorted(c.mesh_axes or ()))


def _at_line(report, c) -> Counter:
    source = c.source
    if source is None:
        return Counter()
    return Counter(x.kind for x in report.collectives if x.source is not None
                   and (x.source.file, x.source.line) == (source.file, source.line)
                   and _pass(x) == _pass(c))


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
        new = _at_line(without, c) - _at_line(baseline, c)
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
            found = sites.constraint_source(operation)
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
            first = sites.called_at(users.choose(locations.frames(dropped[-1][1])))
            if first is not None and first != decision.source:
                decision = dataclasses.replace(decision, source=first)
        return decision
    if decision.kind == "op":
        return decision if _bypass(module, decision, info, users) else None
    kind = decision.kind
    decls = info.inputs if kind == "input" else info.outputs
    names = [t.name for t in decls]
    if decision.name not in names:
        return None
    chosen = {decision.name}
    if kind == "input":
        # An input's rule is one decision: every input it gave its sharding;
        # and an input no rule sharded is one with those that mirror it,
        # and those that mirror them (Adam's `nu` mirrors the parameter
        # that `mu` mirrors: its path ends alike, `mu`'s does not), and
        # with those one entry of the jitted step's `in_shardings` gave
        # theirs (a batch's).
        own = decls[names.index(decision.name)]
        if own.rule is not None:
            chosen |= {t.name for t in decls if t.rule == own.rule}
        else:
            chosen |= {decls[i].name for i in
                       mirrors.decision_group(decls, names.index(own.name))}
    returned = _carried_back(module, info, chosen) \
        if kind == "input" and own.rule is None else []
    for name in sorted(chosen):
        if not edits.open_boundary(module, kind, names.index(name)) \
                and name == decision.name:
            return None
    for index in returned:
        edits.open_boundary(module, "output", index)
    return decision


def _bypass(module, decision: Origin, info, users: UserCode) -> bool:
    """The op a decision names (its primitive at its line) removed, each
    result replaced by the operand of its type: whether there was one."""
    from irshard.backend import edits
    from irshard.collectives.origins import PropagationSites
    from irshard.collectives.values import PRIMITIVE_OPS, _op_name
    if decision.source is None:
        return False
    primitive = decision.name.partition(" ")[0]
    names = _OP_FORMS.get(primitive) or PRIMITIVE_OPS.get(primitive, (primitive,))
    line = (decision.source.file, decision.source.line)
    sites = PropagationSites(module.operation.opview, info, users)

    def there(operation) -> bool:
        if _op_name(operation.name) not in names:
            return False
        found = sites.source(operation)
        return found is not None and (found.file, found.line) == line

    return bool(edits.bypass_ops(module, there))


def _carried_back(module, info, chosen: set[str]) -> list[int]:
    """The outputs that hand back inputs `chosen` (which no rule of
    irshard's sharded: a jitted step's own `in_shardings`) with the same
    sharding: the one an input is donated into, or one of the same shape
    whose path ends as the input's does (`result/0/params/w` for
    `state/params/w`), as a training step returns its state. The step's
    `out_shardings` repeat the decision its `in_shardings` made; an input
    left open would take its sharding back from them."""
    from irshard.backend import edits
    names = [t.name for t in info.inputs]
    given = {name: edits.boundary_sharding(module, "input", names.index(name))
             for name in chosen}
    donated = {edits.aliased_output(module, names.index(name)): name
               for name in chosen}
    found = []
    for index, out in enumerate(info.outputs):
        sharding = edits.boundary_sharding(module, "output", index)
        if sharding is None:
            continue
        if index in donated and given[donated[index]] == sharding:
            found.append(index)
            continue
        for name in chosen:
            decl = info.inputs[names.index(name)]
            if decl.shape == out.shape and given[name] == sharding and \
                    same_path_end(decl.name, out.name):
                found.append(index)
                break
    return found


def _together(causes: Sequence[Cause]) -> tuple[Cause, ...]:
    """The cause tried where each of `causes` alone is refuted: all their
    decisions that a recompile can remove, at once (none for fewer than
    two)."""
    parts = tuple(x.decision for x in causes
                  if x.decision.kind in VERIFIABLE and x.decision.kind != "op")
    if len(parts) < 2:
        return ()
    side = "needed" if any(x.side == "needed" for x in causes
                           if x.decision in parts) else "operand"
    return (Cause(Origin("together", "", parts=parts), side),)


def verified(report, lowered, stage: str,
             compile_report: Callable[[Any], Any] | None = None,
             jobs: int = 1):
    """`report` (explained) with each collective's causes tried in order
    until one holds; a note says how many recompiles that took.
    `compile_report(stage)` compiles a counterfactual stage to the report
    of `stage` (partitioned or optimized); up to `jobs` compile at once
    (on threads: XLA compiles without Python's lock). Each collective's
    walk through its causes asks for one recompile at a time; the walks'
    requests are compiled together, round by round, so the recompiles
    and the verdicts are those of one walk after another."""
    users = UserCode(lowered.info.user_dir)
    recompiles = _Recompiles(lowered, users,
                             compile_report or (lambda s: _report(s, stage)))
    walks: dict[int, Any] = {}
    asked: dict[int, Origin] = {}
    collectives = list(report.collectives)
    for i, c in enumerate(collectives):
        if c.why is not None and c.why.causes:
            walks[i] = _walk(c, report)
            _advance(walks, asked, collectives, i, recompiles)
    while asked:
        recompiles.run(list(asked.values()), jobs)
        for i in list(asked):
            _advance(walks, asked, collectives, i, recompiles)
    count = len(recompiles.without)
    at_once = f", {min(jobs, count)} at a time" if jobs > 1 and count > 1 else ""
    note = (f"--verify: {count} recompile{'s' if count != 1 else ''}{at_once}, "
            f"each without a decision named as a cause (or all of a "
            f"collective's at once)")
    return findings_caused(dataclasses.replace(
        report, collectives=tuple(collectives), notes=report.notes + (note,)))


def _advance(walks, asked, collectives, i, recompiles: "_Recompiles") -> None:
    """Takes collective `i`'s walk on as far as the recompiles made so far
    answer it: records the one it asks for next, or the collective it ends
    with."""
    walk = walks[i]
    try:
        decision = next(walk) if i not in asked else asked[i]
        while recompiles.known(decision):
            decision = walk.send(recompiles.outcome(decision))
        asked[i] = decision
    except StopIteration as done:
        collectives[i] = done.value
        asked.pop(i, None)
        del walks[i]


def _walk(c, report):
    """Collective `c`'s causes, each tried until one holds: a generator
    that yields each decision it needs recompiled without, is sent
    `(report without it, why not, the decision as removed)`, and returns
    `c` with its causes' verdicts."""
    causes = []
    held = False
    together = _together(c.why.causes)
    for cause in (*c.why.causes, *together):
        if cause in together and held:
            break
        if held or cause.decision.kind not in VERIFIABLE:
            causes.append(cause)
            continue
        other, reason, decision = yield cause.decision
        if other is None and cause.decision.kind == "op" and reason == NOTHING:
            causes.append(cause)       # no op to take out: no verdict
            continue
        if other is None:
            causes.append(dataclasses.replace(cause, verdict=NOT_CONFIRMED,
                                              seen=reason))
            continue
        outcome, seen = verdict(c, report, other, cause.decision.kind)
        causes.append(dataclasses.replace(cause, decision=decision,
                                          verdict=outcome, seen=seen))
        held = outcome in (CONFIRMED, CHANGED)
    return dataclasses.replace(c, why=c.why.with_causes(tuple(causes)))


class _Recompiles:
    """The counterfactual recompiles, each decision's once: its module
    edited here (MLIR is edited on one thread), compiled on up to `jobs`
    threads."""

    def __init__(self, lowered, users: UserCode, compile_report):
        self.lowered, self.users, self.compile_report = lowered, users, compile_report
        self.without: dict[str, Any] = {}
        self.failed: dict[str, str] = {}
        self.named: dict[str, Origin] = {}

    def known(self, decision: Origin) -> bool:
        key = decision.key()
        return key in self.without or key in self.failed

    def outcome(self, decision: Origin):
        key = decision.key()
        return (self.without.get(key), self.failed.get(key),
                self.named.get(key, decision))

    def run(self, decisions: Sequence[Origin], jobs: int) -> None:
        made = {}
        for decision in decisions:
            key = decision.key()
            if key in made or self.known(decision):
                continue
            stage_ = counterfactual(self.lowered, decision, self.users)
            if stage_ is None:
                self.failed[key] = NOTHING
                continue
            self.named[key] = stage_[1]
            made[key] = stage_[0]
        for key, (value, error) in threads.each(self.compile_report,
                                                made, jobs).items():
            if isinstance(error, Exception):   # a counterfactual the compiler refuses
                first = f"{error}".split("\n")[0]
                self.failed[key] = f"the recompile without it failed: {first}"
            elif error is not None:
                raise error
            else:
                self.without[key] = value


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
