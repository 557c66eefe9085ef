"""The staged pipeline, modelled on JAX's `Traced -> Lowered -> Compiled`.

    trace(program)       -> StableHLO     the traced function, annotated with
                                          irshard's annotate pass
    StableHLO.propagate()-> Propagated    Shardy's propagation, in-process,
                                          with sharding origins
    StableHLO.compile()  -> Optimized     XLA's executable; optionally with
                                          the HLO right after partitioning
    Optimized.partitioned() -> Partitioned
    Optimized.report() / Partitioned.report() -> CollectiveReport

Each stage is an immutable object holding what the next step needs, with
`as_text()` for its IR. Errors are turned into the user's terms at the
boundaries: an exception raised by the user's function is reported at their
file and line.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass, field
from typing import Any, ClassVar, Sequence

from irshard import backend, passes
from irshard.collectives import analysis
from irshard.core import collector, files, tree
from irshard.core.errors import BackendError
from irshard.core.phases import phase
from irshard.core.dtypes import DType, lookup_dtype
from irshard.core.specs import MeshSpec
from irshard.hardware import targets
from irshard.loading.leaves import Program
from irshard.reporting.report import CollectiveReport
from irshard.stages import reading
from irshard.stages.declared import ProgramInfo, TensorDecl
from irshard.stages.lowerings import (JittedProgram, lower_jitted_program,
                                        result_shardings, tracing_errors)
from irshard.xla.hlo import HloModuleView


class Stage:
    """One step of the pipeline; `as_text()` is its IR."""

    name: ClassVar[str] = ""

    def as_text(self) -> str:
        raise NotImplementedError


def _asm(operation: Any, debug_info: bool) -> str:
    return operation.get_asm(enable_debug_info=debug_info)


@dataclass(frozen=True, eq=False)
class StableHLO(Stage):
    """The traced program as StableHLO with irshard's mesh and shardings."""

    name: ClassVar[str] = "stablehlo"
    info: ProgramInfo
    module: Any                     # jaxlib.mlir.ir.Module
    devices: tuple[Any, ...]
    # The traced Python callable (the gradient with --grad); None for a
    # module read from a file. `run --check` runs it on one device.
    function: Any = None
    # Host callbacks the program calls (jax.debug.print, pure_callback).
    callbacks: Any = ((), None)
    # A function the user named to stand for the single-device result.
    reference: Any = None
    out_tree: Any = None            # the traced function's output structure
    # The concrete values the inputs were given (an `--args` function's
    # arrays), by input name; abstract inputs have none.
    given: Any = field(default=None, compare=False, repr=False)

    def as_text(self, debug_info: bool = False) -> str:
        return _asm(self.module.operation, debug_info)

    @functools.cached_property
    def sixteen_bit_float(self) -> str | None:
        """The narrowest float the program computes in, where it is a
        16-bit one (`bf16`, else `f16`); None otherwise."""
        from irshard.backend import shardy
        found = shardy.sixteen_bit_floats(self.module)
        return "bf16" if "bf16" in found else ("f16" if found else None)

    def propagate(self) -> "Propagated":
        """Runs Shardy's propagation on a copy of the module, recording
        sharding origins. That runs in a child process: where recording
        origins crashes Shardy, propagation runs again here without them,
        and the stage says so in `notes`."""
        from irshard.backend import hloforms, shardy

        inline = passes.pass_class("inline")(default_pipeline="",
                                             only_private=True)

        def inlined_copy():
            # In the forms XLA converts the module to before its own
            # propagation, which the shardings read are to be XLA's.
            copy = self.module.operation.clone()
            inline.apply(copy)
            hloforms.as_hlo(copy)
            return copy

        notes: tuple[str, ...] = ()
        try:
            propagated, crash = backend.run_registered_passes_isolated(
                inlined_copy(), f"builtin.module({shardy.propagation_pipeline()})")
            if crash is not None:   # MaxText's step: in applying constraints
                propagated, again = backend.run_registered_passes_isolated(
                    inlined_copy(), "builtin.module("
                    f"{shardy.propagation_pipeline(origins='propagation')})")
                notes = (f"Shardy crashed ({crash}) recording where each sharding "
                         "came from as it applied the sharding constraints; "
                         "origins are recorded from propagation only",)
                if again is not None:
                    notes = (f"Shardy crashed ({crash}) recording where each "
                             "sharding came from; shardings are shown without "
                             "their origins",)
                    propagated = inlined_copy()
                    backend.run_registered_passes(propagated, "builtin.module("
                        f"{shardy.propagation_pipeline(origins=False)})")
        except backend.PassFailure as e:
            raise BackendError(f"Shardy propagation failed: {e}") from None
        return Propagated(self.info, propagated, notes)

    def compile(self, partitioned: bool = False) -> "Optimized":
        """Partitions and compiles with XLA. With `partitioned`, also keeps
        the HLO right after SPMD partitioning (always kept on the CPU for a
        program with 16-bit floats: the report reads their own types there,
        since the CPU backend widens them)."""
        from irshard.backend import shardy
        to_parameters, to_outputs = shardy.propagation_freedom(self.module)
        partitioned = partitioned or self.info.estimated or (
            self.info.platform == "cpu"
            and self.sixteen_bit_float is not None)
        compiled = backend.compile_module(self.module, self.devices,
                                          to_parameters, to_outputs,
                                          capture_partitioned=partitioned,
                                          callbacks=self.callbacks)
        return Optimized(self.info, compiled, self.module)


