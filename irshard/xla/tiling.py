"""XLA tile assignments in the user's terms: which mesh axes shard which
dimension, and the per-device shape.

An `HloSharding` tiles each dimension k of an array into T[k] pieces and says
which device holds which tile. To name the mesh axes behind T[k], find the
ordered axes whose coordinates, read as a mixed-radix number, give every
device's tile index along k. Meshes have a handful of axes, so trying every
ordered choice is cheap.
"""

from __future__ import annotations

import functools
import itertools
import math
import re
from dataclasses import dataclass
from typing import Sequence

from irshard import backend
from irshard.core.specs import MeshAxis, MeshSpec, ShardingSpec
from irshard.core.syntax import MAX_DEVICES


@dataclass(frozen=True)
class Tiling:
    """The parts of an `HloSharding` that matter here."""

    tile_dims: tuple[int, ...]       # one per array dim, then subgroup dims
    devices: tuple[int, ...]         # row-major over tile_dims
    rank: int
    replicated: bool = False
    maximal: bool = False
    manual: bool = False
    text: str = ""
    opaque: bool = False             # printed, but not read (`text` says it)

    @classmethod
    def replicate(cls, rank: int) -> "Tiling":
        """Every device holds the whole array."""
        return cls((), (), rank, replicated=True)

    @classmethod
    def from_hlo_sharding(cls, sharding, rank: int) -> "Tiling":
        text = str(sharding)
        if sharding.is_replicated():
            return cls((), (), rank, replicated=True, text=text)
        if sharding.is_maximal():
            return cls((), tuple(sharding.tile_assignment_devices()), rank,
                       maximal=True, text=text)
        if sharding.is_manual():
            return cls((), (), rank, manual=True, text=text)
        if text.startswith("{{") or not sharding.is_tiled():
            # A tuple's shardings, or one XLA does not know: asking for its
            # tile assignment would abort inside XLA.
            return cls.unread(rank, text)
        return cls(tuple(sharding.tile_assignment_dimensions()),
                   tuple(sharding.tile_assignment_devices()), rank, text=text)

    @classmethod
    def from_text(cls, text: str, rank: int) -> "Tiling":
        """A sharding as HLO prints it (`{devices=[2,1,2]<=[4]
        last_tile_dim_replicate}`). The plain forms a parameter carries are
        read here; any other is given to XLA's parser (which also says
        what is wrong with a malformed one: `RuntimeError`)."""
        plain = _plain_sharding(text, rank)
        if plain is not None:
            return plain
        return cls.from_hlo_sharding(backend.hlo_sharding_from_text(text), rank)

    @classmethod
    def unread(cls, rank: int, text: str) -> "Tiling":
        """A sharding known only by its text."""
        return cls((), (), rank, text=text, opaque=True)

    def shards(self) -> tuple[int, ...]:
        if self.replicated or self.maximal or self.manual or self.opaque:
            return (1,) * self.rank
        return self.tile_dims[:self.rank]

    def local_shape(self, shape: Sequence[int]) -> tuple[int, ...]:
        """Per-device shape; XLA pads uneven tiles, so dims round up."""
        return tuple(-(-n // t) for n, t in zip(shape, self.shards()))


_IOTA_SHARDING = re.compile(
    r"\{devices=\[(\d+(?:,\d+)*)\]<=\[(\d+(?:,\d+)*)\](?:T\((\d+(?:,\d+)*)\))?"
    r"( last_tile_dim_replicate)?\}")
_LISTED_SHARDING = re.compile(
    r"\{devices=\[(\d+(?:,\d+)*)\](\d+(?:,\d+)*)( last_tile_dim_replicate)?\}")


# A named sharding (jaxlib 0.11 on): `{mesh['a'=2,'b'=2], [{'a'}, {}]}`,
# optionally with the mesh's device order (`device_ids=[...]`).
_NAMED_SHARDING = re.compile(
    r"\{mesh\[((?:'[^']+'=\d+,?)*)\](?:, device_ids=\[(\d+(?:,\d+)*)\])?, "
    r"\[((?:\{[^{}]*\}(?:, )?)*)\]\}")


def _named_sharding(text: str, rank: int) -> Tiling | None:
    """The tiling a named sharding stands for; None for forms not read here
    (sub-axes, unreduced or replicated axis lists, a rank mismatch)."""
    m = _NAMED_SHARDING.fullmatch(text)
    if m is None:
        return None
    axes = [(name, int(size)) for name, size in re.findall(r"'([^']+)'=(\d+)", m.group(1))]
    sizes = dict(axes)
    dims = [re.findall(r"'([^']*)'", d) for d in re.findall(r"\{([^{}]*)\}", m.group(3))]
    if len(dims) != rank or any(a not in sizes for d in dims for a in d):
        return None
    used = [a for d in dims for a in d]
    if len(used) != len(set(used)):
        return None
    count = math.prod(sizes.values())
    ids = _ints(m.group(2)) if m.group(2) else tuple(range(count))
    if len(ids) != count:
        return None
    mesh = MeshSpec(tuple(MeshAxis(n, s) for n, s in axes))
    names = list(mesh.names)
    rest = [n for n in names if n not in used]
    tile_dims = [math.prod(sizes[a] for a in d) for d in dims]
    replicas = math.prod(sizes[a] for a in rest)
    if math.prod(tile_dims) == 1:
        return Tiling((), (), rank, replicated=True, text=text)
    shape = tile_dims + ([replicas] if replicas > 1 else [])
    slots = [0] * count
    for position in range(count):
        coord = dict(zip(names, mesh.coords(position)))
        index = [_radix([coord[a] for a in d], [sizes[a] for a in d]) for d in dims]
        if replicas > 1:
            index.append(_radix([coord[a] for a in rest], [sizes[a] for a in rest]))
        slots[_radix(index, shape)] = ids[position]
    return Tiling(tuple(shape), tuple(slots), rank, text=text)


def _radix(digits: Sequence[int], bases: Sequence[int]) -> int:
    value = 0
    for digit, base in zip(digits, bases):
        value = value * base + digit
    return value


def _ints(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in text.split(","))


def _plain_sharding(text: str, rank: int) -> Tiling | None:
    """The forms XLA prints for a replicated, maximal, manual or tiled
    (iota or listed devices) array; None for any other, and for tilings XLA
    reads as another form (one tile: replicated)."""
    if text == "{replicated}":
        return Tiling((), (), rank, replicated=True, text=text)
    if text.startswith("{mesh["):
        return _named_sharding(text, rank)
    if text == "{manual}":
        return Tiling((), (), rank, manual=True, text=text)
    m = re.fullmatch(r"\{maximal device=(\d+)\}", text)
    if m:
        return Tiling((), (int(m.group(1)),), rank, maximal=True, text=text)
    m = _IOTA_SHARDING.fullmatch(text) or _LISTED_SHARDING.fullmatch(text)
    if m:
        dims = _ints(m.group(1))
        if min(dims) < 1 or math.prod(dims) > MAX_DEVICES:
            return None         # malformed: XLA's door says why
        tiled = dims[:-1] if m.group(m.re.groups) else dims
        if math.prod(tiled) == 1 or m.group(m.re.groups) and dims[-1] == 1:
            return None
    m = _IOTA_SHARDING.fullmatch(text)
    if m:
        dims, reshape = _ints(m.group(1)), _ints(m.group(2))
        perm = _ints(m.group(3)) if m.group(3) else tuple(range(len(reshape)))
        if math.prod(dims) != math.prod(reshape) or \
                sorted(perm) != list(range(len(reshape))) or len(dims) < rank:
            return None
        # Only XLA's canonical form (which `text` must be): no identity
        # transpose, no size-1 dimension, no two dimensions it would merge.
        if m.group(3) is None and len(reshape) != 1 or m.group(3) is not None and (
                1 in reshape or any(b == a + 1 for a, b in zip(perm, perm[1:]))):
            return None
        # Replicated over the last tile dimension, XLA keeps a transposed
        # iota only where that dimension is the iota's minor one whole;
        # otherwise it regroups it or lists (and sorts) each group's devices.
        if m.group(3) is not None and m.group(4) and reshape[perm[-1]] != dims[-1]:
            return None
        # iota over `reshape`, transposed by `perm`, read row-major.
        strides = [math.prod(reshape[i + 1:]) for i in range(len(reshape))]
        devices = tuple(sum(i * strides[p] for i, p in zip(index, perm))
                        for index in itertools.product(
                            *(range(reshape[p]) for p in perm)))
        return _canonical(Tiling(dims, devices, rank, text=text), m.group(4))
    m = _LISTED_SHARDING.fullmatch(text)
    if m:
        dims, devices = _ints(m.group(1)), _ints(m.group(2))
        if math.prod(dims) != len(devices) or len(dims) < rank:
            return None
        return _canonical(Tiling(dims, devices, rank, text=text), m.group(3))
    return None


def _canonical(tiling: Tiling, replicate: str | None) -> Tiling | None:
    """`tiling`, if XLA keeps it as printed: it sorts the devices that
    share a tile."""
    if replicate:
        n = tiling.tile_dims[-1]
        groups = [tiling.devices[i:i + n] for i in range(0, len(tiling.devices), n)]
        if any(list(g) != sorted(g) for g in groups):
            return None
    return tiling


def _tile_indices(tiling: Tiling) -> dict[int, tuple[int, ...]]:
    """Device -> its tile index along each array dimension."""
    result = {}
    positions = itertools.product(*(range(t) for t in tiling.tile_dims))
    for device, index in zip(tiling.devices, positions):
        result[device] = index[:tiling.rank]
    return result


def read(sharding, rank: int) -> Tiling:
    """A sharding as XLA gives it (an `HloSharding`, its printed text, a
    `Tiling` already read, or None: replicated) as a `Tiling`."""
    if sharding is None:
        return Tiling.replicate(rank)
    if isinstance(sharding, Tiling):
        return sharding
    if isinstance(sharding, str):
        return Tiling.from_text(sharding, rank)
    return Tiling.from_hlo_sharding(sharding, rank)


def in_mesh(sharding, rank: int, mesh: MeshSpec) -> ShardingSpec | None:
    """The one way from XLA's sharding (as `read` takes it) to the user's
    terms: a `ShardingSpec` over `mesh`'s axes, or None where the devices
    are not laid out as a sharding over them (a maximal or manual
    sharding, one over other devices)."""
    entries = mesh_axes_of(read(sharding, rank), mesh)
    return None if entries is None else ShardingSpec.of_entries(entries)


@functools.lru_cache(maxsize=1024)
def mesh_axes_of(tiling: Tiling, mesh: MeshSpec) -> tuple[str, ...] | None:
    """One spec entry per dimension (`x`, `x+y`, `_`), or None when the
    tiling is not a sharding over this mesh's axes. (Remembered: a model's
    parameters share a few shardings, each a search over axis orders.)"""
    if tiling.replicated:
        return ("_",) * tiling.rank
    if tiling.maximal or tiling.manual or tiling.opaque:
        return None
    if len(tiling.devices) != mesh.num_devices or \
            set(tiling.devices) != set(range(mesh.num_devices)):
        return None
    tiles = _tile_indices(tiling)
    coords = {d: mesh.coords(d) for d in tiles}
    used: set[int] = set()
    entries = []
    for dim in range(tiling.rank):
        count = tiling.tile_dims[dim]
        if count == 1:
            entries.append("_")
            continue
        choice = _find_axes(dim, count, tiles, coords, mesh, used)
        if choice is None:
            return None
        used.update(choice)
        entries.append("+".join(mesh.axes[a].name for a in choice))
    return tuple(entries)


def _find_axes(dim, count, tiles, coords, mesh, used):
    free = [a for a in range(len(mesh.axes)) if a not in used]
    for r in range(1, len(free) + 1):
        for choice in itertools.permutations(free, r):
            if math.prod(mesh.axes[a].size for a in choice) != count:
                continue
            if all(_mixed_radix(coords[d], choice, mesh) == tiles[d][dim]
                   for d in tiles):
                return choice
    return None


def _mixed_radix(coord, axes, mesh) -> int:
    return _radix([coord[a] for a in axes], [mesh.axes[a].size for a in axes])
