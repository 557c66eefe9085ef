"""The vocabulary `--explain` reads with: a value of the user's program
(`irshard.reporting.why.Value`), the instructions that pass values through or index them, JAX
primitives and their StableHLO ops, and the small readers of shardings,
axes and instruction attributes the explanations share.
"""

from __future__ import annotations

import math
import re
from typing import Any, Sequence

from irshard.core.specs import ShardingSpec


ORIGIN_NAME = "sdy.sharding_origin_name"     # a constraint's origin name

# Instructions that pass a value through unchanged in content.
PASS_THROUGH = frozenset({
    "copy", "convert", "bitcast", "bitcast-convert", "reshape", "transpose",
    "copy-start", "copy-done", "optimization-barrier", "reduce-precision",
})

# Readers XLA's partitioner cannot run on a dimension sharded where they
# index it: it gathers the dimension for them.
INDEXED = {
    "scatter": "a scatter (`.at[...].set/add`) writes at positions of a "
               "dimension sharded over {axes} that need not line up with the "
               "shards: XLA gathers the dimension for it",
    "gather": "a gather (indexing, `jnp.take`) reads positions of a dimension "
              "sharded over {axes} that need not line up with the shards: XLA "
              "gathers the dimension for it",
    "dynamic_slice": "a slice at a traced offset of a dimension sharded over "
                     "{axes}: XLA gathers the dimension for it",
    "dynamic_update_slice": "an update at a traced offset of a dimension "
                            "sharded over {axes}: XLA gathers the dimension "
                            "for it",
}

# Ops that write into their first operand at traced positions.
UPDATES = ("scatter", "scatter-add", "scatter_add", "dynamic_update_slice")

# Ops whose partitioned form needs an operand whole along a dimension, by
# what about them forces it (gathers, scatters and sorts: `INDEXED`).
FORCING = {
    "conv_general_dilated": "with feature groups or a sharded spatial "
                            "dimension is not partitioned along it",
    "sort": "sorts along a sharded dimension",
    "cumsum": "scans along a sharded dimension",
    "custom_call": "has no sharding rule",
    "pure_callback": "runs on the host on the whole array (no sharding rule)",
    "io_callback": "runs on the host on the whole array (no sharding rule)",
}

# Primitives whose sharded form exchanges the edges of neighbouring shards.
HALO_PRIMITIVES = frozenset({
    "pad", "slice", "concatenate", "dynamic_slice", "dynamic_update_slice",
    "rev", "conv_general_dilated", "reduce_window", "reduce_window_sum",
    "select_and_scatter_add", "cumsum", "cumprod", "cummax", "cummin",
    "cumlogsumexp"})

# What changes a value's shape but not the order of its elements.
RESHAPES = frozenset({"reshape", "bitcast", "copy", "convert"})

# JAX primitive (the last part of an op_name) -> StableHLO op names.
PRIMITIVE_OPS = {
    "select_n": ("select",),
    "convert_element_type": ("convert",),
    "exp": ("exponential",),
    "integer_pow": ("multiply",),
    "scatter-add": ("scatter",),
    "scatter_add": ("scatter",),
    "reduce_sum": ("reduce",),
    "reduce_max": ("reduce",),
    "reduce_min": ("reduce",),
    "reduce_prod": ("reduce",),
    "argmax": ("reduce",),
    "argmin": ("reduce",),
    "cumsum": ("reduce_window",),
    "sharding_constraint": ("sharding_constraint", "reshard"),
    "pjit": ("call",),
    "jit": ("call",),
    "rsqrt": ("rsqrt",),
    "pow": ("power",),
    "dot_general": ("dot_general", "dot"),
    "conv_general_dilated": ("convolution",),
    "squeeze": ("reshape",),
    "expand_dims": ("reshape", "broadcast_in_dim"),
    "rev": ("reverse",),
    # JAX's arithmetic, named apart from the StableHLO ops it lowers to.
    "mul": ("multiply",),
    "square": ("multiply", "square"),
    "add_any": ("add",),
    "sub": ("subtract",),
    "div": ("divide",),
    "rem": ("remainder",),
    "neg": ("negate",),
    "max": ("maximum",),
    "min": ("minimum",),
    "lt": ("compare",),
    "le": ("compare",),
    "gt": ("compare",),
    "ge": ("compare",),
    "eq": ("compare",),
    "ne": ("compare",),
    "sin": ("sine",),
    "cos": ("cosine",),
    "log1p": ("log_plus_one",),
    "expm1": ("exponential_minus_one",),
}


# StableHLO op -> HLO opcode, where the names differ.
HLO_OPCODES = {"dot_general": "dot", "broadcast_in_dim": "broadcast",
                "convolution": "convolution", "select": "select"}


# ---------------------------------------------------------------------------
# Helpers


def _dict(attr) -> dict[str, str]:
    from jaxlib.mlir import ir
    d = ir.DictAttr(attr)
    return {d[i].name: ir.StringAttr(d[i].attr).value for i in range(len(d))}


