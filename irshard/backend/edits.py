"""A module edited for a counterfactual recompile (`--verify`): its
sharding constraints dropped, an entry argument's or result's sharding
opened for propagation to choose."""

from __future__ import annotations

from typing import Callable

from jaxlib.mlir import ir

from irshard.backend.shardy import (SHARDING, attr_dicts, entry_function, functions,
                                    set_attr_dicts, sharding_attr, sharding_spec, walk)
from irshard.core.specs import ShardingSpec


# Ops that constrain a value's sharding where the program says so
# (`with_sharding_constraint`, an explicit-mode `reshard`).
CONSTRAINTS = ("sdy.sharding_constraint", "sdy.reshard")


def drop_constraints(module: ir.Module, chosen: Callable[[ir.Operation], bool],
                     upstream: bool = False) -> list[tuple[str, ir.Location]]:
    """Removes the constraints `chosen` picks, each result replaced by its
    operand (a counterfactual: the program without them); with `upstream`,
    also those with the same sharding above them through one-operand ops
    (under explicit axes every op's type is a constraint, and the one that
    made the sharding is the first of the chain: the `reshard`). Returns
    the name and location of each op removed, the chain's first last."""
    with module.context:
        found = [op for fn in functions(module) for op in walk(fn.operation)
                 if op.name in CONSTRAINTS and chosen(op)]
        for operation in list(found) if upstream else ():
            sharding = str(operation.attributes["sharding"])
            value = operation.operands[0]
            for _ in range(64):
                owner = value.owner
                if isinstance(owner, ir.Block):
                    break
                owner = getattr(owner, "operation", owner)
                if owner.name in CONSTRAINTS:
                    if str(owner.attributes["sharding"]) != sharding:
                        break
                    if not any(owner == other for other in found):
                        found.append(owner)
                elif len(owner.operands) != 1:
                    break
                value = owner.operands[0]
        kept = [(operation.name, operation.location) for operation in found]
        for operation in found:
            operation.results[0].replace_all_uses_with(operation.operands[0])
            operation.erase()
    return kept


def bypass_ops(module: ir.Module, chosen: Callable[[ir.Operation], bool]
               ) -> list[tuple[str, ir.Location]]:
    """Removes the ops `chosen` picks whose results each have an operand
    of the same type in the same place (a sort's keys and values, a
    scatter's or an update's array, a callback's argument): each result
    replaced by that operand, the program without the op. Returns the
    name and location of each op removed; others are left."""
    with module.context:
        found = [op for fn in functions(module) for op in walk(fn.operation)
                 if chosen(op)]
        removed = []
        for operation in found:
            results, operands = list(operation.results), list(operation.operands)
            if not results or len(operands) < len(results) or any(
                    r.type != operands[i].type for i, r in enumerate(results)):
                continue
            for i, result in enumerate(results):
                result.replace_all_uses_with(operands[i])
            removed.append((operation.name, operation.location))
            operation.erase()
    return removed


