"""Reading and writing Shardy attributes with jaxlib's MLIR bindings.

Small helpers shared by the passes: find a module's entry function and meshes,
convert between `ShardingSpec` and `#sdy.sharding`, read argument names from
locations. Callers hold the module's context.
"""

from __future__ import annotations

import functools
import re
from typing import Iterator, Sequence

from jaxlib.mlir import ir
from jaxlib.mlir.dialects import func, sdy

from irshard.core.errors import IRError
from irshard.backend.locations import location_name, typed_location
from irshard.core.specs import DimSharding, MeshAxis, MeshSpec, ShardingSpec
from irshard.core.syntax import split_top_level

SHARDING = "sdy.sharding"
SHARDING_ORIGINS = "sdy.sharding_origins"

# Where Shardy's `sdy-propagation-pipeline` stops for irshard: where Shardy
# dumps its `after_propagation` module, before the export passes drop the
# records of why each axis is where it is.
_LAST_PROPAGATION_PASS = "sdy-close-shardings"
# Its options that record those (`sdy.sharding_origins`).
_ORIGINS = re.compile(r"\b((?:sink-)?debug-sharding-origins)=false")


# Shardy's pass that applies sharding constraints to their operands.
_APPLY_CONSTRAINTS = "sdy-apply-sharding-constraints"


@functools.cache
def propagation_pipeline(origins: bool | str = True) -> str:
    """Shardy's propagation as this jaxlib's registered
    `sdy-propagation-pipeline` runs it (its passes as the registry expands
    them: import, call graph, sharding constraints and groups, propagation
    by user priority, the first export steps), up to where Shardy dumps
    its `after_propagation` module, without its module dumps; with
    `origins`, recording where each sharding came from (`"propagation"`:
    everywhere but in applying constraints to their operands, a pass whose
    recording crashes on some modules); the sharding rules it keeps for
    the passes after it dropped. Raises IRError
    where this Shardy registers no such pipeline or stops elsewhere."""
    from jax._src.interpreters import mlir as jax_mlir
    from jaxlib.mlir import passmanager
    # A context as JAX makes it, with Shardy's passes registered.
    with jax_mlir.make_ir_context():
        try:
            expanded = str(passmanager.PassManager.parse(
                "builtin.module(sdy-propagation-pipeline)"))
        except Exception as e:
            raise IRError(f"Shardy registers no propagation pipeline: {e}") from None
    inner = expanded[expanded.index("(") + 1:expanded.rindex(")")]
    passes = [p for p in split_top_level(inner) if p != "sdy-save-module"]
    names = [p.split("{")[0] for p in passes]
    if _LAST_PROPAGATION_PASS not in names:
        raise IRError(f"Shardy's propagation pipeline has no "
                      f"{_LAST_PROPAGATION_PASS}: {expanded}")
    last = names.index(_LAST_PROPAGATION_PASS) + 1
    # The sharding rules propagation keeps for the passes after it are
    # dropped, as the pipeline's own last pass drops them.
    kept = passes[:last] + [p for p in passes[last:] if "sdy-drop-sharding-rules" in p]
    if not origins:
        return ",".join(kept)
    return ",".join(p if origins == "propagation" and p.startswith(_APPLY_CONSTRAINTS)
                    else _ORIGINS.sub(r"\1=true", p) for p in kept)


def functions(module: ir.Module) -> Iterator[func.FuncOp]:
    for op in module.body.operations:
        if op.operation.name == "func.func":
            yield op.opview if not isinstance(op, func.FuncOp) else op


def calls_by_callee(module: ir.Module) -> dict[str, list[ir.Operation]]:
    """Each function's `func.call`s, by the called function's name."""
    found: dict[str, list[ir.Operation]] = {}
    for fn in functions(module):
        for operation in walk(fn.operation):
            if operation.name == "func.call":
                callee = ir.FlatSymbolRefAttr(operation.attributes["callee"]).value
                found.setdefault(callee, []).append(operation)
    return found


def is_public(fn: func.FuncOp) -> bool:
    visibility = fn.attributes["sym_visibility"] \
        if "sym_visibility" in fn.attributes else None
    return visibility is None or ir.StringAttr(visibility).value == "public"


def public_function_names(module: ir.Module) -> list[str]:
    return [ir.StringAttr(fn.attributes["sym_name"]).value
            for fn in functions(module) if is_public(fn)]


def sixteen_bit_floats(module: ir.Module) -> set[str]:
    """The 16-bit float element types (`bf16`, `f16`) of the module's
    values: every operation's results and every block's arguments (a walk,
    in half the time of printing the module to search it)."""
    found: set[str] = set()

    def note(value_type) -> None:
        if isinstance(value_type, ir.ShapedType):
            value_type = value_type.element_type
        if isinstance(value_type, ir.BF16Type):
            found.add("bf16")
        elif isinstance(value_type, ir.F16Type):
            found.add("f16")

    def visit(operation):
        for result in operation.results:
            note(result.type)
        for region in operation.regions:
            for block in region.blocks:
                for argument in block.arguments:
                    note(argument.type)
        return ir.WalkResult.ADVANCE

    operation = getattr(module, "operation", module)
    with operation.context:
        operation.walk(visit)
    return found


