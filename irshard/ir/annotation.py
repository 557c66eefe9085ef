"""Attaching a mesh and shardings to a StableHLO module, and removing them.

The transformations behind `irshard-annotate` and `irshard-strip-shardings`:
the pipeline uses them directly (tracing annotates every module, `--check`
strips one for its single-device reference), the passes wrap them for
pipelines. Callers need not hold the module's context.
"""

from __future__ import annotations

from typing import Mapping

from jaxlib.mlir import ir

from irshard.backend import locations, shardy
from irshard.core.errors import IRError, SpecError
from irshard.core.specs import MeshSpec, ShardingSpec, check_sharding

# Attributes that say how a value is sharded, or why.
SHARDING_ATTRIBUTES = (
    "sdy.sharding", "sdy.sharding_origins", "sdy.propagation_edges",
    "sdy.block_arg_sharding_origins", "sdy.result_sharding_origins",
    "sdy.block_arg_propagation_edges", "sdy.result_propagation_edges",
    "sdy.sharding_rule", "mhlo.sharding",
)
# Operations that only constrain or move a value between shardings: each is
# replaced by its input.
PASS_THROUGH_OPS = ("sdy.sharding_constraint", "sdy.reshard",
                    "sdy.data_flow_edge", "sdy.propagation_barrier")
ERASED_OPS = ("sdy.sharding_group",)


def _resolve_mesh(module: ir.Module, mesh: MeshSpec | None,
                  mesh_name: str) -> tuple[str, MeshSpec, MeshSpec | None]:
    """Creates or updates the mesh symbol; returns its name, its axes and the
    axes it had before, if it was replaced."""
    ops = shardy.mesh_ops(module)
    if mesh is None:
        if mesh_name in ops:
            return mesh_name, shardy.mesh_spec(ops[mesh_name].attributes["mesh"]), None
        if len(ops) == 1:
            name, op = next(iter(ops.items()))
            return name, shardy.mesh_spec(op.attributes["mesh"]), None
        if not ops:
            raise SpecError("the module declares no sdy.mesh; give one with "
                            "--mesh, e.g. --mesh x=4")
        raise SpecError(f"the module declares meshes "
                        f"{', '.join('@' + n for n in sorted(ops))}; name the "
                        f"one to use with --mesh")
    attr = shardy.mesh_attr(mesh)
    previous = None
    if mesh_name in ops:
        previous = shardy.mesh_spec(ops[mesh_name].attributes["mesh"])
        ops[mesh_name].attributes["mesh"] = attr
    else:
        from jaxlib.mlir.dialects import sdy
        with ir.InsertionPoint.at_block_begin(module.body), ir.Location.unknown():
            sdy.MeshOp(mesh_name, attr)
    return mesh_name, mesh, previous if previous != mesh else None


def _check_mesh_sizes(module: ir.Module, name: str, mesh: MeshSpec) -> None:
    """XLA partitions a module for one device count: every mesh in it must
    span the same number of devices (a mesh of size-1 axes aside)."""
    for other, spec in sorted(shardy.meshes(module).items()):
        if other != name and spec.num_devices not in (1, mesh.num_devices):
            raise SpecError(
                f"the module's meshes @{name} ({mesh}: {mesh.num_devices} "
                f"devices) and @{other} ({spec}: {spec.num_devices} devices) "
                f"differ in size; XLA partitions a module for one device "
                f"count, so every mesh must have {mesh.num_devices} devices")


def _index(key: int | str, names: list[str | None], kind: str) -> int:
    if isinstance(key, int) or key.isdigit():
        index = int(key)
        if index >= len(names):
            raise SpecError(f"{kind} {index} does not exist; the entry "
                            f"function has {len(names)} {kind}s")
        return index
    if key in names:
        return names.index(key)
    listed = ", ".join(f"{i}" + (f" ({n})" if n else "")
                       for i, n in enumerate(names)) or "none"
    raise SpecError(f"no {kind} named '{key}'; the {kind}s are {listed}")


