"""What XLA warns about while partitioning, in the user's terms.

XLA's SPMD partitioner logs a warning when it cannot move a value between
two shardings efficiently and replicates it instead ("involuntary full
rematerialization"): every device then holds the whole tensor for a moment.
The warning names HLO shardings and an HLO op; a finding names the mesh
axes, the op and the user's line (from the op's name, which JAX also gives
the op's location in the traced module).
"""

from __future__ import annotations

import dataclasses
import re
from typing import Callable

from irshard.core.frames import SourceLocation, UserCode
from irshard.core.specs import MeshSpec
from irshard.core.syntax import matching_bracket
from irshard.reporting.parts import Finding
from irshard.xla import tiling

_REMAT = "Involuntary full rematerialization"
_OP = re.compile(r"efficiently for HLO operation %?(\S+) = (\S+) ([a-z][a-z0-9-]*)\(")
_OP_NAME = re.compile(r'op_name="((?:[^"\\]|\\.)*)"')
_FRAME = re.compile(r"stack_frame_id=(\d+)")


def _braced(text: str, start: int) -> tuple[str, int]:
    """The `{...}` group starting at `start` (nested braces allowed)."""
    end = matching_bracket(text, start, "{")
    return text[start:end + 1], end + 1


def _axes(text: str, rank: int, mesh: MeshSpec | None) -> str:
    """An HLO sharding in mesh axes (`_,x+y,_`), else as XLA prints it."""
    if mesh is None:
        return text
    try:
        spec = tiling.in_mesh(text, rank, mesh)
    except Exception:
        return text
    if spec is None:
        return text
    entries = spec.entries()
    if all(e == "_" for e in entries):
        return "replicated"
    return ",".join(entries)


def _rank(shape: str) -> int:
    m = re.match(r"[a-z0-9]+\[([^\]]*)\]", shape)
    return len([d for d in m.group(1).split(",") if d.strip()]) if m else 0


def parse(log: str, mesh: MeshSpec | None,
          locate: Callable[[str, int | None], SourceLocation | None]
          ) -> list[Finding]:
    """The findings in what XLA logged while compiling; `locate` maps an
    op's name (`jit(f)/add`) and stack frame id to the user's line."""
    found = []
    for line in log.splitlines():
        if _REMAT not in line:
            continue
        start = line.find("from sharding ")
        if start < 0:
            continue
        try:
            source_text, end = _braced(line, line.index("{", start))
            target_text, end = _braced(line, line.index("{", end))
        except ValueError:
            continue
        op = _OP.search(line, end)
        shape = re.sub(r"\{[^}]*\}$", "", op.group(2)) if op else None
        rank = _rank(shape) if shape else 0
        op_name = _OP_NAME.search(line, end)
        name = op_name.group(1) if op_name else None
        frame = _FRAME.search(line, end)
        frame_id = int(frame.group(1)) if frame else None
        finding = Finding(
            kind="involuntary-remat",
            message=line[line.index(_REMAT):].split(". As the last resort")[0],
            op=op.group(3) if op else None, shape=shape,
            from_sharding=_axes(source_text, rank, mesh),
            to_sharding=_axes(target_text, rank, mesh),
            source=locate(name, frame_id) if name else None, op_name=name)
        if finding not in found:
            found.append(finding)
    return found


def locator(module, user_dir: str | None, frames_table=None
            ) -> Callable[[str, int | None], SourceLocation | None]:
    """(op name, stack frame id) -> the user's line: from the compiled
    module's stack frame table (`frames_table`, which the ids index), else
    from the first op of the traced module JAX gave that name."""
    from irshard.backend import locations, shardy
    users = UserCode(user_dir)
    by_name: dict[str, SourceLocation | None] = {}
    if module is not None:
        with module.context:
            for fn in shardy.functions(module):
                for operation in shardy.walk(fn.operation):
                    name = locations.location_name(operation.location)
                    if name and name not in by_name:
                        by_name[name] = users.choose(
                            locations.frames(operation.location))

    def locate(name: str, frame_id: int | None) -> SourceLocation | None:
        if frame_id is not None and frames_table is not None:
            found = users.choose(frames_table.chain(frame_id))
            if found is not None:
                return found
        return by_name.get(name)
    return locate


def findings_caused(report):
    """`report` with each finding given the cause of the collectives XLA
    made at its line (the demanding side's first, else any)."""
    found = []
    for f in report.findings:
        there = [c.why.cause for c in report.collectives
                 if c.why is not None and c.why.cause is not None
                 and f.source is not None and c.source is not None
                 and (c.source.file, c.source.line) == (f.source.file, f.source.line)]
        there.sort(key=lambda cause: cause.side != "needed")
        found.append(dataclasses.replace(f, cause=there[0]) if there else f)
    return dataclasses.replace(report, findings=tuple(found))