def entry_function(module: ir.Module, name: str = "main") -> func.FuncOp:
    """The public entry function `name`; an IRError naming the functions
    otherwise."""
    names = []
    for fn in functions(module):
        fn_name = ir.StringAttr(fn.attributes["sym_name"]).value
        if fn_name == name:
            if not is_public(fn):
                raise IRError(f"@{name} is private; irshard compiles the "
                              f"public entry function @{name} (declare it "
                              f"'func.func @{name}' or 'func.func public "
                              f"@{name}')")
            return fn
        names.append(fn_name)
    listed = ", ".join(f"@{n}" for n in names) or "none"
    raise IRError(f"the module has no function @{name} (its functions: "
                  f"{listed}); irshard compiles the entry function @main")


def mesh_ops(module: ir.Module) -> dict[str, ir.Operation]:
    return {ir.StringAttr(op.attributes["sym_name"]).value: op
            for op in module.body.operations
            if op.operation.name == "sdy.mesh"}


def mesh_spec(mesh_attr: ir.Attribute) -> MeshSpec:
    mesh = sdy.MeshAttr(mesh_attr)
    return MeshSpec(tuple(MeshAxis(sdy.MeshAxisAttr(a).name,
                                   sdy.MeshAxisAttr(a).size)
                          for a in mesh.axes))


def meshes(module: ir.Module) -> dict[str, MeshSpec]:
    """The module's `sdy.mesh` symbols, by name."""
    return {name: mesh_spec(op.attributes["mesh"])
            for name, op in mesh_ops(module).items()}


def mesh_attr(mesh: MeshSpec) -> ir.Attribute:
    return sdy.MeshAttr.get([sdy.MeshAxisAttr.get(a.name, a.size)
                             for a in mesh.axes])


def axis_ref_name(attr: ir.Attribute) -> str:
    """`x`, or `x:(1)2` for a sub-axis (Shardy's notation)."""
    ref = sdy.AxisRefAttr(attr)
    if ref.sub_axis_info is None:
        return ref.name
    info = sdy.SubAxisInfoAttr(ref.sub_axis_info)
    return f"{ref.name}:({info.pre_size}){info.size}"


def sharding_attr(mesh_name: str, spec: ShardingSpec) -> ir.Attribute:
    dims = [sdy.DimensionShardingAttr.get(
        [sdy.AxisRefAttr.get(axis) for axis in d.axes], not d.open)
        for d in spec.dims]
    return sdy.TensorShardingAttr.get(mesh_name, dims)


def sharding_spec(attr: ir.Attribute) -> tuple[str, ShardingSpec]:
    """(mesh name or inlined mesh text, spec) of a `#sdy.sharding`."""
    sharding = sdy.TensorShardingAttr(attr)
    dims = []
    for d in sharding.dimension_shardings:
        dim = sdy.DimensionShardingAttr(d)
        dims.append(DimSharding(tuple(axis_ref_name(a) for a in dim.axes),
                                not dim.is_closed))
    mesh = str(sharding.mesh_or_ref)
    if mesh.startswith("@"):
        mesh = mesh[1:]
    return mesh, ShardingSpec(tuple(dims))


def sharding_specs(attr: ir.Attribute) -> list[ShardingSpec]:
    """The spec of each value of a `#sdy.sharding_per_value` (a manual
    computation's `in_shardings`, `out_shardings`)."""
    return [sharding_spec(s)[1]
            for s in sdy.TensorShardingPerValueAttr(attr).shardings]


def attr_dicts(fn: func.FuncOp, key: str, count: int) -> list[dict[str, ir.Attribute]]:
    """The per-argument (`arg_attrs`) or per-result (`res_attrs`) attribute
    dictionaries of `fn` as Python dicts."""
    if key not in fn.attributes:
        return [{} for _ in range(count)]
    result = []
    for entry in ir.ArrayAttr(fn.attributes[key]):
        d = ir.DictAttr(entry)
        result.append({d[i].name: d[i].attr for i in range(len(d))})
    return result


def set_attr_dicts(fn: func.FuncOp, key: str,
                   dicts: list[dict[str, ir.Attribute]]) -> None:
    fn.attributes[key] = ir.ArrayAttr.get([ir.DictAttr.get(d) for d in dicts])


