"""The dimensions of a module's values that sharding ties together: what
Shardy's own sharding rules (`sdy-populate-op-sharding-rules`) say one
factor of an op is, followed through the ops that carry values unchanged.

Two dimensions are tied when sharding one along an axis shards the other
along it too, or leaves a partial sum over it: a batch's dimension 0 is
every activation's dimension 0, and a weight gradient's contracting
dimension. `Tied.find((value, dim))` names the class.
"""

from __future__ import annotations

from typing import Any, Iterator

from jaxlib.mlir import ir

from irshard.backend import shardy
from irshard.backend.passrunner import PassFailure, run_registered_passes

RULE = "sdy.sharding_rule"
_POPULATE = "builtin.module(func.func(sdy-populate-op-sharding-rules))"


class Tied:
    """A union-find over (value, dimension) pairs of one module."""

    def __init__(self) -> None:
        self._parent: dict[Any, Any] = {}

    def find(self, node) -> Any:
        parent = self._parent
        root = node
        while parent.get(root, root) != root:
            root = parent[root]
        while node != root:             # path compression
            parent[node], node = root, parent.get(node, node)
        return root

    def union(self, a, b) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self._parent[ra] = rb

    def values(self, left: ir.Value, right: ir.Value) -> None:
        """Ties each dimension of `left` to the same of `right` (where
        both are tensors of one rank)."""
        rank = _rank(left)
        if rank is not None and rank == _rank(right):
            for d in range(rank):
                self.union((left, d), (right, d))


def tied_dimensions(module) -> Tied:
    """The tied dimensions of `module`'s values, read from a copy of it
    with Shardy's sharding rules on every op (the module, `Value`s and all,
    is the copy's: its caller reads the decisions from the same copy)."""
    tied = Tied()
    operation = getattr(module, "operation", module)
    with operation.context:
        try:
            run_registered_passes(operation, _POPULATE)
        except PassFailure:
            return tied
        fns = {fn.sym_name.value: fn for fn in shardy.functions(module)}
        for fn in fns.values():
            for op in shardy.walk(fn.operation):
                if RULE in op.attributes:
                    _by_rule(tied, op)
                elif op.name == "func.call":
                    callee = fns.get(ir.FlatSymbolRefAttr(op.attributes["callee"]).value)
                    if callee is not None:
                        _call(tied, op, callee)
                else:
                    _carried(tied, op)
    return tied


def _by_rule(tied: Tied, op) -> None:
    """Ties every dimension whose leading factor is one factor of `op`'s
    rule (a reshape's merged dimension is tied to its major factor:
    sharding it shards that one first)."""
    from jaxlib.mlir.dialects import sdy
    rule = sdy.OpShardingRuleAttr(op.attributes[RULE])
    factors: dict[int, list] = {}
    for values, mappings in ((op.operands, rule.operand_mappings),
                             (op.results, rule.result_mappings)):
        for value, mapping in zip(values, mappings):
            for d, dim in enumerate(sdy.TensorMappingAttr(mapping).dim_mappings):
                indices = list(sdy.DimMappingAttr(dim).factor_indices)
                if indices:
                    factors.setdefault(indices[0], []).append((value, d))
    for nodes in factors.values():
        for node in nodes[1:]:
            tied.union(nodes[0], node)


def _call(tied: Tied, op, callee) -> None:
    block = callee.body.blocks[0]
    for operand, argument in zip(op.operands, block.arguments):
        tied.values(operand, argument)
    for returned in _terminators(callee.body):
        for result, value in zip(op.results, returned.operands):
            tied.values(result, value)


def _carried(tied: Tied, op) -> None:
    """An op with no rule that carries its values through regions (a
    loop, a conditional, a manual computation): each operand tied to the
    region's argument of its place, each result to what the regions
    return there; with no regions, each operand to the result of its
    place (an optimization barrier)."""
    if not len(op.regions):
        if len(op.operands) == len(op.results):
            for operand, result in zip(op.operands, op.results):
                tied.values(operand, result)
        return
    for region in op.regions:
        if not len(region.blocks):
            continue
        block = region.blocks[0]
        arguments = list(block.arguments)
        if len(arguments) == len(op.operands):
            for operand, argument in zip(op.operands, arguments):
                tied.values(operand, argument)
        for returned in _terminators(region):
            values = list(returned.operands)
            if len(values) == len(op.results):
                for result, value in zip(op.results, values):
                    tied.values(result, value)
            if len(values) == len(arguments):      # a loop's carried values
                for argument, value in zip(arguments, values):
                    tied.values(argument, value)


def _terminators(region) -> Iterator[Any]:
    """The ops that end each block of `region`."""
    for block in region.blocks:
        operations = list(block.operations)
        if operations:
            yield operations[-1].operation


def _rank(value) -> int | None:
    try:
        return ir.RankedTensorType(value.type).rank
    except ValueError:
        return None
