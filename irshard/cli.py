"""The `irshard` command line: its options, the dispatch to `commands`, and
the one error line.

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
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from irshard import REPORT_STAGES, STAGES, __version__, commands
from irshard.core.errors import IrshardError, UsageError, error_line
from irshard.core.frames import GROUPINGS

PLATFORMS = ("cpu", "gpu", "tpu")


class _Parser(argparse.ArgumentParser):
    """Usage errors raise instead of printing usage and exiting. Options
    are spelled out in full: an abbreviation would change meaning as
    options are added, and a launcher passes the command line on to its
    processes, minus its own options."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str):
        raise UsageError(f"{message} (see 'irshard {self.prog.split()[-1]} --help')"
                         if " " in self.prog else message)


# ---------------------------------------------------------------------------
# Options shared by the commands


@dataclass(frozen=True)
class _Option:
    """One option as data: its names and what argparse takes for it."""

    names: tuple[str, ...]
    kwargs: dict[str, Any]

    @classmethod
    def of(cls, *names: str, **kwargs: Any) -> "_Option":
        return cls(names, kwargs)


# What names a program and how it is traced, sharded and compiled: compile,
# run, show and suggest take all of them, search those of a program it
# shards itself (`_SEARCH_PROGRAM`).
PROGRAM_OPTIONS = (
    _Option.of("file", metavar="FILE",
               help="a .py file (a function is traced) or a .mlir module"),
    _Option.of("--fn", metavar="NAME",
               help="the function to compile (default: the file's only "
                    "public function)"),
    _Option.of("--mesh", metavar="SPEC",
               help="the device mesh, major to minor: x=4 or dp=2,tp=4"),
    _Option.of("--axis-types", metavar="TYPES",
               help="how the function is traced over the mesh axes: "
                    "'auto' (default: the compiler propagates shardings) "
                    "or 'explicit' (shardings in the types, as "
                    "jax.make_mesh's default; reshard, auto_axes and "
                    "sharded types work), for every axis or per axis: "
                    "'explicit,auto' or 'dp=explicit'"),
    _Option.of("--args", metavar="NAME", dest="args_fn",
               help="a function in FILE that returns the positional "
                    "arguments (pytrees of arrays or ShapeDtypeStructs, "
                    "e.g. from jax.eval_shape); their shardings are used"),
    _Option.of("--keras-fit", action="store_true",
               help="--fn names a compiled Keras model: compile the train "
                    "step its fit() runs on the batch --args returns "
                    "((x, y)); inputs are named by Keras' variable paths"),
    _Option.of("--context", metavar="NAME", dest="context_fn",
               help="a function in FILE that returns a context manager "
                    "entered around tracing and lowering (e.g. "
                    "jax.set_mesh(mesh) with logical axis rules, as "
                    "MaxText's step needs)"),
    _Option.of("--arg", action="append", default=[], metavar="NAME=TYPE",
               help="an argument's type, e.g. d=f32[1024] or d=f32[1024@x] "
                    "(default: the argument's string annotation)"),
    _Option.of("--shard", action="append", default=[], metavar="PATTERN=SPEC",
               help="the sharding of the inputs whose path PATTERN matches "
                    "(a path, or a glob: '*' within a segment, '**' any "
                    "segments; the first rule that matches applies), one "
                    "entry per dimension: '_', 'x', 'x+y', with '?' to "
                    "leave it open, e.g. d=x,_ or 'params/**/w=_,tp'"),
    _Option.of("--override-shard", action="append", default=[],
               metavar="PATTERN=SPEC",
               help="a --shard rule that applies before all --shard rules; "
                    "the last one given first (so it can be appended to a "
                    "command, as 'irshard suggest' proposes)"),
    _Option.of("--out-shard", action="append", default=[],
               metavar="INDEX=SPEC", help="constrain output INDEX, e.g. 0=_,y"),
    _Option.of("--constrain", action="append", default=[],
               metavar="MATCH=SPEC",
               help="constrain the results of the ops MATCH picks: OP "
                    "(dot_general), FILE:LINE, or OP@FILE:LINE, with #N "
                    "for the N-th, e.g. 'dot_general@model.py:12=_,tp' "
                    "(repeatable)"),
    _Option.of("--grad", nargs="?", const=True, metavar="NAMES",
               help="compile the reverse-mode gradient of the (scalar) "
                    "function: with respect to the named arguments "
                    "(comma-separated), or all floating-point inputs"),
    _Option.of("--static", metavar="NAMES",
               help="arguments that are static (bound to their value, "
                    "not traced), comma-separated names or numbers, as "
                    "jit's static_argnames and static_argnums (a jitted "
                    "function's own count too)"),
    _Option.of("--donate", action="append", default=[], metavar="ARG",
               help="donate an argument (its number or name, as jit's "
                    "donate_argnums and donate_argnames) or the leaves a "
                    "path pattern picks ('state/opt/**'): XLA may reuse "
                    "their buffers for outputs (repeatable; a jitted "
                    "function's own donate_argnums count too)"),
    _Option.of("--platform", choices=PLATFORMS, default="cpu",
               help="where the mesh lives: simulated CPU devices "
                    "(default) or a real accelerator"),
    _Option.of("--target", metavar="TARGET",
               help="what to compile for: cpu (default), a TPU slice "
                    "tpu-v4|v5e|v5p|v6e:TOPOLOGY[,slices=N] (compiled by "
                    "libtpu, no TPU needed) or a GPU cluster "
                    "gpu-h100|h200|b200:NODESxGPUS (estimated without "
                    "GPUs); sets the hardware profile of the times"),
    _Option.of("--profile", metavar="PATH",
               help="a hardware profile saved by 'irshard calibrate -o "
                    "PATH', replacing the target's link numbers"),
)
_SEARCH_PROGRAM = ("file", "--fn", "--args", "--arg", "--grad", "--static",
                   "--donate", "--target", "--profile")