@dataclass(frozen=True, eq=False)
class Propagated(Stage):
    """Every value's sharding after Shardy propagation, with origins."""

    name: ClassVar[str] = "propagated"
    info: ProgramInfo
    operation: Any
    notes: tuple[str, ...] = ()      # what the stage could not record

    def as_text(self, debug_info: bool = False) -> str:
        return _asm(self.operation, debug_info)


@dataclass(frozen=True, eq=False)
class Partitioned(Stage):
    """XLA's HLO right after the SPMD partitioner."""

    name: ClassVar[str] = "partitioned"
    info: ProgramInfo
    text: str
    compiled: backend.CompiledExecutable
    module: Any = None

    def as_text(self) -> str:
        return self.text

    def view(self) -> HloModuleView:
        try:
            return HloModuleView.from_text(self.text)
        except ValueError as e:
            raise BackendError(f"cannot read XLA's partitioned HLO: {e}") from None

    def read(self, use):
        """`use` of what the report reads of the partitioned module."""
        return reading.read(lambda: self.text, self.view, use)

    def report(self) -> CollectiveReport:
        memory_stats = self.compiled.memory_stats_later()
        return self.read(lambda view: reading.report(self.info, self.name, view,
                                              self.compiled, memory_stats,
                                              module=self.module))


@dataclass(frozen=True, eq=False)
class Optimized(Stage):
    """The executable and its final HLO: what actually runs."""

    name: ClassVar[str] = "optimized"
    info: ProgramInfo
    compiled: backend.CompiledExecutable
    module: Any = None              # the StableHLO it was compiled from

    def as_text(self) -> str:
        return self.compiled.hlo_modules()[0].to_string()

    def partitioned(self) -> Partitioned:
        if self.compiled.partitioned_text is None:
            raise ValueError("compile with partitioned=True to keep the "
                             "partitioned stage")
        return Partitioned(self.info, self.compiled.partitioned_text,
                           self.compiled, self.module)

    def view(self) -> HloModuleView:
        """The HLO the report reads: the executable's (for stand-in devices,
        the partitioner's output)."""
        if self.info.estimated:
            return self.partitioned().view()
        return self._view

    @functools.cached_property
    def _view(self) -> HloModuleView:
        return HloModuleView(self.compiled.hlo_modules()[0])

    def report(self) -> CollectiveReport:
        if self.info.estimated:
            # Compiled for stand-in devices: the partitioner's output is the
            # program as any backend gets it.
            return self.partitioned().report()
        # XLA's memory figures worked out while the module is printed and read.
        memory_stats = self.compiled.memory_stats_later()
        programs = None
        if self.info.platform == "cpu" and self.compiled.partitioned_text:
            with phase("partitioned HLO read"):
                programs = self.partitioned().read(analysis.program_shapes)
        return reading.read(self.as_text, lambda: self._view,
                     lambda view: reading.report(self.info, self.name, view,
                                          self.compiled, memory_stats,
                                          programs, self.module))


@dataclass(frozen=True, eq=False)
class Pipeline:
    """The stages of one compile, so a report can print any of them; a
    report of an executable the user compiled has no `lowered` stage."""

    lowered: StableHLO | None
    compiled: Optimized

    def text(self, name: str) -> str:
        if self.lowered is None and name != "optimized":
            from irshard.core.errors import UsageError
            raise UsageError(f"stage {name}: this report is of a compiled "
                             f"executable, which keeps only its optimized HLO; "
                             f"report its Lowered for the others")
        if name == "stablehlo":
            return self.lowered.as_text()
        if name == "propagated":
            return self.lowered.propagate().as_text()
        if name == "partitioned":
            return self._partitioned
        return self.compiled.as_text()

    @functools.cached_property
    def _partitioned(self) -> str:
        # Kept where the report read it; else XLA compiles the program again
        # to dump it (a default report does not pay for the dump).
        compiled = self.compiled
        if compiled.compiled.partitioned_text is None and self.lowered is not None:
            compiled = self.lowered.compile(partitioned=True)
        return compiled.partitioned().as_text()


