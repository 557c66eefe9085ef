"""The one front door from a program to the pipeline's first stage.

A `ProgramSpec` names a program as every command and the Python API give
it: where it comes from (a file's function or module, `Source`, as the
command line names it; or a function and its arguments, `Function`, as the
Python API takes them), its mesh, the target it is placed on and the
constraints put on its ops. `lower` turns it into the stage `stablehlo`:
it asks for the devices the mesh needs before JAX starts, joins the other
processes of a multi-process run, and traces the function (or parses and
annotates the module); `programs` loads one program for each combination
of a factory's knobs, as `search` takes them. The command line only parses
its arguments into a `Source` and formats what comes back; the Python API
checks its arguments into a `Function` (`irshard.apiprogram`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Callable

from irshard.core.errors import RejectedKnobs, UsageError
from irshard.core.specs import MeshSpec, parse_axis_types, parse_mesh
from irshard.hosting import Hosting

# Where the user set JAX to GSPMD's propagation: irshard lowers for Shardy's.
GSPMD_NOTE = ("JAX is set to GSPMD's propagation (jax_use_shardy_partitioner="
              "False); irshard lowered and partitioned the program with "
              "Shardy's, JAX's default: JAX's own compile here may shard it "
              "differently")


@dataclass(frozen=True)
class Source:
    """What to load, as the command line names it."""

    path: str
    mesh: str | None = None               # --mesh; a module may bring its own
    axis_types: str | None = None         # --axis-types: auto, explicit, per axis
    fn: str | None = None                 # --fn
    args_fn: str | None = None            # --args: a function returning them
    factory: str | None = None            # --factory: (step, args) from knobs
    knobs: tuple[tuple[str, Any], ...] = ()   # --knob K=V
    context_fn: str | None = None         # --context: a context manager's maker
    keras_fit: bool = False               # --keras-fit: --fn is a Keras model
    arg_types: tuple[str, ...] = ()       # --arg NAME=TYPE
    shards: tuple[str, ...] = ()          # --shard PATTERN=SPEC
    overrides: tuple[str, ...] = ()       # --override-shard PATTERN=SPEC
    out_shards: tuple[str, ...] = ()      # --out-shard INDEX=SPEC
    constraints: tuple[str, ...] = ()     # --constrain MATCH=SPEC
    grad: bool | tuple[str, ...] | None = None   # --grad [NAMES]
    static: tuple[str, ...] = ()          # --static NAMES
    donate: tuple[str, ...] = ()          # --donate ARG
    reference: str | None = None          # --reference NAME
    platform: str = "cpu"
    target: str | None = None             # --target: cpu, tpu-v5e:4x4, gpu-h100:2x8
    profile: str | None = None            # --profile: a saved hardware profile
    # What is resolved from the options, once: the mesh, the placement.
    _resolved: dict[Any, Any] = field(default_factory=dict, compare=False,
                                      repr=False)

    def argv(self) -> list[str]:
        """The program options as `irshard compile` takes them: what
        reproduces this program from the command line."""
        # A program named like an option (-x.py) stays the program.
        argv = [os.path.join(os.curdir, self.path)
                if self.path.startswith("-") else self.path]
        for option, value in (("--fn", self.fn), ("--mesh", self.mesh),
                              ("--axis-types", self.axis_types),
                              ("--args", self.args_fn),
                              ("--factory", self.factory),
                              ("--context", self.context_fn),
                              ("--static", ",".join(self.static) or None),
                              ("--target", self.target),
                              ("--profile", self.profile)):
            if value is not None:
                argv += [option, value]
        from irshard.core.knobs import knob_text
        for name, value in self.knobs:
            argv += ["--knob", f"{name}={knob_text(value)}"]
        for option, values in (("--arg", self.arg_types), ("--shard", self.shards),
                               ("--override-shard", self.overrides),
                               ("--out-shard", self.out_shards),
                               ("--constrain", self.constraints),
                               ("--donate", self.donate)):
            for value in values:
                argv += [option, value]
        if self.keras_fit:
            argv.append("--keras-fit")
        if self.grad is True:
            argv.append("--grad")
        elif self.grad:
            argv += ["--grad", ",".join(self.grad)]
        if self.platform != "cpu":
            argv += ["--platform", self.platform]
        return argv

    def spec(self) -> "ProgramSpec":
        """This file's program, checked before any work: its mesh, its
        placement, its constraints, the notes its options leave."""
        from irshard.loading.leaves import replaced_overrides
        return ProgramSpec(self, self.mesh_spec(), self.placement(),
                           constraints=parse_constraints(self.constraints),
                           notes=replaced_overrides(self.overrides))

    def program(self, mesh: MeshSpec | None, knobs=None):
        """The file's function loaded on `mesh` (the factory's step made of
        `knobs`, or of --knob's): a `Program`, ready to trace."""
        from irshard.loading import fromfile
        return fromfile.load_program(
            self.path, mesh=mesh, fn_name=self.fn, args=self.arg_types,
            shards=self.shards, overrides=self.overrides,
            out_shards=self.out_shards, grad=self.grad,
            reference=self.reference, args_fn=self.args_fn,
            static=self.static, donate=self.donate,
            context_fn=self.context_fn, keras_fit=self.keras_fit,
            factory=self.factory, knobs=self.knobs if knobs is None else knobs)

    @property
    def is_module(self) -> bool:
        from irshard.stages import irfile
        return irfile.is_mlir(self.path)

    def placement(self):
        """--target, --platform and --profile resolved (`targets.place`),
        once: the command checks them before any work, loading uses the
        same value."""
        if "placement" not in self._resolved:
            from irshard.hardware import targets
            self._resolved["placement"] = targets.place(
                self.target, self.platform, self.profile)
        return self._resolved["placement"]

    def mesh_spec(self) -> MeshSpec | None:
        """The --mesh (with --axis-types); a .mlir module may bring its own
        instead (None). Parsed once, however often asked."""
        if "mesh" not in self._resolved:
            self._resolved["mesh"] = self._mesh_spec()
        return self._resolved["mesh"]

    def _mesh_spec(self) -> MeshSpec | None:
        if self.mesh is not None:
            mesh = parse_mesh(self.mesh)
            if self.axis_types is not None and not self.is_module:
                mesh = parse_axis_types(self.axis_types, mesh)
            return mesh
        if self.is_module:
            return None
        if self.axis_types is not None:
            raise UsageError("--axis-types names the types of --mesh's axes; "
                             "give --mesh too, e.g. --mesh dp=2,tp=4 "
                             "--axis-types explicit")
        if self.placement().target.kind == "tpu" and (self.args_fn or self.factory):
            return None          # the mesh its arguments' shardings name
        raise UsageError("--mesh is required, e.g. --mesh x=4 or --mesh dp=2,tp=4")

    def total_devices(self) -> int:
        """How many devices the mesh spans (a module's, read from its text)."""
        mesh = self.mesh_spec()
        if mesh is not None:
            return mesh.num_devices
        from irshard.stages import irfile
        count = irfile.declared_devices(irfile.read_bytes(self.path))
        if count is None:
            raise UsageError(f"{self.path} declares no mesh in text form; give --mesh")
        return count

    def check_module_options(self) -> None:
        """Options that only mean something for a Python function."""
        for option, given in (("--fn", self.fn), ("--arg", self.arg_types),
                              ("--args", self.args_fn), ("--grad", self.grad),
                              ("--context", self.context_fn),
                              ("--keras-fit", self.keras_fit),
                              ("--static", self.static),
                              ("--donate", self.donate),
                              ("--reference", self.reference),
                              ("--factory", self.factory), ("--knob", self.knobs)):
            if given:
                raise UsageError(f"{option} does not apply to a .mlir module: its "
                                 f"entry is @main and its types are in the module")
        if self.axis_types is not None:
            raise UsageError("--axis-types does not apply to a .mlir module: "
                             "axis types say how JAX traces a Python function, "
                             "and the module is already traced")


