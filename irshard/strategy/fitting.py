"""Changes that bring a program that does not fit under its device's
memory: what its memory peak holds in its inputs (`collectives.memory`'s
kinds, by path), sharded over mesh axes it does not use yet.

- the optimizer state, then the parameters with it, then the other inputs
  (a batch: a smaller batch per device);
- each over every mesh axis it does not use yet, then over each such axis
  alone: an axis joins a dimension already sharded (minor-most), else the
  largest other dimension it divides.

`irshard suggest` compiles each change and keeps those that fit; where none
does alone, it combines the one that left the least memory with the changes
proposed on top of it.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

from irshard.collectives.memory import input_kind
from irshard.core.specs import ShardingSpec

_GROUPS = ((("optimizer-state",), "the optimizer state"),
           (("optimizer-state", "parameter"), "the parameters and optimizer state"),
           (("argument", "donated"), "the other inputs (a smaller batch per device)"))


def widened(entries: Sequence[str], shape: Sequence[int], axis: str,
            fits: Callable[[Sequence[str], Sequence[int]], bool]
            ) -> list[str] | None:
    """`entries` with `axis` added where it divides (`fits`): to a dimension
    already sharded, else to the largest other; None where the input uses
    `axis` already or no dimension takes it."""
    spec = ShardingSpec.of_entries(entries)
    if spec.uses(axis):
        return None
    order = sorted(range(len(shape)),
                   key=lambda d: (not spec.dims[d].axes, -shape[d], d))
    for d in order:
        other = list(spec.with_axes(d, [axis]).entries())
        if fits(other, shape):
            return other
    return None


def memory_changes(inputs: dict[str, tuple[int, Any]],
                   axes: Sequence[str],
                   fits: Callable[[Sequence[str], Sequence[int]], bool]
                   ) -> list[tuple[str, list[tuple[str, list[str]]]]]:
    """(description, [(input name, new entries)]) per change, in the order
    they are worth trying; `inputs` are the report's (`TensorInfo`), by
    name."""
    choices = ([list(axes)] if len(axes) > 1 else []) + [[a] for a in axes]
    found = []
    for kinds, what in _GROUPS:
        for chosen in choices:
            changes = []
            for name, (_, info) in inputs.items():
                if input_kind(name, info.donated) not in kinds \
                        or info.sharding is None:
                    continue
                entries = list(info.sharding)
                for axis in chosen:
                    entries = widened(entries, info.shape, axis, fits) or entries
                if entries != list(info.sharding):
                    changes.append((name, list(entries)))
            if changes:
                over = " and ".join(chosen)
                found.append((f"shard {what} over {over} where they do not use "
                              f"it yet ({len(changes)} input"
                              f"{'s' if len(changes) != 1 else ''})", changes))
    return found
