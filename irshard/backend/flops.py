"""A lower bound on the matrix-product work of a StableHLO module before
partitioning: what no sharding of it can compute in fewer flops.

Each `dot_general` (or `dot`) counts `(2K - 1)` flops per output element
for a contraction of size K: the multiply-adds of a product, or, where
XLA rewrites a small product into a multiply and a reduction, the same
work at one flop per element. What XLA may remove is left out, so the
count stays below what the compiled program does:

  - an operation whose results nothing live reads (XLA removes dead code);
  - a second product of the very same operands and attributes (XLA merges
    common subexpressions);
  - a loop whose trip count is not `for i in range(start, stop)` with
    constant bounds counts once per trip where it is, and not at all
    otherwise (it may run zero times); of a `case`'s branches, the
    cheapest;
  - convolutions, custom calls and what runs inside a `shard_map`'s body
    beyond its local work.

A call counts its callee's work once per call.
"""

from __future__ import annotations

import math
from typing import Any, Iterator

from jaxlib.mlir import ir
from jaxlib.mlir.dialects import stablehlo

_PRODUCTS = ("stablehlo.dot_general", "stablehlo.dot")
# What has effects beyond its results: kept live whatever reads it.
_EFFECTS = ("stablehlo.custom_call", "stablehlo.outfeed", "stablehlo.send",
            "stablehlo.recv", "stablehlo.infeed", "func.return",
            "stablehlo.return", "sdy.return")


def product_flops(module: ir.Module, entry: str = "main") -> float:
    """The lower bound (see the module docstring) of `entry`'s product
    flops, its calls and loops included."""
    functions = {}
    for op in module.body.operations:
        op = op.operation
        if op.name == "func.func":
            functions[ir.StringAttr(op.attributes["sym_name"]).value] = op
    memo: dict[str, float] = {}

    def function(name: str, depth: int = 0) -> float:
        if name not in functions or depth > 64:
            return 0.0
        if name not in memo:
            memo[name] = 0.0        # a recursive call counts nothing
            memo[name] = _region(functions[name].regions[0], function, depth)
        return memo[name]

    return function(entry)


def _region(region: ir.Region, function, depth: int) -> float:
    total = 0.0
    for block in region.blocks:
        seen: set[Any] = set()
        for op in _live(block):
            total += _op(op, seen, function, depth)
    return total


def _op(op: ir.Operation, seen: set[Any], function, depth: int) -> float:
    name = op.name
    if name in _PRODUCTS:
        key = (name, tuple(op.operands),
               tuple(str(op.attributes[a]) for a in _names(op.attributes)))
        if key in seen:
            return 0.0
        seen.add(key)
        return _product(op)
    if name == "func.call":
        callee = ir.FlatSymbolRefAttr(op.attributes["callee"]).value
        return function(callee, depth + 1)
    if name == "stablehlo.while":
        trips = trip_count(op)
        return trips * _region(op.regions[1], function, depth) if trips else 0.0
    if name in ("stablehlo.case", "stablehlo.if"):
        return min((_region(r, function, depth) for r in op.regions), default=0.0)
    return sum(_region(r, function, depth) for r in op.regions)


def _names(attributes) -> list[str]:
    return sorted(attributes[i].name for i in range(len(attributes)))


def _shape(value: ir.Value) -> list[int] | None:
    try:
        shape = ir.RankedTensorType(value.type).shape
    except (ValueError, TypeError):
        return None
    return None if any(d < 0 for d in shape) else list(shape)


def _product(op: ir.Operation) -> float:
    lhs, out = _shape(op.operands[0]), _shape(op.results[0])
    if lhs is None or out is None:
        return 0.0
    if op.name == "stablehlo.dot":
        contracting = [len(lhs) - 1] if lhs else []
    else:
        numbers = stablehlo.DotDimensionNumbers(op.attributes["dot_dimension_numbers"])
        contracting = list(numbers.lhs_contracting_dimensions)
    k = math.prod(lhs[d] for d in contracting)
    if k == 0:
        return 0.0
    return float(math.prod(out)) * (2 * k - 1)


def _live(block: ir.Block) -> Iterator[ir.Operation]:
    """The operations of `block` whose results something live reads, or
    that have effects, in order."""
    ops = [op.operation for op in block.operations]
    members = set(ops)
    live: set[Any] = set()
    kept: list[ir.Operation] = []
    for op in reversed(ops):
        # A use outside this block (in a nested region, or a terminator)
        # keeps the value live: only uses by dead operations of this very
        # block do not.
        used = op.name in _EFFECTS or not op.results or any(
            _operation(use.owner) in live or _operation(use.owner) not in members
            for result in op.results for use in result.uses)
        if used:
            live.add(op)
            kept.append(op)
    return reversed(kept)


def _operation(owner) -> Any:
    return getattr(owner, "operation", owner)


def trip_count(op: ir.Operation) -> int:
    """How many times a `stablehlo.while` runs its body where it is
    `for i in range(start, stop)` with constant bounds and a step of 1
    (what `lax.scan` and `fori_loop` lower to); 0 where it is not."""
    cond, body = op.regions[0].blocks[0], op.regions[1].blocks[0]
    terminator = list(cond.operations)[-1].operation
    if not terminator.operands:
        return 0
    compare = _owner(terminator.operands[0])
    if compare is None or compare.name != "stablehlo.compare" or \
            "LT" not in str(compare.attributes["comparison_direction"]):
        return 0
    counter, bound = compare.operands[0], compare.operands[1]
    index = _argument_index(counter, cond)
    stop = _constant(bound)
    if index is None or stop is None:
        return 0
    start = _constant(op.operands[index])
    step_op = _owner(list(body.operations)[-1].operation.operands[index])
    if start is None or step_op is None or step_op.name != "stablehlo.add":
        return 0
    a, b = step_op.operands
    if not ((_argument_index(a, body) == index and _constant(b) == 1)
            or (_argument_index(b, body) == index and _constant(a) == 1)):
        return 0
    return max(0, stop - start)


def _owner(value: ir.Value) -> ir.Operation | None:
    owner = value.owner
    return owner if isinstance(owner, ir.Operation) else \
        getattr(owner, "operation", None) if not isinstance(owner, ir.Block) else None


def _argument_index(value: ir.Value, block: ir.Block) -> int | None:
    for i, arg in enumerate(block.arguments):
        if arg == value:
            return i
    return None


def _constant(value: ir.Value) -> int | None:
    op = _owner(value)
    if op is None or op.name != "stablehlo.constant":
        return None
    try:
        attr = ir.DenseIntElementsAttr(op.attributes["value"])
        if not attr.is_splat and len(attr) != 1:
            return None
        return int(attr.get_splat_value().value) if attr.is_splat else int(attr[0])
    except (ValueError, TypeError, IndexError):
        return None
