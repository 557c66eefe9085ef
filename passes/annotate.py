"""irshard-annotate: attach a Shardy mesh and shardings to a StableHLO module."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from jaxlib.mlir import ir

from irshard.core.errors import IRError, PassError, SpecError
from irshard.core.specs import ShardingSpec, parse_mesh, parse_sharding
from irshard.ir.annotation import annotate
from irshard.passes import ModulePass


def parse_assignments(text: str, what: str) -> dict[str, ShardingSpec]:
    """`0=x,_;d=_,y` -> {"0": ..., "d": ...}. Entries are separated by ';'
    because ',' separates a sharding's dimensions."""
    result: dict[str, ShardingSpec] = {}
    for item in filter(None, (s.strip() for s in text.split(";"))):
        key, eq, spec = item.partition("=")
        if not eq or not key.strip():
            raise SpecError(f"{what} '{item}': expected INDEX=SHARDING or "
                            f"NAME=SHARDING, e.g. 0=x,_")
        result[key.strip()] = parse_sharding(spec)
    return result


@dataclass(frozen=True)
class AnnotatePass(ModulePass):
    """Attach a Shardy mesh and argument/result shardings to @main.

    Adds (or replaces) `sdy.mesh @<mesh-name>`, sets `sdy.sharding` on the
    entry function's arguments and results, and sets `mhlo.num_partitions` to
    the mesh's device count. Works on any StableHLO module, not only JAX's.
    Each sharding is checked against its tensor: rank, known axes, each axis
    used once, divisibility.

    Options:
      mesh       the mesh, e.g. `x=2,y=2`; empty keeps the module's own mesh.
      args       `;`-separated `INDEX=SHARDING` or `NAME=SHARDING`, e.g.
                 `0=x,_;1=_,y` (names are the arguments' location names).
      results    `;`-separated `INDEX=SHARDING`.
      mesh-name  the mesh symbol's name (default `mesh`).
    """

    name: ClassVar[str] = "irshard-annotate"
    mesh: str = ""
    args: str = ""
    results: str = ""
    mesh_name: str = "mesh"

    def apply(self, module: ir.Module) -> None:
        try:
            mesh = parse_mesh(self.mesh) if self.mesh.strip() else None
            annotate(module, mesh,
                     parse_assignments(self.args, "args"),
                     parse_assignments(self.results, "results"),
                     self.mesh_name)
        except (SpecError, IRError) as e:
            raise PassError(f"{self.name}: {e}") from None
