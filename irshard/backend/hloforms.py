"""A StableHLO module's ops rewritten in the forms XLA's HLO holds them.

XLA compiles a jitted module by converting it to HLO and back before Shardy
propagates its shardings. HLO's `broadcast` maps each operand dimension to
an output dimension of the same size: a `broadcast_in_dim` that stretches a
size-1 dimension becomes a reshape that drops it and a broadcast, and one
that only adds size-1 dimensions becomes a reshape. Shardy's rules for a
reshape and a broadcast are not those for the `broadcast_in_dim` they
replace, so propagation on the module as JAX traced it can choose other
shardings than XLA's does (on a GPT step sharded fsdp and tp, the
backward's activations over `fsdp` on the model dimension instead of
`tp`). `--explain` propagates the module in XLA's forms: the shardings it
reads are the ones XLA partitioned.
"""

from __future__ import annotations

import math

from jaxlib.mlir import ir
from jaxlib.mlir.dialects import stablehlo

from irshard.backend.shardy import functions, walk


def as_hlo(module: ir.Module) -> int:
    """Rewrites `module`'s ops as XLA's HLO holds them (see the module
    docstring), in place; how many ops were rewritten. An op that carries
    attributes of Shardy's is left as it is."""
    rewritten = 0
    with module.context:
        for fn in functions(module):
            for operation in list(walk(fn.operation)):
                if operation.name == "stablehlo.broadcast_in_dim" and \
                        _broadcast(operation):
                    rewritten += 1
    return rewritten


def _broadcast(operation) -> bool:
    """`broadcast_in_dim` as HLO's reshape and broadcast, where it stretches
    or only adds size-1 dimensions; whether it was rewritten."""
    if any(str(getattr(a, "name", a)).startswith("sdy.")
           for a in operation.attributes):
        return False
    try:
        source = ir.RankedTensorType(operation.operands[0].type)
        result = ir.RankedTensorType(operation.results[0].type)
    except ValueError:
        return False
    if not (source.has_static_shape and result.has_static_shape):
        return False
    dims = list(ir.DenseI64ArrayAttr(operation.attributes["broadcast_dimensions"]))
    shape, out = list(source.shape), list(result.shape)
    # Operand dimensions of size 1 that the broadcast stretches.
    stretched = [i for i, d in enumerate(dims) if shape[i] == 1 and out[d] != 1]
    kept = [i for i in range(len(shape)) if i not in stretched]
    only_adds_ones = math.prod(shape) == math.prod(out) and dims == sorted(dims)
    if not stretched and not only_adds_ones:
        return False
    value = operation.operands[0]
    with ir.InsertionPoint(operation), operation.location:
        if only_adds_ones:
            replacement = stablehlo.ReshapeOp(result, value).result
        else:
            narrow = ir.RankedTensorType.get([shape[i] for i in kept],
                                            source.element_type)
            reshaped = stablehlo.ReshapeOp(narrow, value).result
            replacement = stablehlo.BroadcastInDimOp(
                result, reshaped,
                ir.DenseI64ArrayAttr.get([dims[i] for i in kept])).result
    operation.results[0].replace_all_uses_with(replacement)
    operation.erase()
    return True

