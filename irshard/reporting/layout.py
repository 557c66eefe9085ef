"""Where data lives: which device holds which slice of an array.

1-D and 2-D arrays are drawn as a grid of their blocks with the ids of the
devices holding each block in the cells; arrays of three or more dimensions
(which a grid cannot show) as a table of index ranges per device. Built from
a device -> index map such as `Sharding.devices_indices_map(shape)` gives.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from irshard.core.specs import format_shape
from irshard.reporting.report import SCHEMA, mesh_json
from irshard.reporting.cells import table
from irshard.reporting.writer import dumps_json

Range = tuple[int, int]


@dataclass(frozen=True)
class DeviceSlice:
    """One device's slice of an array."""

    device: int
    process: int
    ranges: tuple[Range, ...]     # [start, stop) per dimension

    def to_json(self) -> dict[str, Any]:
        return {"device": self.device, "process": self.process,
                "index": [list(r) for r in self.ranges]}


def placements(indices_map: dict[Any, tuple[slice, ...]],
               shape: Sequence[int]) -> list[DeviceSlice]:
    """Placements from a `{device: index}` map, ordered by device id."""
    result = []
    for device, index in indices_map.items():
        ranges = []
        for s, n in zip(index, shape):
            start, stop, _ = s.indices(n)
            ranges.append((start, stop))
        result.append(DeviceSlice(device.id, getattr(device, "process_index", 0),
                                  tuple(ranges)))
    return sorted(result, key=lambda p: p.device)


def device_list(ids: Sequence[int]) -> str:
    """`0,1,2,3,6` -> `0-3,6`."""
    ids = sorted(ids)
    parts, start = [], None
    for i, d in enumerate(ids):
        if start is None:
            start = d
        if i + 1 == len(ids) or ids[i + 1] != d + 1:
            parts.append(str(start) if start == d else f"{start}-{d}")
            start = None
    return ",".join(parts)


def _range_label(r: Range) -> str:
    return f"{r[0]}:{r[1]}"


def render(shape: Sequence[int], places: list[DeviceSlice],
           indent: str = "  ") -> list[str]:
    """The grid (1-D, 2-D) or per-device table (3-D and above)."""
    if not places:
        return [indent + "(no devices)"]
    rank = len(shape)
    blocks: dict[tuple[Range, ...], list[int]] = {}
    for p in places:
        blocks.setdefault(p.ranges, []).append(p.device)
    if rank == 0 or len(blocks) == 1:
        return [indent + f"every block on devices {device_list([p.device for p in places])}"
                if len(places) > 1 else indent + f"on device {places[0].device}"]
    if rank > 2:
        rows = [["device", "process", "index"]]
        for p in places:
            rows.append([str(p.device), str(p.process),
                         "[" + ", ".join(_range_label(r) for r in p.ranges) + "]"])
        return _columns(rows, indent)
    if rank == 1:
        starts = sorted({k[0] for k in blocks})
        header = ["index"] + [_range_label(r) for r in starts]
        cells = ["device"] + [device_list(blocks[(r,)]) for r in starts]
        return _columns([header, cells], indent, right=True)
    rows_ranges = sorted({k[0] for k in blocks})
    cols_ranges = sorted({k[1] for k in blocks})
    table = [[""] + [_range_label(c) for c in cols_ranges]]
    for r in rows_ranges:
        table.append([_range_label(r)] +
                     [device_list(blocks.get((r, c), [])) or "-" for c in cols_ranges])
    return _columns(table, indent, right=True)


def _columns(rows: list[list[str]], indent: str, right: bool = False) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = []
    for row in rows:
        cells = [row[0].ljust(widths[0])]
        cells += [c.rjust(w) if right else c.ljust(w)
                  for c, w in zip(row[1:], widths[1:])]
        lines.append((indent + "  ".join(cells)).rstrip())
    return lines


def devices_text(listing: dict[str, Any]) -> str:
    """`irshard devices`: the platform, each process's devices, the list."""
    count, processes = len(listing["devices"]), listing["process_count"]
    lines = [f"platform: {listing['platform']}, {count} "
             f"device{'s' if count != 1 else ''}, {processes} "
             f"process{'es' if processes != 1 else ''}"]
    for proc in listing["processes"]:
        lines.append(f"process {proc['index']}: devices {device_list(proc['devices'])}")
    lines += ["", "devices"]
    lines += table(["id", "process", "kind"],
                   [[str(d["id"]), str(d["process"]), d["kind"]]
                    for d in listing["devices"]])
    return "\n".join(lines) + "\n"


def layout_lines(tensors: Sequence[Any]) -> list[str]:
    """The layout of each tensor (an `irshard.stages.placing.Placed`, or
    anything holding one as `placed`): a grid of blocks, or a table of ranges per device."""
    lines = []
    for t in tensors:
        t = getattr(t, "placed", t)
        row = t.info
        label = row.name if row.index is None else f"output {row.index} ({row.name})"
        lines.append(f"  {label}  {format_shape(row.dtype, row.shape)}  "
                     f"{row.sharding_label}")
        lines += render(row.shape, list(t.placements), indent="    ")
    return lines


def show_json(info, inputs: Sequence[Any], outputs: Sequence[Any]) -> str:
    """`irshard show --format json`: where every input and output lives
    (each a `Placed`)."""
    body = {"schema": SCHEMA, "source": info.source, "function": info.function,
            "mesh": mesh_json(info.mesh, info.platform),
            "inputs": [t.to_json() for t in inputs],
            "outputs": [t.to_json() for t in outputs]}
    return dumps_json(body) + "\n"


def show_text(info, inputs: Sequence[Any], outputs: Sequence[Any]) -> str:
    """`irshard show`: where every input and output lives, drawn."""
    lines = [f"{info.source}:{info.function}  mesh {info.mesh} "
             f"({info.mesh.num_devices} {info.platform} devices)", "", "inputs"]
    lines += layout_lines(inputs)
    lines += ["", "outputs"]
    lines += layout_lines(outputs)
    return "\n".join(lines) + "\n"
