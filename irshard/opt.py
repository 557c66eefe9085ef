"""`irshard opt`: an mlir-opt for StableHLO + Shardy modules.

Reads a module (text or bytecode), runs a pipeline that mixes irshard's
passes with the passes MLIR has registered, and prints the module. With
`--split-input-file` each `// -----` chunk is a module of its own; with
`--verify-diagnostics` an error is printed on stdout in the chunk's place and
the command still succeeds, so lit can check error messages.
"""

from __future__ import annotations

import re
import sys
import textwrap
from dataclasses import dataclass
from typing import TextIO

from irshard import backend, pipeline, shardy
from irshard.errors import IRError, IrshardError, PassError

SPLIT_MARKER = re.compile(r"^// -----.*$", re.M)

def _check(text: str, context) -> None:
    backend.parse_pipeline(text, context)


def registered_passes(context) -> list[tuple[str, str]]:
    """(name, anchor) of each candidate pass MLIR knows here."""
    found = []
    for name in shardy.REGISTERED_PASSES:
        for anchor in ("builtin.module", "func.func"):
            text = f"builtin.module({name})" if anchor == "builtin.module" \
                else f"builtin.module(func.func({name}))"
            try:
                _check(text, context)
            except ValueError:
                continue
            found.append((name, anchor))
            break
    return found


def list_passes() -> str:
    from irshard.passes import PASSES, pass_class
    lines = ["irshard's passes:"]
    for name in sorted(PASSES):
        cls = pass_class(name)
        lines.append(f"  {name}")
        lines.append(f"      {cls.summary()}")
        doc = (cls.__doc__ or "").splitlines()
        starts = [i for i, line in enumerate(doc) if line.strip() == "Options:"]
        if starts:
            block = textwrap.dedent("\n".join(doc[starts[0] + 1:])).strip("\n")
            lines += ["      " + line for line in block.splitlines() if line.strip()]
    lines += ["", "passes registered with MLIR (Shardy's and upstream's; "
              "function passes run on each func.func):"]
    for name, anchor in registered_passes(backend.ir_context()):
        lines.append(f"  {name}" + ("  [func.func]" if anchor == "func.func" else ""))
    return "\n".join(lines) + "\n"


@dataclass
class Chunk:
    text: str
    first_line: int          # 1-based line of the chunk in the file


def split_chunks(text: str, split: bool) -> list[Chunk]:
    if not split:
        return [Chunk(text, 1)]
    chunks, start, line = [], 0, 1
    for m in SPLIT_MARKER.finditer(text):
        chunks.append(Chunk(text[start:m.start()], line))
        line += text[start:m.end()].count("\n")
        start = m.end()
    chunks.append(Chunk(text[start:], line))
    return chunks


def parse_module(data: str | bytes, context, source: str, first_line: int = 1):
    """A module from text or bytecode; errors say where, as MLIR does.

    StableHLO's portable artifacts (what `jax.export` serializes:
    `Exported.mlir_module_serialized`, in the versioned VHLO dialect) are
    upgraded to StableHLO, keeping their Shardy meshes and shardings."""
    from jaxlib.mlir import ir
    with context:
        try:
            module = ir.Module.parse(data)
        except ir.MLIRError as e:
            raise IRError(shardy.diagnostic_text(e, source, first_line)) from None
    if isinstance(data, bytes) and any(
            op.operation.name.startswith("vhlo.") for op in module.body.operations):
        from jaxlib.mlir.dialects import stablehlo
        try:
            return stablehlo.deserialize_portable_artifact(context, data)
        except Exception as e:
            raise IRError(f"{source}: cannot read this StableHLO portable "
                          f"artifact: {backend.first_line(e)}") from None
    return module


