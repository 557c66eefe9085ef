"""Where every input and output of an executable lives.

From the executable's own shardings: each input's and output's report row,
the JAX sharding its arrays take, and which device holds which block.
`irshard show` prints this without running; `irshard run` adds checksums and
prints the same layout.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from irshard import backend
from irshard.core.specs import format_shape
from irshard.pipeline.stages import Optimized, TensorDecl
from irshard.reporting import layout
from irshard.reporting.report import SCHEMA, TensorInfo, mesh_json, tensor_info
from irshard.reporting.writer import dumps_json
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


def layout_lines(tensors: Sequence[Any]) -> list[str]:
    """The layout of each tensor (a `Placed`, or anything holding one as
    `placed`): a grid of blocks, or a table of ranges per device."""
    lines = []
    for t in tensors:
        t = getattr(t, "placed", t)
        row = t.info
        label = row.name if row.index is None else f"output {row.index} ({row.name})"
        lines.append(f"  {label}  {format_shape(row.dtype, row.shape)}  "
                     f"{row.sharding_label}")
        lines += layout.render(row.shape, list(t.placements), indent="    ")
    return lines


def render(info, inputs: Sequence[Placed], outputs: Sequence[Placed],
           fmt: str) -> str:
    """`irshard show`: where every input and output lives."""
    if fmt == "json":
        body = {"schema": SCHEMA, "source": info.source, "function": info.function,
                "mesh": mesh_json(info.mesh, info.platform),
                "inputs": [t.to_json() for t in inputs],
                "outputs": [t.to_json() for t in outputs]}
        return dumps_json(body) + "\n"
    lines = [f"{info.source}:{info.function}  mesh {info.mesh} "
             f"({info.mesh.num_devices} {info.platform} devices)", "", "inputs"]
    lines += layout_lines(inputs)
    lines += ["", "outputs"]
    lines += layout_lines(outputs)
    return "\n".join(lines) + "\n"