@dataclass(frozen=True)
class Function:
    """A function and its arguments, as the Python API takes them:
    `keywords` are `program.program_of`'s (rules, shardings, grad, ...),
    checked. With `factory`, `fn` is a factory: `fn(**knobs)` makes
    `(step, args)` or `(step, args, context)`, made once per combination."""

    fn: Callable[..., Any]
    args: tuple[Any, ...]
    keywords: tuple[tuple[str, Any], ...] = ()
    factory: bool = False
    _made: dict[Any, Any] = field(default_factory=dict, compare=False,
                                  repr=False)

    def made(self, knobs=()) -> tuple[Callable[..., Any], tuple[Any, ...], Any]:
        """The step, its arguments and its context's maker (or None) for
        `knobs`; raises `RejectedKnobs` where the factory raises."""
        if not self.factory:
            return self.fn, self.args, None
        if knobs not in self._made:
            self._made[knobs] = _made_by(self.fn, knobs)
        return self._made[knobs]

    def program(self, mesh: MeshSpec, knobs=()):
        from irshard.loading import program
        step, args, context = self.made(knobs)
        keywords = dict(self.keywords)
        if context is not None:
            keywords["context"] = context
        return program.program_of(step, args, mesh=mesh, **keywords)


def _made_by(factory: Callable[..., Any], knobs
             ) -> tuple[Callable[..., Any], tuple[Any, ...], Any]:
    """`factory(**knobs)` as `(step, args, context)`; its raising is the
    knobs' fault (`RejectedKnobs`)."""
    from irshard.core.knobs import knob_text
    name = getattr(factory, "__name__", "factory")
    called = ", ".join(f"{k}={knob_text(v)}" for k, v in knobs)
    try:
        made = factory(**dict(knobs))
    except Exception as e:
        said = f"{name}({called}) raised {type(e).__name__}: {e}"
        raise RejectedKnobs(said, said) from None
    if not (isinstance(made, (tuple, list)) and len(made) in (2, 3)
            and isinstance(made[1], (tuple, list))
            and (len(made) == 2 or callable(made[2]))):
        raise UsageError(f"search: {name}({called}) returned "
                         f"{type(made).__name__}; a factory returns (step, args) "
                         f"or (step, args, context)")
    return made[0], tuple(made[1]), made[2] if len(made) == 3 else None


