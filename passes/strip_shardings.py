"""irshard-strip-shardings: remove every sharding annotation and constraint."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from jaxlib.mlir import ir

from irshard.ir.annotation import strip_shardings
from irshard.passes import ModulePass


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
        strip_shardings(module, self.keep_meshes, self.num_partitions)
