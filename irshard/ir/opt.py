"""`irshard opt`: an mlir-opt for StableHLO + Shardy modules.

Reads a module (text or bytecode), runs a pipeline that mixes irshard's
passes with the passes MLIR has registered, and prints the module. With
`--split-input-file` each `// -----` chunk is a module of its own; with
`--verify-diagnostics` the diagnostics each chunk produces are checked
against its `expected-error`/`-warning`/`-remark`/`-note` comments as
mlir-opt checks them (at their line, `@+N`, `@-N`, `@above`, `@below`,
`@unknown`; `-re` for `{{regex}}` parts): every expected one must appear and
no other, or each mismatch is reported and the command fails.
"""

from __future__ import annotations

import re
import sys
import textwrap
from dataclasses import dataclass
from typing import TextIO

from irshard import backend
from irshard.backend import locations, shardy
from irshard.core.errors import IRError, IrshardError, PassError
from irshard.ir import pipeline
from irshard.ir.diagnostics import (Diagnostic, diagnostic, diagnostic_lines,
                                     expected_diagnostics, failure, infos, verify)
from irshard.passes import PASSES, pass_class

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
    backend.configure(1, "cpu")
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
            raise failure(IRError, locations.diagnostic_text(e, source, first_line),
                           infos(e), source, first_line) from None
    if isinstance(data, bytes) and any(
            op.operation.name.startswith("vhlo.") for op in module.body.operations):
        from jaxlib.mlir.dialects import stablehlo
        try:
            return stablehlo.deserialize_portable_artifact(context, data)
        except Exception as e:
            raise IRError(f"{source}: cannot read this StableHLO portable "
                          f"artifact: {backend.first_line(e)}") from None
    return module


def run_steps(module, steps: list[pipeline.PassStep], print_after_all: bool,
              stderr: TextIO, debug_info: bool = False, source: str = "-",
              first_line: int = 1, diagnostics: list | None = None) -> None:
    """Runs the steps on `module`; a step run apart in a child process adds
    the diagnostics it made to `diagnostics`."""
    for step in steps:
        if step.irshard_pass is not None:
            step.irshard_pass.apply(module)
        else:
            risky = _check_entry(module, step)
            try:
                if risky or _debugging(step):
                    _run_isolated(module, step, risky, diagnostics)
                else:
                    backend.run_registered_passes(
                        module, f"builtin.module({step.mlir_text})")
            except backend.PassFailure as e:
                # MLIR calls the parsed text '-'; say which file and line.
                where = e.describe(source if e.file in ("-", "") else None,
                                   first_line)
                raise failure(PassError, f"pass '{step.label}' failed: {where}",
                               infos(e.error), source, first_line) from None
        if print_after_all:
            stderr.write(f"// -----// IR Dump After {step.label} //----- //\n")
            stderr.write(print_module(module, debug_info) + "\n")


# Shardy's passes that take the entry function by name (and abort without
# one); Shardy's pipelines are taken to contain one. Others run in this
# process, where a warning Shardy gives once per process stays once.
_ENTRY_SEEKING = ("sdy-basic-propagate", "sdy-aggressive-propagate",
                  "sdy-op-priority-propagate", "sdy-user-priority-propagate",
                  "sdy-add-func-data-flow-edges", "sdy-propagate-to-func-results",
                  "sdy-remove-sub-axes-in-input-output-shardings")


def _check_entry(module, step: pipeline.PassStep) -> list[str]:
    """Shardy's passes look for the module's entry and abort the process
    when there is no public function: say so instead. Where they would
    take the entry by name (a function named main, else the module's only
    function) and the module has several functions and no @main, the
    functions' names: the step runs apart, where an abort is survived.
    Empty for the passes that do not look for the entry."""
    from irshard.backend import shardy
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
    entry_seeking = any(name in step.mlir_text for name in _ENTRY_SEEKING) \
        or "-pipeline" in step.mlir_text
    return names if entry_seeking and "@main" not in names and len(names) > 1 else []


def _debugging(step: pipeline.PassStep) -> bool:
    """Whether `step` gives a Shardy pass a debug option
    (`debug-sharding-origins`...): Shardy has crashed the process with them
    on IR it did not expect, so such a step runs apart."""
    return "sdy-" in step.mlir_text and "debug-" in step.mlir_text


