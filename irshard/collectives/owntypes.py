"""A collective's own element types where the backend widened them: the
CPU backend runs bf16 collectives in f32, so what the program moves is read
from the partitioned module's collectives, matched by channel id, through
XLA's combining and splitting of them."""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass

from irshard.xla.shapes import ArrayShape


@dataclass(frozen=True)
class Moved:
    """What a collective moves: its kind and its leaves."""

    kind: str
    leaves: tuple[ArrayShape, ...]


_FLOATS = ("f16", "bf16", "f32", "f64")


def _narrower(ours: ArrayShape, theirs: ArrayShape) -> bool:
    """Whether `theirs` is `ours` in a narrower float type: what the
    program moved where the backend moves `ours`."""
    return (ours.dtype in _FLOATS and theirs.dtype in _FLOATS
            and theirs.nbytes < ours.nbytes)


def own_types(found: list[tuple[str, str, list[ArrayShape]]],
               programs: dict[int, Moved] | None) -> list[list[ArrayShape] | None]:
    """For each collective `(kind, channel_id, leaves)` of an optimized
    module, the program's own leaves where the backend widened their
    element type (the CPU backend runs bf16 collectives in f32), read from
    the partitioned module's collectives; None where it kept the types.

    The same op keeps its channel id. Where XLA combined several into one
    tuple collective (the combiners), the combined op has the first's
    channel id and the others' leaves follow in order; where it split one
    (an array all-to-all into a tuple all-to-all), the parts add up to the
    whole. Each partitioned collective is read once; a collective that
    matches in no way keeps the backend's types."""
    result: list[list[ArrayShape] | None] = [None] * len(found)
    if not programs:
        return result
    left = dict(programs)
    by_kind: dict[str, list[int]] = {}
    for channel in sorted(programs):
        by_kind.setdefault(programs[channel].kind, []).append(channel)
    pending = []
    for i, (kind, channel, leaves) in enumerate(found):
        moved = programs.get(int(channel)) if channel.isdigit() else None
        if (moved is not None and moved.kind == kind
                and len(moved.leaves) == len(leaves)
                and all(a.dims == b.dims for a, b in zip(leaves, moved.leaves))):
            left.pop(int(channel), None)
            result[i] = _widened(leaves, list(moved.leaves))
        elif len(leaves) > 1 and any(leaf.dtype in _FLOATS for leaf in leaves):
            # Combined or split: matched below, once the same ops are taken.
            pending.append(i)
    for i in pending:
        result[i] = _combined_types(*found[i], left, by_kind)
    return result


def _combined_types(kind: str, channel: str, leaves: list[ArrayShape],
                    left: dict[int, Moved], by_kind: dict[str, list[int]]
                    ) -> list[ArrayShape] | None:
    """`own_types` of a collective XLA split (one partitioned collective
    whose parts add up to it) or combined (the partitioned ones of its
    kind from its channel on, in order); those read are taken from
    `left`."""
    first = int(channel) if channel.isdigit() else None
    moved = left.get(first) if first is not None else None
    if moved is not None and moved.kind == kind and len(moved.leaves) == 1 \
            and len(leaves) > 1:
        whole = moved.leaves[0]
        if math.prod(whole.dims) == sum(math.prod(leaf.dims) for leaf in leaves):
            left.pop(first)
            return _widened(leaves, [ArrayShape(whole.dtype, leaf.dims)
                                     for leaf in leaves])
    # The combined ones follow the first: scan the channels of this kind
    # from it on, then those before it.
    channels = by_kind.get(kind, [])
    start = bisect.bisect_left(channels, first if first is not None else 0)
    own: list[ArrayShape] = []
    taken = []
    for k in range(len(channels)):
        c = channels[(start + k) % len(channels)]
        if c not in left:
            continue
        part = left[c].leaves
        ahead = leaves[len(own):len(own) + len(part)]
        if left[c].kind == kind and len(ahead) == len(part) and \
                all(a.dims == b.dims for a, b in zip(ahead, part)):
            own += part
            taken.append(c)
        if len(own) == len(leaves):
            break
    if len(own) != len(leaves):
        return None
    for c in taken:
        left.pop(c)
    return _widened(leaves, own)


def _widened(leaves: list[ArrayShape],
             own: list[ArrayShape]) -> list[ArrayShape] | None:
    """`own` where some leaf is a narrower float than the backend's and the
    rest agree; None where the backend kept the program's types."""
    widened = False
    for ours, theirs in zip(leaves, own):
        if ours.dtype != theirs.dtype:
            if not _narrower(ours, theirs):
                return None
            widened = True
    return own if widened else None