def forcing(primitive: str, operation, axes) -> str:
    """What about an op of `primitive` (its op in the propagated module,
    `operation`, where found) forces XLA to gather along `axes`; a
    convolution's by its groups: one whose input features are split into
    groups (a ResNeXt block's, not a depthwise one's) is not partitioned
    along its batch or spatial dimensions."""
    prop = FORCING.get(primitive, "indexes along a sharded dimension")
    if primitive != "conv_general_dilated" or operation is None:
        return prop
    from jaxlib.mlir import ir
    attrs = operation.attributes
    count = {name: ir.IntegerAttr(attrs[name]).value if name in attrs else 1
             for name in ("feature_group_count", "batch_group_count")}
    over = ",".join(sorted(axes)) or "the mesh"
    if count["feature_group_count"] > 1:
        return (f"with feature_group_count={count['feature_group_count']}: XLA "
                f"does not partition a grouped convolution along the dimension "
                f"sharded over {over}, and gathers its input whole")
    if count["batch_group_count"] > 1:
        return (f"with batch_group_count={count['batch_group_count']} (a grouped "
                f"convolution's kernel gradient): XLA does not partition it "
                f"along the dimension sharded over {over}")
    return prop


def _entries(spec) -> tuple[str, ...]:
    return tuple(str(d).rstrip("?") for d in spec.dims)


def by_axis(origins: dict[str, Any]) -> dict[str, Any]:
    """Origins keyed by whole axis (`x:(1)2` -> `x`), the first kept."""
    result: dict[str, Any] = {}
    for key, value in origins.items():
        result.setdefault(key.split(":")[0], value)
    return result


def agreeing(origins, theirs, ours) -> dict[str, Any]:
    """The origins (recorded for sharding `theirs`) of the axes that
    sharding `ours` places on the same dimension."""
    if theirs is None or ours is None or len(theirs) != len(ours):
        return {}
    kept = {}
    for axis, origin in origins.items():
        dims = [i for i, entry in enumerate(theirs) if _uses((entry,), axis)]
        if dims and _uses((ours[dims[0]],), axis):
            kept[axis] = origin
    return kept


def _only(origins, axes, spec) -> dict[str, Any]:
    """The origins of the axes a collective moves that `spec` uses."""
    return {a: o for a, o in sorted(origins.items()) if a in axes and _uses(spec, a)}


def _uses(entries: Sequence[str] | None, axis: str) -> bool:
    return ShardingSpec.of_entries(entries or ()).uses(axis)


def _axes(names) -> frozenset[str]:
    return frozenset(a.split(":")[0] for a in names or ())


def _local_shape(shape, entries: Sequence[str], mesh) -> tuple[int, ...] | None:
    """Per-device shape of a tensor of `shape` sharded as `entries`, where
    both are known."""
    if mesh is None or len(shape) != len(entries):
        return None
    return mesh.local_shape(shape, entries)


def array_dims(shape) -> tuple[int, ...] | None:
    dims = getattr(shape, "dims", None)
    return tuple(dims) if dims is not None else None


def _op_name(name: str) -> str:
    """`stablehlo.dot_general` -> `dot_general`."""
    return name.split(".", 1)[1] \
        if name.startswith(("stablehlo.", "chlo.", "sdy.", "func.")) \
        else name


def _primitive(op_name: str | None) -> str | None:
    """The JAX primitive of an op name (`jit(f)/while/body/slice` -> slice)."""
    if not op_name:
        return None
    last = op_name.rsplit("/", 1)[-1]
    last = re.sub(r"\[.*$", "", last)
    return last if re.fullmatch(r"[A-Za-z_][\w-]*", last) else None


def parameter_number(inst) -> int | None:
    m = re.search(r"parameter\((\d+)\)", inst.text)
    return int(m.group(1)) if m else None


def is_token(inst) -> bool:
    return inst is not None and str(inst.shape).startswith("token")


def _sharded(entries: Sequence[str] | None) -> str:
    """`sharded x,_`, or what is known where propagation recorded no
    sharding (a value in a manual or auto_axes region)."""
    if entries is None:
        return "(its sharding not recorded)"
    return f"sharded {sharding_text(entries)}"


def sharding_text(entries: Sequence[str] | None) -> str:
    if entries is None:
        return "?"
    if all(e == "_" for e in entries):
        return "replicated"
    return ",".join(entries)


def fit(spec, shape, local, mesh):
    """The sharding of a tensor of global `shape` whose per-device shape is
    `local`: `spec` when it fits, else the mesh axes whose sizes divide each
    dimension as the shapes do (mesh order, `spec`'s axes first)."""
    if shape is None or local is None or mesh is None or len(shape) != len(local):
        return spec
    if spec is not None and _local_shape(shape, spec, mesh) == local:
        return spec
    factors = []
    for g, n in zip(shape, local):
        if n <= 0 or g % n:
            return spec
        factors.append(g // n)
    preferred = list(ShardingSpec.of_entries(spec or ()).axes_used())
    names = [a for a in preferred if ":" not in a and a in mesh.names]
    names += [a for a in mesh.names if a not in names]

    def assign(dim, free):
        if dim == len(factors):
            return []
        for combo in _products(factors[dim], free, mesh):
            rest = assign(dim + 1, [a for a in free if a not in combo])
            if rest is not None:
                return ["+".join(combo) or "_"] + rest
        return None

    found = assign(0, names)
    return tuple(found) if found is not None else spec


def _products(target: int, free: list[str], mesh) -> list[tuple[str, ...]]:
    """Ordered choices of distinct axes from `free` whose sizes multiply to
    `target` (shortest first; mesh order within a choice)."""
    import itertools
    if target == 1:
        return [()]
    found = []
    for r in range(1, len(free) + 1):
        for combo in itertools.combinations(free, r):
            if math.prod(mesh.size_of(a) for a in combo) == target:
                found.append(tuple(sorted(combo, key=mesh.names.index)))
    return found
