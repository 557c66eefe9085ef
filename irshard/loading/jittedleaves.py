"""Which of the user's leaves each input of a jitted object's lowering is:
`jax.jit` flattens the arguments in their order, another wrapper may put
whole arguments in another (`eqx.filter_jit`: the donated first) and add
leaves of its own; each argument's leaves are found as one run."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from irshard.core import tree
from irshard.loading.leaves import Leaf, ParameterBinding


@dataclass(frozen=True)
class Matching:
    """The user's leaf each flat input of a jitted object's lowering is
    (`leaves`: None for one that is no leaf of the arguments, a closure's
    array; a bound argument's name for one a `functools.partial` binds),
    and the user's leaves it could not tell apart (`ambiguous`)."""

    leaves: tuple[Leaf | str | None, ...]
    ambiguous: tuple[str, ...] = ()


def matched_leaves(leaves: Sequence[Leaf], parameters: Sequence[ParameterBinding],
                   lowered: Sequence[Any],
                   bound: Sequence[tuple[str, Sequence[Any], bool]] = (),
                   in_order: bool = False) -> Matching:
    """Which of the user's leaves each flat input of a jitted object's
    lowering is (`lowered`, each with `shape`, `dtype` and `key`); `bound`
    are the arguments a partial binds (name, leaves, by keyword).

    `jax.jit` (`in_order`) flattens the arguments as they are given: the
    bound ones, the positional ones, then the keywords by name. Another
    wrapper may put whole arguments in another order (`eqx.filter_jit` puts
    the donated ones first) and add leaves of its own between them. So each
    argument's leaves are found as one run in the lowering, the arguments
    in their own order if they fit so, else in the first other order that
    does; where another order fits too and would name a leaf differently,
    those leaves are `ambiguous`: the lowering cannot tell them apart.
    Where no order fits (a wrapper that shares or drops leaves), no leaf
    is matched and the inputs keep the lowering's own names."""
    import itertools
    groups, signatures = _arguments(leaves, parameters, bound)
    wanted = [(tuple(x.shape), x.dtype, x.key) for x in lowered]

    def place(order: Sequence[int]) -> tuple[Leaf | str | None, ...] | None:
        found: list[Leaf | str | None] = [None] * len(wanted)
        start = 0
        for g in order:
            sig = signatures[g]
            for at in range(start, len(wanted) - len(sig) + 1):
                if wanted[at:at + len(sig)] == sig:
                    found[at:at + len(sig)] = groups[g]
                    start = at + len(sig)
                    break
            else:
                return None
        return tuple(found)

    natural = list(range(len(groups)))
    orders: Any = itertools.permutations(natural) \
        if not in_order and len(groups) <= 6 else [natural]
    chosen = None
    ambiguous: set[str] = set()
    for order in orders:
        found = place(order)
        if found is None:
            continue
        if chosen is None:
            chosen = found
            continue
        for a, b in zip(chosen, found):
            if _name(a) != _name(b):
                ambiguous.update(n for n in (_name(a), _name(b)) if n)
    if chosen is None:
        return Matching((None,) * len(wanted))
    return Matching(chosen, tuple(sorted(ambiguous)))


def _arguments(leaves: Sequence[Leaf], parameters: Sequence[ParameterBinding],
               bound: Sequence[tuple[str, Sequence[Any], bool]]
               ) -> tuple[list[list[Any]], list[list[Any]]]:
    """Each argument's leaves (or, for a partial's bound ones, their names)
    and their signatures, in JAX's order: the positional ones (bound
    first), then the keywords by name."""
    arguments: list[tuple[tuple[int, str], list[Any], list[Any]]] = []
    for name, found, keyword in bound:
        arguments.append(((1 if keyword else 0, name if keyword else ""),
                          [tree.path_of(name, [x.path] if x.path else [])
                           for x in found],
                          [(tuple(x.shape), x.dtype, x.key) for x in found]))
    for p in parameters:
        if p.static or not p.count:
            continue
        group = list(leaves[p.start:p.start + p.count])
        keyword = p.kind == "keyword-only"
        arguments.append(((1 if keyword else 0, p.name if keyword else ""), group,
                          [(x.type.shape, x.type.dtype.numpy, x.key) for x in group]))
    arguments.sort(key=lambda a: a[0])       # stable: positional in order
    return [a[1] for a in arguments], [a[2] for a in arguments]


def _name(leaf: Leaf | str | None) -> str | None:
    return leaf.path if isinstance(leaf, Leaf) else leaf
