"""XLA's buffer assignment and the buffers' live ranges, as XLA dumps them
after optimizing a module (`*after_optimizations-buffer-assignment.txt`,
`*after_optimizations-live-range.txt`, on every backend).

The buffer assignment lists the allocations an executable holds while it
runs, each with what it is and the values (instruction results) placed in
it::

    allocation 1: size 524288, parameter 0, shape |f32[128,1024]| at ShapeIndex {}, maybe-live-out:
     value: <68 param @0> (size=524288,offset=0): f32[128,1024]{1,0:T(8,128)}
    allocation 7: size 82432, preallocated-temp:
     value: <69 copy-start.1{} @0> (size=512,offset=81920): (f32[128,1024]{...}, ...)

The live ranges give the schedule and each value's first and last position
in it (`name{index}:start-end`). XLA's parser of neither exists in Python;
the forms read here are every one XLA prints (`BufferAllocation::ToString`,
`HloLiveRange::ToString`), tested on CPU and TPU dumps of both JAX versions.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_ALLOCATION = re.compile(r"allocation (\d+): size (\d+)(.*):\s*$")
_PARAMETER = re.compile(r"parameter (\d+), shape \|.*?\| at ShapeIndex \{([\d,\s]*)\}")
_COLOR = re.compile(r"(?:^|, )color (\d+)")
# `<ID NAME{INDEX} @POSITION>`: the index is left out for a non-tuple value
# by some printers; the position is the value's memory space.
_VALUE = re.compile(r"^\s*value: <\d+ (\S+?)(\{[\d,\s]*\})? @(\d+)> "
                    r"\(size=(\d+),offset=(\d+)\): (.*)$")
_RANGE = re.compile(r"^\s*(\S+?\{[\d,\s]*\}):(\d+)-(\d+)\s*$")
_SEQUENCE = re.compile(r"^\s*(\d+):(\S+)\s*$")


@dataclass(frozen=True)
class BufferValue:
    """An instruction's result (or one element of a tuple result) placed in
    an allocation."""

    key: str                  # `name{index}`, as the live ranges name it
    instruction: str
    size: int
    offset: int
    shape: str


@dataclass(frozen=True)
class Allocation:
    index: int
    size: int
    color: int                # memory space: 0 is the device's main memory
    parameter: int | None     # the entry parameter it holds
    live_out: bool            # it may hold (part of) the result
    thread_local: bool
    constant: bool
    values: tuple[BufferValue, ...]

    @property
    def kind(self) -> str:
        """parameter, output, constant, thread-local or temporary."""
        if self.parameter is not None:
            return "parameter"
        if self.live_out:
            return "output"
        if self.constant:
            return "constant"
        if self.thread_local:
            return "thread-local"
        return "temporary"


@dataclass(frozen=True)
class LiveRanges:
    sequence: tuple[str, ...]                 # the schedule, in order
    ranges: dict[str, tuple[int, int]]        # value key -> (first, last)


def _key(name: str, index: str | None) -> str:
    return f"{name}{index if index else '{}'}".replace(" ", "")


def parse_assignment(text: str) -> list[Allocation]:
    """The allocations of a buffer assignment dump."""
    allocations: list[Allocation] = []
    current: dict | None = None
    values: list[BufferValue] = []

    def close() -> None:
        if current is not None:
            allocations.append(Allocation(values=tuple(values), **current))

    for line in text.splitlines():
        m = _ALLOCATION.match(line)
        if m:
            close()
            rest = m.group(3)
            p = _PARAMETER.search(rest)
            c = _COLOR.search(rest)
            current = dict(index=int(m.group(1)), size=int(m.group(2)),
                           color=int(c.group(1)) if c else 0,
                           parameter=int(p.group(1)) if p else None,
                           live_out="maybe-live-out" in rest,
                           thread_local="thread-local" in rest,
                           constant=", constant" in rest)
            values = []
            continue
        if current is None:
            continue
        v = _VALUE.match(line)
        if v:
            values.append(BufferValue(_key(v.group(1), v.group(2)), v.group(1),
                                      int(v.group(4)), int(v.group(5)), v.group(6)))
        elif line.strip() and not line.startswith(" "):
            close()                  # the summary after the allocations
            current = None
    close()
    return allocations


def parse_live_ranges(text: str) -> LiveRanges:
    """The schedule and the values' live ranges of a live-range dump."""
    sequence: list[str] = []
    ranges: dict[str, tuple[int, int]] = {}
    section = None
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("InstructionSequence"):
            section = "sequence"
            continue
        if stripped.startswith("BufferLiveRange"):
            section = "ranges"
            continue
        if stripped.endswith(":") and not _SEQUENCE.match(line):
            section = None           # `Live ranges at N (peak):` and after
            continue
        if section == "sequence":
            m = _SEQUENCE.match(line)
            if m:
                sequence.append(m.group(2))
        elif section == "ranges":
            m = _RANGE.match(line)
            if m:
                ranges[m.group(1).replace(" ", "")] = (int(m.group(2)),
                                                       int(m.group(3)))
    return LiveRanges(tuple(sequence), ranges)


def covered(extents: list[tuple[int, int]]) -> int:
    """Bytes covered by the `(offset, size)` extents of one allocation:
    values that share bytes (an in-place update, a tuple and its element)
    count once."""
    total = 0
    end = -1
    for offset, size in sorted(extents):
        start = max(offset, end)
        if offset + size > start:
            total += offset + size - start
        end = max(end, offset + size)
    return total
