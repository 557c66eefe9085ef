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
  and the constraint that repeats it);
- where that is refuted too, with every other decision that shards a
  dimension those shard, along the collective's axes (dimensions tied by
  Shardy's sharding rules, `collectives.classes`: a batch's sharding and
  each layer's activation constraint that repeats it); also for a
  collective XLA combined from several;
- where that is refuted too, the decisions that hold the collective once
  they are gone: the program without them is compiled and explained, and
  the causes named there are removed with them (a batch's sharding and
  the activation constraints that repeat it), up to `PEELS` times; not
  for a collective XLA combined from several.

Its verdict is `confirmed` where the collective goes (fewer of its kind,
axes and arrays at its line: two weights' gathers at one line are told
apart), `changed` where it becomes another collective there, makes other
arrays or moves other bytes, `not confirmed` where it stays; a
collective's causes are tried in order until one is confirmed (one that
changes it is a cause, named after a confirmed one). Each decision is
recompiled once, however many collectives name it.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Callable, Sequence

from irshard.collectives import classes
from irshard.collectives.counterfactual import NOTHING, counterfactual
from irshard.collectives.findings import findings_caused
from irshard.collectives.verdicts import collective_key, verdict
from irshard.core import threads
from irshard.core.frames import UserCode
from irshard.reporting.why import CHANGED, CONFIRMED, NOT_CONFIRMED, Cause, Origin

# The decisions a recompile can remove.
VERIFIABLE = ("constraint", "input", "output", "op", "shard_map", "together")
# The decisions a recompile may have nothing of to remove (an op with no
# operand of its result's type, a shard_map whose specs shard an axis):
# named, with no verdict.
UNTESTED = ("op", "shard_map")
# How many times a collective every named cause of which was refuted is
# explained again in the program without them. Each time costs two
# recompiles; on MaxText's step the batch's sum needed more than three.
PEELS = 2


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
                             compile_report or (lambda s: _report(s, stage)), stage)
    # The decisions that shard each dimension, read once a collective's
    # causes are all refuted.
    decisions = functools.cache(lambda: classes.Decisions(lowered, users))

    def sharing(c, named: Sequence[Origin]) -> tuple[Origin, ...]:
        return decisions().sharing(named, c.mesh_axes or ())

    walks: dict[int, Any] = {}
    asked: dict[int, Origin] = {}
    collectives = list(report.collectives)
    for i, c in enumerate(collectives):
        if c.why is not None and c.why.causes:
            walks[i] = _walk(c, report, sharing)
            _advance(walks, asked, collectives, i, recompiles)
    while asked:
        recompiles.run(list(asked.values()), jobs)
        for i in list(asked):
            _advance(walks, asked, collectives, i, recompiles)
    count = len(recompiles.without) + len(recompiles.explained)
    widest = min(jobs, recompiles.widest)
    at_once = f", up to {widest} at a time" if widest > 1 else ""
    note = (f"--verify: {count} recompile{'s' if count != 1 else ''}{at_once}, "
            f"each without a decision named as a cause (or all of a "
            f"collective's at once)")
    if recompiles.explained:
        n = len(recompiles.explained)
        note += (f"; {n} of them explained again, for a collective that "
                 f"stayed without each of its causes")
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


def _walk(c, report, sharing: Callable[[Any, Sequence[Origin]], tuple] | None = None):
    """Collective `c`'s causes, each tried until one is confirmed: a generator
    that yields each decision it needs recompiled without, is sent
    `(report without it, why not, the decision as removed)`, and returns
    `c` with its causes' verdicts. Where all are refuted, it tries them
    with the decisions that shard the same dimensions (`sharing(c,
    decisions)`); where that is refuted too, it yields `Explain(decision)`
    for the last refuted one, is sent the report without it explained (or
    None), and tries the causes named there together with it."""
    causes = []
    held = changed = False
    refuted = None
    together = _together(c.why.causes)
    for cause in (*c.why.causes, *together):
        if cause in together and (held or changed):
            break
        if held or cause.decision.kind not in VERIFIABLE:
            causes.append(cause)
            continue
        cause, compiled = yield from _tried(c, report, cause)
        causes.append(cause)
        if not compiled:                # no verdict, or the recompile failed
            continue
        # One that changes the collective is a cause, but one found later
        # that removes it is named first (an FSDP weight's gather: without
        # the batch's sharding it becomes the dot's partial sums, without
        # the weight's it goes).
        held = cause.verdict == CONFIRMED
        changed = changed or cause.verdict == CHANGED
        if cause.verdict == NOT_CONFIRMED and cause.decision.kind != "op":
            refuted = cause
    if refuted is not None and not (held or changed) and sharing is not None:
        named = _unique_decisions(causes)
        wider = sharing(c, named)
        removable = tuple(d for d in wider if d.kind not in UNTESTED)
        side = refuted.side
        if removable:
            tried, compiled = yield from _tried(c, report, Cause(
                Origin("together", "", parts=(*named, *removable)), side))
            causes.append(tried)
            held = tried.verdict in (CONFIRMED, CHANGED)
            refuted = tried if compiled else None
        # A shard_map whose specs shard the dimension has nothing a
        # recompile can remove (its body runs on shards): named, untested,
        # and what holds the collective (no more is looked for).
        untested = [Cause(d, side) for d in wider if d.kind in UNTESTED]
        if untested and not held:
            causes += untested
            refuted = None
    # A collective XLA combined from several (a gradient norm's sums over
    # every sharded weight) stays while any of them does: not peeled.
    if refuted is not None and not (held or changed or c.why.combined):
        causes += yield from _peel(c, report, refuted)
    return dataclasses.replace(c, why=c.why.with_causes(tuple(causes)))


