"""The spec grammar: meshes, tensor types and shardings.

    mesh      := AXIS=SIZE (',' AXIS=SIZE)*          x=4   dp=2,tp=4
    type      := DTYPE '[' [dim (',' dim)*] ']'       f32[16,32]   i32[]
    dim       := SIZE ['@' axes ['?']]                f32[1024@x]  f32[8@x+y,4]
    sharding  := entry (',' entry)*                   x,_   x+y,_?
    entry     := ('_' | axes) ['?']
    axes      := AXIS ('+' AXIS)*

Axis names are identifiers, sizes are integers (mesh sizes positive, tensor
dimensions non-negative). Parsing checks the syntax; `check_sharding` checks a
sharding against a tensor shape and a mesh (rank, known axes, each axis used
once, divisibility). Every violation raises `SpecError` with a message that
names the offending text and says what would be accepted. Pure Python: the
command line imports it before JAX.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, replace
from typing import Sequence

from irshard.core.errors import SpecError
from irshard.core.dtypes import DTYPE_NAMES, DType, lookup_dtype
from irshard.core.textinput import MAX_DIGITS, check_one_line, parse_size, shown

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
# The largest tensor irshard accepts, in bytes: XLA's shape arithmetic is
# 64-bit and overflows (aborting the process) a little above this.
MAX_TENSOR_BYTES = 2 ** 60


# ---------------------------------------------------------------------------
# Meshes


# How JAX traces over a mesh axis: `auto` leaves the sharding to the
# compiler's propagation (irshard's default); `explicit` puts it in the
# program's types (`jax.sharding.AxisType.Explicit`, what `jax.make_mesh`
# makes by default), so `reshard`, `auto_axes` and sharded types work.
AXIS_TYPES = ("auto", "explicit")


@dataclass(frozen=True)
class MeshAxis:
    name: str
    size: int
    # Not part of the mesh's identity: two meshes with the same axes and
    # sizes partition a program for the same devices.
    type: str = field(default="auto", compare=False)


@dataclass(frozen=True)
class MeshSpec:
    """A logical device mesh; axes are ordered major to minor."""

    axes: tuple[MeshAxis, ...]

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(a.name for a in self.axes)

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(a.size for a in self.axes)

    @property
    def num_devices(self) -> int:
        return math.prod(self.shape)

    @property
    def explicit(self) -> tuple[str, ...]:
        """The names of the explicit axes."""
        return tuple(a.name for a in self.axes if a.type == "explicit")

    def size_of(self, name: str) -> int:
        for axis in self.axes:
            if axis.name == name:
                return axis.size
        raise KeyError(name)

    def axis_size(self, name: str) -> int:
        """A mesh axis's size; a sub-axis in Shardy's notation (`x:(1)2`)
        is its own size, 2."""
        if ":(" in name:
            return int(name.rsplit(")", 1)[1])
        return self.size_of(name)

    def local_shape(self, shape: Sequence[int],
                    entries: Sequence[str]) -> tuple[int, ...]:
        """The per-device shape of a tensor of `shape` whose dimensions are
        sharded as `entries` (`_`, `x`, `x+y`, sub-axes), rounded up as the
        partitioner pads an uneven split."""
        result = []
        for dim, entry in zip(shape, entries):
            div = 1
            for part in entry.rstrip("?").split("+"):
                if part and part != "_":
                    div *= self.axis_size(part)
            result.append(-(-dim // div))
        return tuple(result)

    def coords(self, device: int) -> tuple[int, ...]:
        """Mesh coordinates of logical device `device` (row-major order)."""
        coords = []
        for size in reversed(self.shape):
            coords.append(device % size)
            device //= size
        return tuple(reversed(coords))

    def __str__(self) -> str:
        return ",".join(f"{a.name}={a.size}" for a in self.axes)

    def types_text(self) -> str:
        """The axis types as `--axis-types` takes them: '' when every axis
        is auto, `explicit` when all are explicit, else per axis."""
        types = {a.type for a in self.axes}
        if types == {"auto"}:
            return ""
        if len(types) == 1:
            return types.pop()
        return ",".join(f"{a.name}={a.type}" for a in self.axes)


_MESH_HELP = "expected NAME=SIZE[,NAME=SIZE...], e.g. x=4 or dp=2,tp=4"


def parse_mesh(text: str) -> MeshSpec:
    """Parses `x=4` or `dp=2,tp=4`."""
    check_one_line(text, "mesh")
    if not text.strip():
        raise SpecError(f"mesh is empty; {_MESH_HELP}")
    axes: list[MeshAxis] = []
    seen: set[str] = set()
    for item in text.split(","):
        item = item.strip()
        if not item:
            raise SpecError(f"mesh {shown(text)} has an empty entry; {_MESH_HELP}")
        name, eq, size = (s.strip() for s in item.partition("="))
        if not eq:
            raise SpecError(
                f"mesh axis {shown(item)} has no size; {_MESH_HELP}")
        if not _IDENT.match(name):
            raise SpecError(
                f"mesh axis name {shown(name)} is not an identifier; axis names are "
                f"letters, digits and '_', not starting with a digit")
        if not parse_size(size):
            raise SpecError(
                f"mesh axis '{name}' has size {shown(size)}; sizes must be positive "
                f"integers (at most {MAX_DIGITS} digits)")
        if name in seen:
            raise SpecError(
                f"mesh axis '{name}' appears twice in {shown(text)}; each axis is "
                f"named once")
        seen.add(name)
        axes.append(MeshAxis(name, int(size)))
    return MeshSpec(tuple(axes))


_TYPES_HELP = ("expected 'auto' or 'explicit' for every axis, or one per "
               "axis: 'explicit,auto' or 'dp=explicit,tp=auto'")


def parse_axis_types(text: str, mesh: MeshSpec) -> MeshSpec:
    """`mesh` with the axis types of `--axis-types`: one type for every
    axis (`explicit`), one per axis in order (`explicit,auto`), or by name
    (`dp=explicit`; axes not named stay auto)."""
    check_one_line(text, "--axis-types")
    items = [item.strip() for item in text.split(",")]
    types: dict[str, str] = {}
    named = ["=" in item for item in items]
    if any(named) and not all(named):
        raise SpecError(f"--axis-types {shown(text)} mixes named and unnamed "
                        f"entries; {_TYPES_HELP}")
    if all(named):
        for item in items:
            name, _, kind = (s.strip() for s in item.partition("="))
            if name not in mesh.names:
                raise SpecError(f"--axis-types names axis '{name}', which "
                                f"--mesh {mesh} does not have")
            if name in types:
                raise SpecError(f"--axis-types gives axis '{name}' twice")
            types[name] = kind
    elif len(items) == 1:
        types = {name: items[0] for name in mesh.names}
    elif len(items) == len(mesh.axes):
        types = dict(zip(mesh.names, items))
    else:
        raise SpecError(f"--axis-types {shown(text)} has {len(items)} entries "
                        f"but --mesh {mesh} has {len(mesh.axes)} axes; "
                        f"{_TYPES_HELP}")
    for name, kind in types.items():
        if kind.lower() not in AXIS_TYPES:
            raise SpecError(f"--axis-types: '{kind}' is not an axis type "
                            f"(axis '{name}'); {_TYPES_HELP}")
    return MeshSpec(tuple(replace(a, type=types.get(a.name, "auto").lower())
                          for a in mesh.axes))


# ---------------------------------------------------------------------------
# Shardings


@dataclass(frozen=True)
class DimSharding:
    """How one dimension is sharded: over `axes` (major to minor); `open`
    leaves it to propagation to shard further."""

    axes: tuple[str, ...] = ()
    open: bool = False

    def __str__(self) -> str:
        return ("+".join(self.axes) or "_") + ("?" if self.open else "")


@dataclass(frozen=True)
class ShardingSpec:
    """One `DimSharding` per tensor dimension."""

    dims: tuple[DimSharding, ...]

    @classmethod
    def replicated(cls, rank: int) -> "ShardingSpec":
        return cls(tuple(DimSharding() for _ in range(rank)))

    @classmethod
    def of_entries(cls, entries: Sequence[str]) -> "ShardingSpec":
        """From the report's entries (`x`, `x+y`, `_`, sub-axes `x:(1)2`,
        open `x?`), already checked: no parsing of user input here."""
        return cls(tuple(
            DimSharding(tuple(a for a in e.rstrip("?").split("+") if a and a != "_"),
                        e.endswith("?"))
            for e in entries))

    @classmethod
    def of_axes(cls, dims: Sequence[tuple[Sequence[str], bool]]) -> "ShardingSpec":
        """From (axes, open) per dimension, as a PartitionSpec gives them."""
        return cls(tuple(DimSharding(tuple(axes), bool(open_)) for axes, open_ in dims))

    @property
    def rank(self) -> int:
        return len(self.dims)

    def axes_used(self) -> tuple[str, ...]:
        return tuple(a for d in self.dims for a in d.axes)

    def uses(self, axis: str) -> bool:
        """Whether a dimension is sharded over `axis` or a sub-axis of it."""
        return any(_base_axis(a) == axis for a in self.axes_used())

    def dim_of(self, axis: str) -> int | None:
        """The dimension sharded over `axis` (or a sub-axis of it)."""
        return next((i for i, d in enumerate(self.dims)
                     if any(_base_axis(a) == axis for a in d.axes)), None)

    def without(self, axes) -> "ShardingSpec":
        """This sharding with `axes` (and their sub-axes) taken off:
        replicated along them."""
        gone = set(axes)
        return ShardingSpec(tuple(
            replace(d, axes=tuple(a for a in d.axes if _base_axis(a) not in gone))
            for d in self.dims))

    def with_axes(self, dim: int, axes: Sequence[str]) -> "ShardingSpec":
        """This sharding with `axes` added, minor-most, to dimension `dim`."""
        dims = list(self.dims)
        dims[dim] = replace(dims[dim], axes=dims[dim].axes + tuple(axes))
        return ShardingSpec(tuple(dims))

    def shards(self, mesh: MeshSpec) -> tuple[int, ...]:
        """Number of shards along each dimension."""
        return tuple(math.prod(mesh.axis_size(a) for a in d.axes)
                     for d in self.dims)

    def entries(self) -> tuple[str, ...]:
        """Each dimension as the report writes it: `_`, `x`, `x+y`."""
        return tuple(str(d).rstrip("?") for d in self.dims)

    def local_shape(self, shape: Sequence[int],
                    mesh: MeshSpec) -> tuple[int, ...]:
        """The per-device shape, rounded up as the partitioner pads."""
        return mesh.local_shape(shape, self.entries())

    def __str__(self) -> str:
        return ",".join(str(d) for d in self.dims)


def _base_axis(name: str) -> str:
    """The mesh axis of a sub-axis in Shardy's notation (`x:(1)2` -> x)."""
    return name.split(":")[0]


