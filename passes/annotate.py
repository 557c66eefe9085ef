"""irshard-annotate: attach a Shardy mesh and shardings to a StableHLO module."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Mapping

from jaxlib.mlir import ir

from irshard import shardy
from irshard.errors import IRError, PassError, SpecError
from irshard.specs import MeshSpec, ShardingSpec, check_sharding, parse_mesh, parse_sharding
from irshard.passes import ModulePass


def parse_assignments(text: str, what: str) -> dict[str, ShardingSpec]:
    """`0=x,_;d=_,y` -> {"0": ..., "d": ...}. Entries are separated by ';'
    because ',' separates a sharding's dimensions."""
    result: dict[str, ShardingSpec] = {}
    for item in filter(None, (s.strip() for s in text.split(";"))):
        key, eq, spec = item.partition("=")
        if not eq or not key.strip():
            raise SpecError(f"{what} '{item}': expected INDEX=SHARDING or "
                            f"NAME=SHARDING, e.g. 0=x,_")
        result[key.strip()] = parse_sharding(spec)
    return result


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
                    f"it: {shardy.diagnostic_text(e, with_location=False)}; "
                    f"use the module's axis names") from None
            raise IRError(f"the annotated module does not verify: "
                          f"{shardy.diagnostic_text(e)}") from None
    return mesh


@dataclass(frozen=True)
class AnnotatePass(ModulePass):
    """Attach a Shardy mesh and argument/result shardings to @main.

    Adds (or replaces) `sdy.mesh @<mesh-name>`, sets `sdy.sharding` on the
    entry function's arguments and results, and sets `mhlo.num_partitions` to
    the mesh's device count. Works on any StableHLO module, not only JAX's.
    Each sharding is checked against its tensor: rank, known axes, each axis
    used once, divisibility.

    Options:
      mesh       the mesh, e.g. `x=2,y=2`; empty keeps the module's own mesh.
      args       `;`-separated `INDEX=SHARDING` or `NAME=SHARDING`, e.g.
                 `0=x,_;1=_,y` (names are the arguments' location names).
      results    `;`-separated `INDEX=SHARDING`.
      mesh-name  the mesh symbol's name (default `mesh`).
    """

    name: ClassVar[str] = "irshard-annotate"
    mesh: str = ""
    args: str = ""
    results: str = ""
    mesh_name: str = "mesh"

    def apply(self, module: ir.Module) -> None:
        try:
            mesh = parse_mesh(self.mesh) if self.mesh.strip() else None
            annotate(module, mesh,
                     parse_assignments(self.args, "args"),
                     parse_assignments(self.results, "results"),
                     self.mesh_name)
        except (SpecError, IRError) as e:
            raise PassError(f"{self.name}: {e}") from None
