"""Inputs that are one decision: a parameter and the optimizer state a
training step carries for it (`opt_state/mu/layers/0/w` for
`params/layers/0/w`), which a jitted step's own `in_shardings` shard
alike and Shardy may name in each other's place; and the inputs one entry
of those `in_shardings` gave their sharding (a batch's, as a prefix)."""

from __future__ import annotations

from typing import Sequence


def mirror_group(decls, index: int) -> list[int]:
    """Input `index` and the inputs that mirror it, and those that mirror
    them (Adam's `nu` mirrors the parameter that `mu` mirrors: its path
    ends alike, `mu`'s does not), in order: one decision."""
    found = {index}
    members = [decls[index]]
    for member in members:
        for i, t in enumerate(decls):
            if i not in found and mirrors(t, member):
                found.add(i)
                members.append(t)
    return sorted(found)


def decision_group(decls, index: int) -> list[int]:
    """Input `index` with every input that is one decision with it: those
    that mirror it (`mirror_group`) and those given their sharding by the
    same `in_shardings` entry (`TensorDecl.sharing`), and theirs, in order."""
    found = {index}
    todo = [index]
    while todo:
        i = todo.pop()
        near = set(mirror_group(decls, i))
        share = getattr(decls[i], "sharing", None)
        if share is not None:
            near |= {j for j, t in enumerate(decls)
                     if getattr(t, "sharing", None) == share}
        for j in sorted(near - found):
            found.add(j)
            todo.append(j)
    return sorted(found)


def group_name(decls, group: Sequence[int]) -> int:
    """The input a mirror group is named by: the parameter, whose path is
    the shortest (its optimizer state's add `opt_state/0/mu`), the first
    of those."""
    return min(group, key=lambda i: (decls[i].name.count("/"), i))


def mirrors(other, decl) -> bool:
    """Whether input `other` mirrors `decl`, which no rule of irshard's
    sharded (a jitted object's own `in_shardings`): the same shape and
    sharding, and a path that ends as `decl`'s does but for its first
    segments (`opt_state/mu/layers/0/w` for `params/layers/0/w`), as the
    optimizer state a training step carries for each parameter does; they
    are one decision, since either pins the other's sharding."""
    if other is decl or decl.rule is not None or other.shape != decl.shape \
            or other.sharding != decl.sharding:
        return False
    return same_path_end(decl.name, other.name)


def same_path_end(a: str, b: str) -> bool:
    """Whether paths `a` and `b` end alike but for their first segments
    (at least two segments in common, all but two of the shorter)."""
    mine, theirs = a.split("/"), b.split("/")
    common = 0
    while common < min(len(mine), len(theirs)) and \
            mine[-1 - common] == theirs[-1 - common]:
        common += 1
    return common >= max(2, min(len(mine), len(theirs)) - 2)