# ---------------------------------------------------------------------------
# Tracing a Python function


def _output_decls(lowered: backend.LoweredFunction, program: Program,
                  flat) -> tuple[TensorDecl, ...]:
    """Outputs named by path (`result/1/m`); with --grad, after the leaf each
    is the gradient of (`grad(params)/w`); a `jax.Ref` input's final value
    after the leaf (`updated(state)/w`)."""
    keys = flat.key_outputs
    refs = [leaf for leaf in program.inputs if leaf.ref]
    own = len(lowered.out_names) - len(refs)
    decls = []
    for i, (shape, dtype, path) in enumerate(zip(
            lowered.out_shapes, lowered.out_dtypes, lowered.out_names)):
        if program.grad is not None:
            name = tree.grad_path(program.inputs[program.grad[i]].path)
        elif refs and i >= own:
            name = tree.updated_path(refs[i - own].path)
        else:
            name = tree.output_path(path[1:] if refs else path)
        decls.append(TensorDecl(name, lookup_dtype(dtype) or lookup_dtype("f32"),
                                tuple(shape), keys[i] if i < len(keys) else None))
    return tuple(decls)


def _static_notes(program: Program, outputs: Sequence[str]) -> tuple[str, ...]:
    """Says which leaves were not arrays and passed through unchanged."""
    notes = []
    if program.fixed_leaves:
        notes.append(f"inputs that are not arrays are passed as they are "
                     f"(static): {tree.listing(list(program.fixed_leaves), 4)}")
    if outputs:
        notes.append(f"outputs that are not arrays are left out of the "
                     f"compiled program: {tree.listing(list(outputs), 4)}")
    return tuple(notes)


def x64_notes(tensors: Sequence[tuple[str, DType]]) -> tuple[str, ...]:
    """Turns on JAX's 64-bit mode when a tensor is declared 64-bit (without
    it JAX silently makes i64/f64 values 32-bit), and says so."""
    wide = [f"{name} ({dtype.name})" for name, dtype in tensors
            if dtype.is_64bit]
    if not wide:
        return ()
    backend.enable_x64()
    return (f"64-bit types are on (jax_enable_x64) for {', '.join(wide)}; "
            f"the function's own default types are then 64-bit too",)


@collector.sparing
def trace(program: Program, placement: targets.Placement | None = None,
          devices: Sequence[Any] | None = None) -> StableHLO:
    """Traces `program` (or its gradient with `program.grad`) to StableHLO as
    a function of its input leaves, and attaches the mesh and shardings with
    irshard's annotate pass. `placement` (simulated CPUs when None) says
    what it is compiled for; `devices`, which of them the mesh is laid on."""
    from irshard.ir.annotation import annotate
    placement = placement or targets.place(None)
    mesh = program.mesh
    devices = list(devices) if devices is not None else \
        backend.devices(placement.platform, mesh.num_devices)
    jax_mesh = backend.make_mesh(mesh.names, mesh.shape, devices,
                                 [a.type for a in mesh.axes])
    notes = x64_notes([(leaf.path, leaf.type.dtype) for leaf in program.inputs])
    if program.jitted is not None:
        return _stage_of(program, placement, devices, lower_jitted_program(
            program, jax_mesh, _user_dir(program)), notes)
    fn = flat = program.flat_fn()
    reference = program.flat_fn(program.reference) if program.reference else None
    if program.grad is not None:
        fn = backend.gradient(fn, program.grad)
        if reference is not None:
            reference = backend.gradient(reference, program.grad)
    user_dir = program.user_dir or os.path.dirname(os.path.abspath(program.source))
    with tracing_errors(program, mesh, user_dir):
        lowered = backend.lower(
            fn, [leaf.type.shape for leaf in program.inputs],
            [leaf.type.dtype.numpy for leaf in program.inputs], jax_mesh,
            [leaf.weak for leaf in program.inputs],
            [[d.axes for d in leaf.sharding.dims] for leaf in program.inputs]
            if mesh.explicit else None, program.donated, program.context)
    annotate(lowered.module, mesh,
             {i: leaf.sharding for i, leaf in enumerate(program.inputs)},
             result_shardings(program, lowered.out_tree,
                               [len(s) for s in lowered.out_shapes]))
    info = ProgramInfo(
        source=files.shown_path(program.source), function=program.function,
        user_dir=user_dir, mesh=mesh, placement=placement,
        inputs=tuple(TensorDecl(leaf.path, leaf.type.dtype, leaf.type.shape,
                                leaf.key, leaf.sharding,
                                i in program.donated, leaf.rule)
                     for i, leaf in enumerate(program.inputs)),
        outputs=_output_decls(lowered, program, flat), notes=notes
        + _static_notes(program, flat.static_outputs))
    return StableHLO(info, lowered.module, tuple(devices), fn,
                     lowered.callbacks, reference, lowered.out_tree,
                     _given(program.inputs))


