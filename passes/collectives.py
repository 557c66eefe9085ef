"""irshard-collectives: report the Shardy-level collectives in a module."""

from __future__ import annotations

import math
import os
import sys
from dataclasses import dataclass
from typing import ClassVar

from jaxlib.mlir import ir

from irshard.backend import locations, shardy
from irshard.collectives import analysis
from irshard.core.errors import IRError, PassError
from irshard.core.frames import UserCode
from irshard.core.dtypes import dtype_from_mlir
from irshard.core.specs import MeshSpec, ShardingSpec
from irshard.passes import ModulePass
from irshard.reporting.report import Collective, CollectiveReport, tensor_info
from irshard.reporting.text import render_text
from irshard.reporting.writer import render_json
from irshard.xla import loops



def _element_type(type_: ir.Type) -> tuple[str, int]:
    element = str(ir.RankedTensorType(type_).element_type)
    dtype = dtype_from_mlir(element)
    return (dtype.name, dtype.itemsize) if dtype else (element, 4)


def _loops_around(operation: ir.Operation) -> tuple[int | None, ...]:
    trips = []
    parent = operation.parent
    while parent is not None and parent.name != "func.func":
        if parent.name == "stablehlo.while":
            trips.append(loops.while_trip_count(parent))
        parent = parent.parent
    return tuple(reversed(trips))


def _source(operation, resolver):
    return resolver.choose(locations.frames(operation.location))


def _attribute(operation: ir.Operation, resolver) -> tuple:
    """The op's own source line, else its consumer's or producer's (Shardy
    gives a reshard it inserts the location of the value it reshards)."""
    own = _source(operation, resolver)
    if own is not None:
        return own, "metadata"
    neighbours = [use.owner for result in operation.results for use in result.uses]
    neighbours += [value.owner for value in operation.operands]
    for neighbour in neighbours:
        neighbour = getattr(neighbour, "operation", neighbour)
        if isinstance(neighbour, ir.Operation):
            source = _source(neighbour, resolver)
            if source is not None:
                return source, "inferred"
    return None, "none"


def sdy_collectives(module: ir.Module, mesh: MeshSpec, mesh_name: str,
                    user_dir: str | None) -> list[Collective]:
    resolver = UserCode(user_dir)
    result = []
    with module.context:
        for fn in shardy.functions(module):
            for operation in shardy.walk(fn.operation):
                if operation.name not in shardy.SDY_COLLECTIVES:
                    continue
                kind, axes_attr = shardy.SDY_COLLECTIVES[operation.name]
                _, out_spec = shardy.sharding_spec(operation.attributes["out_sharding"])
                value = operation.results[0]
                shape = shardy.tensor_shape(value.type) or ()
                dtype, itemsize = _element_type(value.type)
                local = out_spec.local_shape(shape, mesh)
                axes = shardy.collective_axes(operation, mesh)
                group = math.prod(mesh.axis_size(a) for a in axes) if axes else 1
                nbytes = math.prod(local) * itemsize
                source, attribution = _attribute(operation, resolver)
                result.append(Collective(
                    name=operation.name, kind=kind, dtype=dtype, shape=local,
                    bytes=nbytes, wire_bytes=analysis.wire_bytes(kind, nbytes, group),
                    mesh_axes=tuple(axes), group_size=group, source=source,
                    attribution=attribution, op_name=None,
                    loop_trip_counts=_loops_around(operation)))
    return result


def _tensor_infos(fn, key: str, types, mesh: MeshSpec, indexed: bool):
    infos = []
    names = shardy.argument_names(fn) if key == "arg_attrs" else shardy.result_names(fn)
    for i, attrs in enumerate(shardy.attr_dicts(fn, key, len(types))):
        shape = shardy.tensor_shape(types[i]) or ()
        dtype, _ = _element_type(types[i]) if shardy.tensor_shape(types[i]) is not None \
            else (str(types[i]), 0)
        spec = shardy.sharding_spec(attrs[shardy.SHARDING])[1] \
            if shardy.SHARDING in attrs else ShardingSpec.replicated(len(shape))
        infos.append(tensor_info(names[i] or f"arg{i}", dtype, shape, spec,
                                 mesh, i if indexed else None))
    return tuple(infos)


def sdy_report(module: ir.Module, source: str, mesh_name: str | None,
               user_dir: str | None) -> CollectiveReport:
    with module.context:
        name, mesh = shardy.find_mesh(module, mesh_name, "irshard-collectives")
        main = shardy.entry_function(module)
        return CollectiveReport(
            source=source, function="main", stage_name="sdy", mesh=mesh, platform=None,
            inputs=_tensor_infos(main, "arg_attrs", list(main.type.inputs), mesh, False),
            outputs=_tensor_infos(main, "res_attrs", list(main.type.results), mesh, True),
            collectives=tuple(sdy_collectives(module, mesh, name, user_dir)),
            memory=None)


@dataclass(frozen=True)
class CollectivesPass(ModulePass):
    """Report the Shardy-level collectives (sdy.all_gather, ...) on stderr.

    After explicit resharding (`sdy-insert-explicit-reshards` then
    `sdy-reshard-to-collectives`) the collectives Shardy will ask for are ops
    in the module; this reports them in the same text or JSON form as the
    HLO report (stage `sdy`): kind, per-device shape and bytes, mesh axes,
    the trip counts of enclosing `stablehlo.while` loops, and the source
    line. The module is unchanged.

    Options:
      format     `text` (default) or `json`.
      mesh-name  the mesh (default: the module's only mesh).
    """

    name: ClassVar[str] = "irshard-collectives"
    format: str = "text"
    mesh_name: str = ""

    def apply(self, module: ir.Module) -> None:
        if self.format not in ("text", "json"):
            raise PassError(f"{self.name}: format is text or json, not "
                            f"'{self.format}'")
        try:
            report = sdy_report(module, "module", self.mesh_name or None,
                                os.getcwd())
        except IRError as e:
            message = str(e)
            if not message.startswith(self.name):
                message = f"{self.name}: {message}"
            raise PassError(message) from None
        text = render_json(report) if self.format == "json" else render_text(report)
        sys.stderr.write(text)
        sys.stderr.flush()
