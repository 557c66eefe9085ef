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

from dataclasses import dataclass, field
from typing import Any

from irshard.errors import UsageError
from irshard.specs import MeshSpec, parse_mesh


@dataclass(frozen=True)
class Source:
    """What to load, as the command line names it."""

    path: str
    mesh: str | None = None               # --mesh; a module may bring its own
    fn: str | None = None                 # --fn
    args_fn: str | None = None            # --args: a function returning them
    arg_types: tuple[str, ...] = ()       # --arg NAME=TYPE
    shards: tuple[str, ...] = ()          # --shard PATTERN=SPEC
    out_shards: tuple[str, ...] = ()      # --out-shard INDEX=SPEC
    grad: bool | tuple[str, ...] | None = None   # --grad [NAMES]
    static: tuple[str, ...] = ()          # --static NAMES
    reference: str | None = None          # --reference NAME
    platform: str = "cpu"
    extra: dict[str, Any] = field(default_factory=dict, compare=False)

    @property
    def is_module(self) -> bool:
        from irshard import irfile
        return irfile.is_mlir(self.path)

    def mesh_spec(self) -> MeshSpec | None:
        """The --mesh; a .mlir module may bring its own instead (None)."""
        if self.mesh is not None:
            return parse_mesh(self.mesh)
        if self.is_module:
            return None
        raise UsageError("--mesh is required, e.g. --mesh x=4 or --mesh dp=2,tp=4")

    def total_devices(self) -> int:
        """How many devices the mesh spans (a module's, read from its text)."""
        mesh = self.mesh_spec()
        if mesh is not None:
            return mesh.num_devices
        from irshard import irfile
        count = irfile.declared_devices(irfile.read_bytes(self.path))
        if count is None:
            raise UsageError(f"{self.path} declares no mesh in text form; give --mesh")
        return count

    def check_module_options(self) -> None:
        """Options that only mean something for a Python function."""
        for option, given in (("--fn", self.fn), ("--arg", self.arg_types),
                              ("--args", self.args_fn), ("--grad", self.grad),
                              ("--static", self.static),
                              ("--reference", self.reference)):
            if given:
                raise UsageError(f"{option} does not apply to a .mlir module: its "
                                 f"entry is @main and its types are in the module")


def load(source: Source, cluster=None, timeout: float | None = None):
    """The program of `source` as stage `stablehlo`; with `cluster` (a
    multi-process run), after joining the other processes."""
    from irshard import backend, distributed, irfile
    mesh = source.mesh_spec()

    def configure(total: int) -> None:
        backend.configure(distributed.local_devices(total, cluster, source.platform),
                          source.platform, exact=cluster is not None)

    def join() -> None:
        if cluster is not None:
            distributed.join(cluster, timeout)

    if source.is_module:
        source.check_module_options()
        data = irfile.read_bytes(source.path)
        configure(mesh.num_devices if mesh else irfile.declared_devices(data) or 1)
        join()
        from irshard.program import parse_out_shardings, parse_rules
        distributed.report_stage("tracing")
        return irfile.load(source.path, data, mesh, parse_rules(source.shards),
                           parse_out_shardings(source.out_shards),
                           source.platform, lambda m: configure(m.num_devices))
    configure(mesh.num_devices)
    join()
    from irshard import program, stages
    prog = program.load_program(
        source.path, mesh=mesh, fn_name=source.fn, args=source.arg_types,
        shards=source.shards, out_shards=source.out_shards, grad=source.grad,
        reference=source.reference, args_fn=source.args_fn,
        static=source.static)
    distributed.report_stage("tracing")
    return stages.trace(prog, source.platform)
