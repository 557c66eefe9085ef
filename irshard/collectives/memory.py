"""Where a device's memory goes at its peak, read from XLA's own buffer
assignment (`irshard.xla.buffers`).

An executable holds its allocations in the device's main memory (memory
space 0; on TPU, HBM) for the whole run: the entry parameters, the results,
the constants and the blocks XLA packs the temporaries into. That sum is
the per-device footprint (what XLA's memory usage report totals for the
memory space), and it is what this module breaks down:

- every parameter allocation, as the input it holds: `parameter` or
  `optimizer-state` where its path says so, `donated` for another donated
  input, else `argument`;
- every result allocation not shared with a donated input: `output`;
- constants: `temporary`, named by their instruction;
- each temporary block at the moment (a position in XLA's schedule) where
  the values live in it cover the most bytes, as those values: a
  collective's buffer (`collective-buffer`), a forward value that lives into
  the backward pass (`activation`), anything else (`temporary`); the bytes
  of the block no listed value holds at that moment are one `temporary`
  row without an instruction (fragmentation, and on TPU what XLA's memory
  space assignment reserves there).

- fusions' thread-local scratch, as one `temporary` row.

The parts sum to the allocations' sizes exactly, by construction; XLA's
memory analysis is compared with them in the report's notes. Other memory
spaces (a TPU's VMEM) are not the device's main memory and are not
counted.
"""

from __future__ import annotations

import re
from typing import Any, Sequence

from irshard.core.frames import UserCode
from irshard.reporting.peak import Peak, PeakBuffer
from irshard.xla import buffers

# An optimizer's state by its path (optax's `opt_state`, Flax NNX's
# `optimizer`, Keras' `adam/...`); its moments' own names (`mu`, `nu`) only
# outside a parameters' subtree, where they may name a weight.
_OPTIMIZER = re.compile(r"(^|/)(opt_state|optimizer|optim|opt|adam\w*|"
                        r"momentum|moments?|exp_avg\w*)(/|$)", re.I)
_PARAMETERS = re.compile(r"(^|/)(params?|parameters|weights?|model|variables)(/|$)",
                         re.I)
_MOMENTS = re.compile(r"(^|/)(mu|nu)(/|$)")
_COLLECTIVE = re.compile(r"all-gather|all-reduce|reduce-scatter|all-to-all|"
                         r"collective-permute|collective-broadcast|ragged-all-to-all")
TOP = 10                             # rows of the text report's table


def input_kind(path: str, donated: bool) -> str:
    """What an input holds, by its path: `optimizer-state`, `parameter`,
    else `donated` or `argument`."""
    if _OPTIMIZER.search(path):
        return "optimizer-state"
    if _PARAMETERS.search(path):
        return "parameter"
    if _MOMENTS.search(path):
        return "optimizer-state"
    return "donated" if donated else "argument"


def peak(assignment_text: str, live_range_text: str, inputs: Sequence[Any],
         view=None, resolver: UserCode | None = None) -> Peak:
    """The peak of an executable from XLA's dumps; `inputs` are the entry
    parameters' TensorInfo in order, `view` the optimized module (for the
    instructions' names, op_names and lines)."""
    allocations = [a for a in buffers.parse_assignment(assignment_text)
                   if a.color == 0]
    ranges = buffers.parse_live_ranges(live_range_text)
    locate = _locator(view, resolver)
    found: list[PeakBuffer] = []
    aliased = {a.index for a in allocations
               if a.parameter is not None and a.live_out}
    for a in allocations:
        if a.parameter is not None:
            info = inputs[a.parameter] if a.parameter < len(inputs) else None
            name = info.name if info is not None else f"parameter {a.parameter}"
            donated = bool(info is not None and info.donated) or a.index in aliased
            found.append(PeakBuffer(a.size, input_kind(name, donated), name,
                                    _shape_of(info), is_input=True))
        elif a.live_out or a.constant:
            kind = "output" if a.live_out else "temporary"
            # Named by the value that fills it (the largest, for a tuple).
            held = max(a.values, key=lambda v: v.size, default=None)
            found.append(_buffer(a.size, kind, held, locate, inputs))
    temps = [a for a in allocations if a.kind == "temporary"]
    position, curve = _usage(temps, ranges)
    backward = _in_backward(ranges.sequence, position, locate)
    for a in temps:
        live = [v for v in a.values if position is not None
                and _live(ranges, v.key, position)]
        by_extent: dict[tuple[int, int], list[buffers.BufferValue]] = {}
        for v in live:
            by_extent.setdefault((v.offset, v.size), []).append(v)
        # Values that share bytes (an in-place update, a tuple and its
        # elements) count once: the bytes go to the first and widest.
        used, end = 0, -1
        for offset, size in sorted(by_extent, key=lambda e: (e[0], -e[1])):
            own = offset + size - max(offset, end)
            end = max(end, offset + size)
            if own <= 0:
                continue
            v = by_extent[(offset, size)][0]
            kind = _temp_kind(v, backward, locate)
            found.append(_buffer(own, kind, v, locate, inputs))
            used += own
        if a.size > used:
            found.append(PeakBuffer(a.size - used, "temporary", "",
                                    note="temporary block, no value at the peak"))
    scratch = sum(a.size for a in allocations if a.kind == "thread-local")
    if scratch:
        found.append(PeakBuffer(scratch, "temporary", "",
                                note="fusions' thread-local scratch"))
    found.sort(key=lambda b: (-b.bytes, b.kind, b.name))
    at = ranges.sequence[position] if position is not None \
        and position < len(ranges.sequence) else None
    held = sum(a.size for a in allocations
               if a.kind != "temporary" and a.kind != "thread-local")
    return Peak(sum(b.bytes for b in found), position, at, tuple(found),
                len(ranges.sequence), tuple((p, held + u) for p, u in _sampled(curve)))