def run_steps(module, steps: list[pipeline.Step], print_after_all: bool,
              stderr: TextIO, debug_info: bool = False, source: str = "-",
              first_line: int = 1) -> None:
    for step in steps:
        if step.irshard_pass is not None:
            step.irshard_pass.apply(module)
        else:
            risky = _check_entry(module, step)
            try:
                if risky:
                    _run_isolated(module, step, risky)
                else:
                    backend.run_registered_passes(
                        module, f"builtin.module({step.mlir_text})")
            except backend.PassFailure as e:
                # MLIR calls the parsed text '-'; say which file and line.
                where = e.describe(source if e.file in ("-", "") else None,
                                   first_line)
                raise PassError(f"pass '{step.label}' failed: {where}") from None
        if print_after_all:
            stderr.write(f"// -----// IR Dump After {step.label} //----- //\n")
            stderr.write(print_module(module, debug_info) + "\n")


def _check_entry(module, step: pipeline.Step) -> list[str]:
    """Shardy's passes look for the module's entry and abort the process
    when there is no public function: say so instead. Where they would
    take the entry by name (a function named main, else the module's only
    function) and the module has several functions and no @main, the
    functions' names: the step runs apart, where an abort is survived."""
    from irshard import shardy
    if "sdy-" not in step.mlir_text:
        return []
    with module.context:
        names = [f"@{ir_name(fn)}" for fn in shardy.functions(module)]
        public = shardy.public_function_names(module)
    if not public:
        what = (f"only private functions ({', '.join(names)})" if names
                else "no functions")
        raise PassError(f"pass '{step.label}' needs a public entry function, "
                        f"and the module has {what}; declare one "
                        f"'func.func @main'")
    return names if "@main" not in names and len(names) > 1 else []


def _run_isolated(module, step: pipeline.Step, names: list[str]) -> None:
    """Runs `step` on `module` in a child process and takes its result in
    place; a child that dies (Shardy's check for @main) is an error line."""
    operation, why = backend.run_registered_passes_isolated(
        module, f"builtin.module({step.mlir_text})")
    if operation is None:
        raise PassError(
            f"pass '{step.label}' aborted ({why}): Shardy takes the function "
            f"named main, or a module's only function, as the entry, and "
            f"this module has {len(names)} functions ({', '.join(names)}) and "
            f"no @main; rename its entry function to @main")
    with module.context:
        old = list(module.body.operations)
        anchor = old[0]
        for op in list(operation.regions[0].blocks[0].operations):
            op.operation.move_before(anchor)
        for op in old:
            op.operation.erase()
        attributes = module.operation.attributes
        new = {a.name: a.attr for a in operation.attributes}
        for name in [a.name for a in attributes]:
            if name not in new:
                del attributes[name]
        for name, attr in new.items():
            attributes[name] = attr


def ir_name(fn) -> str:
    from jaxlib.mlir import ir
    return ir.StringAttr(fn.attributes["sym_name"]).value


def print_module(module, debug_info: bool = False) -> str:
    return module.operation.get_asm(enable_debug_info=debug_info).rstrip("\n")


def opt(data: str | bytes, source: str, pipeline_text: str | None, *,
        split_input_file: bool = False, verify_diagnostics: bool = False,
        print_ir_after_all: bool = False, debug_info: bool = False,
        stderr: TextIO = sys.stderr) -> str:
    """Runs the pipeline over the module(s) in `data`; returns the output."""
    context = backend.ir_context()
    steps: list[pipeline.Step] = []
    if pipeline_text:
        steps = pipeline.plan(pipeline.parse(pipeline_text), pipeline_text,
                              context, _check, print_ir_after_all)
    if isinstance(data, bytes) and not data.startswith(b"ML\xefR"):
        try:
            data = data.decode("utf-8")
        except UnicodeDecodeError:
            raise IRError(f"{source}: neither MLIR text (UTF-8) nor MLIR "
                          f"bytecode") from None
    if isinstance(data, bytes):
        chunks = [Chunk(data, 1)]           # bytecode holds one module
    else:
        chunks = split_chunks(data, split_input_file)
    outputs = []
    for chunk in chunks:
        try:
            module = parse_module(chunk.text, context, source, chunk.first_line)
            run_steps(module, steps, print_ir_after_all, stderr, debug_info,
                      source, chunk.first_line)
            outputs.append(print_module(module, debug_info))
        except IrshardError as e:
            if not verify_diagnostics:
                raise
            outputs.append(f"irshard: error: {e}")
    return "\n// -----\n".join(outputs) + "\n"