def mark_buffer_donors(module: ir.Module, indices: Sequence[int],
                       unpin: bool = False) -> None:
    """Marks arguments `indices` of @main as buffers XLA may reuse for any
    output (`jax.buffer_donor`, as `jax.jit` marks a donated argument it
    does not alias to one output itself). With `unpin`, an argument
    aliased to one output (`tf.aliasing_output`) becomes such a donor: its
    sharding changed, so that output may no longer be its size."""
    with module.context:
        main = entry_function(module)
        count = len(main.type.inputs)
        dicts = attr_dicts(main, "arg_attrs", count)
        for i in indices:
            if "tf.aliasing_output" in dicts[i]:
                if not unpin:
                    continue
                del dicts[i]["tf.aliasing_output"]
            dicts[i]["jax.buffer_donor"] = ir.BoolAttr.get(True)
        set_attr_dicts(main, "arg_attrs", dicts)


# Registered passes `--list-passes` looks for; only those this jaxlib has
# registered are listed.
REGISTERED_PASSES = """
sdy-add-data-flow-edges sdy-add-func-data-flow-edges sdy-aggressive-propagate
sdy-apply-sharding-constraints sdy-basic-propagate sdy-close-shardings
sdy-constant-or-scalar-merger sdy-constant-or-scalar-splitter
sdy-convert-global-to-local sdy-drop-sharding-and-mesh sdy-drop-sharding-rules
sdy-explicit-gather-scatter-batching sdy-export-named-computations
sdy-export-pipeline sdy-flatten-call-graph sdy-import-func-calls
sdy-import-pipeline sdy-inline-meshes sdy-insert-explicit-reshards
sdy-insert-func-call-reshards sdy-lift-inlined-meshes sdy-manual-axes-cleanup
sdy-op-priority-propagate sdy-pad-for-divisibility
sdy-per-instruction-partitioning sdy-populate-op-sharding-rules
sdy-pre-order-funcs sdy-propagate-sharding-from-func-to-call
sdy-propagate-to-func-results sdy-propagation-pipeline
sdy-remove-all-gather-reduce-scatter-for-cmv1 sdy-remove-propagation-debug-info
sdy-remove-sharding-groups sdy-remove-size-one-axes
sdy-remove-sub-axes-in-input-output-shardings sdy-reshard-to-collectives
sdy-resolve-permutation-factors sdy-sharding-constraint-to-reshard
sdy-sharding-group-import sdy-sink-data-flow-edges
sdy-sink-func-data-flow-edges sdy-unflatten-call-graph
sdy-update-non-divisible-input-output-shardings sdy-user-priority-propagate
sdy-verify-unreduced-axes
stablehlo-aggressive-simplification stablehlo-legalize-to-vhlo
stablehlo-refine-shapes chlo-legalize-to-stablehlo
canonicalize cse symbol-dce symbol-privatize sccp strip-debuginfo
remove-dead-values loop-invariant-code-motion topological-sort
control-flow-sink print-op-stats
""".split()


# Shardy's collective ops, their report kind, and the attribute naming the
# axes they communicate over. `sdy.all_slice` moves no data and is left out.
SDY_COLLECTIVES = {
    "sdy.all_gather": ("all-gather", "gathering_axes"),
    "sdy.all_reduce": ("all-reduce", "reduction_axes"),
    "sdy.reduce_scatter": ("reduce-scatter", "reduce_scatter_axes"),
    "sdy.all_to_all": ("all-to-all", "params"),
    "sdy.collective_permute": ("collective-permute", None),
}


_AXIS = re.compile(r'"([^"]+)"(:\(\d+\)\d+)?')


def value_sharding(value: ir.Value) -> ShardingSpec | None:
    """The sharding a value's defining op gives it (`sdy.sharding`), for a
    single-result op."""
    owner = value.owner
    owner = getattr(owner, "operation", owner)
    if isinstance(owner, ir.Operation) and SHARDING in owner.attributes:
        text = str(owner.attributes[SHARDING])
        if text.startswith("#sdy.sharding<"):
            return sharding_spec(owner.attributes[SHARDING])[1]
        if text.startswith("#sdy.sharding_per_value<"):
            per_value = sdy.TensorShardingPerValueAttr(owner.attributes[SHARDING])
            index = ir.OpResult(value).result_number
            return sharding_spec(per_value.shardings[index])[1]
    return None


def collective_axes(operation: ir.Operation, mesh: MeshSpec) -> list[str]:
    """The mesh axes a Shardy collective communicates over."""
    kind, axes_attr = SDY_COLLECTIVES[operation.name]
    if axes_attr is not None:
        return [name + (sub or "") for name, sub in
                _AXIS.findall(str(operation.attributes[axes_attr]))]
    _, out_spec = sharding_spec(operation.attributes["out_sharding"])
    before = value_sharding(operation.operands[0])
    moved = set(out_spec.axes_used())
    if before is not None:
        moved = {a for a in moved | set(before.axes_used())
                 if [a in d.axes for d in before.dims]
                 != [a in d.axes for d in out_spec.dims]}
    return [a for a in mesh.names if a in moved]