_SHARDING_HELP = ("expected one entry per dimension: '_' (not sharded), an "
                  "axis 'x', axes 'x+y', each optionally followed by '?' "
                  "(open), e.g. x,_")


def _parse_axes(text: str, context: str) -> tuple[str, ...]:
    axes = tuple(a.strip() for a in text.split("+"))
    for axis in axes:
        if not _IDENT.match(axis):
            shown = axis or "(empty)"
            raise SpecError(
                f"{context}: '{shown}' is not a mesh axis name; {_SHARDING_HELP}")
    return axes


def parse_dim_sharding(text: str, context: str) -> DimSharding:
    entry = text.strip()
    is_open = entry.endswith("?")
    if is_open:
        entry = entry[:-1].strip()
    if entry == "_":
        return DimSharding((), is_open)
    if not entry:
        raise SpecError(f"{context}: empty entry; {_SHARDING_HELP}")
    return DimSharding(_parse_axes(entry, context), is_open)


def parse_sharding(text: str) -> ShardingSpec:
    """Parses `x,_`, `x+y,_?`. An empty string is the sharding of a scalar."""
    check_one_line(text, "sharding")
    context = f"sharding {shown(text)}"
    if not text.strip():
        return ShardingSpec(())
    return ShardingSpec(tuple(parse_dim_sharding(entry, context)
                              for entry in text.split(",")))


