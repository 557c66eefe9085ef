"""Finding the collectives of an HLO module and what they cost.

Walks the module from its entry computation in program order, descending into
called computations (loop bodies, calls, branches, async wrappers) and
keeping the trip counts of the enclosing `while` loops. Each collective gets
its bytes, the mesh axes its groups span, and the user's source line: from
its own metadata, or, for one the partitioner made without metadata, from a
neighbouring instruction (`attribution: inferred`).
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import NamedTuple

from irshard.collectives.owntypes import Moved, own_types
from irshard.core.errors import IRError
from irshard.core.frames import Frame, SourceLocation, UserCode
from irshard.core.dtypes import lookup_dtype
from irshard.core.specs import MeshSpec
from irshard.core.textinput import shown
from irshard.reporting.packed import PackedCollectives
from irshard.xla import hlo, tpufusions
from irshard.xla import replica_groups as rg
from irshard.xla.hlo import COLLECTIVE_OPCODES, HloModuleView, Instruction, collective_kind
from irshard.xla.shapes import ArrayShape, shape_leaves
from irshard.xla.loops import trip_count


# Computations these opcodes apply per element (reducers, comparators): they
# hold no collectives and do not run once per call.
_ELEMENTWISE_CALLERS = {"all-reduce", "all-reduce-start", "reduce-scatter",
                        "reduce", "reduce-window", "scatter", "sort", "map",
                        "select-and-scatter"}


def hlo_dtype(dtype: str) -> str:
    """HLO's element type in the grammar's spelling (`s32` -> `i32`)."""
    known = lookup_dtype(dtype)
    return known.name if known else dtype


def wire_bytes(kind: str, nbytes: int, n: int) -> int:
    """Bytes one device sends, with ring algorithms, for a result of
    `nbytes` per device in a group of `n`."""
    if n <= 1:
        return 0
    if kind in ("all-gather", "all-to-all", "ragged-all-to-all"):
        return nbytes * (n - 1) // n
    if kind == "reduce-scatter":       # the full buffer is n results
        return nbytes * (n - 1)
    if kind == "all-reduce":
        return 2 * nbytes * (n - 1) // n
    return nbytes                      # collective-permute, -broadcast




# ---------------------------------------------------------------------------
# Sources


def _frames(view: HloModuleView, inst: Instruction) -> Sequence[Frame]:
    """The instruction's stack, innermost first: its stack frame chain, or
    the single `source_file:source_line` older modules carry."""
    metadata = inst.metadata
    if metadata.get("stack_frame_id", "").isdigit():
        chain = view.stack_frames.chain_of(int(metadata["stack_frame_id"]))
        if chain:
            return chain
    if "source_file" in metadata and metadata.get("source_line", "").isdigit():
        return [Frame(metadata["source_file"], "", int(metadata["source_line"]))]
    return []


def user_line(view: HloModuleView, resolver: UserCode) -> Callable[[Instruction], str | None]:
    """`file:line` of the user's code an instruction's own metadata names
    (nothing inferred from its neighbours), for the timeline's events."""
    # By stack frame: a module's instructions share a few.
    by_frame: dict[str, str | None] = {}

    def line(inst: Instruction) -> str | None:
        metadata = inst.metadata
        frame = metadata.get("stack_frame_id") if "source_file" not in metadata \
            else None
        if frame is not None and frame in by_frame:
            return by_frame[frame]
        found = resolver.choose(_frames(view, inst))
        named = f"{found.file}:{found.line}" if found is not None else None
        if frame is not None:
            by_frame[frame] = named
        return named
    return line


