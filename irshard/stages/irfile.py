"""Programs read from `.mlir` files: StableHLO from any frontend.

A module another frontend emitted (Reactant's `@code_hlo`, PyTorch/XLA, an
exported JAX module) or a module from a bug report enters the same pipeline
as a traced Python function: shardings already in it are kept, `--mesh` and
`--shard` add or override them (arguments named `arg0`, `arg1`, ... or by
their location names), and the entry function is `@main`.
"""

from __future__ import annotations

import math
import os
import re
from typing import Sequence

from irshard import backend
from irshard.core import files, tree
from irshard.core.errors import InputError, SpecError, UsageError
from irshard.core.dtypes import dtype_from_mlir
from irshard.core.specs import MeshSpec, ShardingSpec, check_size
from irshard.stages import declared, staged

MLIR_SUFFIXES = (".mlir", ".mlirbc")
_MESH_DECL = re.compile(rb'sdy\.mesh\s+@[\w.$\-]+\s*=\s*<\s*\[([^\]]*)\]')
_AXIS_SIZE = re.compile(rb'"[^"]*"\s*=\s*(\d+)')


def is_mlir(path: str) -> bool:
    return path.endswith(MLIR_SUFFIXES)


def read_bytes(path: str) -> bytes:
    """The file's bytes (`-`: standard input), or an InputError."""
    if path == "-":
        import sys
        return sys.stdin.buffer.read()
    if not os.path.exists(path):
        raise InputError(f"file '{path}' does not exist")
    if os.path.isdir(path):
        raise InputError(f"'{path}' is a directory; expected a .mlir file")
    files.check_regular(path, "file")
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        raise InputError(f"cannot read '{path}': {e.strerror}") from None


def declared_devices(data: bytes) -> int | None:
    """The largest mesh a module's text declares (None for bytecode or a
    module without meshes): how many devices to ask for before parsing."""
    sizes = [math.prod(int(n) for n in _AXIS_SIZE.findall(m.group(1)))
             for m in _MESH_DECL.finditer(data)]
    return max(sizes) if sizes else None


def _argument_shardings(main, rules: Sequence[tree.Rule]) -> dict[int, ShardingSpec]:
    """`--shard` rules over @main's arguments, each named `argI` and, when
    its location has one, by that name too: the first rule matching either
    name applies."""
    from irshard.backend import shardy
    names = shardy.argument_names(main)
    keys = [[f"arg{i}"] + ([n] if n else []) for i, n in enumerate(names)]
    every = [k for both in keys for k in both]
    for rule in tree.unmatched(rules, every):
        raise SpecError(f"{rule.option or '--shard'} {rule.text}: "
                        f"'{rule.pattern}' matches no argument of @main; its "
                        f"arguments are "
                        f"{tree.listing([' or '.join(k) for k in keys])}")
    result = {}
    for i, both in enumerate(keys):
        rule = next((r for r in rules if any(r.matches(k) for k in both)), None)
        if rule is not None:
            result[i] = rule.value
    return result


def load(path: str, data: bytes, mesh: MeshSpec | None,
         rules: Sequence[tree.Rule],
         out_shards: Sequence[tuple[int, ShardingSpec]], place):
    """The module as stage `stablehlo`, annotated and with its devices;
    `place` (a `hosting.Hosting`) gives them once the mesh is known."""
    from irshard.ir import gspmd, opt
    from irshard.backend import shardy
    from irshard.ir.annotation import annotate
    context = backend.ir_context()
    module = opt.parse_module(data, context, path)
    shardy.name_locations(module, files.shown_path(path))
    with context:
        main = shardy.entry_function(module)
        gspmd.import_frontend_attributes(module)
        mesh, arg_shardings, result_shardings, note = \
            gspmd.entry_shardings(module, mesh, path)
        existing = shardy.meshes(module)
        shardings = arg_shardings | _argument_shardings(main, rules)
    if mesh is None and not existing:
        raise UsageError(f"{path} declares no sdy.mesh; give one with --mesh, "
                         f"e.g. --mesh x=4")
    mesh = annotate(module, mesh, shardings, result_shardings | dict(out_shards))
    devices = place.devices(mesh)
    with context:
        names = shardy.argument_names(main)
        inputs = tuple(_decl(names[i] or f"arg{i}", t, path)
                       for i, t in enumerate(main.type.inputs))
        outputs = [_decl(name, t, path) for name, t in
                   zip(shardy.result_names(main), main.type.results)]
    notes = staged.x64_notes([(d.name, d.dtype) for d in (*inputs, *outputs)])
    if note:
        notes = (note,) + notes
    info = declared.ProgramInfo(
        source=files.shown_path(path), function="main",
        user_dir=os.path.dirname(os.path.abspath(path)), mesh=mesh,
        placement=place.placement, inputs=inputs, outputs=tuple(outputs),
        notes=notes)
    return staged.StableHLO(info, module, tuple(devices), None)


def _decl(name: str, type_, path: str):
    from jaxlib.mlir import ir

    from irshard.backend import shardy
    shape = shardy.tensor_shape(type_)
    if shape is None:
        raise SpecError(f"{path}: @main's '{name}' has type {type_}; irshard "
                        f"needs statically shaped tensors")
    element = str(ir.RankedTensorType(type_).element_type)
    dtype = dtype_from_mlir(element)
    if dtype is None:
        raise SpecError(f"{path}: @main's '{name}' has element type {element}, "
                        f"which irshard cannot make values of")
    check_size(shape, dtype, f"{path}: @main's '{name}'")
    return declared.TensorDecl(name, dtype, shape)