@dataclass(frozen=True)
class ProgramSpec:
    """One program, as every command and the API name it, resolved and
    checked: where it comes from (`Source` or `Function`), its mesh (None:
    a module's own), where it is placed (`targets.Placement`), the devices
    it is laid on where the user gave them (a `jax.sharding.Mesh`'s, in its
    order), the `(match, spec)` constraints put on its ops, and notes its
    options leave for the report."""

    origin: Any
    mesh: MeshSpec | None
    placement: Any
    devices: tuple[Any, ...] | None = None
    constraints: tuple[tuple[str, str], ...] = ()
    notes: tuple[str, ...] = ()


def load(source: Source, cluster=None, timeout: float | None = None):
    """The program of `source` as stage `stablehlo`; with `cluster` (a
    multi-process run), after joining the other processes."""
    return lower(source.spec(), cluster, timeout)


def lower(spec: ProgramSpec, cluster=None, timeout: float | None = None):
    """The program `spec` names as stage `stablehlo`: its devices asked
    for before JAX starts, the other processes of a multi-process run
    (`cluster`) joined, the function traced (a module parsed and
    annotated), the constraints put on."""
    from irshard import backend
    from irshard.running import distributed
    hosting = Hosting(spec.placement, cluster)
    notes = spec.notes

    def join() -> None:
        if cluster is not None:
            distributed.join(cluster, timeout)

    origin, mesh = spec.origin, spec.mesh
    if isinstance(origin, Source) and origin.is_module:
        from irshard.loading.fromfile import parse_out_shardings
        from irshard.loading.leaves import parse_overrides, parse_rules
        from irshard.stages import irfile
        origin.check_module_options()
        data = irfile.read_bytes(origin.path)
        hosting.configure(mesh.num_devices if mesh
                          else irfile.declared_devices(data) or 1)
        join()
        distributed.report_stage("tracing")
        stage = irfile.load(origin.path, data, mesh,
                            parse_overrides(origin.overrides)
                            + parse_rules(origin.shards),
                            parse_out_shardings(origin.out_shards), hosting)
    else:
        if spec.devices is None:
            hosting.configure(mesh.num_devices if mesh is not None else 1)
        join()
        with hosting.visible():
            # The program's import comes before JAX's backends start, so it
            # may still set JAX's options (`jax_num_cpu_devices`).
            program = origin.program(mesh)
            distributed.report_stage("tracing")
            stage = hosting.trace(program, spec.devices)
        if backend.gspmd_configured():
            notes += (GSPMD_NOTE,)
    return _noted(constrain(stage, spec.constraints), notes)


