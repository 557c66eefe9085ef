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
  profile has one (`Rates.flops_curve`);
- a collective takes the link model's time (`cost.CostModel`); a
  synchronous one stops compute until it ends (exposed), an async
  `-start` runs beside the compute scheduled before its `-done`, which
  waits only for what is left of it;
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
lower bound of their time. The events of the walk, loops
drawn up to `DRAWN_TRIPS` iterations and summarized past them, make the
predicted timeline (`trace.py`).
"""

from __future__ import annotations

import math
import os
from array import array
from dataclasses import dataclass, field
from typing import Any, Callable, NamedTuple

from irshard.collectives import loops
from irshard.collectives.analysis import collective_kind
from irshard.collectives.costs import FREE, Cost, Costs
from irshard.xla import tpufusions
from irshard.xla.hlo import HloModuleView, Instruction, shape_leaves

# Iterations of a loop drawn one by one on the timeline; the rest of its
# trips are one summary event each.
DRAWN_TRIPS = 3
# Events kept for the timeline, at most.
MAX_EVENTS = 20000

@dataclass(frozen=True)
class Rates:
    """What a device does per second, and what each instruction costs on
    top (the runtime's dispatch of a kernel or thunk)."""

    peak_flops: float
    memory_bandwidth: float
    overhead_s: float = 0.0
    transcendentals: float | None = None     # per second; peak_flops if None
    launch_s: float = 0.0        # once per execution: the runtime's start
    first_collective_s: float = 0.0   # more for an execution's first collective
    # At most this much more for a collective after compute: the wait for
    # the devices a CPU host's scheduler ran last.
    rendezvous_skew_s: float = 0.0

    # Memory bandwidth by the bytes an instruction moves: (bytes, rate)
    # points, log-interpolated; `memory_bandwidth` where there are none.
    bandwidth_curve: tuple[tuple[float, float], ...] = ()
    # Bytes per second of large slices of larger arrays read out of their
    # layout's order (through a transpose: `costs.Cost.sliced`); as any
    # other bytes where None.
    sliced_strided_bandwidth: float | None = None
    # FLOPs per second of matrix products by their size (`Cost.products`
    # of one instruction): (flops, rate) points, log-interpolated;
    # `peak_flops` where there are none. A GPU reaches its peak only with
    # large products.
    flops_curve: tuple[tuple[float, float], ...] = ()
    # The same for products of 32- or 64-bit floats (`Cost.wide`), where
    # they differ (a GPU's f32 products: TF32): a rate, and by size.
    wide_flops: float | None = None
    wide_curve: tuple[tuple[float, float], ...] = ()
    # Once per execution for each array it returns (the runtime makes each
    # result buffer), counted into `launch_s`'s part of the step.
    output_s: float = 0.0
    # Each trip of a while loop beyond its instructions (the runtime reads
    # the condition back: a GPU's host waits for it).
    loop_trip_s: float = 0.0

    def bandwidth(self, nbytes: float) -> float:
        return along(self.bandwidth_curve, nbytes, self.memory_bandwidth)

    def seconds(self, flops: float, transcendentals: float, nbytes: float,
                sliced: float = 0.0, wide: float = 0.0,
                products: float = 0.0) -> float:
        products = max(products, wide)
        narrow = products - wide
        compute = (flops - products) / self.peak_flops
        if narrow:
            compute += narrow / along(self.flops_curve, narrow, self.peak_flops)
        if wide:
            compute += wide / along(self.wide_curve, wide,
                                    self.wide_flops or self.peak_flops)
        compute += transcendentals / (self.transcendentals or self.peak_flops)
        if not nbytes:
            return self.overhead_s + compute
        stream = self.bandwidth(nbytes)
        memory = nbytes / stream
        if sliced and self.sliced_strided_bandwidth:
            sliced = min(sliced, nbytes)
            memory += sliced / self.sliced_strided_bandwidth - sliced / stream
        return self.overhead_s + max(compute, memory)


def along(curve: tuple[tuple[float, float], ...], x: float, default: float) -> float:
    """The rate at `x` on `curve`'s (x, rate) points, log-interpolated and
    held at its ends; `default` where it has none."""
    if not curve:
        return default
    if x <= curve[0][0]:
        return curve[0][1]
    for (b0, r0), (b1, r1) in zip(curve, curve[1:]):
        if x <= b1:
            t = math.log(x / b0) / math.log(b1 / b0)
            return math.exp(math.log(r0) + t * (math.log(r1) - math.log(r0)))
    return curve[-1][1]


class Event(NamedTuple):
    """One interval of the predicted timeline."""

    name: str                    # the HLO instruction
    opcode: str
    track: str                   # "compute" or "collectives"
    start_s: float
    duration_s: float
    iteration: tuple[int, ...] = ()   # indices of the loops around it
    repeats: int = 1             # >1: a summary of that many iterations
    collective: str | None = None     # the report's collective, by name
    source: str | None = None    # the user's file:line (compute events)


@dataclass
class Step:
    """The simulated step: its time and what it is made of."""

    step_s: float = 0.0
    compute_s: float = 0.0
    flops: float = 0.0             # every run of every instruction
    bytes_accessed: float = 0.0
    untimed_s: float = 0.0         # of compute_s: what has no cost to read
    launch_s: float = 0.0          # the runtime's start of the execution
    exposed_comm_s: float = 0.0
    overlapped_comm_s: float = 0.0
    # Instructions with no cost to read, by opcode: how many.
    untimed: dict[str, int] = field(default_factory=dict)
    unknown_trips: int = 0
    events: list[Event] = field(default_factory=list)
    dropped_events: int = 0

    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "step_s": self.step_s, "launch_s": self.launch_s,
            "compute_s": self.compute_s,
            "exposed_comm_s": self.exposed_comm_s,
            "overlapped_comm_s": self.overlapped_comm_s,
        }
        if self.untimed:
            d["untimed"] = {"instructions": dict(sorted(self.untimed.items())),
                            "min_s": self.untimed_s}
        if self.unknown_trips:
            d["unknown_trip_counts"] = self.unknown_trips
        return d


