"""How many times a loop runs: XLA's `known_trip_count`, or the pattern
`for (i = c0; i < N; i += step)` read from a `while` in HLO (`trip_count`)
or in StableHLO (`while_trip_count`), both counted by `trips`.
"""

from __future__ import annotations

import re

from irshard.core.errors import IRError
from irshard.core.textinput import shown
from irshard.xla.hlo import HloModuleView, Instruction


def _constant_value(inst: Instruction | None) -> int | None:
    if inst is None or inst.opcode != "constant":
        return None
    m = re.search(r"constant\((-?\d+)\)", inst.text)
    return int(m.group(1)) if m else None


def _through_copies(view: HloModuleView, name: str,
                    computation: str) -> Instruction | None:
    inst = view.get(name, computation)
    while inst is not None and inst.opcode in ("copy", "convert", "bitcast") \
            and inst.operands:
        inst = view.get(inst.operands[0], computation)
    return inst


def tuple_index(inst: Instruction | None) -> int | None:
    if inst is None or inst.opcode != "get-tuple-element":
        return None
    m = re.search(r"\d+", inst.attrs.get("index", ""))
    return int(m.group(0)) if m else None


def _root(view: HloModuleView, computation: str) -> Instruction | None:
    return view.root(computation)


_FLIP = {"LT": "GT", "GT": "LT", "LE": "GE", "GE": "LE", "NE": "NE", "EQ": "EQ"}


def trip_count(view: HloModuleView, loop: Instruction) -> int | None:
    """Iterations of a `while`: XLA's `known_trip_count` when it has one,
    else from the pattern `for (i = c0; i < N; i += step)` in the loop."""
    counted = loop.backend_config.get("known_trip_count")
    known = counted.get("n") if isinstance(counted, dict) else counted
    if known is not None:
        if isinstance(known, bool) or not isinstance(known, (int, str)) \
                or not str(known).isdigit():
            raise IRError(f"%{loop.name} (while): known_trip_count "
                          f"{shown(str(known))} is not a whole number of "
                          f"iterations")
        return int(known)
    called = dict(loop.called_computations())
    cond = _root(view, called.get("condition", ""))
    if cond is None or cond.opcode != "compare" or len(cond.operands) != 2:
        return None
    direction = re.search(r"[A-Z]+", cond.attrs.get("direction", ""))
    direction = direction.group(0) if direction else ""
    lhs, rhs = (_through_copies(view, o, cond.computation) for o in cond.operands)
    if tuple_index(lhs) is None:
        lhs, rhs, direction = rhs, lhs, _FLIP.get(direction, "")
    index, limit = tuple_index(lhs), _constant_value(rhs)
    if index is None or limit is None:
        return None
    init_tuple = view.get(loop.operands[0], loop.computation) \
        if loop.operands else None
    if init_tuple is None or init_tuple.opcode != "tuple" \
            or index >= len(init_tuple.operands):
        return None
    start = _constant_value(_through_copies(view, init_tuple.operands[index],
                                            loop.computation))
    body_root = _root(view, called.get("body", ""))
    if start is None or body_root is None or body_root.opcode != "tuple":
        return None
    update = _through_copies(view, body_root.operands[index],
                             body_root.computation)
    if update is None or update.opcode not in ("add", "subtract"):
        return None
    values = [_through_copies(view, o, body_root.computation)
              for o in update.operands]
    step = next((_constant_value(v) for v in values
                 if _constant_value(v) is not None), None)
    if step is None or not any(tuple_index(v) == index for v in values):
        return None
    if update.opcode == "subtract":
        step = -step
    return trips(start, limit, step, direction)


def trips(start: int, limit: int, step: int, direction: str) -> int | None:
    """Iterations of `for (i = start; i DIRECTION limit; i += step)`, with
    DIRECTION one of LT, LE, GT, GE, NE; None where that is no count."""
    if step == 0:
        return None
    span = {"LT": limit - start, "LE": limit - start + (1 if step > 0 else 0),
            "GT": limit - start, "GE": limit - start + (-1 if step < 0 else 0),
            "NE": limit - start}.get(direction)
    if span is None:
        return None
    count = -(-span // step) if step > 0 else -(-(-span) // (-step))
    return max(0, count)


def while_trip_count(loop) -> int | None:
    """Iterations of a `stablehlo.while` written as `for (i = c0; i < N;
    i += step)` (a counter in the loop's arguments, compared with a
    constant, advanced by a constant), read through MLIR's attributes."""
    from jaxlib.mlir.dialects import stablehlo
    cond, body = loop.regions[0].blocks[0], loop.regions[1].blocks[0]
    compare = _operation(list(cond.operations)[-1].operands[0].owner)
    if getattr(compare, "name", "") != "stablehlo.compare":
        return None
    direction = stablehlo.ComparisonDirectionAttr(
        compare.attributes["comparison_direction"]).value
    lhs, rhs = compare.operands
    args = list(cond.arguments)
    if lhs in args and _dense_int(rhs) is not None and direction in ("LT", "LE"):
        index, limit = args.index(lhs), _dense_int(rhs)
    elif rhs in args and _dense_int(lhs) is not None and direction in ("GT", "GE"):
        index, limit = args.index(rhs), _dense_int(lhs)
        direction = {"GT": "LT", "GE": "LE"}[direction]
    else:
        return None
    start = _dense_int(loop.operands[index])
    update = _operation(list(body.operations)[-1].operands[index].owner)
    if start is None or getattr(update, "name", "") != "stablehlo.add":
        return None
    step = next((_dense_int(v) for v in update.operands
                 if _dense_int(v) is not None), None)
    if not step or step < 0 or list(body.arguments)[index] not in list(update.operands):
        return None
    return trips(start, limit, step, direction)


def _operation(owner):
    return getattr(owner, "operation", owner)


def _dense_int(value) -> int | None:
    """The integer a scalar constant op defines, or None."""
    from jaxlib.mlir import ir
    owner = _operation(value.owner)
    if getattr(owner, "name", "") not in ("stablehlo.constant", "sdy.constant",
                                          "arith.constant"):
        return None
    try:
        dense = ir.DenseIntElementsAttr(owner.attributes["value"])
    except (ValueError, TypeError):
        return None
    return int(dense[0]) if dense.is_splat or len(dense) == 1 else None
