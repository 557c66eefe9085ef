"""Replica groups in every form XLA prints them, and the mesh axes they span.

XLA prints a collective's device groups as

    {{0,1},{2,3}}                      an explicit list (`{}`: all devices)
    [2,4]<=[8]  [2,4]<=[4,2]T(1,0)     an iota: arange(8).reshape(4,2)
                                       .transpose(1,0).reshape(2,4)
    mesh['x'=2,'y'=4] {'y'}            a mesh and the axes each group spans;
    mesh['x'=4] {'x':(1)2}             `x:(pre)size` is a sub-axis, and
    mesh['a'=2,'b'=2], device_ids=(0,2,1,3) {'a'}
                                       device_ids permute the mesh

All of them expand to an explicit list of groups; `span_axes` then names the
axes of the user's mesh that the groups span. Device ids are the logical ids
of the SPMD program: with one replica, id i is the mesh's i-th device in
row-major order.
"""

from __future__ import annotations

import functools
import itertools
import math
import re

from irshard.core.specs import MeshSpec
from irshard.core.syntax import iota_problem, matching_bracket

Groups = list[list[int]]
_INTS = re.compile(r"\s*\d+(?:\s*,\s*\d+)*\s*")


def _ints(text: str) -> list[int]:
    return [int(x) for x in re.findall(r"-?\d+", text)]


def iota_groups(group_dims: list[int], reshape_dims: list[int],
                perm: list[int]) -> Groups:
    """Expands `[group_dims]<=[reshape_dims]T(perm)`."""
    problem = iota_problem(group_dims, reshape_dims, perm)
    if problem:
        raise ValueError(problem)
    total = math.prod(reshape_dims)
    # Row-major strides of the reshaped iota, read in transposed order.
    strides = [math.prod(reshape_dims[i + 1:]) for i in range(len(reshape_dims))]
    dims = [reshape_dims[p] for p in perm]
    order_strides = [strides[p] for p in perm]
    flat = []
    for index in itertools.product(*(range(d) for d in dims)):
        flat.append(sum(i * s for i, s in zip(index, order_strides)))
    size = group_dims[-1] if len(group_dims) > 1 else total
    return [flat[i:i + size] for i in range(0, total, size)]


_MESH_AXIS = re.compile(r"'?([\w.\-]+)'?\s*=\s*(\d+)")
_GROUP_AXIS = re.compile(r"'?([\w.\-]+)'?(?::\((\d+)\)(\d+))?")


def parse_mesh_form(text: str) -> tuple[list[tuple[str, int]], list[int] | None,
                                        list[tuple[str, int, int]]]:
    """`mesh['x'=2,'y'=4], device_ids=(...) {'y'}` ->
    (mesh axes, device ids or None, grouped axes as (name, pre, size))."""
    m = re.match(r"\s*mesh\[(.*?)\](.*)\{(.*)\}\s*$", text, re.S)
    if not m:
        raise ValueError(f"not a mesh replica group list: {text!r}")
    axes = [(name, int(size)) for name, size in _MESH_AXIS.findall(m.group(1))]
    device_ids = None
    ids = re.search(r"device_ids=\((.*)\)", m.group(2))
    if ids:
        device_ids = _device_ids(ids.group(1))
    sizes = dict(axes)
    grouped = []
    for item in filter(None, (s.strip() for s in m.group(3).split(","))):
        g = _GROUP_AXIS.fullmatch(item)
        if not g or g.group(1) not in sizes:
            raise ValueError(f"unknown mesh axis {item!r} in {text!r}")
        name = g.group(1)
        if g.group(2):
            grouped.append((name, int(g.group(2)), int(g.group(3))))
        else:
            grouped.append((name, 1, sizes[name]))
    return axes, device_ids, grouped


def _device_ids(body: str) -> list[int]:
    """A mesh's device order: `0,2,1,3`, or an iota `[4,2]T(1,0)` (arange
    reshaped and transposed), also written `[8]<=[4,2]T(1,0)`."""
    iota = re.fullmatch(r"\s*(?:\[[\d,\s]*\]<=)?\[([\d,\s]*)\](?:T\(([\d,\s]*)\))?\s*",
                        body)
    if not iota:
        return _ints(body)
    reshape = _ints(iota.group(1))
    perm = _ints(iota.group(2)) if iota.group(2) else list(range(len(reshape)))
    return [d for g in iota_groups([math.prod(reshape)], reshape, perm) for d in g]