def check_sharding(sharding: ShardingSpec, shape: tuple[int, ...],
                   mesh: MeshSpec, subject: str) -> None:
    """Checks that `sharding` fits a tensor of `shape` on `mesh`.

    `subject` names the tensor in messages, e.g. "argument 'd'".
    """
    context = f"sharding '{sharding}' for {subject}"
    if sharding.rank != len(shape):
        dims = "[" + ",".join(map(str, shape)) + "]"
        example = ",".join(["_"] * len(shape)) or "an empty sharding"
        raise SpecError(
            f"{context} has {sharding.rank} "
            f"entr{'y' if sharding.rank == 1 else 'ies'} but the tensor has "
            f"shape {dims} (rank {len(shape)}); give one entry per dimension, "
            f"e.g. {example}")
    seen: set[str] = set()
    for dim, (size, entry) in enumerate(zip(shape, sharding.dims)):
        for axis in entry.axes:
            if axis not in mesh.names:
                raise SpecError(
                    f"{context}: unknown mesh axis '{axis}'; the mesh has "
                    f"axes {', '.join(mesh.names)}")
            if axis in seen:
                raise SpecError(
                    f"{context}: mesh axis '{axis}' is used twice; an axis "
                    f"may shard only one dimension of a tensor")
            seen.add(axis)
        shards = math.prod(mesh.size_of(a) for a in entry.axes)
        if size % shards:
            what = " x ".join(f"{a}={mesh.size_of(a)}" for a in entry.axes)
            raise SpecError(
                f"{context}: dimension {dim} has size {size}, which is not "
                f"divisible by {shards} ({what}); shard it over axes whose "
                f"sizes divide {size}, or leave it '_'")