def annotate(module: ir.Module, mesh: MeshSpec | None,
             args: Mapping[int | str, ShardingSpec],
             results: Mapping[int | str, ShardingSpec],
             mesh_name: str = "mesh") -> MeshSpec:
    """Attaches `mesh` and the given shardings to the entry function @main.

    Arguments are named by index or by their location name (`loc("d")`);
    results by index. Shardings already in the module are kept unless
    overridden. Sets `mhlo.num_partitions` to the mesh's device count.
    Returns the mesh the shardings refer to.
    """
    with module.context, ir.Location.unknown():
        main = shardy.entry_function(module)
        name, mesh, replaced = _resolve_mesh(module, mesh, mesh_name)
        _check_mesh_sizes(module, name, mesh)
        arg_names = shardy.argument_names(main)
        arg_types = list(main.type.inputs)
        result_types = list(main.type.results)
        for kind, given, names, types, key in (
                ("argument", args, arg_names, arg_types, "arg_attrs"),
                ("result", results, [None] * len(result_types), result_types,
                 "res_attrs")):
            if not given:
                continue
            dicts = shardy.attr_dicts(main, key, len(types))
            for k, spec in given.items():
                index = _index(k, names, kind)
                shape = shardy.tensor_shape(types[index])
                subject = f"{kind} {index}" + (
                    f" ('{names[index]}')" if names[index] else "")
                if shape is None:
                    raise SpecError(f"{subject} has type {types[index]}; "
                                    f"only statically shaped tensors can be "
                                    f"sharded")
                check_sharding(spec, shape, mesh, subject)
                dicts[index][shardy.SHARDING] = shardy.sharding_attr(name, spec)
            shardy.set_attr_dicts(main, key, dicts)
        i32 = ir.IntegerType.get_signless(32)
        module.operation.attributes["mhlo.num_partitions"] = \
            ir.IntegerAttr.get(i32, mesh.num_devices)
        if "mhlo.num_replicas" not in module.operation.attributes:
            module.operation.attributes["mhlo.num_replicas"] = \
                ir.IntegerAttr.get(i32, 1)
        try:
            module.operation.verify()
        except ir.MLIRError as e:
            if replaced is not None:
                raise SpecError(
                    f"the mesh {mesh} replaces the module's @{name} "
                    f"({replaced}), but the module's own shardings do not fit "
                    f"it: {locations.diagnostic_text(e, with_location=False)}; "
                    f"use the module's axis names") from None
            raise IRError(f"the annotated module does not verify: "
                          f"{locations.diagnostic_text(e)}") from None
    return mesh


def strip_shardings(module: ir.Module, keep_meshes: bool = True,
                    num_partitions: bool = False) -> None:
    """Removes every sharding annotation and constraint, leaving the program
    as written for one device (manual computations, written per device, are
    kept). `keep_meshes=False` also drops the `sdy.mesh` symbols;
    `num_partitions` sets `mhlo.num_partitions` to 1."""
    with module.context, ir.Location.unknown():
        for fn in list(shardy.functions(module)):
            for key, count in (("arg_attrs", len(fn.type.inputs)),
                               ("res_attrs", len(fn.type.results))):
                if key in fn.attributes:
                    dicts = shardy.attr_dicts(fn, key, count)
                    for d in dicts:
                        for name in SHARDING_ATTRIBUTES:
                            d.pop(name, None)
                    shardy.set_attr_dicts(fn, key, dicts)
            for operation in list(shardy.walk(fn.operation)):
                if operation.name in PASS_THROUGH_OPS:
                    for result, operand in zip(operation.results,
                                               operation.operands):
                        result.replace_all_uses_with(operand)
                    operation.erase()
                elif operation.name in ERASED_OPS:
                    operation.erase()
                else:
                    for name in SHARDING_ATTRIBUTES:
                        if name in operation.attributes:
                            del operation.attributes[name]
        if not keep_meshes:
            for op in shardy.mesh_ops(module).values():
                op.operation.erase()
        if num_partitions:
            module.operation.attributes["mhlo.num_partitions"] = \
                ir.IntegerAttr.get(ir.IntegerType.get_signless(32), 1)
