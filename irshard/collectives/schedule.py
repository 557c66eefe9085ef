"""One step of a compiled program, simulated in the order it runs.

The executable's HLO is scheduled: each computation's instructions are in
the order a device runs them (`hlo.HloModuleView` keeps that order). The
simulation walks the entry computation in that order with two clocks, the
device's compute stream and its collective stream:

- a compute instruction (a fusion, a dot, a copy) takes
  `overhead + max(flops / peak_flops, bytes / memory_bandwidth)`, its flops
  counted as XLA's cost analysis counts them (two per multiply-add of a
  dot, one per element of an elementwise op, transcendentals apart) and its
  bytes the operands it reads and the result it writes;
- a collective takes the link model's time (`cost.CostModel`); a
  synchronous one stops compute until it ends (exposed), an async
  `-start` runs beside the compute scheduled before its `-done`, which
  waits only for what is left of it;
- a `while` runs its condition and body as many times as it loops (its
  trip count; once where that is unknown, and the step says so); calls,
  conditionals (their costliest branch) and async computations are
  followed.

What has no cost to read (a custom call) is timed as nothing, and the step
says how many such instructions it holds. The events of the walk, loops
drawn up to `DRAWN_TRIPS` iterations and summarized past them, make the
predicted timeline (`trace.py`).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any, Callable

from irshard.collectives import loops
from irshard.collectives.analysis import collective_kind
from irshard.xla.hlo import ArrayShape, HloModuleView, Instruction, shape_bytes, shape_leaves

# Iterations of a loop drawn one by one on the timeline; the rest of its
# trips are one summary event each.
DRAWN_TRIPS = 3
# Events kept for the timeline, at most.
MAX_EVENTS = 20000

# What moves no data and computes nothing.
_FREE = frozenset({
    "parameter", "constant", "get-tuple-element", "tuple", "bitcast",
    "after-all", "partition-id", "replica-id", "opt-barrier",
    "add-dependency", "domain", "get-dimension-size", "set-dimension-size",
})
_TRANSCENDENTAL = frozenset({
    "exponential", "exponential-minus-one", "log", "log-plus-one", "tanh",
    "logistic", "sqrt", "rsqrt", "cbrt", "power", "sine", "cosine", "tan",
    "atan2", "erf",
})
# Ops that move data without arithmetic.
_MOVES = frozenset({
    "copy", "copy-start", "transpose", "broadcast", "slice", "dynamic-slice",
    "dynamic-update-slice", "concatenate", "pad", "reshape", "reverse",
    "gather", "scatter", "iota", "convert", "select", "sort",
})
# Computations these ops apply per element: counted by the op itself.
_APPLIES = frozenset({"reduce", "reduce-window", "scatter", "sort", "map",
                      "select-and-scatter", "all-reduce", "reduce-scatter",
                      "all-reduce-start"})


@dataclass(frozen=True)
class Rates:
    """What a device does per second, and what each instruction costs on
    top (the runtime's dispatch of a kernel or thunk)."""

    peak_flops: float
    memory_bandwidth: float
    overhead_s: float = 0.0
    transcendentals: float | None = None     # per second; peak_flops if None

    def seconds(self, flops: float, transcendentals: float, nbytes: float) -> float:
        compute = flops / self.peak_flops
        compute += transcendentals / (self.transcendentals or self.peak_flops)
        return self.overhead_s + max(compute, nbytes / self.memory_bandwidth)


@dataclass(frozen=True)
class Cost:
    flops: float = 0.0
    transcendentals: float = 0.0
    bytes: float = 0.0

    def __add__(self, other: "Cost") -> "Cost":
        return Cost(self.flops + other.flops,
                    self.transcendentals + other.transcendentals,
                    self.bytes + other.bytes)


@dataclass(frozen=True)
class Event:
    """One interval of the predicted timeline."""

    name: str                    # the HLO instruction
    opcode: str
    track: str                   # "compute" or "collectives"
    start_s: float
    duration_s: float
    iteration: tuple[int, ...] = ()   # indices of the loops around it
    repeats: int = 1             # >1: a summary of that many iterations
    collective: str | None = None     # the report's collective, by name


@dataclass
class Step:
    """The simulated step: its time and what it is made of."""

    step_s: float = 0.0
    compute_s: float = 0.0
    exposed_comm_s: float = 0.0
    overlapped_comm_s: float = 0.0
    untimed: dict[str, int] = field(default_factory=dict)   # opcode -> count
    unknown_trips: int = 0
    events: list[Event] = field(default_factory=list)
    dropped_events: int = 0

    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "step_s": self.step_s, "compute_s": self.compute_s,
            "exposed_comm_s": self.exposed_comm_s,
            "overlapped_comm_s": self.overlapped_comm_s,
        }
        if self.untimed:
            d["untimed"] = dict(sorted(self.untimed.items()))
        if self.unknown_trips:
            d["unknown_trip_counts"] = self.unknown_trips
        return d


def _elements(shape) -> int:
    return sum(math.prod(leaf.dims) for leaf in shape_leaves(shape))


