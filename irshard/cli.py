"""The `irshard` command line: a thin shim over the library.

Parsing and checking the command line imports nothing heavy; JAX is imported
only once a command needs it, after the device count for the mesh is set.
Every `IrshardError` becomes one `irshard: error: ...` line on stderr and the
error's exit code; nothing is written to an output file unless the command
succeeded.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from typing import Callable, Sequence

from irshard import __version__
from irshard.errors import IrshardError, UsageError
from irshard.specs import MeshSpec, parse_mesh

STAGES = ("stablehlo", "propagated", "partitioned", "optimized")
REPORT_STAGES = ("partitioned", "optimized")
PLATFORMS = ("cpu", "gpu", "tpu")


class _Parser(argparse.ArgumentParser):
    """Usage errors raise instead of printing usage and exiting."""

    def error(self, message: str):
        raise UsageError(f"{message} (see 'irshard {self.prog.split()[-1]} --help')"
                         if " " in self.prog else message)


# ---------------------------------------------------------------------------
# Options shared by the commands


def _add_program_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", metavar="FILE",
                   help="a .py file (a function is traced) or a .mlir module")
    p.add_argument("--fn", metavar="NAME",
                   help="the function to compile (default: the file's only "
                        "public function)")
    p.add_argument("--mesh", metavar="SPEC",
                   help="the device mesh, major to minor: x=4 or dp=2,tp=4")
    p.add_argument("--arg", action="append", default=[], metavar="NAME=TYPE",
                   help="an argument's type, e.g. d=f32[1024] or d=f32[1024@x] "
                        "(default: the argument's string annotation)")
    p.add_argument("--shard", action="append", default=[], metavar="NAME=SPEC",
                   help="an argument's sharding, one entry per dimension: "
                        "'_', 'x', 'x+y', with '?' to leave it open, e.g. d=x,_")
    p.add_argument("--out-shard", action="append", default=[],
                   metavar="INDEX=SPEC", help="constrain output INDEX, e.g. 0=_,y")
    p.add_argument("--grad", action="store_true",
                   help="compile the reverse-mode gradient of the (scalar) "
                        "function with respect to all floating-point inputs")
    p.add_argument("--platform", choices=PLATFORMS, default="cpu",
                   help="where the mesh lives: simulated CPU devices "
                        "(default) or a real accelerator")


def _add_report_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--emit", action="append", default=[], metavar="STAGE",
                   help="print a stage's IR instead of the report: "
                        + ", ".join(STAGES) + " (repeatable)")
    p.add_argument("--stage", default="optimized", metavar="STAGE",
                   help="the HLO the report reads: optimized (default, what "
                        "runs) or partitioned (the partitioner's output)")
    p.add_argument("--format", choices=("text", "json"), default="text",
                   help="report format (default: text)")
    p.add_argument("-o", "--output", metavar="PATH",
                   help="write the output to PATH instead of stdout")
    p.add_argument("--debug-info", action="store_true",
                   help="print MLIR stages with their source locations")


def _stages(args) -> list[str]:
    for stage in args.emit:
        if stage not in STAGES:
            raise UsageError(f"unknown stage '{stage}'; stages are "
                             f"{', '.join(STAGES)}")
    if args.stage not in REPORT_STAGES:
        what = ("unknown stage" if args.stage not in STAGES
                else "the report reads HLO, not stage")
        raise UsageError(f"{what} '{args.stage}'; --stage is one of "
                         f"{', '.join(REPORT_STAGES)}")
    return [s for s in STAGES if s in args.emit]


def _mesh(args) -> MeshSpec:
    if args.mesh is None:
        raise UsageError("--mesh is required, e.g. --mesh x=4 or --mesh dp=2,tp=4")
    return parse_mesh(args.mesh)


def check_output_path(path: str | None) -> None:
    """Fails before any work if `path` cannot be written."""
    if path is None:
        return
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise UsageError(f"-o {path}: directory '{os.path.dirname(path) or '.'}' "
                         f"does not exist")
    if os.path.isdir(path):
        raise UsageError(f"-o {path}: is a directory; give a file path")


def write_output(path: str | None, text: str) -> None:
    """Writes to stdout, or atomically to `path` (never a half-written file)."""
    if path is None:
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".irshard-")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _load(args, mesh: MeshSpec):
    """The traced program (stage `stablehlo`) of the command's FILE."""
    from irshard import backend
    backend.configure(mesh.num_devices, args.platform)
    from irshard import program, stages
    prog = program.load_program(
        args.file, mesh=mesh, fn_name=args.fn, args=args.arg,
        shards=args.shard, out_shards=args.out_shard, grad=args.grad)
    return stages.trace(prog, args.platform)