def _add_options(p: argparse.ArgumentParser, options: Sequence[_Option],
                 only: Sequence[str] | None = None,
                 helps: dict[str, str] | None = None) -> None:
    """Adds `options` to `p` (those named in `only`, in their order), with
    the help of any named in `helps` said for `p`'s command."""
    helps = helps or {}
    for option in options:
        name = option.names[0]
        if only is None or name in only:
            kwargs = dict(option.kwargs)
            if name in helps:
                kwargs["help"] = helps[name]
            p.add_argument(*option.names, **kwargs)


def _add_program_options(p: argparse.ArgumentParser) -> None:
    _add_options(p, PROGRAM_OPTIONS)


def _add_report_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--budget", action="append", default=[], metavar="EXPR",
                   help="fail (exit 1) when the report exceeds EXPR: "
                        "QUANTITY[@AXES] OP NUMBER[UNIT], e.g. "
                        "'all-gather@fsdp<=2', 'bytes<=64MiB' or "
                        "'peak@activation<=4GiB' (repeatable)")
    p.add_argument("--emit", action="append", default=[], metavar="STAGE",
                   help="print a stage's IR instead of the report: "
                        + ", ".join(STAGES) + " (repeatable)")
    p.add_argument("--stage", default="optimized", metavar="STAGE",
                   help="the HLO the report reads: optimized (default, what "
                        "runs) or partitioned (the partitioner's output)")
    p.add_argument("--explain", action="store_true",
                   help="say why each collective exists: the sharding of the "
                        "value it reads and where it was made, the sharding "
                        "its reader needs, and where propagation got each "
                        "mesh axis from")
    _format_option(p, ("text", "json", "html", "trace"),
                   "report format (default: text); html: one "
                   "self-contained page (implies --explain); trace: the "
                   "step simulated in the executable's schedule, as a "
                   "Chrome/Perfetto trace (ui.perfetto.dev)")
    p.add_argument("--full", action="store_true",
                   help="on a terminal, list every row of long tables and "
                        "(run) every layout; by default they are folded "
                        "to the 20 heaviest rows (files and pipes get "
                        "everything)")
    p.add_argument("--group-by", choices=GROUPINGS, metavar="KEY",
                   help="sum the collectives by KEY under their table: line "
                        "(the innermost line of the model's code), scope "
                        "(JAX's name stack: the model's module names) or "
                        "caller (the line that called a helper many rows "
                        "share); a folded table is summed by line unless "
                        "given")
    _output_option(p, "write the output to PATH instead of stdout")
    p.add_argument("--debug-info", action="store_true",
                   help="print MLIR stages with their source locations")