def programs(spec: ProgramSpec, knob_space) -> list[tuple[Any, Any]]:
    """The program `spec` names for each combination of its factory's
    knobs (`knob_space`: `(name, values)` pairs; one program, as it is,
    without knobs), loaded on its mesh (a `Program`), or what the factory
    said rejecting the combination. Raises where it rejects every one."""
    from irshard import searching
    hosting = Hosting(spec.placement)
    hosting.configure(spec.mesh.num_devices if spec.mesh is not None else 1)
    loaded: list[tuple[Any, Any]] = []
    with hosting.visible():
        for knobs in searching.knob_combinations(knob_space):
            try:
                loaded.append((knobs, spec.origin.program(spec.mesh, knobs)))
            except RejectedKnobs as e:
                loaded.append((knobs, e.reason))
    if all(isinstance(p, str) for _, p in loaded):
        factory = (f"--factory {spec.origin.factory}"
                   if isinstance(spec.origin, Source) else "search: the factory")
        raise UsageError(f"{factory} rejects every combination of the knobs; "
                         f"the first: {loaded[0][1]}")
    return loaded


def _noted(stage, notes: tuple[str, ...]):
    """`stage` with `notes` added to what its report will say."""
    if not notes:
        return stage
    import dataclasses
    return dataclasses.replace(stage, info=dataclasses.replace(
        stage.info, notes=stage.info.notes + notes))


def parse_constraints(items) -> tuple[tuple[str, str], ...]:
    """`--constrain MATCH=SPEC` items as (match, spec), checked before any
    work: MATCH is `OP`, `FILE:LINE` or `OP@FILE:LINE`, with `#N` for the
    N-th (irshard-constrain's `match=`)."""
    from irshard.core.errors import SpecError
    from irshard.core.specs import parse_sharding
    from irshard.core.matching import parse_match
    result, seen = [], {}
    for item in items:
        match, sep, spec = item.rpartition("=")
        if not sep or not match:
            raise UsageError(f"--constrain '{item}': give MATCH=SPEC, e.g. "
                             f"--constrain 'dot_general@model.py:12=_,tp'")
        try:
            parse_match(match)
            parse_sharding(spec)
        except SpecError as e:
            raise UsageError(f"--constrain '{item}': {e}") from None
        if match in seen:
            raise UsageError(
                f"--constrain {match} is given twice ('{seen[match]}' and "
                f"'{item}'); constrain each match once")
        seen[match] = item
        result.append((match, spec))
    return tuple(result)


def constrain(stage, constraints):
    """The stage with a sharding constraint on the ops each (match, spec)
    picks (irshard-constrain, run in place before compiling)."""
    if not constraints:
        return stage
    from irshard.core.errors import PassError
    from irshard.passes import pass_class
    constrain_pass = pass_class("irshard-constrain")
    for match, spec in constraints:
        try:
            constrain_pass(match=match, sharding=spec).apply(stage.module)
        except PassError as e:
            text = str(e).replace("irshard-constrain: ", "", 1)
            raise UsageError(f"--constrain '{match}={spec}': {text}") from None
    return stage
