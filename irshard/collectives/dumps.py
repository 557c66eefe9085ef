"""Collective reports from HLO that any frontend wrote.

`irshard collectives PATH` reads an HLO text file (or a serialized
`HloModuleProto`, `.pb`), or a directory XLA dumped with
`XLA_FLAGS=--xla_dump_to=DIR`, and reports every module found. In a dump
directory each module is read from its final HLO (`*after_optimizations.txt`;
with `--stage partitioned`, the dump after `spmd-partitioning`), falling back
to the last pass dumped. Mesh axes are named by `--mesh`, else by the Shardy
mesh the module was compiled from (`xla.sdy.meshes` in its frontend
attributes), else by the mesh XLA printed in its replica groups; source lines
come from the module's own tables.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from typing import Any

from irshard import backend
from irshard.collectives import analysis
from irshard.core import files, schema
from irshard.core.errors import IRError, InputError, SpecError, UsageError
from irshard.core.specs import MeshAxis, MeshSpec
from irshard.reporting.diff import HINT, SCHEMA, Side, is_report, main_module
from irshard.reporting.report import CollectiveReport, TensorInfo, tensor_info
from irshard.xla import hloscan
from irshard.xla.hlo import HloModuleView, parse_instruction_text
from irshard.xla.shapes import ArrayShape
from irshard.xla.tiling import Tiling

# module_0003.jit_step.<rest>.txt, as XLA names its dump files.
_DUMP_FILE = re.compile(r"module_(\d+)\.(.+?)\.(.+)\.(txt|pb)$")
_NOT_HLO = ("buffer-assignment", "memory-usage-report", "live-range",
            "ir-no-opt", "ir-with-opt", "debug_options", "thunk_sequence")
_SDY_MESH = re.compile(r'#sdy\.mesh<\[([^\]]*)\]')
_SDY_AXIS = re.compile(r'\\?"([^"\\]+)\\?"\s*=\s*(\d+)')
_PRINTED_MESH = re.compile(r"mesh\[([^\]]*)\]")
_PRINTED_AXIS = re.compile(r"'?([\w.\-]+)'?=(\d+)")
_PARAMETER_NUMBER = re.compile(r" parameter\((\d+)\)")


@dataclass(frozen=True)
class FoundModule:
    label: str            # how the report names it
    path: str
    stage: str            # optimized, partitioned, before_optimizations, file
    # What the module XLA was handed (`before_optimizations`) says of its
    # entry: its header line and its parameters' lines, which name the mesh
    # and, where the final module prints none (jaxlib 0.11 on), the
    # parameters' global shapes and shardings.
    sibling_text: str = ""


def _stage_of(rest: str) -> str | None:
    """The stage a dump file holds, or None if it holds no HLO module."""
    if any(marker in rest for marker in _NOT_HLO) or rest.startswith("obj-file"):
        return None
    if rest.endswith("after_optimizations"):
        return "optimized"
    if "after_spmd-partitioning" in rest:
        return "partitioned"
    if rest == "before_optimizations":
        return "before_optimizations"
    if re.match(r"\d{4}\.", rest):
        return "pass"
    return None


def find_modules(path: str, stage: str = "optimized") -> list[FoundModule]:
    if not os.path.exists(path):
        raise InputError(f"'{path}' does not exist; give an HLO text file or "
                         f"an XLA dump directory")
    if not os.path.isdir(path):
        files.check_regular(path, "file")
        return [FoundModule(os.path.basename(path), path, "file")]
    groups: dict[tuple[str, str], list[tuple[str, str, str]]] = {}
    others = []
    for name in sorted(os.listdir(path)):
        full = os.path.join(path, name)
        if not os.path.isfile(full):     # a FIFO in a dump is no module
            continue
        m = _DUMP_FILE.match(name)
        if m:
            kind = _stage_of(m.group(3))
            if kind is not None:
                groups.setdefault((m.group(1), m.group(2)), []).append(
                    (kind, m.group(3), full))
        elif name.endswith((".hlo", ".hlo.txt")):
            others.append(FoundModule(name, full, "file"))
    found = []
    for (number, module_name), dumped in sorted(groups.items()):
        by_stage = {}
        for kind, rest, full in dumped:
            by_stage.setdefault(kind, []).append((rest, full))
        choice = None
        for wanted in ((stage,), ("optimized",), ("pass",), ("partitioned",),
                       ("before_optimizations",)):
            if wanted[0] in by_stage:
                choice = (wanted[0], sorted(by_stage[wanted[0]])[-1][1])
                break
        if choice is None:
            continue
        sibling = ""
        if "before_optimizations" in by_stage and choice[0] != "before_optimizations":
            sibling = _entry_lines(by_stage["before_optimizations"][0][1])
        found.append(FoundModule(f"module_{number}.{module_name}", choice[1],
                                 choice[0] if choice[0] != "pass" else "last pass",
                                 sibling))
    found += others
    if not found:
        raise InputError(
            f"no HLO modules in '{path}'; expected XLA dump files such as "
            f"module_0000.NAME.after_optimizations.txt (from XLA_FLAGS="
            f"--xla_dump_to={path}) or .hlo text files")
    return found


def _entry_lines(path: str) -> str:
    """The header line of an HLO text file and its entry's parameter lines."""
    kept = []
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            kept.append(f.readline())
            in_entry = False
            for line in f:
                if line.startswith("ENTRY "):
                    in_entry = True
                elif in_entry and line.startswith("}"):
                    break
                elif in_entry and " parameter(" in line:
                    kept.append(line)
    except OSError:
        pass                      # the module itself is what is reported
    return "".join(kept)