def _add_run_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--check", action="store_true",
                   help="also run the function unsharded on one device and "
                        "compare every output (exit 1 on a mismatch)")
    p.add_argument("--rtol", type=float, metavar="R",
                   help="relative tolerance of --check (default by dtype: "
                        "f32 1e-5, f64 1e-10, f16 1e-3, bf16 1e-2)")
    p.add_argument("--atol", type=float, metavar="A",
                   help="absolute tolerance of --check (default by dtype: "
                        "f32 1e-6, f64 1e-12, f16 1e-3, bf16 1e-2)")
    p.add_argument("--seed", type=int, default=0, metavar="N",
                   help="seed of the random inputs (default 0); element "
                        "[i, j, ...] has the same value on any mesh")
    p.add_argument("--random", action="store_true",
                   help="draw every input from --seed, also those the --args "
                        "function gives concrete values (by default those "
                        "values are used, and only abstract leaves are drawn)")
    p.add_argument("--input", action="append", default=[],
                   metavar="NAME=PATH.npy",
                   help="read argument NAME from a .npy file (memory-mapped; "
                        "each device reads its own slice)")
    p.add_argument("--range", action="append", default=[], metavar="NAME=LO,HI",
                   help="draw argument NAME's random values from [LO, HI) "
                        "(default: floats [-1, 1), integers [0, 16))")
    p.add_argument("--reference", metavar="NAME",
                   help="with --check: compare with function NAME of the same "
                        "file, run on one device (it takes the same inputs)")
    p.add_argument("--repeat", type=int, metavar="N",
                   help="time N runs after a warm-up; report the median and "
                        "minimum")
    p.add_argument("--save", metavar="PATH.npz",
                   help="save the outputs to a .npz file")
    p.add_argument("--trace", metavar="PATH",
                   help="write JAX's profile of 3 runs as a Chrome/Perfetto "
                        "trace, to set beside the simulated step "
                        "(--format trace)")


def _add_process_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--launcher", choices=("local", "ray"), default=None,
                   help="with --processes: start them here (local, the "
                        "default) or as Ray tasks (ray: on the cluster at "
                        "--ray-address, or a local Ray instance)")
    p.add_argument("--ray-address", metavar="ADDR",
                   help="with --launcher ray: the Ray cluster to run on "
                        "(as ray.init takes it, e.g. 10.0.0.1:6379 or auto); "
                        "without it a local instance is started and stopped")
    p.add_argument("--processes", type=int, metavar="N",
                   help="run as N local processes forming one mesh "
                        "(jax.distributed on 127.0.0.1, gloo collectives), "
                        "each with devices/N devices")
    p.add_argument("--coordinator", metavar="HOST:PORT",
                   help="join a multi-process run coordinated at HOST:PORT "
                        "(with --process-id and --num-processes); under "
                        "Slurm or MPI these are read from the environment")
    p.add_argument("--process-id", type=int, metavar="I")
    p.add_argument("--num-processes", type=int, metavar="N")
    p.add_argument("--timeout", type=_seconds, metavar="S",
                   help="with --processes: stop every process if the run "
                        "takes longer than S seconds (default 300)")
    p.add_argument("--join-timeout", type=_seconds, metavar="S",
                   help="how long each process of a multi-process run waits "
                        "for the others to join (default: --timeout, else "
                        "300 s; a loaded machine may take minutes to start "
                        "them all)")


def _seconds(text: str) -> float:
    """A positive, finite number of seconds (argparse type)."""
    import math
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(
            f"'{text}' is not a positive number of seconds")
    return value


def _byte_sizes(text: str) -> list[int]:
    """`4KiB,64KiB,1MiB` -> bytes (argparse type)."""
    from irshard.reporting.budget import UNITS
    import re
    sizes = []
    for item in text.split(","):
        m = re.fullmatch(r"\s*([0-9]{1,12})\s*(B|KiB|MiB|GiB)?\s*", item)
        if not m or int(m.group(1)) == 0:
            raise argparse.ArgumentTypeError(
                f"'{item}' is not a size; give sizes such as 4KiB,64KiB,1MiB")
        sizes.append(int(m.group(1)) * int(UNITS[m.group(2) or "B"]))
    return sizes