# ---------------------------------------------------------------------------
# Tensor types


@dataclass(frozen=True)
class TensorType:
    """A tensor type, optionally carrying its sharding (`f32[8@x,4]`)."""

    dtype: DType
    shape: tuple[int, ...]
    sharding: ShardingSpec | None = None

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * self.dtype.itemsize

    def with_sharding(self, sharding: ShardingSpec | None) -> "TensorType":
        return TensorType(self.dtype, self.shape, sharding)

    def __str__(self) -> str:
        if self.sharding is None:
            dims = [str(n) for n in self.shape]
        else:
            dims = [f"{n}@{d}" if d.axes else (f"{n}@_?" if d.open else str(n))
                    for n, d in zip(self.shape, self.sharding.dims)]
        return f"{self.dtype.name}[{','.join(dims)}]"


_TYPE_HELP = "expected DTYPE[DIM,...], e.g. f32[16,32], f32[1024@x] or i32[]"


def parse_type(text: str) -> TensorType:
    """Parses `f32[16,32]`, `i32[]`, `f32[8@x,4@y]`, `f32[8@x+y?,4]`."""
    check_one_line(text, "type")
    context = f"type {shown(text)}"
    m = re.fullmatch(r"\s*([A-Za-z0-9_]+)\s*\[(.*)\]\s*", text)
    if not m:
        raise SpecError(f"{context}: {_TYPE_HELP}")
    dtype = lookup_dtype(m.group(1))
    if dtype is None:
        raise SpecError(
            f"{context}: unknown dtype '{m.group(1)}'; expected one of "
            f"{DTYPE_NAMES} (bool is accepted as pred)")
    body = m.group(2)
    if not body.strip():
        return TensorType(dtype, ())
    shape: list[int] = []
    dims: list[DimSharding] = []
    for index, item in enumerate(body.split(","), start=1):
        size, at, axes = (s.strip() for s in item.partition("@"))
        if not size:
            raise SpecError(
                f"{context}: dimension {index} is empty; each dimension is a "
                f"non-negative integer size, optionally with @AXES")
        if parse_size(size) is None:
            raise SpecError(
                f"{context}: dimension {index} has size {shown(size)}; sizes are "
                f"non-negative integers (at most {MAX_DIGITS} digits)")
        shape.append(parse_size(size))
        dims.append(parse_dim_sharding(axes, context) if at else DimSharding())
    has_sharding = any(d.axes or d.open for d in dims)
    sharding = ShardingSpec(tuple(dims)) if has_sharding else None
    ttype = TensorType(dtype, tuple(shape), sharding)
    check_size(ttype.shape, ttype.dtype, context)
    return ttype


def check_size(shape: tuple[int, ...], dtype: DType, context: str) -> None:
    """A tensor must be smaller than `MAX_TENSOR_BYTES`."""
    nbytes = math.prod(shape) * dtype.itemsize
    if nbytes >= MAX_TENSOR_BYTES:
        raise SpecError(
            f"{context}: the tensor is {nbytes} bytes (2^"
            f"{nbytes.bit_length() - 1} or more); irshard handles tensors "
            f"below 2^60 bytes (1 EiB)")


def format_shape(dtype: str, shape: tuple[int, ...] | list[int]) -> str:
    return f"{dtype}[{','.join(str(n) for n in shape)}]"