def _given(leaves) -> dict[str, Any]:
    return {leaf.path: leaf.value for leaf in leaves if leaf.value is not None}


def _user_dir(program: Program) -> str:
    return program.user_dir or os.path.dirname(os.path.abspath(program.source))


def _stage_of(program: Program, placement: targets.Placement,
              devices: Sequence[Any], lowered: JittedProgram,
              notes: tuple[str, ...]) -> StableHLO:
    """The StableHLO stage of a jitted object's lowering (`lowerings`)."""
    if lowered.devices is not None and len(lowered.devices) == len(devices):
        devices = list(lowered.devices)
    info = ProgramInfo(
        source=files.shown_path(program.source), function=program.function,
        user_dir=_user_dir(program), mesh=program.mesh, placement=placement,
        inputs=tuple(TensorDecl(leaf.path, leaf.type.dtype, leaf.type.shape,
                                leaf.key, leaf.sharding, donated, leaf.rule, sharing)
                     for leaf, donated, sharing in zip(
                         lowered.leaves, lowered.donated,
                         lowered.sharing or (None,) * len(lowered.leaves))),
        outputs=tuple(TensorDecl(name, dtype, shape, key)
                      for name, dtype, shape, key in lowered.outputs),
        notes=notes + lowered.notes + _static_notes(program, ()))
    return StableHLO(info, lowered.module, tuple(devices), None,
                     lowered.callbacks, None, lowered.out_tree,
                     _given(lowered.leaves))


def from_lowering(lowered: Any, mesh: MeshSpec, placement: targets.Placement,
                  devices: Sequence[Any], function: str,
                  source: str = "<python>") -> StableHLO:
    """The StableHLO stage of a lowering the user already has (a
    `jax.stages.Lowered` or `Traced`, or a framework's): nothing traced
    again, its shardings and donation as they are."""
    from irshard.stages.lowerings import Prelowered
    program = Program(source=source, function=function, fn=None, mesh=mesh,
                      inputs=(), jitted=Prelowered(lowered))
    jax_mesh = backend.make_mesh(mesh.names, mesh.shape, devices,
                                 [a.type for a in mesh.axes])
    return _stage_of(program, placement, devices,
                     lower_jitted_program(program, jax_mesh, _user_dir(program)), ())


def from_compiled(step: backend.CompiledStep, mesh: MeshSpec,
                  placement: targets.Placement, function: str) -> Optimized:
    """The optimized stage of an executable the user already compiled
    (`irshard.report` of a `jax.stages.Compiled`): its inputs the ones XLA
    kept, named by their path in `(args, kwargs)`."""
    from irshard.stages.lowerings import lowered_input_name
    inputs = tuple(TensorDecl(lowered_input_name(leaf.path),
                              _known_dtype(leaf.dtype), leaf.shape, leaf.key,
                              None, leaf.donated)
                   for leaf in step.inputs if leaf.kept)
    outputs = tuple(TensorDecl(tree.path_of("result", [leaf.path] if leaf.path else []),
                               _known_dtype(leaf.dtype), leaf.shape, leaf.key)
                    for leaf in step.outputs)
    notes = ()
    if len(step.devices) > 1:
        setting = "GSPMD's" if backend.gspmd_configured() else "Shardy's, its default"
        notes = (f"which partitioner (Shardy or GSPMD) built this executable "
                 f"is not recorded in it; JAX is set to {setting} propagation "
                 f"here",)
    info = ProgramInfo(source="<python>", function=function, user_dir=None,
                       mesh=mesh, placement=placement, inputs=inputs,
                       outputs=outputs, notes=notes)
    return Optimized(info, backend.CompiledExecutable(
        step.executable, step.devices, None, ((), None), ""))


def _known_dtype(name: str) -> DType:
    found = lookup_dtype(name)
    if found is None:
        raise BackendError(f"the executable has a value of dtype {name}, "
                           f"which irshard cannot report")
    return found