def add_opt_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", metavar="FILE.mlir", nargs="?",
                   help="a StableHLO + Shardy module, as text or bytecode "
                        "('-' reads stdin)")
    p.add_argument("-p", "--pipeline", "--pass-pipeline", metavar="PIPELINE",
                   help="passes in MLIR's textual syntax, irshard's and "
                        "registered ones mixed, e.g. "
                        "'irshard-annotate{mesh=\"x=4\" args=\"0=x\"},"
                        "sdy-propagation-pipeline,irshard-print-shardings'; "
                        "or each pass as a flag, as mlir-opt takes them: "
                        "--sdy-propagation-pipeline --canonicalize")
    _output_option(p, "write the module to PATH instead of stdout")
    p.add_argument("--list-passes", action="store_true",
                   help="list irshard's passes and their options, then the "
                        "passes MLIR has registered")
    p.add_argument("--split-input-file", action="store_true",
                   help="treat each '// -----' chunk as its own module")
    p.add_argument("--verify-diagnostics", action="store_true",
                   help="check the diagnostics against the input's "
                        "expected-error/-warning/-remark/-note comments, as "
                        "mlir-opt does; exit 1 on any mismatch")
    p.add_argument("--allow-unregistered-dialect", action="store_true",
                   help="accept operations of dialects MLIR does not know")
    p.add_argument("--print-ir-after-all", "--mlir-print-ir-after-all",
                   action="store_true",
                   help="print the module to stderr after every pass")
    p.add_argument("--debug-info", "--mlir-print-debuginfo", action="store_true",
                   help="print locations")


def _count(text: str) -> int:
    """A positive whole number (argparse type)."""
    if text.isdigit() and int(text) > 0:
        return int(text)
    raise argparse.ArgumentTypeError(f"'{text}' is not a positive whole number")


def _jobs(text: str) -> int | str:
    """`--jobs`: a positive count, or auto (argparse type)."""
    if text == "auto":
        return text
    if text.isdigit() and int(text) > 0:
        return int(text)
    raise argparse.ArgumentTypeError(f"'{text}' is not a positive number or auto")


def _format_option(p, formats: tuple[str, ...], help: str | None = None) -> None:
    """`--format`, one of `formats`, text by default: every command's."""
    p.add_argument("--format", choices=formats, default="text",
                   **({"help": help} if help else {}))