def reports(path: str, stage: str, mesh: MeshSpec | None
            ) -> tuple[list[CollectiveReport], list[tuple[str, int]]]:
    """The report of every module at `path`, and (label, devices) of each
    module of a dump directory that runs on another number of devices than
    `--mesh` has (a real dump also holds one-device helpers, `jit_iota`...):
    those are skipped, unless no module fits."""
    found = find_modules(path, stage)
    result, skipped = [], []
    for module in found:
        try:
            result.append(report(module, path, mesh))
        except MeshMismatch as e:
            if not os.path.isdir(path):
                raise
            skipped.append((module.label, e.devices))
    if not result:
        sizes = ", ".join(sorted({str(n) for _, n in skipped}))
        raise SpecError(f"--mesh {mesh} has {mesh.num_devices} devices but no "
                        f"module in '{path}' runs on that many (they run on "
                        f"{sizes}); give a mesh of one of those sizes")
    return result, skipped


def load_view(found: FoundModule):
    """The module: a text file scanned for what the report reads
    (`hloscan`), or, for a serialized module or a printed form the scan
    does not read, parsed by XLA's own parser."""
    return _read(found, lambda view: view)


def _read(found: FoundModule, use):
    """`use` of the module: scanned from a text file, else (a serialized
    module, a form the scan does not read) parsed by XLA."""
    if found.path.endswith(".pb"):
        return use(_parsed_view(found))

    def scan():
        try:
            return hloscan.ScannedModule.from_file(found.path)
        except OSError as e:
            raise InputError(f"cannot read '{found.path}': {e.strerror}") from None

    return hloscan.read(scan, lambda: _parsed_view(found), use)


