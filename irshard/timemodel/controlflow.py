"""The walk's control flow: a loop's trips (drawn on the timeline up to
`DRAWN_TRIPS`, the rest simulated once and counted) and a conditional's
costliest branch, as a mixin of the schedule's walk (`schedule._Walk`),
which gives `computation`, the clock, the step and its parts."""

from __future__ import annotations

from irshard.timemodel.step import Event
from irshard.xla import loops

# Iterations of a loop drawn one by one on the timeline; the rest of its
# trips are one summary event each.
DRAWN_TRIPS = 3
# Events kept for the timeline, at most.
MAX_EVENTS = 20000
# Where a loop's trips are counted among the step's sources.
TRIPS = "loop-trips"


class ControlFlow:
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
        parts, done = before[-1], after[-1]
        self.set_totals([b + (a - b) * rest for b, a in zip(before[:-1], after[:-1])]
                        + [{k: parts.get(k, 0.0) + (v - parts.get(k, 0.0)) * rest
                            for k, v in done.items()}])
        start = before[0]
        self.comm_free = {k: max(v, self.now) for k, v in self.comm_free.items()}
        if self.draw and self.now > start:
            self.step.events.append(Event(inst.name, "while", "compute", start,
                                          self.now - start,
                                          iteration + (drawn,), rest))
        self.computation(cond, iteration + (trips,), depth + 1)

    def trip(self) -> None:
        """What one trip of a loop takes beyond its instructions."""
        if not self.rates.loop_trip_s:
            return
        self.now += self.rates.loop_trip_s
        self.step.compute_s += self.rates.loop_trip_s
        self.add(("kind", "loop trips"), self.rates.loop_trip_s)
        self.add(("source", TRIPS), self.rates.loop_trip_s)

    _TOTALS = ("compute_s", "exposed_comm_s", "overlapped_comm_s", "flops",
               "bytes_accessed", "untimed_s")

    def totals(self) -> list:
        """The clock and what the step has added up so far, its parts
        last."""
        return [self.now] + [getattr(self.step, f) for f in self._TOTALS] \
            + [dict(self.parts)]

    def set_totals(self, values) -> None:
        self.now = values[0]
        for f, value in zip(self._TOTALS, values[1:-1]):
            setattr(self.step, f, value)
        self.parts = dict(values[-1])

    def branches(self, inst, called, iteration, depth):
        """A conditional costs its costliest branch."""
        best = None
        start, free, drawn = self.totals(), dict(self.comm_free), len(self.step.events)
        for role, target in inst.called_computations():
            self.set_totals(start)
            self.comm_free = dict(free)
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