def _shape_of(info) -> str:
    if info is None:
        return ""
    return f"{info.dtype}[{','.join(map(str, info.local_shape))}]"


def _live(ranges: buffers.LiveRanges, key: str, position: int) -> bool:
    span = ranges.ranges.get(key)
    return span is not None and span[0] <= position <= span[1]


def _usage(temps: list[buffers.Allocation], ranges: buffers.LiveRanges
           ) -> tuple[int | None, list[tuple[int, int]]]:
    """The schedule position where the values live in the temporary blocks
    hold the most bytes (the first such), and those bytes at every position
    where they change. Values at one extent of a block (an in-place update,
    a loop's carried value) count once while any of them lives: XLA's heap
    places values that live at once at disjoint bytes otherwise."""
    spans: dict[tuple[int, int, int], list[tuple[int, int]]] = {}
    for a in temps:
        for v in a.values:
            span = ranges.ranges.get(v.key)
            if span is not None:
                spans.setdefault((a.index, v.offset, v.size), []).append(span)
    delta: dict[int, int] = {}
    for (_, _, size), found in spans.items():
        found.sort()
        start, end = found[0]
        for s, e in found[1:] + [(None, None)]:
            if s is not None and s <= end + 1:
                end = max(end, e)
                continue
            delta[start] = delta.get(start, 0) + size
            delta[end + 1] = delta.get(end + 1, 0) - size
            if s is not None:
                start, end = s, e
    if not delta:
        return None, []
    delta.setdefault(0, 0)           # the allocations alone, from the start
    curve, used, best, best_at = [], 0, -1, None
    for position in sorted(delta):
        used += delta[position]
        curve.append((position, used))
        if used > best:
            best, best_at = used, position
    return best_at, curve


def _sampled(curve: list[tuple[int, int]], points: int = 400) -> list[list[int]]:
    """At most `points` of the curve, each the largest of its stretch (the
    peak stays on it)."""
    if len(curve) <= points:
        return [list(p) for p in curve]
    step = len(curve) / points
    out = []
    for i in range(points):
        stretch = curve[int(i * step):int((i + 1) * step)] or curve[-1:]
        out.append(list(max(stretch, key=lambda p: p[1])))
    return out


def _locator(view, resolver):
    """name -> (instruction or None, op_name, source)."""
    cache: dict[str, tuple[Any, str | None, Any]] = {}

    def locate(name: str):
        if name in cache:
            return cache[name]
        inst = None
        if view is not None:
            try:
                inst = view.get(name, getattr(view, "entry", ""))
            except Exception:
                inst = None
        op_name = source = None
        if inst is not None:
            from irshard.collectives.analysis import attribute
            if resolver is not None:
                source, _, op_name = attribute(view, inst, resolver, max_depth=1)
            op_name = op_name or inst.metadata.get("op_name")
        cache[name] = (inst, op_name, source)
        return cache[name]
    return locate


def _in_backward(sequence: Sequence[str], position: int | None, locate) -> bool:
    """Whether the instruction at `position` of the schedule belongs to the
    backward pass (its op_name is under `transpose(...)`)."""
    if position is None or position >= len(sequence):
        return False
    _, op_name, _ = locate(sequence[position])
    return bool(op_name and "transpose(" in op_name)


def _temp_kind(v: buffers.BufferValue, backward: bool, locate) -> str:
    """A collective's buffer; a value of the forward pass (JAX names it
    under `jvp(...)`) live in the backward pass (saved for it: an
    activation); else a temporary."""
    inst, op_name, _ = locate(v.instruction)
    opcode = inst.opcode if inst is not None else ""
    if _COLLECTIVE.search(opcode) or _COLLECTIVE.search(v.instruction):
        return "collective-buffer"
    if backward and op_name and "jvp(" in op_name and "transpose(" not in op_name:
        return "activation"
    return "temporary"


def _input_named(op_name: str | None, inputs: Sequence[Any]) -> str | None:
    """The input an instruction copies, where JAX named it after the entry
    parameter (`arg7`: a copy into another layout)."""
    m = re.fullmatch(r"arg(\d+)", op_name or "")
    if m and int(m.group(1)) < len(inputs):
        return inputs[int(m.group(1))].name
    return None


def _buffer(size: int, kind: str, v: buffers.BufferValue | None, locate,
            inputs: Sequence[Any] = ()) -> PeakBuffer:
    if v is None:
        return PeakBuffer(size, kind, "")
    _, op_name, source = locate(v.instruction)
    shape = v.shape.split("{")[0] if not v.shape.startswith("(") else v.shape
    return PeakBuffer(size, kind, v.instruction, shape, op_name, source,
                      copy_of=_input_named(op_name, inputs))