def _emit_texts(lowered, emits: list[str], stage: str, debug_info: bool):
    """The requested stages' IR, in pipeline order, and the compiled program
    (None when only MLIR stages were asked for)."""
    texts = []
    if "stablehlo" in emits:
        texts.append(("stablehlo", lowered.as_text(debug_info)))
    if "propagated" in emits:
        texts.append(("propagated", lowered.propagate().as_text(debug_info)))
    compiled = None
    if any(s in emits for s in ("partitioned", "optimized")) or not emits:
        compiled = lowered.compile(
            partitioned="partitioned" in emits or stage == "partitioned")
    if "partitioned" in emits:
        texts.append(("partitioned", compiled.partitioned().as_text()))
    if "optimized" in emits:
        texts.append(("optimized", compiled.as_text()))
    return texts, compiled


def join_stage_texts(texts: list[tuple[str, str]]) -> str:
    if len(texts) == 1:
        text = texts[0][1]
        return text if text.endswith("\n") else text + "\n"
    parts = []
    for name, text in texts:
        parts.append(f"// ----- irshard stage: {name}\n")
        parts.append(text if text.endswith("\n") else text + "\n")
    return "".join(parts)


def render_report(report, fmt: str) -> str:
    return report.render_json() if fmt == "json" else report.render_text()


# ---------------------------------------------------------------------------
# Commands


def cmd_compile(args) -> int:
    emits = _stages(args)
    mesh = _mesh(args)
    check_output_path(args.output)
    lowered = _load(args, mesh)
    texts, compiled = _emit_texts(lowered, emits, args.stage, args.debug_info)
    if emits:
        write_output(args.output, join_stage_texts(texts))
        return 0
    report = (compiled.partitioned() if args.stage == "partitioned"
              else compiled).report()
    write_output(args.output, render_report(report, args.format))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="irshard",
        description="See, test and run how a program gets sharded: trace a "
                    "function to StableHLO, attach a Shardy mesh and "
                    "shardings, partition it with XLA, and report every "
                    "collective with its bytes, mesh axes, loop counts and "
                    "the source line that caused it.")
    parser.add_argument("--version", action="version",
                        version=f"irshard {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND",
                                parser_class=_Parser)

    p = sub.add_parser("compile", help="partition a function or module and "
                       "report its collectives (or print a stage's IR)")
    _add_program_options(p)
    _add_report_options(p)
    p.set_defaults(handler=cmd_compile)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        handler: Callable | None = getattr(args, "handler", None)
        if handler is None:
            parser.print_help()
            return 2
        return handler(args)
    except IrshardError as e:
        print(f"irshard: error: {e}", file=sys.stderr)
        return e.exit_code
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except KeyboardInterrupt:
        print("irshard: interrupted", file=sys.stderr)
        return 130
    except Exception as e:
        if os.environ.get("IRSHARD_TRACEBACK"):
            raise
        print(f"irshard: error: internal error: {type(e).__name__}: "
              f"{str(e).splitlines()[0] if str(e) else ''} (set "
              f"IRSHARD_TRACEBACK=1 for the traceback)", file=sys.stderr)
        return 3


if __name__ == "__main__":
    sys.exit(main())
