"""A compiled stage's report: its collectives, the simulated step, XLA's
memory figures and the buffer assignment's peak, the partitioner's
findings, and the inputs' and outputs' tensors, each timed as a phase
(`irshard.core.phases`).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

from irshard import backend
from irshard.collectives import analysis, findings
from irshard.collectives import memory as peaks
from irshard.core.frames import UserCode
from irshard.core.phases import phase
from irshard.core.specs import MeshSpec
from irshard.reporting.parts import MemoryUse, TargetInfo
from irshard.reporting.report import CollectiveReport, TensorInfo, tensor_info
from irshard.stages.declared import ProgramInfo, TensorDecl
from irshard.timemodel import links, schedule
from irshard.timemodel import rates as compute_rates
from irshard.xla import hloscan
from irshard.xla.hlo import HloModuleView


def _tensor_infos(decls: tuple[TensorDecl, ...], shardings: list[Any],
                  mesh: MeshSpec, indexed: bool) -> tuple[TensorInfo, ...]:
    return tuple(
        dataclasses.replace(
            tensor_info(decl.name, decl.dtype.name, decl.shape,
                        shardings[i] if i < len(shardings) else None, mesh,
                        i if indexed else None, decl.key),
            donated=decl.donated)
        for i, decl in enumerate(decls))


def report(info: ProgramInfo, stage: str, view: HloModuleView,
            compiled: backend.CompiledExecutable,
            memory_stats: Callable[[], dict[str, int]], programs=None,
            module=None) -> CollectiveReport:
    """The report of `view`; `memory_stats`: XLA's memory figures, which
    the caller started working out (`memory_stats_later`) before reading
    the module."""
    target, profile = info.placement.target, info.placement.profile
    model = links.CostModel.for_devices(target, profile, compiled.devices)
    with phase("collectives"):
        collectives = analysis.collectives(view, info.mesh, info.user_dir,
                                           programs, model)
    comm = sum((c.time_s or 0.0) * c.executions for c in collectives)
    with phase("simulation"):
        step = simulated(info, view, collectives)
    with phase("memory figures"):
        figures = memory_stats()
    notes = info.notes + compiled.notes
    with phase("memory peak"):
        found = peak_of(compiled, info, view) \
            if compiled.buffer_dumps is not None else None
    memory = MemoryUse(figures["argument_bytes"], figures["output_bytes"],
                       figures.get("alias_bytes", 0), figures["temp_bytes"],
                       found, profile.hbm_bytes or None)
    # Said where it matters: over 1% and 64 KiB (constants and a tuple's
    # index table account for a few bytes on any backend).
    if found is not None and abs(found.bytes - memory.analysed_bytes) \
            > max(0.01 * found.bytes, 64 << 10):
        notes += (f"XLA's figures differ: its memory analysis counts "
                  f"{memory.analysed_bytes} bytes per device, its buffer "
                  f"assignment holds {found.bytes} (the peak's breakdown); "
                  f"memory per device and fits take the buffer "
                  f"assignment's",)
    # The simulation counts each loop's work as often as it runs; XLA's own
    # count reads a loop body once.
    if step is not None:
        flops, moved = step.flops, step.bytes_accessed
    else:
        found = compiled.cost()
        flops, moved = found.get("flops"), found.get("bytes accessed")
    roofline = links.roofline(profile, flops, moved, comm)
    return CollectiveReport(
        source=info.source, function=info.function, stage_name=stage,
        mesh=info.mesh, platform=info.platform,
        inputs=_tensor_infos(info.inputs,
                             compiled.parameter_shardings(len(info.inputs)),
                             info.mesh, indexed=False),
        outputs=_tensor_infos(info.outputs,
                              compiled.output_shardings(len(info.outputs)),
                              info.mesh, indexed=True),
        collectives=collectives, memory=memory,
        notes=notes,
        target=TargetInfo.of(info.placement), roofline=roofline, step=step,
        findings=tuple(findings.parse(
            compiled.log, info.mesh,
            findings.locator(module, info.user_dir, view.stack_frames))))


def peak_of(compiled: backend.CompiledExecutable, info: ProgramInfo, view):
    """The peak of XLA's buffer assignment and what holds it; None where
    XLA's dump cannot be read (a format this reader does not know)."""
    assignment, ranges = compiled.buffer_dumps
    inputs = _tensor_infos(info.inputs, compiled.parameter_shardings(len(info.inputs)),
                           info.mesh, indexed=False)
    try:
        return peaks.peak(assignment, ranges, inputs, view,
                           UserCode(info.user_dir))
    except (ValueError, KeyError, IndexError):
        return None


def simulated(info: ProgramInfo, view, collectives) -> schedule.Step | None:
    """One step of `view` simulated in its schedule, its collectives timed
    as the report times them; None where the target has no compute rates."""
    rates = compute_rates.rates(info.placement, info.mesh.num_devices)
    if rates is None:
        return None
    times = {c.name: (c.time_s or 0.0, c.name) for c in collectives}

    def collective_s(inst):
        return times.get(inst.name) or (0.0, None)

    axes = {c.name: c.mesh_axes or ("?",) for c in collectives}
    # A TPU's collectives over different mesh axes run over different links
    # of its torus (and across slices, the data-center network), side by
    # side; a host's or a GPU's run one after another.
    lanes = links.torus_lanes(info.mesh, axes) \
        if info.placement.target.kind == "tpu" else None
    step = schedule.simulate(view, rates, collective_s, analysis.user_line(
        view, UserCode(info.user_dir)), lanes)
    # Named in the mesh's order: the links of `fsdp,tensor` and
    # `tensor,fsdp` are the same.
    order = {axis.name: i for i, axis in enumerate(info.mesh.axes)}
    step = step.by_axes(lambda name: ",".join(sorted(
        axes.get(name, ("?",)),
        key=lambda a: (order.get(a.split(":")[0], len(order)), a))))
    return dataclasses.replace(step, error_band=info.placement.profile.error_band,
                               assumes=compute_rates.assumed(info.placement,
                                                            info.mesh.num_devices))


def read(text_of: Callable[[], str], parsed, use):
    """`use` of the module as the report reads it: scanned from its text
    (`text_of()`, held by the scan alone), or `parsed()` (XLA's objects)
    for a form the scan does not read."""
    def scanned():
        with phase("HLO printed"):
            text = text_of()
        with phase("HLO scanned"):
            return hloscan.ScannedModule.from_text(text)

    return hloscan.read(scanned, parsed, use)