def _tried(c, report, cause: Cause):
    """(`cause` of collective `c` with the verdict of the recompile without
    its decision, whether it was recompiled): a generator, as `_walk`. An
    op with nothing to take out keeps no verdict; a decision the program
    could not be compiled without is not confirmed, and says why."""
    other, reason, decision = yield cause.decision
    if other is None and cause.decision.kind in UNTESTED and reason == NOTHING:
        return cause, False
    if other is None:
        return dataclasses.replace(cause, verdict=NOT_CONFIRMED, seen=reason), False
    outcome, seen = verdict(c, report, other, cause.decision.kind)
    return dataclasses.replace(cause, decision=decision, verdict=outcome,
                               seen=seen), True


def _unique_decisions(causes: Sequence[Cause]) -> tuple[Origin, ...]:
    """The decisions of `causes` a recompile can remove, `together`'s
    parts each on its own, each once."""
    found: dict[str, Origin] = {}
    for cause in causes:
        d = cause.decision
        if d.kind in VERIFIABLE and (d.kind not in UNTESTED or cause.verdict):
            for part in d.parts or (d,):
                found.setdefault(part.key(), part)
    return tuple(found.values())


def _peel(c, report, refuted: Cause):
    """The rest of `_walk` where every cause of `c` was refuted, the last
    `refuted`: up to `PEELS` times, the program without it explained and
    the causes named there tried together with it. Returns the causes it
    tried, with their verdicts."""
    tried_all = []
    for _ in range(PEELS):
        without = yield Explain(refuted.decision)
        more = _holding(c, without, refuted.decision)
        if not more:
            break
        parts = (*(refuted.decision.parts or (refuted.decision,)),
                 *(x.decision for x in more))
        tried, compiled = yield from _tried(c, report, Cause(
            Origin("together", "", parts=parts), refuted.side))
        tried_all.append(tried)
        if not compiled or tried.verdict in (CONFIRMED, CHANGED):
            break
        refuted = tried
    return tried_all


@dataclasses.dataclass(frozen=True)
class Explain:
    """A walk's request for the program without `decision`, compiled and
    explained."""

    decision: Origin

    def key(self) -> str:
        return f"explain without {self.decision.key()}"


def _holding(c, without, removed: Origin) -> list[Cause]:
    """The causes the report `without` (explained, or None) names for
    collective `c` there that `removed` does not hold: what keeps it once
    `removed` is gone."""
    if without is None:
        return []
    gone = {p.key() for p in (removed.parts or (removed,))}
    key = collective_key(c)
    there = sorted((x for x in without.collectives if collective_key(x) == key
                    and x.why is not None),
                   key=lambda x: x.op_name != c.op_name)
    found = []
    for x in there[:1]:
        for cause in x.why.causes:
            d = cause.decision
            if d.kind in VERIFIABLE and d.kind not in (*UNTESTED, "together") \
                    and d.key() not in gone:
                gone.add(d.key())
                found.append(cause)
    return found


class _Recompiles:
    """The counterfactual recompiles, each decision's once: its module
    edited here (MLIR is edited on one thread), compiled on up to `jobs`
    threads; an `Explain` request's compiled keeping its partitioned HLO
    and explained here."""

    def __init__(self, lowered, users: UserCode, compile_report, read: str):
        self.lowered, self.users, self.compile_report = lowered, users, compile_report
        self.read = read
        self.without: dict[str, Any] = {}
        self.failed: dict[str, str] = {}
        self.named: dict[str, Origin] = {}
        self.explained: dict[str, Any] = {}
        self.widest = 0          # the most recompiles one round asked for

    def known(self, decision) -> bool:
        key = decision.key()
        return key in self.without or key in self.failed or key in self.explained

    def outcome(self, decision):
        key = decision.key()
        if isinstance(decision, Explain):
            return self.explained.get(key)
        return (self.without.get(key), self.failed.get(key),
                self.named.get(key, decision))

    def run(self, decisions: Sequence[Any], jobs: int) -> None:
        made, explain = {}, {}
        for decision in decisions:
            key = decision.key()
            if key in made or key in explain or self.known(decision):
                continue
            asked = isinstance(decision, Explain)
            stage_ = counterfactual(self.lowered, decision.decision if asked
                                    else decision, self.users)
            if stage_ is None:
                if asked:
                    self.explained[key] = None
                else:
                    self.failed[key] = NOTHING
                continue
            if asked:
                explain[key] = stage_[0]
            else:
                self.named[key] = stage_[1]
                made[key] = stage_[0]
        self.widest = max(self.widest, len(made), len(explain))
        for key, (value, error) in threads.each(self.compile_report,
                                                made, jobs).items():
            if isinstance(error, Exception):   # a counterfactual the compiler refuses
                first = f"{error}".split("\n")[0]
                self.failed[key] = f"the recompile without it failed: {first}"
            elif error is not None:
                raise error
            else:
                self.without[key] = value
        compiled = threads.each(lambda s: s.compile(partitioned=True), explain,
                                jobs) if explain else {}
        for key, (value, error) in compiled.items():
            if error is not None and not isinstance(error, Exception):
                raise error
            self.explained[key] = None if error is not None else \
                self._explained(explain[key], value)

    def _explained(self, stage_, compiled):
        """The counterfactual's report, explained; None where irshard
        cannot read it (the walk then ends as if nothing held it)."""
        from irshard.collectives.explain import explained
        from irshard.core.errors import IrshardError
        read = compiled.partitioned() if self.read == "partitioned" else compiled
        try:
            return explained(read.report(), stage_, read)
        except IrshardError:
            return None


def _report(stage_, read: str):
    compiled = stage_.compile(partitioned=read == "partitioned")
    return compiled.partitioned().report() if read == "partitioned" \
        else compiled.report()
