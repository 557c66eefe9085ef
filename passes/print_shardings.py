"""irshard-print-shardings: every value's sharding, as a table on stderr."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from typing import ClassVar

from jaxlib.mlir import ir

from irshard.backend import locations, shardy
from irshard.core.syntax import split_top_level
from irshard.passes import ModulePass
from irshard.reporting.cells import table


def _origins(attr: ir.Attribute | None) -> str:
    """`{x = "self", y = "input: 0"}` -> `x: self, y: input: 0`."""
    if attr is None:
        return ""
    text = str(attr).strip("{}[] ")
    return ", ".join(part.strip().replace(' = "', ": ").rstrip('"')
                     for part in text.split('",') if part.strip())


def _where(location) -> str:
    frames = locations.location_frames(location)
    return f"{os.path.basename(frames[0][0])}:{frames[0][1]}" if frames else ""


def sharding_rows(module: ir.Module) -> list[list[str]]:
    rows = []
    with module.context:
        for fn in shardy.functions(module):
            fn_name = ir.StringAttr(fn.attributes["sym_name"]).value
            for kind, key, types in (("arg", "arg_attrs", fn.type.inputs),
                                     ("result", "res_attrs", fn.type.results)):
                for i, attrs in enumerate(shardy.attr_dicts(fn, key, len(types))):
                    if shardy.SHARDING in attrs:
                        rows.append([f"@{fn_name} {kind} {i}", str(types[i]),
                                     str(attrs[shardy.SHARDING]).removeprefix(
                                         "#sdy.sharding"),
                                     _origins(attrs.get(shardy.SHARDING_ORIGINS)),
                                     ""])
            for operation in shardy.walk(fn.operation):
                if shardy.SHARDING not in operation.attributes:
                    continue
                value = str(operation.attributes[shardy.SHARDING])
                per_value = value.removeprefix("#sdy.sharding_per_value<[").removesuffix("]>")
                shardings = _split_top(per_value)
                origins = operation.attributes[shardy.SHARDING_ORIGINS] \
                    if shardy.SHARDING_ORIGINS in operation.attributes else None
                origin_list = _split_top(str(origins).strip("[]")) if origins else []
                for i, result in enumerate(operation.results):
                    sharding = shardings[i] if i < len(shardings) else ""
                    rows.append([
                        operation.name + (f" #{i}" if len(operation.results) > 1 else ""),
                        str(result.type), sharding,
                        _origins(origin_list[i]) if i < len(origin_list) else "",
                        _where(operation.location)])
    return rows


def _split_top(text: str) -> list[str]:
    return split_top_level(text, ",", "<[{(")


@dataclass(frozen=True)
class PrintShardingsPass(ModulePass):
    """Print each value's sharding (and its origin) as a table on stderr.

    One row per sharded function argument and result and per result of an
    operation that carries `sdy.sharding`, in program order: the value, its
    type, its sharding, the origin of each axis when propagation recorded it
    (`sdy.sharding_origins`), and the source line. The module is unchanged.

    Options: none.
    """

    name: ClassVar[str] = "irshard-print-shardings"

    def apply(self, module: ir.Module) -> None:
        rows = sharding_rows(module)
        lines = table(["value", "type", "sharding", "origin", "source"], rows,
                      indent="") if rows else ["(no shardings)"]
        sys.stderr.write("\n".join(lines) + "\n")
        sys.stderr.flush()
