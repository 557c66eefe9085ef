"""The candidates of `irshard search`: mesh shapes that factor the device
count over the named axes, each with the rules its axes' roles give the
program's leaves (`rules.build_rules`), in the order they are worth
compiling, and those pruned before compiling: a mesh axis that shards
nothing, or arguments that alone exceed a device's memory.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Sequence

from irshard.core.errors import UsageError
from irshard.reporting.cells import human_bytes
from irshard.strategy import rules as rulesets
from irshard.strategy.change import Change

DEFAULT_AXES = ("data", "fsdp", "tensor")
_ABBREVIATIONS = {"data": "DP", "fsdp": "FSDP", "tensor": "TP", "sequence": "SP",
                  "expert": "EP"}
_CANONICAL = ({"data"}, {"fsdp"}, {"tensor"}, {"fsdp", "tensor"})




def factorizations(n: int, k: int) -> list[tuple[int, ...]]:
    """Every ordered k-tuple of positive integers whose product is n."""
    if k == 1:
        return [(n,)]
    found = []
    for first in range(1, n + 1):
        if n % first == 0:
            found += [(first, *rest) for rest in factorizations(n // first, k - 1)]
    return found


def strategy_name(axes: Sequence[str], hidden: bool = False) -> str:
    roles = [rulesets.role_of(a) for a in axes]
    name = "+".join(_ABBREVIATIONS.get(r, r) for r in roles) or "replicated"
    return name + (" (hidden dims)" if hidden else "")


def _balance(sizes: Sequence[int]) -> float:
    """How far from square a mesh is (0 for equal sizes): the natural
    shape of a combined strategy is tried first."""
    logs = [math.log(s) for s in sizes]
    return max(logs) - min(logs) if logs else 0.0


def plans(devices: int, axes: Sequence[str]) -> list[tuple[rulesets.Plan, str]]:
    """(plan, origin) for every mesh shape over `axes`, size-1 axes left
    out, in the order they are worth compiling: the canonical strategies
    (single axes, then FSDP+TP from the squarest mesh), then those with
    FSDP on the weights' other dimension, then the combined strategies the
    same way."""
    found = []
    for sizes in dict.fromkeys(tuple((a, s) for a, s in zip(axes, sizes) if s > 1)
                               for sizes in factorizations(devices, len(axes))):
        roles = {rulesets.role_of(a) for a, _ in sizes}
        canonical = roles in _CANONICAL or (
            "sequence" in roles and roles - {"sequence"} in _CANONICAL)
        origin = "canonical" if canonical else "combined"
        found.append((rulesets.Plan(sizes), origin))
        if "fsdp" in roles:
            found.append((rulesets.Plan(sizes, fsdp_hidden=True), origin))
    order = {"canonical": 0, "combined": 1}
    found.sort(key=lambda p: (order[p[1]], p[0].fsdp_hidden, len(p[0].axes),
                              _balance([s for _, s in p[0].axes]),
                              [list(axes).index(a) for a, _ in p[0].axes],
                              [-s for _, s in p[0].axes]))
    return found


@dataclass(frozen=True)
class Pruned:
    change: Change
    reason: str


def _spec_factor(spec: str, sizes: dict[str, int]) -> int:
    factor = 1
    for entry in spec.split(","):
        for axis in entry.split("+"):
            factor *= sizes.get(axis, 1)
    return factor


def argument_bytes(structure: rulesets.Structure, candidate: Change,
                   element_bytes: Callable[[str], int]) -> int:
    """Bytes of the inputs one device holds under `candidate`'s rules."""
    sizes = dict(candidate.mesh)
    specs = rulesets.specs_of(structure, candidate.rules)
    return sum(math.prod(leaf.shape) * element_bytes(leaf.dtype)
               // _spec_factor(specs[leaf.path], sizes)
               for leaf in structure.leaves)


def _unused_axes(structure: rulesets.Structure, candidate: Change) -> list[str]:
    used = set()
    for spec in rulesets.specs_of(structure, candidate.rules).values():
        for entry in spec.split(","):
            used.update(a for a in entry.split("+") if a not in ("_", ""))
    return [a for a, _ in candidate.mesh if a not in used]


def candidates(structure: rulesets.Structure, devices: int, axes: Sequence[str],
               capacity: int | None, element_bytes: Callable[[str], int]
               ) -> tuple[list[Change], list[Pruned]]:
    """The candidates worth compiling, in order, and those pruned."""
    kept, pruned, seen = [], [], set()
    for plan, origin in plans(devices, axes):
        names = [a for a, _ in plan.axes]
        strategy = strategy_name(names, plan.fsdp_hidden)
        candidate = Change(f"{strategy} on {','.join(f'{n}={k}' for n, k in plan.axes)}",
                           mesh=plan.axes, rules=rulesets.build_rules(structure, plan),
                           strategy=strategy, origin=origin)
        if candidate.key in seen:
            continue
        seen.add(candidate.key)
        unused = _unused_axes(structure, candidate)
        if unused:
            pruned.append(Pruned(candidate, f"mesh axis {', '.join(unused)} "
                                 f"divides no dimension it would shard"))
            continue
        held = argument_bytes(structure, candidate, element_bytes)
        if capacity is not None and held > capacity:
            pruned.append(Pruned(candidate, f"its arguments alone take "
                                 f"{human_bytes(held)} per device, more than "
                                 f"the {human_bytes(capacity)} a device has"))
            continue
        kept.append(candidate)
    return kept, pruned


def parse_axes(text: str | None) -> tuple[str, ...]:
    if text is None:
        return DEFAULT_AXES
    names = tuple(a.strip() for a in text.split(","))
    for name in names:
        if rulesets.role_of(name) not in rulesets.ROLES:
            raise UsageError(f"--axes: '{name}' plays no role a search knows; "
                             f"name axes {', '.join(rulesets.ROLES)} (or a name "
                             f"starting with one, e.g. data2)")
    if len(set(names)) != len(names) or not names:
        raise UsageError(f"--axes '{text}': name each axis once, e.g. "
                         f"data,fsdp,tensor")
    return names
