"""irshard-constrain: steer propagation without editing the program."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import ClassVar

from jaxlib.mlir import ir
from jaxlib.mlir.dialects import sdy

from irshard.backend import locations, shardy
from irshard.core.errors import IRError, PassError, SpecError
from irshard.core.matching import Match, parse_match
from irshard.core.specs import check_sharding, parse_sharding
from irshard.passes import ModulePass


def _matches(match: Match, operation: ir.Operation, calls=None) -> bool:
    if not match.op_matches(operation.name):
        return False
    return match.file is None or _matches_location(operation, match.file,
                                                   match.line, calls)


def _matches_location(operation: ir.Operation, file: str, line: int,
                      calls=None) -> bool:
    """Whether `operation` came from `file:line`: a frame of its location,
    or, for an op of a function JAX outlined from its own code (`relu`,
    `logsumexp`), a frame of a call of that function (the line the user
    wrote it at, as `--explain` names it)."""
    for _ in range(32):
        for path, op_line, _ in locations.location_frames(operation.location):
            if op_line == line and (path == file or path.endswith(os.sep + file)
                                    or os.path.basename(path) == file):
                return True
        fn = operation.parent
        while fn is not None and fn.name != "func.func":
            fn = fn.parent
        if calls is None or fn is None or shardy.is_public(fn.opview):
            return False
        callers = calls.get(fn.opview.sym_name.value)
        if not callers:
            return False
        if any(_matches_location(c, file, line) for c in callers[1:]):
            return True
        operation = callers[0]
    return False


def _describe(operation: ir.Operation) -> str:
    types = ", ".join(str(r.type) for r in operation.results)
    return f"{operation.name} -> {types}" if types else operation.name


@dataclass(frozen=True)
class ConstrainPass(ModulePass):
    """Insert sdy.sharding_constraint on the results of matching operations.

    Each result of a matching operation whose rank fits the sharding, and
    whose dimensions the sharding divides, gets a `sdy.sharding_constraint`,
    and the result's users read the constrained value: propagation must
    honour the sharding there. Operations are matched by name, by the
    source location they came from, or both, so a layout can be forced at a
    line of a model without editing it.

    Options:
      match      an operation name (`stablehlo.dot_general`, or just
                 `dot_general`), a source location `FILE:LINE` (`model.py:12`;
                 FILE may be a path suffix or a base name), or both
                 (`dot_general@model.py:12`; an op of a function JAX
                 outlined, `jax.nn.relu`'s `maximum`, matches the line of
                 its call as well); `#N` picks the N-th match in
                 program order (`model.py:12#2`). An op picked alone must
                 take the sharding; of several, those it does not divide are
                 left alone.
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
            raise PassError(f"{who}: give match=OP_NAME|FILE:LINE|OP@FILE:LINE "
                            f"and sharding=SPEC, e.g. "
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
        match = parse_match(self.match)
        calls = shardy.calls_by_callee(module)
        matched = []
        for fn in shardy.functions(module):
            for operation in shardy.walk(fn.operation):
                if operation.name in ("sdy.sharding_constraint", "func.return",
                                      "stablehlo.return", "sdy.return"):
                    continue
                if _matches(match, operation, calls):
                    matched.append(operation)
        if match.index is not None:
            if match.index > len(matched):
                raise SpecError(
                    f"match '{self.match}': {len(matched)} operation(s) match "
                    f"before the index, so there is no #{match.index}"
                    + _listing(matched))
            matched = [matched[match.index - 1]]
        count = 0
        skipped = []
        for operation in matched:
            fitting = [r for r in operation.results
                       if (shape := shardy.tensor_shape(r.type)) is not None
                       and len(shape) == spec.rank]
            for result in fitting:
                where = locations.location_frames(operation.location)
                subject = f"the result of {operation.name}" + (
                    f" at {os.path.basename(where[0][0])}:{where[0][1]}" if where else "")
                try:
                    check_sharding(spec, shardy.tensor_shape(result.type), mesh, subject)
                except SpecError as e:
                    # A line holds ops of many shapes (a size-1 broadcast):
                    # only an op named alone must take the sharding.
                    if match.single or len(matched) == 1:
                        raise
                    skipped.append(str(e))
                    continue
                constraint = self._insert_after(operation, result, mesh_name, spec)
                result.replace_all_uses_except(constraint.result, constraint.operation)
                count += 1
        if matched and count == 0:
            why = f"; {skipped[0]}" if skipped else ""
            raise SpecError(f"{len(matched)} operation(s) match '{self.match}' "
                            f"but none has a result of rank {spec.rank} that "
                            f"the sharding divides{why}" + _listing(matched))
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


def _listing(operations) -> str:
    if not operations:
        return ""
    shown = "; ".join(f"#{i} {_describe(op)}" for i, op in enumerate(operations[:8], 1))
    more = f"; and {len(operations) - 8} more" if len(operations) > 8 else ""
    return f" (they are: {shown}{more})"