# What an instruction's runs after its first take (`_Walk.computation`).
_SEEN, _IDLE, _COMPUTE, _OTHER = range(4)

# What the walk follows into the computations they call.
_CALLERS = {"while", "call", "async-start", "conditional", "fusion"}


class _Walk:
    def __init__(self, view: HloModuleView, rates: Rates,
                 collective_s: Callable[[Instruction], tuple[float, str | None]],
                 source_of: Callable[[Instruction], str | None] | None = None):
        self.view = view
        self.source_of = source_of
        self.rates = rates
        self.collective_s = collective_s
        self.costs = Costs(view)
        self.timed: dict[str, array] = {}
        self.kinds: dict[str, bytearray] = {}
        self.step = Step()
        self.now = 0.0             # the compute stream's clock
        self.comm_free = 0.0       # when the collective stream is free
        # start (or chain) -> (end, seconds, seconds exposed already)
        self.pending: dict = {}
        # Asynchronous fusion chains started (`tpufusions.chain`).
        self.chains: set[tuple[str, str]] = set()
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
        if len(self.step.events) >= MAX_EVENTS:
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
        kinds = self.kinds[name]
        for i, inst in enumerate(body):
            kind = kinds[i]
            if kind == _IDLE:
                continue
            if kind == _COMPUTE:
                self.compute(inst, iteration, timed[3 * i], timed[3 * i + 1],
                             timed[3 * i + 2])
                continue
            kinds[i] = self.instruction(inst, iteration, depth, timed, 3 * i)

    def instruction(self, inst: Instruction, iteration, depth, timed=None,
                    at: int = 0) -> int:
        """Runs `inst`; says what its later runs take."""
        op = inst.opcode
        if op in FREE:
            return _IDLE
        called = dict(inst.called_computations()) if op in _CALLERS else {}
        if op == "while":
            self.loop(inst, called, iteration, depth)
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
            return _IDLE
        kind = _COMPUTE
        if op == "fusion":
            # A fusion holding a collective (a TPU's collective fusions): the
            # collective is timed as the report times it, as if synchronous,
            # then the fusion's own work.
            # One of libtpu's asynchronous collective fusions
            # (`tpufusions`): its start starts the collective, its done
            # waits for it, the fusions between only compute.
            fused = called.get("calls", "")
            if self.holds_collectives(fused):
                role = tpufusions.role(self.view, inst)
                for inner in self.view.instructions_of(fused):
                    if collective_kind(inner) is None:
                        continue
                    chain = tpufusions.chain(inner)
                    if chain is not None and role == tpufusions.DONE:
                        if chain in self.pending:
                            self.finish(*self.pending.pop(chain))
                        kind = _OTHER
                    elif chain is None or role == tpufusions.START \
                            or chain not in self.chains:
                        if chain is not None:
                            self.chains.add(chain)
                        self.collective(inner, iteration, chain
                                        if role == tpufusions.START else None)
                        kind = _OTHER
        unknown = op == "custom-call" and not self.costs.known(inst)
        if unknown:
            # Its arithmetic is unknown: timed by its memory traffic alone,
            # a lower bound the step reports apart.
            self.untimed.add((op, inst.computation, inst.name))
        if timed is not None and timed[at] == timed[at]:
            seconds, work, moved = timed[at], timed[at + 1], timed[at + 2]
        else:
            cost = Cost(bytes=self.costs.memory(inst)) if unknown \
                else self.costs.of(inst, called.get("calls"))
            seconds = self.rates.seconds(cost.flops, cost.transcendentals,
                                         cost.bytes, cost.sliced, cost.wide,
                                         cost.products)
            work, moved = cost.flops + cost.transcendentals, cost.bytes
            if timed is not None:
                timed[at], timed[at + 1], timed[at + 2] = seconds, work, moved
        if unknown:
            self.step.untimed_s += seconds
            kind = _OTHER
        self.compute(inst, iteration, seconds, work, moved)
        return kind

    def compute(self, inst: Instruction, iteration, seconds: float,
                work: float, moved: float) -> None:
        self.event(inst, "compute", self.now, seconds, iteration)
        self.now += seconds
        self.step.compute_s += seconds
        self.step.flops += work
        self.step.bytes_accessed += moved

    def collective(self, inst, iteration, chain=None):
        """Runs collective `inst`; one that `-start`s or starts an
        asynchronous fusion `chain` runs beside compute until its done."""
        seconds, name = self.collective_s(_wrapped(self.view, inst) or inst)
        if not self.woken:
            self.woken = True
            seconds += self.rates.first_collective_s
        if self.rates.rendezvous_skew_s:
            seconds += min(self.rates.rendezvous_skew_s,
                           self.step.compute_s - self.computed)
            self.computed = self.step.compute_s
        start = max(self.now, self.comm_free)
        end = start + seconds
        self.comm_free = end
        self.event(inst, "collectives", start, seconds, iteration, collective=name)
        if inst.opcode.endswith("-start") or chain is not None:
            self.pending[chain or inst.name] = (end, seconds, 0.0)
            return
        # Compute stops until it ends; while it waits for the stream, the
        # asynchronous ones still on it are what is exposed.
        for other, (until, took, exposed) in list(self.pending.items()):
            shared = min(until, start) - max(until - took, self.now)
            if shared > 0:
                self.pending[other] = (until, took, exposed + shared)
        self.step.exposed_comm_s += end - self.now
        self.now = end

    def done(self, inst):
        start = inst.operands[0] if inst.operands else None
        if start not in self.pending:
            return
        self.finish(*self.pending.pop(start))

    def finish(self, end: float, seconds: float, exposed: float) -> None:
        """An asynchronous collective's end waited for: what was not waited
        for (now or by a collective queued behind it) ran beside compute."""
        waited = max(0.0, end - self.now)
        self.step.exposed_comm_s += waited
        self.step.overlapped_comm_s += max(0.0, seconds - waited - exposed)
        self.now = max(self.now, end)

    def loop(self, inst, called, iteration, depth):
        trips = loops.trip_count(self.view, inst)
        if trips is None:
            self.step.unknown_trips += 1
            trips = 1
        body, cond = called.get("body", ""), called.get("condition", "")
        # One iteration past the drawn ones is drawn too: a summary holds two
        # or more.
        drawn = trips if trips <= DRAWN_TRIPS + 1 else DRAWN_TRIPS
        if self.draw and drawn > 1:
            # No more iterations drawn than the timeline has room for: those
            # it could not show are summarized.
            room = MAX_EVENTS - len(self.step.events)
            size = len(self.view.instructions_of(body))
            if size * drawn > room:
                drawn = max(1, room // max(1, size))
        for i in range(drawn):
            self.computation(cond, iteration + (i,), depth + 1)
            self.trip()
            self.computation(body, iteration + (i,), depth + 1)
        rest = trips - drawn
        if rest <= 0:
            self.computation(cond, iteration + (trips,), depth + 1)
            return
        # The other iterations cost what one more does: simulated once,
        # undrawn, and counted `rest` times.
        before = self.totals()
        drawing, self.draw = self.draw, False
        self.computation(cond, iteration + (drawn,), depth + 1)
        self.trip()
        self.computation(body, iteration + (drawn,), depth + 1)
        self.draw = drawing
        after = self.totals()
        self.set_totals([b + (a - b) * rest for b, a in zip(before, after)])
        start = before[0]
        self.comm_free = max(self.comm_free, self.now)
        if self.draw and self.now > start:
            self.step.events.append(Event(inst.name, "while", "compute", start,
                                          self.now - start,
                                          iteration + (drawn,), rest))
        self.computation(cond, iteration + (trips,), depth + 1)

    def trip(self) -> None:
        """What one trip of a loop takes beyond its instructions."""
        self.now += self.rates.loop_trip_s
        self.step.compute_s += self.rates.loop_trip_s

    _TOTALS = ("compute_s", "exposed_comm_s", "overlapped_comm_s", "flops",
               "bytes_accessed", "untimed_s")

    def totals(self) -> list[float]:
        """The clock and what the step has added up so far."""
        return [self.now] + [getattr(self.step, f) for f in self._TOTALS]

    def set_totals(self, values) -> None:
        self.now = values[0]
        for f, value in zip(self._TOTALS, values[1:]):
            setattr(self.step, f, value)

    def branches(self, inst, called, iteration, depth):
        """A conditional costs its costliest branch."""
        best = None
        start, free, drawn = self.totals(), self.comm_free, len(self.step.events)
        for role, target in inst.called_computations():
            self.set_totals(start)
            self.comm_free = free
            del self.step.events[drawn:]
            self.computation(target, iteration, depth + 1)
            state = (self.totals(), self.comm_free, self.step.events[drawn:])
            if best is None or state[0][0] > best[0][0]:
                best = state
        if best is not None:
            self.set_totals(best[0])
            self.comm_free = best[1]
            del self.step.events[drawn:]
            self.step.events.extend(best[2])


def rates(placement, devices: int, cores: int | None = None) -> Rates | None:
    """What one device of `placement`'s target computes per second: the
    profile's measured compute numbers where it has them, else its peak
    numbers; None where it has neither. A CPU host's numbers are for one
    device while as many run as measured nearest to `devices` (its
    `by_devices`), or else for the whole host, shared by the simulated
    devices that run on its cores."""
    profile = placement.profile
    cpu = placement.target.kind == "cpu"
    if cpu:
        profile = profile.for_devices(devices)
    found = profile.compute
    if found.get("flops") and found.get("bandwidth"):
        bandwidth = found["bandwidth"]
        curve = _points(bandwidth) if isinstance(bandwidth, list) else ()
        flat = curve[-1][1] if curve else float(bandwidth)
        overhead = found.get("op_overhead", 0.0)
        if cpu and not found.get("devices"):
            cores = cores or os.cpu_count() or 1
            share = max(1, devices)
            return Rates(found["flops"] / share, flat / share,
                         overhead * max(1.0, devices / cores),
                         launch_s=profile.launch)
        return Rates(found["flops"], flat, overhead, launch_s=profile.launch,
                     bandwidth_curve=curve,
                     sliced_strided_bandwidth=found.get("sliced_strided_bandwidth"),
                     flops_curve=_points(found.get("flops_by_size")),
                     wide_flops=found.get("flops_f32"),
                     wide_curve=_points(found.get("flops_f32_by_size")),
                     output_s=found.get("output", 0.0),
                     loop_trip_s=found.get("loop_trip", 0.0),
                     first_collective_s=found.get("first_collective", 0.0),
                     rendezvous_skew_s=found.get("rendezvous_skew", 0.0))
    if profile.peak_flops and profile.hbm_bandwidth:
        return Rates(profile.peak_flops, profile.hbm_bandwidth,
                     launch_s=profile.launch)
    return None


def _points(found) -> tuple[tuple[float, float], ...]:
    """A profile's `[x, rate]` points, in order of x."""
    return tuple((float(x), float(r)) for x, r in sorted(found or ()))


def _wrapped(view: HloModuleView, inst: Instruction) -> Instruction | None:
    """The collective an `async-start` runs (the report names it), if any."""
    if inst.opcode != "async-start":
        return None
    calls = dict(inst.called_computations()).get("calls")
    return next((i for i in view.instructions_of(calls or "")
                 if collective_kind(i) is not None), None)


def _wraps_collective(view: HloModuleView, inst: Instruction, called) -> bool:
    """An `async-start` whose computation is one collective."""
    if inst.opcode != "async-start" or not called.get("calls"):
        return False
    return any(collective_kind(i) is not None
               for i in view.instructions_of(called["calls"]))


def simulate(view: HloModuleView, rates: Rates,
             collective_s: Callable[[Instruction], tuple[float, str | None]],
             source_of: Callable[[Instruction], str | None] | None = None
             ) -> Step:
    """The step of `view`'s entry computation on one device: `collective_s`
    gives each collective instruction's seconds per run and the report's
    name for it, `source_of` a drawn compute instruction's user line."""
    walk = _Walk(view, rates, collective_s, source_of)
    launch = rates.launch_s
    if rates.output_s:
        root = view.root(view.entry)
        launch += rates.output_s * (len(shape_leaves(root.shape)) if root else 1)
    walk.now = walk.comm_free = walk.step.launch_s = launch
    walk.computation(view.entry, ())
    # What is still in flight at the end is waited for.
    for start in list(walk.pending):
        walk.finish(*walk.pending.pop(start))
    walk.step.step_s = walk.now
    for op, _, _ in walk.untimed:
        walk.step.untimed[op] = walk.step.untimed.get(op, 0) + 1
    return walk.step