def _output_option(p, help: str | None = None) -> None:
    """`-o PATH`: every command that writes a report or a module."""
    p.add_argument("-o", "--output", metavar="PATH",
                   **({"help": help} if help else {}))


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
    p.set_defaults(handler=commands.cmd_compile)

    p = sub.add_parser("run", help="compile as 'compile' does and execute the "
                       "program on the mesh; --check compares with one device")
    _add_program_options(p)
    _add_report_options(p)
    _add_run_options(p)
    _add_process_options(p)
    p.set_defaults(handler=commands.cmd_run)

    p = sub.add_parser("show", help="which device holds which slice of every "
                       "input and output, from the shardings alone")
    _add_program_options(p)
    _format_option(p, ("text", "json"))
    _output_option(p)
    p.set_defaults(handler=commands.cmd_show)

    p = sub.add_parser("devices", help="the platform's devices, per process")
    p.add_argument("--platform", choices=PLATFORMS, default="cpu")
    p.add_argument("--mesh", metavar="SPEC",
                   help="simulate as many CPU devices as this mesh needs "
                        "(default: one per process)")
    _format_option(p, ("text", "json"))
    _add_process_options(p)
    p.set_defaults(handler=commands.cmd_devices)

    p = sub.add_parser("collectives", help="the collective report of an HLO "
                       "text file or of every module in an XLA dump directory")
    p.add_argument("path", metavar="PATH",
                   help="an HLO text (.txt/.hlo) or HloModuleProto (.pb) file, "
                        "or a directory from XLA_FLAGS=--xla_dump_to=PATH")
    p.add_argument("--mesh", metavar="SPEC",
                   help="name the mesh axes (default: the mesh the module "
                        "records, if any)")
    p.add_argument("--stage", default="optimized", metavar="STAGE",
                   help="in a dump directory, read each module's optimized "
                        "(default) or partitioned HLO")
    _format_option(p, ("text", "json", "html"),
                   "report format (default: text); html shows one "
                   "module: a file's, or a dump's only sharded one")
    p.add_argument("--group-by", choices=GROUPINGS, metavar="KEY",
                   help="sum each module's collectives by KEY under their "
                        "table: line, scope or caller (as compile's)")
    _output_option(p)
    p.set_defaults(handler=commands.cmd_collectives)

    p = sub.add_parser("suggest", help="try changes that would remove the "
                       "costliest collectives, recompile each, and list those "
                       "that help")
    _add_program_options(p)
    p.add_argument("--top", type=_count, default=3, metavar="N",
                   help="look at the N costliest collectives (default 3), and "
                        "every finding")
    p.add_argument("--max-candidates", type=_count, default=16, metavar="N",
                   help="compile at most N changes (default 16)")
    p.add_argument("--jobs", type=_jobs, default="auto", metavar="N",
                   help="compile N changes at once in separate processes, or "
                        "auto (default: when compiling takes longer than "
                        "tracing again, on as many cores as there are)")
    _format_option(p, ("text", "json"))
    _output_option(p)
    p.set_defaults(handler=commands.cmd_suggest)

    p = sub.add_parser("search", help="find the sharding strategy for a "
                       "program and a target: mesh shapes times rule sets "
                       "(data, FSDP, tensor parallel and their mixes), each "
                       "compiled for real and ranked by its simulated step")
    _add_options(p, PROGRAM_OPTIONS, _SEARCH_PROGRAM, {
        "file": "a .py file",
        "--fn": "the step function (default: the file's only public function)",
        "--args": "a function in FILE that returns the positional arguments "
                  "(e.g. from jax.eval_shape)",
        "--arg": "an argument's type, e.g. d=f32[1024]",
        "--grad": "search for the reverse-mode gradient of the function",
        "--target": "search for a target: a TPU slice (tpu-v5e:4x4, "
                    "tpu-v5p:2x2x4), a GPU cluster (gpu-h100:1x8, estimated) "
                    "or cpu with --devices"})
    p.add_argument("--devices", type=_count, metavar="N",
                   help="search for N simulated CPU devices")
    p.add_argument("--axes", metavar="NAMES",
                   help="the mesh axes to factor the devices over, major to "
                        "minor (default data,fsdp,tensor; also sequence, "
                        "expert)")
    p.add_argument("--budget-time", default="10m", metavar="DURATION",
                   help="stop compiling after DURATION: 600, 90s, 10m, 1h "
                        "(default 10m); candidates left are listed")
    p.add_argument("--jobs", type=_jobs, default="auto", metavar="N",
                   help="compile N candidates at once in separate processes "
                        "(default auto: one on two cores or fewer, half the "
                        "cores otherwise)")
    p.add_argument("--cache-dir", metavar="DIR",
                   help="where compiled candidates are cached (default "
                        "$XDG_CACHE_HOME/irshard/search)")
    p.add_argument("--no-cache", action="store_true",
                   help="compile every candidate, reading and writing no cache")
    _format_option(p, ("text", "json", "html"))
    _output_option(p)
    p.set_defaults(handler=commands.cmd_search)

    p = sub.add_parser("diff", help="compare two reports by source line and "
                       "kind: collectives added and removed, bytes, time, memory")
    p.add_argument("a", metavar="A",
                   help="the baseline: a JSON report (irshard compile --format "
                        "json -o A.json), an HLO file or an XLA dump directory")
    p.add_argument("b", metavar="B", help="the report compared with A, the same way")
    p.add_argument("--fail-on-regression", action="store_true",
                   help="exit 1 when B moves more bytes per run or takes "
                        "longer than A")
    p.add_argument("--module", metavar="NAME",
                   help="in a dump with several modules, the one whose name "
                        "contains NAME")
    p.add_argument("--stage", default="optimized", choices=REPORT_STAGES,
                   help="in a dump directory, read the optimized (default) or "
                        "partitioned HLO")
    _format_option(p, ("text", "json", "html"))
    _output_option(p)
    p.set_defaults(handler=commands.cmd_diff)

    p = sub.add_parser("calibrate", help="time each collective kind on the "
                       "devices present and fit the time model (latency + "
                       "bytes / bandwidth), with its error on held-out sizes")
    p.add_argument("--mesh", required=True, metavar="SPEC",
                   help="the mesh whose axes the collectives run over")
    p.add_argument("--sizes", type=_byte_sizes, metavar="LIST",
                   help="result sizes per device, e.g. 4KiB,64KiB,1MiB "
                        "(default 4KiB to 4MiB, each twice the last)")
    p.add_argument("--repeats", type=int, default=5, metavar="N",
                   help="timed runs per measurement (default 5)")
    p.add_argument("--platform", choices=PLATFORMS, default="cpu",
                   help="the devices measured: simulated CPU devices "
                        "(default) or the GPUs present; a mesh of one "
                        "device measures its compute alone")
    _format_option(p, ("text", "json"))
    _output_option(p, "save the fitted profile for --profile PATH")
    p.set_defaults(handler=commands.cmd_calibrate)

    p = sub.add_parser("opt", help="run a pass pipeline (irshard's passes and "
                       "Shardy's) over a StableHLO + Shardy module; also "
                       "installed as irshard-opt")
    add_opt_arguments(p)
    p.set_defaults(handler=commands.cmd_opt)
    return parser