def _dims(text: str) -> list[int]:
    return [int(d) for d in re.findall(r"\d+", text or "")]


class _Costs:
    """Flops, transcendentals and bytes of instructions, as XLA's cost
    analysis counts them, each computation's read once."""

    def __init__(self, view: HloModuleView):
        self.view = view
        self._inner: dict[str, Cost] = {}

    def shape_of(self, name: str, computation: str):
        inst = self.view.get(name, computation)
        return inst.shape if inst is not None else ()

    def arithmetic(self, inst: Instruction) -> Cost:
        """What `inst` computes, without memory traffic."""
        op = inst.opcode
        if op in _FREE or op in _MOVES:
            return Cost()
        if op == "fusion":
            return self.inner(dict(inst.called_computations()).get("calls", ""))
        out = _elements(inst.shape)
        if op == "dot":
            lhs = self.shape_of(inst.operands[0], inst.computation) \
                if inst.operands else ()
            dims = lhs.dims if isinstance(lhs, ArrayShape) else ()
            k = math.prod(dims[d] for d in _dims(inst.attrs.get("lhs_contracting_dims"))
                          if d < len(dims))
            return Cost(flops=2.0 * out * k)
        if op == "convolution":
            kernel = self.shape_of(inst.operands[1], inst.computation) \
                if len(inst.operands) > 1 else ()
            size = math.prod(kernel.dims) if isinstance(kernel, ArrayShape) else 1
            features = max(1, (kernel.dims[-1] if isinstance(kernel, ArrayShape)
                               and kernel.dims else 1))
            return Cost(flops=2.0 * out * size / features)
        if op in ("reduce", "reduce-window", "all-reduce", "reduce-scatter"):
            inputs = sum(_elements(self.shape_of(o, inst.computation))
                         for o in inst.operands[:max(1, len(inst.operands) // 2)])
            return Cost(flops=float(inputs))
        if op in _TRANSCENDENTAL:
            return Cost(transcendentals=float(out))
        return Cost(flops=float(out))

    def inner(self, computation: str) -> Cost:
        """What a fused computation computes."""
        if computation not in self._inner:
            total = Cost()
            for inst in self.view.instructions_of(computation):
                total = total + self.arithmetic(inst)
            self._inner[computation] = total
        return self._inner[computation]

    def memory(self, inst: Instruction) -> float:
        """Bytes `inst` reads and writes."""
        if inst.opcode in _FREE:
            return 0.0
        read = sum(shape_bytes(self.shape_of(o, inst.computation))
                   for o in inst.operands)
        return float(read + shape_bytes(inst.shape))

    def of(self, inst: Instruction) -> Cost:
        found = self.arithmetic(inst)
        return Cost(found.flops, found.transcendentals, self.memory(inst))


class _Walk:
    def __init__(self, view: HloModuleView, rates: Rates,
                 collective_s: Callable[[Instruction], tuple[float, str | None]]):
        self.view = view
        self.rates = rates
        self.collective_s = collective_s
        self.costs = _Costs(view)
        self.step = Step()
        self.now = 0.0             # the compute stream's clock
        self.comm_free = 0.0       # when the collective stream is free
        self.pending: dict[str, tuple[float, float]] = {}   # start -> (end, dur)
        self.draw = True

    def event(self, inst, track, start, duration, iteration, repeats=1,
              collective=None):
        if not self.draw or duration <= 0:
            return
        if len(self.step.events) >= MAX_EVENTS:
            self.step.dropped_events += 1
            return
        self.step.events.append(Event(inst.name, inst.opcode, track, start,
                                      duration, iteration, repeats, collective))

    def computation(self, name: str, iteration: tuple[int, ...], depth: int = 0):
        if depth > 64:
            return
        for inst in self.view.instructions_of(name):
            self.instruction(inst, iteration, depth)

    def instruction(self, inst: Instruction, iteration, depth):
        op = inst.opcode
        called = dict(inst.called_computations())
        if op == "while":
            self.loop(inst, called, iteration, depth)
            return
        if op in ("call", "async-start") and collective_kind(inst) is None \
                and not _wraps_collective(self.view, inst, called):
            target = called.get("to_apply") or called.get("calls")
            if target:
                self.computation(target, iteration, depth + 1)
            return
        if op == "conditional":
            self.branches(inst, called, iteration, depth)
            return
        if collective_kind(inst) is not None or _wraps_collective(self.view, inst, called):
            self.collective(inst, iteration)
            return
        if op.endswith("-done"):
            self.done(inst)
            return
        if op == "custom-call":
            self.step.untimed[op] = self.step.untimed.get(op, 0) + 1
            return
        if op in _FREE or op.endswith("-update"):
            return
        cost = self.costs.of(inst)
        seconds = self.rates.seconds(cost.flops, cost.transcendentals, cost.bytes)
        self.event(inst, "compute", self.now, seconds, iteration)
        self.now += seconds
        self.step.compute_s += seconds

    def collective(self, inst, iteration):
        seconds, name = self.collective_s(inst)
        start = max(self.now, self.comm_free)
        end = start + seconds
        self.comm_free = end
        self.event(inst, "collectives", start, seconds, iteration, collective=name)
        if inst.opcode.endswith("-start"):
            self.pending[inst.name] = (end, seconds)
            return
        self.step.exposed_comm_s += end - self.now
        self.now = end

    def done(self, inst):
        start = inst.operands[0] if inst.operands else None
        if start not in self.pending:
            return
        end, seconds = self.pending.pop(start)
        waited = max(0.0, end - self.now)
        self.step.exposed_comm_s += waited
        self.step.overlapped_comm_s += seconds - min(seconds, waited)
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
        for i in range(drawn):
            self.computation(cond, iteration + (i,), depth + 1)
            self.computation(body, iteration + (i,), depth + 1)
        rest = trips - drawn
        if rest <= 0:
            self.computation(cond, iteration + (trips,), depth + 1)
            return
        # The other iterations cost what one more does: simulated once,
        # undrawn, and counted `rest` times.
        before = (self.now, self.step.compute_s, self.step.exposed_comm_s,
                  self.step.overlapped_comm_s)
        drawing, self.draw = self.draw, False
        self.computation(cond, iteration + (drawn,), depth + 1)
        self.computation(body, iteration + (drawn,), depth + 1)
        self.draw = drawing
        after = (self.now, self.step.compute_s, self.step.exposed_comm_s,
                 self.step.overlapped_comm_s)
        delta = [b - a for a, b in zip(before, after)]
        start = before[0]
        self.now = before[0] + delta[0] * rest
        self.step.compute_s = before[1] + delta[1] * rest
        self.step.exposed_comm_s = before[2] + delta[2] * rest
        self.step.overlapped_comm_s = before[3] + delta[3] * rest
        self.comm_free = max(self.comm_free, self.now)
        if self.draw and delta[0] > 0:
            self.step.events.append(Event(inst.name, "while", "compute", start,
                                          self.now - start,
                                          iteration + (drawn,), rest))
        self.computation(cond, iteration + (trips,), depth + 1)

    def branches(self, inst, called, iteration, depth):
        """A conditional costs its costliest branch."""
        best = None
        start = (self.now, self.step.compute_s, self.step.exposed_comm_s,
                 self.step.overlapped_comm_s, self.comm_free, len(self.step.events))
        for role, target in inst.called_computations():
            self.now, self.step.compute_s, self.step.exposed_comm_s, \
                self.step.overlapped_comm_s, self.comm_free = start[:5]
            del self.step.events[start[5]:]
            self.computation(target, iteration, depth + 1)
            state = (self.now, self.step.compute_s, self.step.exposed_comm_s,
                     self.step.overlapped_comm_s, self.comm_free,
                     list(self.step.events[start[5]:]))
            if best is None or state[0] > best[0]:
                best = state
        if best is not None:
            self.now, self.step.compute_s, self.step.exposed_comm_s, \
                self.step.overlapped_comm_s, self.comm_free = best[:5]
            del self.step.events[start[5]:]
            self.step.events.extend(best[5])


def rates(placement, devices: int, cores: int | None = None) -> Rates | None:
    """What one device of `placement`'s target computes per second: the
    profile's measured compute numbers where it has them (a CPU host's,
    shared by the simulated devices that run on its cores), else its peak
    numbers; None where it has neither."""
    profile = placement.profile
    found = profile.compute
    if found.get("flops") and found.get("bandwidth"):
        if placement.target.kind == "cpu":
            import os
            cores = cores or os.cpu_count() or 1
            share = max(1, devices)
            return Rates(found["flops"] / share, found["bandwidth"] / share,
                         found.get("op_overhead", 0.0) * max(1.0, devices / cores))
        return Rates(found["flops"], found["bandwidth"], found.get("op_overhead", 0.0))
    if profile.peak_flops and profile.hbm_bandwidth:
        return Rates(profile.peak_flops, profile.hbm_bandwidth)
    return None


def _wraps_collective(view: HloModuleView, inst: Instruction, called) -> bool:
    """An `async-start` whose computation is one collective."""
    if inst.opcode != "async-start" or not inst.wrapped:
        return False
    wrapped = view.instructions.get(inst.wrapped)
    return wrapped is not None and collective_kind(wrapped) is not None


def simulate(view: HloModuleView, rates: Rates,
             collective_s: Callable[[Instruction], tuple[float, str | None]]
             ) -> Step:
    """The step of `view`'s entry computation on one device: `collective_s`
    gives each collective instruction's seconds per run and the report's
    name for it."""
    walk = _Walk(view, rates, collective_s)
    walk.computation(view.entry, ())
    # What is still in flight at the end is waited for.
    for start in list(walk.pending):
        end, seconds = walk.pending.pop(start)
        waited = max(0.0, end - walk.now)
        walk.step.exposed_comm_s += waited
        walk.step.overlapped_comm_s += seconds - min(seconds, waited)
        walk.now = max(walk.now, end)
    walk.step.step_s = walk.now
    return walk.step