def _parsed_view(found: FoundModule) -> HloModuleView:
    try:
        if found.path.endswith(".pb"):
            with open(found.path, "rb") as f:
                return HloModuleView(backend.hlo_module_from_proto(f.read()))
        with open(found.path, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        raise InputError(f"cannot read '{found.path}': {e.strerror}") from None
    except ValueError as e:
        raise IRError(f"{found.path} is not a serialized HLO module: {e}") from None
    try:
        return HloModuleView.from_text(text)
    except ValueError as e:
        message = " ".join(line.strip() for line in str(e).splitlines()[:3]
                           if line.strip())
        raise IRError(f"{found.path} does not parse as HLO: {message}") from None


def module_mesh(view: HloModuleView, sibling_text: str = "") -> MeshSpec | None:
    """The mesh that names a module's axes: Shardy's, else XLA's printed one."""
    for text in (view.header, sibling_text):
        m = _SDY_MESH.search(text)
        if m:
            axes = _SDY_AXIS.findall(m.group(1))
            if axes:
                return MeshSpec(tuple(MeshAxis(n, int(s)) for n, s in axes))
    # XLA prints a mesh in the shardings of the module it was handed (from
    # jaxlib 0.11 on: `sharding={mesh['a'=2,'b'=2], [{'a'}, {}]}`, the
    # user's axis names) and in replica groups (`mesh['x'=4] {'x'}`, where
    # an explicit program's axes may be XLA's own `axis_0`, ...).
    for text in (sibling_text, view.printed_mesh or ""):
        m = _PRINTED_MESH.search(text)
        axes = _PRINTED_AXIS.findall(m.group(1)) if m else None
        if axes:
            return MeshSpec(tuple(MeshAxis(n, int(s)) for n, s in axes))
    return None


def _tiling(text: str | None, rank: int) -> Tiling | None:
    if not text:
        return None
    try:
        return Tiling.from_text(text, rank)
    except RuntimeError:
        return Tiling.unread(rank, text)


def _handed_parameters(sibling_text: str) -> dict[int, tuple[tuple[int, ...], str]]:
    """(global shape, sharding text) of each parameter of the module XLA
    was handed, by number."""
    found = {}
    for line in sibling_text.splitlines()[1:]:
        try:
            _, shape, opcode, attrs = parse_instruction_text(line)
        except ValueError:
            continue
        m = _PARAMETER_NUMBER.search(line)
        if m and opcode == "parameter" and isinstance(shape, ArrayShape) \
                and attrs.get("sharding"):
            found[int(m.group(1))] = (shape.dims, attrs["sharding"])
    return found


def _numbered(parameters) -> list[tuple[int, Any]]:
    """The entry's parameters with their numbers, in argument order (XLA
    prints them in the order its schedule uses them)."""
    found = []
    for position, inst in enumerate(parameters):
        m = _PARAMETER_NUMBER.search(inst.text)
        found.append((int(m.group(1)) if m else position, inst))
    return sorted(found, key=lambda pair: pair[0])


def _parameters(view: HloModuleView, mesh: MeshSpec | None,
                sibling_text: str = "") -> tuple[TensorInfo, ...]:
    handed = None
    infos = []
    for number, inst in _numbered(view.parameters()):
        if not isinstance(inst.shape, ArrayShape):
            continue
        local = inst.shape.dims
        tiling = _tiling(inst.attrs.get("sharding"), len(local))
        # A parameter's shape is its shard's: the whole is shards x that.
        shape = tuple(n * t for n, t in zip(local, tiling.shards())) \
            if tiling else local
        if tiling is None and sibling_text:
            # Printed without its sharding: the module XLA was handed has
            # the parameter whole, with its sharding.
            if handed is None:
                handed = _handed_parameters(sibling_text)
            whole, text = handed.get(number, ((), ""))
            found = _tiling(text, len(local)) if len(whole) == len(local) else None
            if found is not None and found.local_shape(whole) == tuple(local):
                tiling, shape = found, whole
        infos.append(tensor_info(inst.metadata.get("op_name") or inst.name,
                                 analysis.hlo_dtype(inst.shape.dtype), shape,
                                 tiling, mesh))
    return tuple(infos)


class MeshMismatch(SpecError):
    """--mesh does not have as many devices as the module runs on."""

    def __init__(self, message: str, devices: int):
        super().__init__(message)
        self.devices = devices


def report(found: FoundModule, source: str, mesh: MeshSpec | None) -> CollectiveReport:
    return _read(found, lambda view: _report(view, found, source, mesh))


def _report(view, found: FoundModule, source: str, mesh: MeshSpec | None
            ) -> CollectiveReport:
    devices = view.num_partitions * view.num_replicas
    if mesh is not None and mesh.num_devices != devices:
        raise MeshMismatch(f"--mesh {mesh} has {mesh.num_devices} devices but "
                           f"{found.label} runs on {devices}", devices)
    if mesh is None:
        mesh = module_mesh(view, found.sibling_text)
        if mesh is not None and mesh.num_devices != devices:
            mesh = None
    note = partitioner_note(found) if devices > 1 else None
    return CollectiveReport(
        source=files.shown_path(source), function=None,
        stage_name=found.stage, mesh=mesh, platform=None,
        inputs=_parameters(view, mesh, found.sibling_text), outputs=(),
        collectives=analysis.collectives(view, mesh, None),
        memory=None, module=found.label, notes=(note,) if note else ())


def partitioner(handed: str) -> str | None:
    """Which partitioner XLA ran on a module, from the header and entry
    parameters of the module it was handed (`before_optimizations`): JAX's
    Shardy lowering exports its meshes and shardings as `xla.sdy.`
    frontend attributes (XLA of jaxlib 0.11 on prints them as named
    shardings, `sharding={mesh['x'=4], [...]}`), GSPMD's only a tiling,
    `sharding={devices=...}`; None where neither is there (no sharding at
    all, or no such text)."""
    if "xla.sdy." in handed or "{mesh[" in handed:
        return "shardy"
    if "sharding={" in handed:
        return "gspmd"
    return None


def partitioner_note(found: FoundModule) -> str | None:
    """The report's note on the partitioner, where it is not Shardy's
    (JAX's default): GSPMD's, or not recorded in what was read."""
    handed = found.sibling_text
    if found.stage == "before_optimizations":
        handed = _entry_lines(found.path)
    which = partitioner(handed)
    if which == "shardy":
        return None
    if which == "gspmd":
        return ("XLA partitioned this module with GSPMD's propagation: the "
                "module it was handed carries GSPMD shardings and no Shardy "
                "mesh (JAX's jax_use_shardy_partitioner=False)")
    if found.stage == "file":
        return ("which partitioner (Shardy or GSPMD) made this module's "
                "collectives is not recorded in it; XLA's dump folder says "
                "(its module_N.NAME.before_optimizations.txt)")
    return None


# ---------------------------------------------------------------------------
# A side of `irshard diff`


def _pick(modules: list[CollectiveReport], path: str, module: str | None
          ) -> CollectiveReport:
    """One module's report among several: the one `--module` names, else
    the only one that runs on more than one device."""
    if module is not None:
        named = [m for m in modules if module in (m.module or "")]
        if len(named) == 1:
            return named[0]
        what = "no module" if not named else f"{len(named)} modules"
        raise UsageError(f"{path}: {what} named like '{module}'; modules: "
                         + ", ".join(m.module or "?" for m in modules))
    found = main_module(modules, lambda m: (m.mesh is not None and m.mesh.num_devices > 1)
                        or bool(m.collectives))
    if found is not None:
        return found
    raise UsageError(f"{path} holds {len(modules)} modules; name one with "
                     f"--module: " + ", ".join(m.module or "?" for m in modules))


def load_side(path: str, module: str | None = None, stage: str = "optimized") -> Side:
    """A report from a JSON report, an HLO file or an XLA dump directory."""
    if not os.path.exists(path):
        raise UsageError(f"'{path}' does not exist; give a JSON report "
                         f"(irshard compile --format json -o FILE), an HLO "
                         f"file or an XLA dump directory")
    if os.path.isfile(path) and path.endswith(".json"):
        value = schema.load_json(path, "report", HINT)
        if isinstance(value, dict) and isinstance(value.get("modules"), list):
            modules = [m for m in value["modules"] if is_report(m)]
            return Side(path, _pick([CollectiveReport.read(m, f"report {path}, module {i}")
                                     for i, m in enumerate(modules)], path, module))
        if not is_report(value):
            raise UsageError(f"'{path}' is not an irshard report (no "
                             f"'collectives' list); {HINT}")
        if value.get("schema", SCHEMA) != SCHEMA:
            raise UsageError(f"'{path}' has \"schema\": "
                             f"{json.dumps(value.get('schema'))}; this irshard "
                             f"reads reports of schema {SCHEMA}")
        return Side(path, CollectiveReport.read(value, f"report {path}"))
    backend.configure(1, "cpu")
    found, _ = reports(path, stage, None)
    return Side(path, _pick(list(found), path, module))


def diff_side(value: Any, label: str | None = None) -> Side:
    """A side from a report (`irshard.compile`'s), a report's JSON form,
    or a path (as `irshard diff` reads one)."""
    if isinstance(value, (str, os.PathLike)):
        found = load_side(os.fspath(value))
        return Side(found.path, found.report, label)
    if is_report(value):
        value = CollectiveReport.read(value, "diff: the report")
    elif not isinstance(value, CollectiveReport):
        raise UsageError(f"diff: expected a report (irshard.compile's), its "
                         f"JSON form or a path, not {type(value).__name__}")
    if label is None:
        what = value.function or value.module
        mesh = ",".join(f"{a.name}={a.size}" for a in value.mesh.axes) \
            if value.mesh is not None else ""
        label = os.path.basename(value.source or "-") \
            + (f" ({what})" if what else "") + (f" mesh {mesh}" if mesh else "")
    return Side(value.source or "-", value, label)
