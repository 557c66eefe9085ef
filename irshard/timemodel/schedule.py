"""One step of a compiled program, simulated in the order it runs.

The executable's HLO is scheduled: each computation's instructions are in
the order a device runs them (`hlo.HloModuleView` keeps that order). The
simulation walks the entry computation in that order with two clocks, the
device's compute stream and its collective stream:

- a compute instruction (a fusion, a dot, a copy) takes
  `overhead + max(flops / peak_flops, bytes / memory_bandwidth)`, its flops
  counted as XLA's cost analysis counts them (two per multiply-add of a
  dot, one per element of an elementwise op, transcendentals apart) and its
  bytes the operands it reads and the result it writes (large slices of
  stacked arrays read across their rows at their own, measured rate:
  `costs.Cost.sliced`); matrix products, a GPU's library calls for them
  included, at a measured rate by their size and their type where the
  profile has one (`Rates.flops_curve`); on a TPU, an instruction libtpu's
  cost model estimates takes its estimated cycles at the chip's clock
  (`tpufusions.estimated_cycles`), and a Pallas kernel what it declares it
  costs (`tpufusions.kernel_cost`);
- a collective takes the link model's time (`cost.CostModel`); a
  synchronous one stops compute until it ends (exposed), an async
  `-start` runs beside the compute scheduled before its `-done`, which
  waits only for what is left of it (one stream, or with `lanes` one per
  set of links: a TPU's collectives over other mesh axes, or the other way
  round a ring, run side by side); a collective a TPU offloads to its
  SparseCore starts when its `-update` gives it its operand;
- a `while` runs its condition and body as many times as it loops (its
  trip count; once where that is unknown, and the step says so), each
  trip taking what the runtime takes to go round; calls,
  conditionals (their costliest branch) and async computations are
  followed.

The step starts with the runtime's launch of the execution and of each
array it returns (measured: a CPU host's dispatch to the devices' threads,
a GPU's launch). What has no cost to read (a custom call other than a
library's product) is timed by its memory traffic
alone, and the step says how many such instructions it holds and that
lower bound of their time. The step's compute is kept by what timed it and
by what ran, its communication by collective (`Step.compute_by_source`,
`compute_by_kind`, `exposed_by`, `overlapped_by`). The events of the walk
(loops and branches in `controlflow`) make the predicted timeline
(`trace.py`).
"""

from __future__ import annotations

import math
import re
from array import array
from dataclasses import MISSING, fields
from types import SimpleNamespace
from typing import Any, Callable

from irshard.timemodel import controlflow
from irshard.timemodel.costs import FREE, Cost, Costs
from irshard.timemodel.rates import Rates
from irshard.timemodel.step import Event, Step
from irshard.xla import tpufusions
from irshard.xla.hlo import HloModuleView, Instruction, collective_kind
from irshard.xla.shapes import shape_leaves


def _tally() -> SimpleNamespace:
    """`Step`'s fields, mutable, as the walk adds them up."""
    values = {f.name: f.default_factory() if f.default_factory is not MISSING
              else f.default for f in fields(Step)}
    return SimpleNamespace(**(values | {"events": []}))


# What timed an instruction (`Step.compute_by_source`): libtpu's cost
# model's cycles at the chip's clock, the rates' roofline of what a
# kernel declares it costs (a Pallas kernel's `CostEstimate`) or of what
# the instruction is read to compute, its memory traffic alone (nothing to
# read its arithmetic from: a lower bound), or the runtime's turn of a loop.
ESTIMATE, KERNEL, ROOFLINE, TRAFFIC = (
    "libtpu-estimate", "kernel-estimate", "roofline", "traffic-only")
TRIPS = controlflow.TRIPS


def _kind(inst: Instruction) -> str:
    """What ran, for `Step.compute_by_kind`: a fusion by XLA's kind of it
    (`kLoop`, `kInput`, `kOutput`, `kCustom`), else its opcode."""
    if inst.opcode == "fusion":
        m = _FUSION_KIND.search(inst.text)
        return f"{m.group(1)} fusion" if m else "fusion"
    return inst.opcode


_FUSION_KIND = re.compile(r"\bkind=(k[A-Za-z]+)")

# The collective stream when there are no lanes: every collective's.
_ONE_LANE = ("",)

# What an instruction's runs after its first take (`_Walk.computation`).
_SEEN, _IDLE, _COMPUTE, _OTHER = range(4)

# What the walk follows into the computations they call.
_CALLERS = {"while", "call", "async-start", "conditional", "fusion"}