def attribute(view: HloModuleView, inst: Instruction, resolver: UserCode,
              max_depth: int = 4) -> tuple[SourceLocation | None, str, str | None]:
    """(source, attribution, op_name) of `inst`: with no source anywhere
    near, its own op_name, else its nearest neighbour's (whose scope it
    shares)."""
    own = resolver.choose(_frames(view, inst))
    if own is not None:
        return own, "metadata", inst.metadata.get("op_name")
    named = inst.metadata.get("op_name")
    # Breadth-first over producers, then consumers.
    seen = {inst.name}
    frontier = [inst]
    for _ in range(max_depth):
        nxt = []
        for current in frontier:
            around = [view.get(name, current.computation)
                      for name in current.operands]
            around += view.users(current)
            for neighbour in around:
                if neighbour is None or neighbour.name in seen:
                    continue
                seen.add(neighbour.name)
                source = resolver.choose(_frames(view, neighbour))
                if source is not None:
                    return source, "inferred", neighbour.metadata.get("op_name")
                named = named or neighbour.metadata.get("op_name")
                nxt.append(neighbour)
        frontier = nxt
    return None, "none", named


# ---------------------------------------------------------------------------
# Collectives


class _Site(NamedTuple):
    inst: Instruction
    loops: tuple[int | None, ...]
    is_async: bool
    start: Instruction | None = None   # the async-start running `inst`
    # The fusion that performs `inst` as another collective (libtpu's
    # all-reduce-scatter fusion: a reduce-scatter), named and located by it.
    fusion: Instruction | None = None


def _performed(site: _Site) -> tuple[str | None, Instruction]:
    """(kind, the instruction the executable runs) of a site."""
    if site.fusion is not None:
        return "reduce-scatter", site.fusion
    return collective_kind(site.inst), site.inst


def _sites(view: HloModuleView) -> Iterator[_Site]:
    """The module's collectives in program order, as they are visited (a
    reader that reads each from the text holds one at a time)."""

    # libtpu's asynchronous collective fusions (`tpufusions`): the chains
    # whose collective was counted at its start.
    started: set[tuple[str, str]] = set()

    def visit(computation, loops, is_async, depth, starts=False):
        if depth > 64:
            return
        for inst in view.visits(computation):
            # Read before the site is handed on: its reader may let go of
            # what it parsed (`release`). A collective calls only what it
            # applies per element.
            calls = () if inst.opcode in COLLECTIVE_OPCODES \
                else inst.called_computations()
            if collective_kind(inst) is not None:
                chain = tpufusions.chain(inst)
                if chain is not None:
                    # The same collective again, in a fusion computing
                    # while it runs or in its done: counted at its start.
                    if chain in started and not starts:
                        continue
                    started.add(chain)
                yield _Site(inst, loops, is_async or inst.opcode.endswith("-start")
                            or inst.opcode == "send")
            wrapped = view.get(inst.wrapped, "") if inst.wrapped else None
            if wrapped is not None and wrapped.opcode in COLLECTIVE_OPCODES:
                yield _Site(wrapped, loops, True, inst)
            summed = tpufusions.reduce_scatter(view, inst) \
                if inst.opcode == "fusion" else None
            if summed is not None:
                # A streamed module visits a fusion as its calls alone.
                yield _Site(summed, loops, is_async, None,
                            view.get(inst.name, computation) or inst)
                continue
            for key, callee in calls:
                if key == "to_apply" and inst.opcode in _ELEMENTWISE_CALLERS:
                    continue
                inner = loops
                if inst.opcode == "while":
                    trips = trip_count(view, inst)
                    if key == "condition" and trips is not None:
                        trips += 1
                    inner = loops + (trips,)
                starting = tpufusions.role(view, inst) == tpufusions.START \
                    if inst.opcode == "fusion" else False
                yield from visit(callee, inner,
                                 is_async or inst.opcode == "async-start" or starting,
                                 depth + 1, starting)

    return visit(view.entry, (), False, 0)


def _result_shape(view: HloModuleView, inst: Instruction):
    """The collective's result: for an async `-start`, its `-done`'s."""
    if inst.opcode.endswith("-start"):
        done = view.async_done(inst)
        if done is not None:
            return done.shape
        shape = inst.shape
        if isinstance(shape, tuple) and len(shape) >= 2:
            return shape[1]
    return inst.shape