def _run_isolated(module, step: pipeline.PassStep, names: list[str],
                  diagnostics: list | None = None) -> None:
    """Runs `step` on `module` in a child process and takes its result in
    place; a child that dies (Shardy's check for @main, a crash in a debug
    option) is an error line."""
    operation, why = backend.run_registered_passes_isolated(
        module, f"builtin.module({step.mlir_text})", diagnostics, diagnostic)
    if operation is None and not names:
        options = ", ".join(dict.fromkeys(
            re.findall(r"debug-[\w-]+(?:=\w+)?", step.mlir_text)))
        raise PassError(
            f"pass '{step.label}' crashed ({why}) with Shardy's {options}; "
            f"run it without, or report the module to Shardy")
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
        # By index: iterating gives names or (name, value) pairs by version.
        new = {operation.attributes[i].name: operation.attributes[i].attr
               for i in range(len(operation.attributes))}
        for name in [attributes[i].name for i in range(len(attributes))]:
            if name not in new:
                del attributes[name]
        for name, attr in new.items():
            attributes[name] = attr


def ir_name(fn) -> str:
    from jaxlib.mlir import ir
    return ir.StringAttr(fn.attributes["sym_name"]).value


def print_module(module, debug_info: bool = False) -> str:
    return module.operation.get_asm(enable_debug_info=debug_info).rstrip("\n")


# ---------------------------------------------------------------------------
# Diagnostics


def _chunks(data: str | bytes, source: str, split_input_file: bool) -> list["Chunk"]:
    """The modules of `data`: MLIR bytecode holds one; text is split at
    `// -----` lines where asked."""
    if isinstance(data, bytes) and not data.startswith(b"ML\xefR"):
        try:
            data = data.decode("utf-8")
        except UnicodeDecodeError:
            raise IRError(f"{source}: neither MLIR text (UTF-8) nor MLIR "
                          f"bytecode") from None
    if isinstance(data, bytes):
        return [Chunk(data, 1)]
    return split_chunks(data, split_input_file)


def opt(data: str | bytes, source: str, pipeline_text: str | None, *,
        split_input_file: bool = False, verify_diagnostics: bool = False,
        print_ir_after_all: bool = False, debug_info: bool = False,
        allow_unregistered_dialect: bool = False,
        stderr: TextIO = sys.stderr) -> str:
    """Runs the pipeline over the module(s) in `data`; returns the output.
    With `verify_diagnostics`, raises `VerifyFailed` (holding the output
    of the chunks that produced a module) where the diagnostics are not
    those the chunks expect."""
    backend.configure(1, "cpu")
    context = backend.ir_context()
    context.allow_unregistered_dialects = allow_unregistered_dialect
    steps: list[pipeline.PassStep] = []
    if pipeline_text:
        steps = pipeline.plan(pipeline.parse(pipeline_text), pipeline_text,
                              context, _check, print_ir_after_all)
    outputs, problems = [], []
    for chunk in _chunks(data, source, split_input_file):
        diagnostics: list[Diagnostic] = []

        def collect(info, into=diagnostics) -> bool:
            into.append(diagnostic(info))
            return True

        handler = context.attach_diagnostic_handler(collect)
        try:
            module = parse_module(chunk.text, context, source, chunk.first_line)
            run_steps(module, steps, print_ir_after_all, stderr, debug_info,
                      source, chunk.first_line, diagnostics)
            outputs.append(print_module(module, debug_info))
        except IrshardError as e:
            if not verify_diagnostics:
                raise
            diagnostics += getattr(e, "diagnostics", None) or [
                Diagnostic("error", None, 0, str(e))]
        finally:
            handler.detach()
        if verify_diagnostics:
            expected, unread = expected_diagnostics(
                chunk.text if isinstance(chunk.text, str) else "")
            problems += [f"{source}:{line + chunk.first_line - 1}: error: {what}"
                         for line, what in unread]
            problems += verify(diagnostics, expected, source, chunk.first_line)
        else:
            # What did not stop the chunk (warnings, remarks) is shown.
            for line in diagnostic_lines(diagnostics, source, chunk.first_line):
                stderr.write(line + "\n")
    text = "\n// -----\n".join(outputs) + "\n" if outputs else ""
    if problems:
        raise VerifyFailed(problems, text)
    return text


class VerifyFailed(Exception):
    """`--verify-diagnostics` found diagnostics other than those expected."""

    def __init__(self, problems: list[str], output: str):
        super().__init__(f"{len(problems)} diagnostic(s) not as expected")
        self.problems = problems
        self.output = output
