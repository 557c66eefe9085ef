"""From a file and options to the pipeline's first stage.

`load` turns a `.py` file (a function, its arguments, types and sharding
rules) or a `.mlir` module (StableHLO from any frontend) into the stage
`stablehlo`: it asks for the devices the mesh needs before JAX starts, joins
the other processes of a multi-process run, and traces the function (or
parses and annotates the module). The command line only parses its
arguments into a `Source` and formats what comes back; the Python API starts
from a function instead (`irshard.api`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from irshard.core.errors import UsageError
from irshard.core.specs import MeshSpec, parse_axis_types, parse_mesh


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


class Hosting:
    """A placement (`targets.Placement`) and the devices it is laid onto:
    asked for before JAX starts, where they are simulated; in a
    multi-process run (`cluster`), this process's share."""

    def __init__(self, placement, cluster=None):
        if placement.target.kind == "tpu" and cluster is not None:
            raise UsageError(f"--target {placement.target.text} compiles for a "
                             f"TPU slice without running; it takes no processes")
        self.placement = placement
        self.cluster = cluster
        self.target = placement.target
        self.platform = placement.platform

    def configure(self, total: int) -> None:
        from irshard import backend
        from irshard.running import distributed
        if self.target.kind == "tpu":
            backend.configure(1, "cpu")
            return
        backend.configure(distributed.local_devices(total, self.cluster,
                                                    self.platform),
                          self.platform, exact=self.cluster is not None)

    def visible(self):
        """A context in which the program sees the target's devices: a TPU
        slice's chips are what `jax.devices()` lists (its import and its
        tracing build meshes from them)."""
        import contextlib

        from irshard import backend
        if self.target.kind != "tpu":
            return contextlib.nullcontext()
        return backend.visible_devices(backend.tpu_slice(
            self.target.topology_name, self.target.slices, self.target.text))

    def all_devices(self, chosen: list[Any]) -> list[Any]:
        """Every device the mesh could be laid onto: the slice's chips, or
        the platform's devices `chosen` for it."""
        from irshard import backend
        if self.target.kind == "tpu":
            return backend.tpu_slice(self.target.topology_name,
                                     self.target.slices, self.target.text)
        return chosen

    def trace(self, program):
        """A loaded program traced on its mesh's devices: stage
        `stablehlo` (within `visible()`)."""
        from irshard import backend
        from irshard.stages import staged
        mesh = program.mesh
        devices = self.devices(mesh)
        # A mesh the program built itself with the same axes lays out the
        # devices as the program expects (its shard_maps name that mesh).
        own = backend.own_mesh_devices(program.namespace, mesh.names,
                                       mesh.shape, devices[0].platform)
        if own is not None and set(own) <= set(self.all_devices(devices)):
            devices = own
        return staged.trace(program, self.placement, devices)

    def devices(self, mesh: MeshSpec) -> list[Any]:
        from irshard import backend
        self.target.check_mesh(mesh)
        self.configure(mesh.num_devices)
        if self.target.kind == "tpu":
            return backend.tpu_devices(self.target.topology_name,
                                       self.target.slices, mesh.shape,
                                       mesh.names, self.target.text)
        return backend.devices(self.platform, mesh.num_devices)


def load(source: Source, cluster=None, timeout: float | None = None):
    """The program of `source` as stage `stablehlo`; with `cluster` (a
    multi-process run), after joining the other processes."""
    from irshard.running import distributed
    from irshard.stages import irfile
    from irshard.loading.leaves import replaced_overrides
    mesh = source.mesh_spec()
    constraints = parse_constraints(source.constraints)
    notes = replaced_overrides(source.overrides)
    place = Hosting(source.placement(), cluster)

    def join() -> None:
        if cluster is not None:
            distributed.join(cluster, timeout)

    if source.is_module:
        source.check_module_options()
        data = irfile.read_bytes(source.path)
        place.configure(mesh.num_devices if mesh
                        else irfile.declared_devices(data) or 1)
        join()
        from irshard.loading.fromfile import parse_out_shardings
        from irshard.loading.leaves import parse_overrides, parse_rules
        distributed.report_stage("tracing")
        return _noted(constrain(irfile.load(source.path, data, mesh,
                                            parse_overrides(source.overrides)
                                            + parse_rules(source.shards),
                                            parse_out_shardings(source.out_shards),
                                            place), constraints), notes)
    place.configure(mesh.num_devices if mesh is not None else 1)
    join()
    from irshard.loading import fromfile
    with place.visible():
        # The program's import comes before JAX's backends start, so it may
        # still set JAX's options (`jax_num_cpu_devices`).
        prog = fromfile.load_program(
            source.path, mesh=mesh, fn_name=source.fn, args=source.arg_types,
            shards=source.shards, overrides=source.overrides,
            out_shards=source.out_shards, grad=source.grad,
            reference=source.reference, args_fn=source.args_fn,
            static=source.static, donate=source.donate,
            context_fn=source.context_fn, keras_fit=source.keras_fit,
            factory=source.factory, knobs=source.knobs)
        distributed.report_stage("tracing")
        traced = place.trace(prog)
    return _noted(constrain(traced, constraints), notes)


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
