"""Reading and writing Shardy attributes with jaxlib's MLIR bindings.

Small helpers shared by the passes: find a module's entry function and meshes,
convert between `ShardingSpec` and `#sdy.sharding`, read argument names from
locations. Callers hold the module's context.
"""

from __future__ import annotations

import re
from typing import Any, Iterator

from jaxlib.mlir import ir
from jaxlib.mlir.dialects import func, sdy

from irshard.errors import IRError
from irshard.specs import DimSharding, MeshAxis, MeshSpec, ShardingSpec

SHARDING = "sdy.sharding"
SHARDING_ORIGINS = "sdy.sharding_origins"


def functions(module: ir.Module) -> Iterator[func.FuncOp]:
    for op in module.body.operations:
        if op.operation.name == "func.func":
            yield op.opview if not isinstance(op, func.FuncOp) else op


def is_public(fn: func.FuncOp) -> bool:
    visibility = fn.attributes["sym_visibility"] \
        if "sym_visibility" in fn.attributes else None
    return visibility is None or ir.StringAttr(visibility).value == "public"


def public_function_names(module: ir.Module) -> list[str]:
    return [ir.StringAttr(fn.attributes["sym_name"]).value
            for fn in functions(module) if is_public(fn)]


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


# `loc("d")` or `loc("d"(...))`, not a file location `loc("f.py":3:7)`.
_NAME_LOC = re.compile(r'^loc\("((?:[^"\\]|\\.)*)"(?=[()])')


def location_name(location: ir.Location) -> str | None:
    """The name of a `loc("name")` or `loc("name"(...))` location."""
    m = _NAME_LOC.match(str(location))
    return m.group(1) if m else None


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


def parse_module(text: str, context: Any, source: str) -> ir.Module:
    """Parses MLIR text; errors carry MLIR's own `file:line:col: message`."""
    with context:
        try:
            return ir.Module.parse(text)
        except ir.MLIRError as e:
            raise IRError(f"{source}: {diagnostic_text(e)}") from None


def diagnostic_text(error: ir.MLIRError, with_location: bool = True) -> str:
    """The first diagnostic of an MLIRError as `line:col: message`."""
    diagnostics = list(error.error_diagnostics)
    if not diagnostics:
        return error.message
    d = diagnostics[0]
    if not with_location:
        return d.message
    where = str(d.location)
    m = re.match(r'loc\("[^"]*":(\d+):(\d+)', where)
    prefix = f"{m.group(1)}:{m.group(2)}: " if m else ""
    return f"{prefix}{d.message}"


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


_FILE_LOC = re.compile(r'(?:"((?:[^"\\]|\\.)*)"\()?"((?:[^"\\]|\\.)*)":(\d+):(\d+)')


def location_frames(location) -> list[tuple[str, int, str]]:
    """(file, line, function) of every file location in an MLIR location,
    innermost first (the order `callsite(callee at caller)` prints them); the
    function is the name JAX wraps a frame's location in, or ''."""
    frames = []
    for m in _FILE_LOC.finditer(str(location)):
        frames.append((m.group(2), int(m.group(3)), m.group(1) or ""))
    return frames


def find_mesh(module: ir.Module, name: str | None, who: str) -> tuple[str, MeshSpec]:
    """The mesh `name`, or the module's only mesh."""
    found = meshes(module)
    if name:
        if name not in found:
            listed = ", ".join("@" + n for n in sorted(found)) or "none"
            raise IRError(f"{who}: the module has no mesh @{name} (its meshes: "
                          f"{listed})")
        return name, found[name]
    if len(found) != 1:
        what = "no sdy.mesh" if not found else \
            f"meshes {', '.join('@' + n for n in sorted(found))}"
        raise IRError(f"{who}: the module declares {what}; name the mesh with "
                      f"mesh-name=NAME")
    return next(iter(found.items()))


_BARE_FILE_LOC = re.compile(r'loc\((?:"[^"]*":\d+:\d+|callsite\(|fused)')


def name_locations(module: ir.Module) -> int:
    """Wraps each operation's unnamed source location in a name (the op's).

    XLA keeps a location's file and line in the HLO's metadata only under a
    name (JAX writes `loc("jit(f)/dot"(...))`); modules from other frontends
    often carry bare `loc("model.jl":12:3)`. Returns how many were wrapped.
    """
    count = 0
    with module.context:
        for fn in functions(module):
            for operation in walk(fn.operation):
                if _BARE_FILE_LOC.match(str(operation.location)):
                    # The inner, empty name stands where JAX puts the
                    # function's name: these frames have none.
                    frame = ir.Location.name("", childLoc=operation.location)
                    operation.location = ir.Location.name(operation.name,
                                                          childLoc=frame)
                    count += 1
    return count


def clone_module(module) -> ir.Module:
    """A deep copy of a module (or of its operation) as an `ir.Module`."""
    operation = getattr(module, "operation", module)
    with operation.context:
        return ir.Module.parse(operation.get_asm(enable_debug_info=True,
                                                 binary=True))


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