def program_shapes(view: HloModuleView) -> dict[int, Moved]:
    """What each collective of a (partitioned) module moves, by channel id:
    the program's own element types, before a backend changed them."""
    result = {}
    for site in _sites(view):
        channel = site.inst.attrs.get("channel_id", "")
        if channel.isdigit():
            result[int(channel)] = Moved(
                collective_kind(site.inst),
                tuple(shape_leaves(_result_shape(view, site.inst))))
    return result


@functools.lru_cache(maxsize=1024)
def _groups(printed: tuple[str, str], mesh: MeshSpec | None, devices: int
            ) -> tuple[list[list[int]], list[str] | None, int]:
    """(groups, mesh axes, group size) of printed replica groups or
    source-target pairs: a module repeats a few forms many times. The
    lists are shared: callers do not change them."""
    what, text = printed
    if what == "pairs":
        pairs = rg.parse_pairs(text)
        axes = rg.pair_axes(pairs, mesh) if mesh else None
        group = (math.prod(mesh.size_of(a) for a in axes) if axes
                 else len({d for p in pairs for d in p}))
        return [list(p) for p in pairs], axes, group
    groups = rg.parse_replica_groups(text, devices)
    axes = rg.span_axes(groups, mesh) if mesh else None
    return groups, axes, len(groups[0]) if groups else devices


def _read_groups(inst: Instruction, printed: tuple[str, str],
                 mesh: MeshSpec | None, devices: int):
    """`_groups`, with a malformed list named as the user's IR error."""
    try:
        return _groups(printed, mesh, devices)
    except (ValueError, IndexError, ZeroDivisionError, OverflowError,
            MemoryError) as e:
        what = "source_target_pairs" if printed[0] == "pairs" else "replica_groups"
        raise IRError(f"%{inst.name} ({inst.opcode}): malformed {what}="
                      f"{shown(printed[1])}: {e}") from None


def collectives(view: HloModuleView, mesh: MeshSpec | None,
                user_dir: str | None,
                programs: dict[int, Moved] | None = None,
                cost=None) -> PackedCollectives:
    """The collectives of `view` in program order. With `programs` (from
    `program_shapes` of the partitioned module), a collective the backend
    widened reports the program's own type and bytes, and the backend's type
    as `backend_dtype`. With `cost` (a `cost.CostModel`), each gets the link
    it crosses and its estimated time."""
    resolver = UserCode(user_dir)
    devices = (mesh.num_devices if mesh
               else view.num_partitions * view.num_replicas)
    if programs:
        sites: Iterable[_Site] = list(_sites(view))
        owns: Iterable = own_types([_found(view, site) for site in sites],
                                    programs)
    else:
        # Nothing to match across collectives: each is read, reported and
        # let go in turn.
        sites, owns = _sites(view), itertools.repeat(None)
    return PackedCollectives(_packed(view, sites, owns, resolver, mesh, devices,
                                     cost))


def _packed(view: HloModuleView, sites: Iterable[_Site], owns: Iterable,
            resolver: UserCode, mesh: MeshSpec | None, devices: int, cost
            ) -> Iterator[tuple[str, str | None, tuple]]:
    """(name, op_name, shared fields) of each collective of `sites`."""
    alike: dict[tuple, tuple] = {}
    # Collectives printed alike (`hlo.alike`: the same text but for name,
    # operands, channel id and op_name) in the same loops report alike:
    # what the first of them gave, by that key.
    known: dict[tuple, tuple] = {}
    release = getattr(view, "release", None)
    for site, own in zip(sites, owns):
        inst = site.inst
        printed = _alike_key(view, site)
        if printed is not None:
            key = (printed[0], site.loops, site.is_async,
                   None if own is None else tuple(own))
            shared = known.get(key)
            if shared is not None:
                yield inst.name, printed[1], shared
                if release is not None:
                    release(inst)
                continue
        shared, op_name = _collective(view, site, own, resolver, mesh, devices,
                                      cost)
        # Collectives alike share one tuple (sources compared by identity:
        # `resolver` gives each stack's one object).
        source = shared[7]
        shared = alike.setdefault(shared[:7] + (id(source),) + shared[8:], shared)
        if printed is not None and shared[8] == "metadata" \
                and len(known) < _KNOWN_FORMS:
            known[key] = shared
        yield (site.fusion or inst).name, op_name, shared
        if release is not None:
            release(inst)


