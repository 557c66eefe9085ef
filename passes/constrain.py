"""irshard-constrain: steer propagation without editing the program."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import ClassVar

from jaxlib.mlir import ir
from jaxlib.mlir.dialects import sdy

from irshard import shardy
from irshard.errors import IRError, PassError, SpecError
from irshard.passes import ModulePass
from irshard.specs import check_sharding, parse_sharding


def _matches_location(operation: ir.Operation, file: str, line: int) -> bool:
    for path, op_line, _ in shardy.location_frames(operation.location):
        if op_line == line and (path == file or path.endswith(os.sep + file)
                                or os.path.basename(path) == file):
            return True
    return False


def _parse_match(match: str) -> tuple[str | None, str | None, int | None]:
    """(op name, file, line) from `stablehlo.dot_general` or `model.py:12`."""
    head, sep, tail = match.rpartition(":")
    if sep and tail.isdigit() and head:
        return None, head, int(tail)
    return match, None, None


@dataclass(frozen=True)
class ConstrainPass(ModulePass):
    """Insert sdy.sharding_constraint on the results of matching operations.

    Each result of a matching operation whose rank fits the sharding gets a
    `sdy.sharding_constraint`, and the result's users read the constrained
    value: propagation must honour the sharding there. Operations are matched
    by name or by the source location they came from, so a layout can be
    forced at a line of a model without editing it.

    Options:
      match      an operation name (`stablehlo.dot_general`) or a source
                 location `FILE:LINE` (`model.py:12`; FILE may be a path
                 suffix or a base name).
      sharding   the sharding in irshard's grammar, e.g. `x,_` or `_,x+y?`.
      mesh-name  the mesh the sharding refers to (default: the module's only
                 mesh).
    """

    name: ClassVar[str] = "irshard-constrain"
    match: str = ""
    sharding: str = ""
    mesh_name: str = ""

    def apply(self, module: ir.Module) -> None:
        who = self.name
        if not self.match or not self.sharding:
            raise PassError(f"{who}: give match=OP_NAME|FILE:LINE and "
                            f"sharding=SPEC, e.g. "
                            f"{who}{{match=stablehlo.dot_general sharding=x,_}}")
        try:
            spec = parse_sharding(self.sharding)
            with module.context, ir.Location.unknown():
                mesh_name, mesh = shardy.find_mesh(module, self.mesh_name or None, who)
                count = self._constrain(module, spec, mesh_name, mesh)
        except SpecError as e:
            raise PassError(f"{who}: {e}") from None
        except IRError as e:
            raise PassError(str(e)) from None
        if count == 0:
            raise PassError(f"{who}: no operation matches '{self.match}'")

    def _constrain(self, module, spec, mesh_name, mesh) -> int:
        op_name, file, line = _parse_match(self.match)
        matched = []
        for fn in shardy.functions(module):
            for operation in shardy.walk(fn.operation):
                if operation.name == "sdy.sharding_constraint":
                    continue
                if (op_name is not None and operation.name == op_name) or (
                        file is not None and _matches_location(operation, file, line)):
                    matched.append(operation)
        count = 0
        for operation in matched:
            fitting = [r for r in operation.results
                       if (shape := shardy.tensor_shape(r.type)) is not None
                       and len(shape) == spec.rank]
            if not fitting:
                continue
            for result in fitting:
                where = shardy.location_frames(operation.location)
                subject = f"the result of {operation.name}" + (
                    f" at {os.path.basename(where[0][0])}:{where[0][1]}" if where else "")
                check_sharding(spec, shardy.tensor_shape(result.type), mesh, subject)
                constraint = self._insert_after(operation, result, mesh_name, spec)
                result.replace_all_uses_except(constraint.result, constraint.operation)
                count += 1
        if matched and count == 0:
            raise SpecError(f"{len(matched)} operation(s) match '{self.match}' "
                            f"but none has a result of rank {spec.rank}")
        return count

    @staticmethod
    def _insert_after(operation, result, mesh_name, spec):
        block = operation.block
        ops = list(block.operations)
        index = next(i for i, op in enumerate(ops) if op.operation == operation)
        point = (ir.InsertionPoint(ops[index + 1]) if index + 1 < len(ops)
                 else ir.InsertionPoint(block))
        with point, operation.location:
            return sdy.ShardingConstraintOp(
                result, shardy.sharding_attr(mesh_name, spec))