def mesh_groups(axes: list[tuple[str, int]], device_ids: list[int] | None,
                grouped: list[tuple[str, int, int]]) -> Groups:
    """The groups of a mesh-form list: devices that agree on every coordinate
    outside the grouped (sub-)axes, ordered by the grouped axes as listed."""
    # Split every axis into the factors the grouped sub-axes cut it into.
    factors: list[tuple[str, int, int]] = []   # (axis, pre, size)
    for name, size in axes:
        cuts = sorted({1, size} | {p for a, p, s in grouped if a == name}
                      | {p * s for a, p, s in grouped if a == name})
        for lo, hi in zip(cuts, cuts[1:]):
            factors.append((name, lo, hi // lo))
    # Factors are ordered major to minor; within an axis, a larger `pre`
    # (more major part already taken) is more minor.
    ordered = []
    for name, _ in axes:
        ordered.extend(sorted((f for f in factors if f[0] == name),
                              key=lambda f: f[1]))
    shape = [f[2] for f in ordered]
    group_factor_ids = []
    for name, pre, size in grouped:
        ids = [i for i, f in enumerate(ordered)
               if f[0] == name and f[1] >= pre and f[1] * f[2] <= pre * size]
        group_factor_ids.extend(ids)
    other = [i for i in range(len(ordered)) if i not in group_factor_ids]
    strides = [math.prod(shape[i + 1:]) for i in range(len(shape))]
    total = math.prod(shape)
    ids_of = device_ids if device_ids is not None else list(range(total))
    groups = []
    for outer in itertools.product(*(range(shape[i]) for i in other)):
        base = sum(o * strides[i] for o, i in zip(outer, other))
        group = []
        for inner in itertools.product(*(range(shape[i]) for i in group_factor_ids)):
            position = base + sum(v * strides[i]
                                  for v, i in zip(inner, group_factor_ids))
            group.append(ids_of[position])
        groups.append(group)
    return groups


def parse_replica_groups(text: str, num_devices: int) -> Groups:
    """Expands any printed form; `{}` (no groups) means all devices."""
    # A module repeats a few forms many times: each is expanded once.
    return [list(group) for group in _expanded(text, num_devices)]


@functools.lru_cache(maxsize=256)
def _expanded(text: str, num_devices: int) -> tuple[tuple[int, ...], ...]:
    return tuple(tuple(group) for group in _parse_replica_groups(text, num_devices))


def _parse_replica_groups(text: str, num_devices: int) -> Groups:
    text = text.strip()
    if text.startswith("mesh"):
        return mesh_groups(*parse_mesh_form(text))
    if text.startswith("["):
        m = re.fullmatch(r"\[([\d,\s]*)\]<=\[([\d,\s]*)\](?:T\(([\d,\s]*)\))?", text)
        if not m:
            raise ValueError(f"not an iota replica group list: {text!r}")
        reshape = _ints(m.group(2))
        perm = _ints(m.group(3)) if m.group(3) else list(range(len(reshape)))
        return iota_groups(_ints(m.group(1)), reshape, perm)
    if text.startswith("{"):
        if matching_bracket(text, 0) != len(text) - 1:
            raise ValueError(f"unbalanced replica groups: {text!r}")
        if re.fullmatch(r"\{\s*\}", text):
            return [list(range(num_devices))]
        if not re.fullmatch(r"\{\s*\{[^{}]*\}(?:\s*,\s*\{[^{}]*\})*\s*\}", text):
            raise ValueError("expected groups such as {{0,1},{2,3}}")
        bodies = re.findall(r"\{([^{}]*)\}", text[1:-1])
        if not all(_INTS.fullmatch(b) for b in bodies):
            raise ValueError("each group must list device ids, e.g. {0,1}")
        groups = [_ints(g) for g in bodies]
        _check_ids([d for g in groups for d in g], num_devices)
        return groups
    raise ValueError(f"unrecognised replica groups: {text!r}")


def parse_pairs(text: str) -> list[tuple[int, int]]:
    """`{{0,1},{1,2}}` -> [(0, 1), (1, 2)]."""
    text = text.strip()
    if not re.fullmatch(r"\{\s*(?:\{[^{}]*\}(?:\s*,\s*\{[^{}]*\})*)?\s*\}", text):
        raise ValueError("expected pairs such as {{0,1},{1,0}}")
    pairs = []
    for pair in re.findall(r"\{([^{}]*)\}", text[1:-1]):
        values = _ints(pair) if _INTS.fullmatch(pair) else []
        if len(values) != 2:
            raise ValueError(f"entry {{{pair}}} is not a pair of device ids")
        pairs.append((values[0], values[1]))
    return pairs


def _check_ids(ids: list[int], num_devices: int) -> None:
    if len(set(ids)) != len(ids):
        raise ValueError("a device appears in more than one place")
    if ids and max(ids) >= num_devices:
        raise ValueError(f"device {max(ids)} is not among the program's "
                         f"{num_devices} devices")


def _axis_label(mesh: MeshSpec, axis: int, values: list[int]) -> str | None:
    """`x` when `values` cover axis `axis`, `x:(pre)size` for a sub-axis."""
    name, size = mesh.axes[axis].name, mesh.axes[axis].size
    distinct = sorted(set(values))
    if len(distinct) == size:
        return name
    stride = distinct[1] - distinct[0] if len(distinct) > 1 else 1
    if any(b - a != stride for a, b in zip(distinct, distinct[1:])):
        return None
    count = len(distinct)
    if size % (count * stride):
        return None
    return f"{name}:({size // (count * stride)}){count}"


def span_axes(groups: Groups, mesh: MeshSpec) -> list[str] | None:
    """The mesh axes each group spans, major first; None if the groups do not
    line up with the mesh (devices outside it, or groups of other shapes)."""
    if not groups or any(d >= mesh.num_devices or d < 0 for g in groups for d in g):
        return None
    labels: list[str] | None = None
    for group in groups:
        coords = [mesh.coords(d) for d in group]
        varying = [a for a in range(len(mesh.axes))
                   if len({c[a] for c in coords}) > 1]
        group_labels = []
        for a in varying:
            label = _axis_label(mesh, a, [c[a] for c in coords])
            if label is None:
                return None
            group_labels.append(label)
        expected = math.prod(
            mesh.axes[a].size if ":" not in lbl else int(lbl.rsplit(")", 1)[1])
            for a, lbl in zip(varying, group_labels))
        if expected != len(group) or len(set(group)) != len(group):
            return None
        # Major first: the axis whose coordinate changes last along the group.
        def first_change(a):
            return next((i for i, c in enumerate(coords) if c[a] != coords[0][a]),
                        len(coords))
        ordered = [lbl for _, lbl in sorted(zip(varying, group_labels),
                                            key=lambda p: -first_change(p[0]))]
        if labels is None:
            labels = ordered
        elif labels != ordered:
            return None
    return labels


def pair_axes(pairs: list[tuple[int, int]], mesh: MeshSpec) -> list[str] | None:
    """The mesh axes along which a collective-permute moves data."""
    if any(max(p) >= mesh.num_devices or min(p) < 0 for p in pairs):
        return None
    axes = set()
    for source, target in pairs:
        s, t = mesh.coords(source), mesh.coords(target)
        axes.update(a for a in range(len(mesh.axes)) if s[a] != t[a])
    return [mesh.axes[a].name for a in sorted(axes)]


def pair_directions(pairs: list[tuple[int, int]], mesh: MeshSpec
                    ) -> set[tuple[str, str]]:
    """The mesh axes a collective-permute moves data along, each with the
    way round its ring it goes: `+` to higher coordinates (wrapping round),
    `-` to lower. A link carries each way at once, so shifts the two ways
    use different halves of it. Empty where the pairs are not on the mesh."""
    if any(max(p) >= mesh.num_devices or min(p) < 0 for p in pairs):
        return set()
    found = set()
    for source, target in pairs:
        s, t = mesh.coords(source), mesh.coords(target)
        for a, axis in enumerate(mesh.axes):
            if s[a] != t[a]:
                step = (t[a] - s[a]) % axis.size
                found.add((axis.name, "-" if 2 * step > axis.size else "+"))
    return found
