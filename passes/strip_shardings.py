"""irshard-strip-shardings: remove every sharding annotation and constraint."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from jaxlib.mlir import ir

from irshard import shardy
from irshard.passes import ModulePass

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


@dataclass(frozen=True)
class StripShardingsPass(ModulePass):
    """Remove every sharding annotation and constraint.

    Drops `sdy.sharding` (and propagation's origins, edges and rules,
    `mhlo.sharding`) from arguments, results and operations, replaces
    `sdy.sharding_constraint`, `sdy.reshard` and data-flow edges by their
    input and erases sharding groups, leaving the program as written for one
    device. Manual computations (`sdy.manual_computation`) are kept: their
    bodies are written per device.

    Options:
      keep-meshes       keep the `sdy.mesh` symbols (default true).
      num-partitions    also set `mhlo.num_partitions` to 1 (default false).
    """

    name: ClassVar[str] = "irshard-strip-shardings"
    keep_meshes: bool = True
    num_partitions: bool = False

    def apply(self, module: ir.Module) -> None:
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
            if not self.keep_meshes:
                for op in shardy.mesh_ops(module).values():
                    op.operation.erase()
            if self.num_partitions:
                module.operation.attributes["mhlo.num_partitions"] = \
                    ir.IntegerAttr.get(ir.IntegerType.get_signless(32), 1)