# Distinct printed forms remembered: a module whose collectives all differ
# (a backend config of each its own) keeps no more than these.
_KNOWN_FORMS = 4096


def _alike_key(view: HloModuleView, site: _Site) -> tuple[tuple, str] | None:
    """(key, op_name) of a collective whose report follows from its
    printed form (`hlo.alike`), with its `-done`'s shape for an async
    `-start`; None where its report needs more (an async wrapper's, a
    fusion's)."""
    if site.start is not None or site.fusion is not None:
        return None
    inst = site.inst
    printed = hlo.alike(inst.text)
    if printed is None:
        return None
    key, op_name, _ = printed
    if inst.opcode.endswith("-start"):
        done = view.async_done(inst)
        if done is not None:
            head = hlo.alike(done.text)
            if head is None:
                return None
            key = key + (head[0][0],)
    return key, op_name


def _found(view: HloModuleView, site: _Site) -> tuple[str, str, list[ArrayShape]]:
    """(kind, channel id, leaves) of a collective, for `own_types`."""
    kind, runs = _performed(site)
    return (kind, site.inst.attrs.get("channel_id", ""),
            shape_leaves(_result_shape(view, runs)))


def _collective(view: HloModuleView, site: _Site, own: list[ArrayShape] | None,
                resolver: UserCode, mesh: MeshSpec | None, devices: int,
                cost) -> tuple[tuple, str | None]:
    """(the values of `packed.SHARED_FIELDS`, op_name) of one collective."""
    inst = site.inst
    kind, runs = _performed(site)
    leaves = shape_leaves(_result_shape(view, runs))
    if inst.opcode == "send":
        # Between slices: what is sent (the operand), over the axes that
        # span the slices.
        leaves = [leaf for leaf in leaves if leaf.dtype not in ("u32", "token")][:1]
        groups = cost.slice_groups() if cost is not None else []
        axes = cost.slice_axes(mesh) if cost is not None and mesh else None
        group = len(groups[0]) if groups else 1
    elif kind == "collective-permute" and "source_target_pairs" in inst.attrs:
        groups, axes, group = _read_groups(
            inst, ("pairs", inst.attrs["source_target_pairs"]), mesh, devices)
    else:
        groups, axes, group = _read_groups(
            inst, ("groups", inst.attrs.get("replica_groups", "{}")), mesh,
            devices)
    backend_dtype = None
    if own is not None:
        backend_dtype = hlo_dtype(leaves[0].dtype)
        leaves = own
    nbytes = sum(leaf.nbytes for leaf in leaves)
    wire = sum(wire_bytes(kind, leaf.nbytes, group) for leaf in leaves)
    link, seconds = cost.estimate(kind, nbytes, wire, group, groups) \
        if cost is not None else (None, None)
    source, attribution, op_name = attribute(view, runs, resolver)
    if source is None and site.start is not None:
        source, attribution, op_name = attribute(view, site.start, resolver)
    first = leaves[0] if leaves else ArrayShape("f32", ())
    axes = tuple(axes) if axes is not None else None
    shapes = tuple((hlo_dtype(leaf.dtype), leaf.dims) for leaf in leaves) \
        if len(leaves) > 1 else None
    return (kind, hlo_dtype(first.dtype), first.dims, nbytes, wire, axes,
            group, source, attribution, site.loops, site.is_async,
            len(leaves), backend_dtype, link, seconds, None, shapes), op_name