def ungroup_convolutions(module: ir.Module, chosen: Callable[[ir.Operation], bool]
                         ) -> list[tuple[str, ir.Location]]:
    """Rewrites each grouped convolution `chosen` picks
    (`feature_group_count` G > 1) as the ungrouped one that computes the
    same: its kernel laid G times along the input features and zeroed
    where an output feature's group does not read an input feature (block
    diagonal). Returns the name and location of each op rewritten."""
    import numpy as np
    from jaxlib.mlir.dialects import stablehlo
    with module.context:
        found = [op for fn in functions(module) for op in walk(fn.operation)
                 if op.name == "stablehlo.convolution" and chosen(op)]
        done = []
        for op in found:
            groups = _int_attr(op, "feature_group_count")
            if groups <= 1 or _int_attr(op, "batch_group_count") != 1:
                continue
            dims = stablehlo.ConvDimensionNumbers(op.attributes["dimension_numbers"])
            inputs, outputs = (dims.kernel_input_feature_dimension,
                               dims.kernel_output_feature_dimension)
            kernel = op.operands[1]
            kernel_type = ir.RankedTensorType(kernel.type)
            shape = list(kernel_type.shape)
            per_group = shape[inputs]
            shape[inputs] *= groups
            # mask[..., c, ..., o, ...] = 1 where input feature c and output
            # feature o are of one group.
            index = np.indices((shape[inputs], shape[outputs]))
            block = (index[0] // per_group == index[1] // (shape[outputs] // groups))
            order = [inputs, outputs] if inputs < outputs else [outputs, inputs]
            mask = block if inputs < outputs else block.T
            mask = np.broadcast_to(np.expand_dims(mask, tuple(
                d for d in range(len(shape)) if d not in order)), shape)
            with ir.InsertionPoint(op), op.location:
                laid = stablehlo.ConcatenateOp([kernel] * groups, inputs).result
                f32 = ir.RankedTensorType.get(shape, ir.F32Type.get())
                ones = stablehlo.ConstantOp(ir.DenseElementsAttr.get(
                    np.ascontiguousarray(mask, dtype=np.float32), type=f32)).result
                if kernel_type.element_type != ir.F32Type.get():
                    ones = stablehlo.ConvertOp(ir.RankedTensorType.get(
                        shape, kernel_type.element_type), ones).result
                op.operands[1] = stablehlo.MulOp(laid, ones).result
            op.attributes["feature_group_count"] = ir.IntegerAttr.get(
                ir.IntegerType.get_signless(64), 1)
            done.append((op.name, op.location))
    return done


# Ops whose meaning inside a manual computation depends on its devices:
# a body that holds one is not the same computation on the whole arrays.
_PER_DEVICE = ("sdy.", "stablehlo.all_", "stablehlo.collective", "stablehlo.reduce_scatter",
               "stablehlo.partition_id", "stablehlo.replica_id", "stablehlo.send",
               "stablehlo.recv")


def inline_manual_computations(module: ir.Module,
                               chosen: Callable[[ir.Operation], bool]
                               ) -> list[tuple[str, ir.Location]]:
    """Replaces each manual computation (a `shard_map`) `chosen` picks whose
    every operand and result is whole on each device (its specs shard
    nothing) and whose body talks to no other device by its body, run on
    the whole arrays: the same values, without the boundary. Returns the
    name and location of each one inlined; others are left."""
    with module.context:
        found = [op for fn in functions(module) for op in walk(fn.operation)
                 if op.name == "sdy.manual_computation" and chosen(op)]
        done = []
        for op in found:
            # `#sdy.sharding_per_value<[<@mesh, [{"x"}, {}]>]>`: an axis
            # is named in quotes.
            if any('"' in str(op.attributes[key])
                   for key in ("in_shardings", "out_shardings")):
                continue
            block = op.regions[0].blocks[0]
            body = [child.operation for child in block.operations]
            inner = [o for child in body for o in (child, *walk(child))]
            if any(o.name.startswith(_PER_DEVICE)
                   and o.name not in ("sdy.return", "sdy.constant") for o in inner):
                continue
            for argument, operand in zip(block.arguments, op.operands):
                argument.replace_all_uses_with(operand)
            returned = body[-1]
            for child in body[:-1]:
                child.move_before(op)
            for result, value in zip(op.results, returned.operands):
                result.replace_all_uses_with(value)
            done.append((op.name, op.location))
            op.erase()
    return done


def _int_attr(op: ir.Operation, name: str) -> int:
    return ir.IntegerAttr(op.attributes[name]).value if name in op.attributes else 1


def _boundary(module: ir.Module, kind: str):
    """The entry function, which of its attribute lists holds its
    arguments' (`kind` "input") or results' ("output"), and those
    attributes; call inside the module's context."""
    main = entry_function(module)
    key, count = ("arg_attrs", len(main.type.inputs)) if kind == "input" \
        else ("res_attrs", len(main.type.results))
    return main, key, attr_dicts(main, key, count)


def boundary_sharding(module: ir.Module, kind: str, index: int) -> str | None:
    """The entry function's argument (`kind` "input") or result ("output")
    `index`'s sharding as printed, None where it has none."""
    with module.context:
        _, _, dicts = _boundary(module, kind)
        if index >= len(dicts) or SHARDING not in dicts[index]:
            return None
        return str(dicts[index][SHARDING])


def aliased_output(module: ir.Module, index: int) -> int | None:
    """The result the entry function's argument `index` is donated into
    (`tf.aliasing_output`), None where it is not."""
    with module.context:
        _, _, dicts = _boundary(module, "input")
        if index >= len(dicts) or "tf.aliasing_output" not in dicts[index]:
            return None
        return ir.IntegerAttr(dicts[index]["tf.aliasing_output"]).value


def open_boundary(module: ir.Module, kind: str, index: int) -> bool:
    """Lets propagation choose the entry function's argument (`kind`
    "input": every dimension open) or result ("output": its sharding
    removed) `index`. Returns whether it had a sharding to open."""
    with module.context:
        main, key, dicts = _boundary(module, kind)
        if index >= len(dicts) or SHARDING not in dicts[index]:
            return False
        if kind == "input":
            mesh, spec = sharding_spec(dicts[index][SHARDING])
            dicts[index][SHARDING] = sharding_attr(
                mesh, ShardingSpec.of_axes([((), True)] * spec.rank))
        else:
            del dicts[index][SHARDING]
        set_attr_dicts(main, key, dicts)
    return True