def _parse(parser: argparse.ArgumentParser, argv: list[str]) -> argparse.Namespace:
    """The arguments; `opt` also takes mlir-opt's spellings: single-dash long
    options, and passes as flags (`-sdy-propagation-pipeline`)."""
    if argv[:1] != ["opt"]:
        return parser.parse_args(argv)
    from irshard.ir import pipeline
    probe = argparse.ArgumentParser(add_help=False)
    add_opt_arguments(probe)
    options = {s for a in probe._actions for s in a.option_strings}
    valued = {s for a in probe._actions if a.nargs is None for s in a.option_strings}
    args, flags = parser.parse_known_args(
        ["opt", *pipeline.long_options(argv[1:], options | {"--help"}, valued)])
    if flags:
        if args.pipeline is not None:
            raise UsageError(f"give passes either as -p PIPELINE or as flags "
                             f"({flags[0]}), not both")
        args.pipeline = pipeline.from_flags(flags)
    return args


def _check_one_line(args, argv: Sequence[str]) -> None:
    """Every argument is one line of printable text, so every message that
    quotes one stays one line. A pipeline may span lines: its whitespace is
    read as spaces."""
    import re
    pipeline = getattr(args, "pipeline", None)
    if pipeline is not None:
        args.pipeline = re.sub(r"\s", " ", pipeline)
    for arg in argv:
        # A path that is not UTF-8 (legal on Linux) arrives with its bytes
        # as lone surrogates (PEP 383): those are one line too.
        if arg is not pipeline and not all(
                c.isprintable() or "\udc80" <= c <= "\udcff" for c in arg):
            raise UsageError(f"argument {arg!r} contains a control character "
                             f"(a newline, tab, ...); give it on one line")


def main(argv: Sequence[str] | None = None) -> int:
    """The command line `argv` (the program's own by default). As the
    program, a signal after the command is done is ignored; called with
    `argv` (a test, a tool), the caller's signal handlers are restored."""
    from irshard.core import files, interrupts
    saved = interrupts.install()
    try:
        return _main(argv)
    finally:
        if argv is None:
            # Done, however it ended: a late signal no longer changes it.
            interrupts.settle()
        else:
            interrupts.restore(saved)


def _main(argv: Sequence[str] | None) -> int:
    from irshard.core import files, interrupts
    claimed = False
    try:
        # Paths are the user's, from here: the program may change directory.
        files.anchor()
        parser = build_parser()
        argv = list(sys.argv[1:] if argv is None else argv)
        args = _parse(parser, argv)
        args.argv = argv
        _check_one_line(args, argv)
        handler: Callable | None = getattr(args, "handler", None)
        if handler is None:
            commands_ = next(a for a in parser._actions
                             if isinstance(a, argparse._SubParsersAction)).choices
            raise UsageError(f"give a command: {', '.join(commands_)} "
                             f"(see 'irshard --help')")
        files.claim_stdout()
        claimed = True
        with files.held_outputs():
            return handler(args)
    except IrshardError as e:
        print(error_line(e), file=sys.stderr)
        if getattr(e, "hard_exit", False):
            # Native threads are still running and would end the process
            # their own way (a fatal error of XLA's): leave now.
            sys.stderr.flush()
            files.release_stdout()
            os._exit(e.exit_code)
        return e.exit_code
    except BrokenPipeError:
        files.STDOUT.discard()
        return 0
    except KeyboardInterrupt:
        interrupts.exit_now()
        return 130
    except Exception as e:
        if os.environ.get("IRSHARD_TRACEBACK"):
            raise
        print(error_line(f"internal error: {type(e).__name__}: "
                         f"{str(e).splitlines()[0] if str(e) else ''} (set "
                         f"IRSHARD_TRACEBACK=1 for the traceback)"), file=sys.stderr)
        return 3
    finally:
        if claimed:
            files.release_stdout()


if __name__ == "__main__":
    sys.exit(main())
