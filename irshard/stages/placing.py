"""Where every input and output of an executable lives.

From the executable's own shardings: each input's and output's report row,
the JAX sharding its arrays take, and which device holds which block.
`irshard show` prints this without running (`irshard.reporting.layout`
renders it); `irshard run` adds checksums and prints the same layout.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from irshard import backend
from irshard.reporting import layout
from irshard.reporting.report import TensorInfo, tensor_info
from irshard.stages.declared import TensorDecl
from irshard.stages.staged import Optimized
from irshard.xla import tiling


@dataclass(frozen=True)
class Placed:
    """An input or output of the executable."""

    decl: TensorDecl
    info: TensorInfo
    sharding: Any                        # its arrays' jax.sharding.Sharding
    placements: tuple[layout.DeviceSlice, ...]

    def to_json(self) -> dict[str, Any]:
        d = self.info.to_json()
        d["layout"] = [p.to_json() for p in self.placements]
        return d


def _placements(sharding, decl: TensorDecl) -> tuple[layout.DeviceSlice, ...]:
    found = layout.placements(sharding.devices_indices_map(tuple(decl.shape)),
                              decl.shape)
    if decl.key:     # a key array's blocks, not its key data's
        found = [layout.DeviceSlice(p.device, p.process, p.ranges[:-1])
                 for p in found]
    return tuple(found)


def placed(compiled: Optimized) -> tuple[list[Placed], list[Placed]]:
    """The executable's inputs and outputs, placed on its devices."""
    info, exe = compiled.info, compiled.compiled
    jax_mesh = backend.make_mesh(info.mesh.names, info.mesh.shape, exe.devices)

    def place(decls, hlo_shardings, indexed):
        result = []
        for i, (decl, hlo) in enumerate(zip(decls, hlo_shardings)):
            spec = tiling.in_mesh(hlo, len(decl.shape), info.mesh)
            entries = spec.entries() if spec is not None else None
            sharding = backend.jax_sharding(hlo, jax_mesh, entries)
            row = tensor_info(decl.name, decl.dtype.name, decl.shape, hlo,
                              info.mesh, i if indexed else None, decl.key)
            result.append(Placed(decl, row, sharding, _placements(sharding, decl)))
        return result

    return (place(info.inputs, exe.parameter_shardings(len(info.inputs)), False),
            place(info.outputs, exe.output_shardings(len(info.outputs)), True))


def mesh_device_ids(compiled: Optimized) -> list[Any]:
    """The ids of the executable's devices laid out as its mesh (nested
    lists, one level per mesh axis, major to minor)."""
    info = compiled.info
    mesh = backend.make_mesh(info.mesh.names, info.mesh.shape,
                             compiled.compiled.devices)
    return _ids(mesh.devices.tolist())


def _ids(value: Any) -> Any:
    return [_ids(v) for v in value] if isinstance(value, list) else value.id