def argument_names(fn: func.FuncOp) -> list[str | None]:
    """Each argument's name from its location (JAX writes `loc("d")`)."""
    if fn.is_external:
        return [None] * len(fn.type.inputs)
    return [location_name(arg.location) for arg in fn.entry_block.arguments]


def tensor_shape(type_: ir.Type) -> tuple[int, ...] | None:
    try:
        ranked = ir.RankedTensorType(type_)
    except ValueError:
        return None
    if not ranked.has_static_shape:
        return None
    return tuple(ranked.shape)


def walk(op: ir.Operation) -> Iterator[ir.Operation]:
    """Every operation nested in `op`, in pre-order."""
    for region in op.regions:
        for block in region.blocks:
            for child in block.operations:
                yield child.operation
                yield from walk(child.operation)


def propagation_freedom(module: ir.Module) -> tuple[list[bool], list[bool]]:
    """Whether XLA may choose each entry argument's and result's sharding:
    an argument whose sharding is missing or has an open dimension, a result
    without a sharding. (`jax.jit` passes the same to XLA.)"""
    with module.context:
        main = entry_function(module)
        args = []
        for attrs in attr_dicts(main, "arg_attrs", len(main.type.inputs)):
            if SHARDING not in attrs:
                args.append(True)
                continue
            _, spec = sharding_spec(attrs[SHARDING])
            args.append(any(d.open for d in spec.dims))
        results = [SHARDING not in attrs for attrs in
                   attr_dicts(main, "res_attrs", len(main.type.results))]
    return args, results


def find_mesh(module: ir.Module, name: str | None, who: str) -> tuple[str, MeshSpec]:
    """The mesh `name`, or the module's only mesh (one with axes, where
    JAX also declares an empty one)."""
    found = meshes(module)
    if name:
        if name not in found:
            listed = ", ".join("@" + n for n in sorted(found)) or "none"
            raise IRError(f"{who}: the module has no mesh @{name} (its meshes: "
                          f"{listed})")
        return name, found[name]
    with_axes = {n: m for n, m in found.items() if m.axes}
    if len(found) > 1 and len(with_axes) == 1:
        return next(iter(with_axes.items()))
    if len(found) != 1:
        what = "no sdy.mesh" if not found else \
            f"meshes {', '.join('@' + n for n in sorted(found))}"
        raise IRError(f"{who}: the module declares {what}; name the mesh with "
                      f"mesh-name=NAME")
    return next(iter(found.items()))


def name_locations(module: ir.Module, source: str | None = None) -> int:
    """Wraps each operation's unnamed source location in a name (the op's).

    XLA keeps a location's file and line in the HLO's metadata only under a
    name (JAX writes `loc("jit(f)/dot"(...))`); modules from other frontends
    often carry bare `loc("model.jl":12:3)`. An operation written without a
    location gets its line in the module's own text, which MLIR's parser
    records under the name `-`: with `source`, that is the file's name.
    Returns how many were wrapped.
    """
    count = 0
    with module.context:
        for fn in functions(module):
            for operation in walk(fn.operation):
                location = typed_location(operation.location)
                if source and isinstance(location, ir.FileLineColLoc) \
                        and location.filename == "-":
                    operation.location = ir.Location.file(
                        source, location.start_line, location.start_col)
                if isinstance(location, (ir.FileLineColLoc, ir.CallSiteLoc,
                                         ir.FusedLoc)):
                    # The inner, empty name stands where JAX puts the
                    # function's name: these frames have none.
                    frame = ir.Location.name("", childLoc=operation.location)
                    operation.location = ir.Location.name(operation.name,
                                                          childLoc=frame)
                    count += 1
    return count


def clone_module(module) -> ir.Module:
    """A deep copy of a module (or of its operation) as an `ir.Module`: its
    attributes and each operation of its body cloned into a new module (a
    twentieth of the time of printing and parsing it again)."""
    operation = getattr(module, "operation", module)
    with operation.context, operation.location:
        copy = ir.Module.create()
        attributes = operation.attributes
        for i in range(len(attributes)):
            named = attributes[i]
            copy.operation.attributes[named.name] = named.attr
        for inner in operation.regions[0].blocks[0].operations:
            copy.body.append(inner.clone())
    return copy


def result_names(fn: func.FuncOp) -> list[str]:
    """Each result's name: JAX's `jax.result_info`, else `result` (or
    `result[i]` when there are several)."""
    results = attr_dicts(fn, "res_attrs", len(fn.type.results))
    names = []
    for i, attrs in enumerate(results):
        info = attrs.get("jax.result_info")
        if info is not None:
            names.append(ir.StringAttr(info).value)
        else:
            names.append("result" if len(results) == 1 else f"result[{i}]")
    return names