class _Walk(controlflow.ControlFlow):
    def __init__(self, view: HloModuleView, rates: Rates,
                 collective_s: Callable[[Instruction], tuple[float, str | None]],
                 source_of: Callable[[Instruction], str | None] | None = None,
                 lanes: Callable[[Instruction, str | None], tuple] | None = None):
        self.view = view
        self.source_of = source_of
        self.rates = rates
        self.collective_s = collective_s
        self.costs = Costs(view)
        self.timed: dict[str, array] = {}
        self.kinds: dict[str, bytearray] = {}
        # Each instruction's (what ran, what timed it), on its first run.
        self.labels: dict[str, list] = {}
        # What `Step`'s by-source, by-kind, exposed and overlapped parts add
        # up so far, keyed (part, key).
        self.parts: dict[tuple[str, Any], float] = {}
        self.step = _tally()
        self.now = 0.0             # the compute stream's clock
        # When each collective stream is free: one, or one for each set of
        # links (`lanes`).
        self.comm_free: dict[Any, float] = {}
        self.lanes = lanes
        # start (or chain) -> (end, seconds, seconds exposed already, the
        # report's name of the collective)
        self.pending: dict = {}
        # Asynchronous fusion chains started (`tpufusions.chain`).
        self.chains: set[tuple[str, str]] = set()
        # Offloaded collectives whose start gave no operand: start -> the
        # collective, begun at the update that gives it one.
        self.deferred: dict[str, Instruction] = {}
        self.draw = True
        self.untimed: set[tuple[str, str, str]] = set()
        self.woken = False          # whether a collective has run yet
        self.computed = 0.0         # compute_s at the last collective
        self.holds_collectives: Callable[[str], bool] = getattr(
            view, "holds_collectives", lambda _: True)

    def event(self, inst, track, start, duration, iteration, repeats=1,
              collective=None):
        if not self.draw or duration <= 0:
            return
        if len(self.step.events) >= controlflow.MAX_EVENTS:
            self.step.dropped_events += 1
            return
        source = self.source_of(inst) if self.source_of and track == "compute" \
            else None
        self.step.events.append(Event(inst.name, inst.opcode, track, start,
                                      duration, iteration, repeats, collective,
                                      source))

    def computation(self, name: str, iteration: tuple[int, ...], depth: int = 0):
        if depth > 64:
            return
        body = self.view.instructions_of(name)
        # Each instruction's seconds, work and bytes, worked out on its first
        # run (a loop body runs many times): NaN until then. What its runs
        # after the first take: `_SEEN` (nothing is known yet), `_IDLE`
        # (nothing), `_COMPUTE` (its seconds alone) or `_OTHER`.
        timed = self.timed.get(name)
        if timed is None or len(timed) != 3 * len(body):
            timed = self.timed[name] = array("d", [math.nan]) * (3 * len(body))
            self.kinds[name] = bytearray(len(body))
            self.labels[name] = [None] * len(body)
        kinds, labels = self.kinds[name], self.labels[name]
        for i, inst in enumerate(body):
            kind = kinds[i]
            if kind == _IDLE:
                continue
            if kind == _COMPUTE:
                self.compute(inst, iteration, timed[3 * i], timed[3 * i + 1],
                             timed[3 * i + 2], labels[i])
                continue
            kinds[i] = self.instruction(inst, iteration, depth, timed, 3 * i,
                                        labels)

    def instruction(self, inst: Instruction, iteration, depth, timed=None,
                    at: int = 0, labels=None) -> int:
        """Runs `inst`; says what its later runs take."""
        op = inst.opcode
        if op in FREE:
            return _IDLE
        called = dict(inst.called_computations()) if op in _CALLERS else {}
        kind = self.control(inst, called, iteration, depth)
        if kind is not None:
            return kind
        kind = _COMPUTE
        if op == "fusion" and self.collective_fusion(inst, called, iteration):
            kind = _OTHER
        cycles = tpufusions.estimated_cycles(inst) if self.rates.clock_hz \
            else None
        declared = tpufusions.kernel_cost(inst) if op == "custom-call" else None
        if cycles is None and tpufusions.allocates(inst):
            return _IDLE
        unknown = cycles is None and declared is None and op == "custom-call" \
            and not self.costs.known(inst)
        if unknown:
            # Its arithmetic is unknown: timed by its memory traffic alone,
            # a lower bound the step reports apart.
            self.untimed.add((op, inst.computation, inst.name))
        label = labels[at // 3] if labels is not None else None
        if label is None:
            label = (_kind(inst), ESTIMATE if cycles is not None
                     else KERNEL if declared is not None
                     else TRAFFIC if unknown else ROOFLINE)
            if labels is not None:
                labels[at // 3] = label
        if timed is not None and timed[at] == timed[at]:
            seconds, work, moved = timed[at], timed[at + 1], timed[at + 2]
        else:
            seconds, work, moved = self.priced(inst, called, cycles, declared,
                                               unknown)
            if timed is not None:
                timed[at], timed[at + 1], timed[at + 2] = seconds, work, moved
        if unknown:
            self.step.untimed_s += seconds
            kind = _OTHER
        self.compute(inst, iteration, seconds, work, moved, label)
        return kind

    def control(self, inst: Instruction, called: dict[str, str], iteration,
                depth) -> int | None:
        """Runs `inst` where it is control flow, a collective or part of
        one: what its later runs take; None for an instruction that
        computes."""
        op = inst.opcode
        if op == "while":
            self.loop(inst, called, iteration, depth)
            return _OTHER
        if op == "async-start" and collective_kind(inst) is None:
            held = _offloaded(self.view, called)
            if held is not None:
                # A collective another core runs (libtpu's SparseCore
                # offload: `call-start`, `call-update` giving it its
                # operand, `call-done`): it starts with its operand.
                if inst.operands:
                    self.collective(held, iteration, inst.name)
                else:
                    self.deferred[inst.name] = held
                return _OTHER
        if op in ("call", "async-start") and collective_kind(inst) is None \
                and not _wraps_collective(self.view, inst, called):
            target = called.get("to_apply") or called.get("calls")
            if target:
                self.computation(target, iteration, depth + 1)
            return _OTHER
        if op == "conditional":
            self.branches(inst, called, iteration, depth)
            return _OTHER
        if collective_kind(inst) is not None or _wraps_collective(self.view, inst, called) \
                or (op == "fusion" and tpufusions.reduce_scatter(self.view, inst)):
            # An all-reduce-scatter fusion is the reduce-scatter the report
            # names by the fusion: its slice of the sum is part of it.
            self.collective(inst, iteration)
            return _OTHER
        if op.endswith("-done"):
            self.done(inst)
            return _OTHER
        if op.endswith("-update"):
            begun = inst.operands[0] if inst.operands else None
            if begun in self.deferred:
                self.collective(self.deferred.pop(begun), iteration, inst.name)
                return _OTHER
            if begun in self.pending:
                self.pending[inst.name] = self.pending.pop(begun)
                return _OTHER
            return _IDLE
        return None

    def collective_fusion(self, inst: Instruction, called: dict[str, str],
                          iteration) -> bool:
        """Runs the collectives a fusion holds (a TPU's collective fusions),
        timed as the report times them, as if synchronous, before the
        fusion's own work; whether it held one. Of libtpu's asynchronous
        collective fusions (`tpufusions`), the start starts the collective,
        the done waits for it, the fusions between only compute."""
        fused = called.get("calls", "")
        if not self.holds_collectives(fused):
            return False
        held = False
        role = tpufusions.role(self.view, inst)
        for inner in self.view.instructions_of(fused):
            if collective_kind(inner) is None:
                continue
            chain = tpufusions.chain(inner)
            if chain is not None and role == tpufusions.DONE:
                if chain in self.pending:
                    self.finish(*self.pending.pop(chain))
                held = True
            elif chain is None or role == tpufusions.START \
                    or chain not in self.chains:
                if chain is not None:
                    self.chains.add(chain)
                self.collective(inner, iteration, chain
                                if role == tpufusions.START else None)
                held = True
        return held

    def priced(self, inst: Instruction, called: dict[str, str], cycles,
               declared, unknown: bool) -> tuple[float, float, float]:
        """What one run of computing `inst` takes: seconds, work, bytes."""
        if declared is not None:
            cost = Cost(flops=declared[0], transcendentals=declared[1],
                        bytes=declared[2])
        elif unknown:
            cost = Cost(bytes=self.costs.memory(inst))
        else:
            cost = self.costs.of(inst, called.get("calls"))
        if cycles is not None:
            seconds = self.rates.overhead_s + cycles / self.rates.clock_hz
        else:
            seconds = self.rates.seconds(cost.flops, cost.transcendentals,
                                         cost.bytes, cost.sliced, cost.wide,
                                         cost.products)
        return seconds, cost.flops + cost.transcendentals, cost.bytes

    def compute(self, inst: Instruction, iteration, seconds: float,
                work: float, moved: float, label=None) -> None:
        self.event(inst, "compute", self.now, seconds, iteration)
        self.now += seconds
        self.step.compute_s += seconds
        if label is not None:
            self.add(("kind", label[0]), seconds)
            self.add(("source", label[1]), seconds)
        self.step.flops += work
        self.step.bytes_accessed += moved

    def collective(self, inst, iteration, chain=None):
        """Runs collective `inst`; one that `-start`s or starts an
        asynchronous fusion `chain` runs beside compute until its done."""
        performed = _wrapped(self.view, inst) or inst
        seconds, name = self.collective_s(performed)
        if not self.woken:
            self.woken = True
            seconds += self.rates.first_collective_s
        if self.rates.rendezvous_skew_s:
            seconds += min(self.rates.rendezvous_skew_s,
                           self.step.compute_s - self.computed)
            self.computed = self.step.compute_s
        lanes = self.lanes(performed, name) if self.lanes is not None \
            else _ONE_LANE
        start = max([self.now] + [self.comm_free.get(k, 0.0) for k in lanes])
        end = start + seconds
        for k in lanes:
            self.comm_free[k] = end
        self.event(inst, "collectives", start, seconds, iteration, collective=name)
        if inst.opcode.endswith("-start") or chain is not None:
            self.pending[chain or inst.name] = (end, seconds, 0.0, name)
            return
        # Compute stops until it ends; while it waits for the stream, the
        # asynchronous ones still on it are what is exposed.
        for other, (until, took, exposed, named) in list(self.pending.items()):
            shared = min(until, start) - max(until - took, self.now)
            if shared > 0:
                self.pending[other] = (until, took, exposed + shared, named)
        self.step.exposed_comm_s += end - self.now
        self.add(("exposed", name), end - self.now)
        self.now = end

    def add(self, key: tuple[str, Any], seconds: float) -> None:
        self.parts[key] = self.parts.get(key, 0.0) + seconds

    def done(self, inst):
        start = inst.operands[0] if inst.operands else None
        if start not in self.pending:
            return
        self.finish(*self.pending.pop(start))

    def finish(self, end: float, seconds: float, exposed: float,
               name: str | None = None) -> None:
        """An asynchronous collective's end waited for: what was not waited
        for (now or by a collective queued behind it) ran beside compute."""
        waited = max(0.0, end - self.now)
        overlapped = max(0.0, seconds - waited - exposed)
        self.step.exposed_comm_s += waited
        self.step.overlapped_comm_s += overlapped
        self.add(("exposed", name), waited)
        self.add(("overlapped", name), overlapped)
        self.now = max(self.now, end)


def _wrapped(view: HloModuleView, inst: Instruction) -> Instruction | None:
    """The collective an `async-start` runs (the report names it), if any."""
    if inst.opcode != "async-start":
        return None
    calls = dict(inst.called_computations()).get("calls")
    return next((i for i in view.instructions_of(calls or "")
                 if collective_kind(i) is not None), None)


def _offloaded(view: HloModuleView, called) -> Instruction | None:
    """The collective an `async-start` runs on another core (libtpu's
    collectives offloaded to its SparseCore: `call-start`, whose computation
    is the collective's, or a call of it), if any."""
    for inner in view.instructions_of(called.get("to_apply") or ""):
        if collective_kind(inner) is not None:
            return inner
    for inner in view.instructions_of(called.get("calls") or ""):
        if inner.opcode != "call":
            continue
        target = dict(inner.called_computations()).get("to_apply")
        found = next((i for i in view.instructions_of(target or "")
                      if collective_kind(i) is not None), None)
        if found is not None:
            return found
    return None


def _wraps_collective(view: HloModuleView, inst: Instruction, called) -> bool:
    """An `async-start` whose computation is one collective."""
    if inst.opcode != "async-start" or not called.get("calls"):
        return False
    return any(collective_kind(i) is not None
               for i in view.instructions_of(called["calls"]))


def simulate(view: HloModuleView, rates: Rates,
             collective_s: Callable[[Instruction], tuple[float, str | None]],
             source_of: Callable[[Instruction], str | None] | None = None,
             lanes: Callable[[Instruction, str | None], tuple] | None = None
             ) -> Step:
    """The step of `view`'s entry computation on one device: `collective_s`
    gives each collective instruction's seconds per run and the report's
    name for it, `source_of` a drawn compute instruction's user line.

    Collectives run one after another on one stream, or, with `lanes`
    (a collective instruction and its report's name -> the links it uses,
    e.g. its mesh axes on a TPU's torus, each way round), one after another
    on each link and side by side on links apart: a collective starts when
    every link it uses is free."""
    walk = _Walk(view, rates, collective_s, source_of, lanes)
    launch = rates.launch_s
    if rates.output_s:
        root = view.root(view.entry)
        launch += rates.output_s * (len(shape_leaves(root.shape)) if root else 1)
    walk.now = walk.step.launch_s = launch
    walk.comm_free = {k: launch for k in _ONE_LANE}
    walk.computation(view.entry, ())
    # What is still in flight at the end is waited for.
    for start in list(walk.pending):
        walk.finish(*walk.pending.pop(start))
    walk.step.step_s = walk.now
    step = walk.step
    parts = {"kind": step.compute_by_kind, "source": step.compute_by_source,
             "exposed": step.exposed_by, "overlapped": step.overlapped_by}
    for (part, key), seconds in walk.parts.items():
        parts[part][key] = seconds
    for op, _, _ in walk.untimed:
        walk.step.untimed[op] = walk.step.untimed.get(op, 0) + 1
    return Step(**(vars(walk.step) | {"events": tuple(walk.step.events)}))
