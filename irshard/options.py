"""The command line's options, as data: each a name and what argparse
takes for it, grouped as the commands share them (`COMMANDS` in `cli` says
which command takes which), with the types that parse their values
(`optiontypes`).
Declaring them here once keeps every command's help the same wherever an
option appears, and lets the documentation be generated from them."""

from __future__ import annotations

import argparse

from irshard import REPORT_STAGES, STAGES
from irshard.core.frames import GROUPINGS, SOURCE_GROUPINGS
from irshard.optiontypes import Option, byte_size, byte_sizes, count, jobs, seconds

PLATFORMS = ("cpu", "gpu", "tpu")


def _format(formats: tuple[str, ...] = ("text", "json"), help: str | None = None) -> Option:
    """`--format`, one of `formats`, text by default: every command's."""
    return Option.of("--format", choices=formats, default="text",
                     **({"help": help} if help else {}))


def _output(help: str | None = None) -> Option:
    """`-o PATH`: every command that writes a report or a module."""
    return Option.of("-o", "--output", metavar="PATH",
                     **({"help": help} if help else {}))


# ---------------------------------------------------------------------------
# The groups


# What names a program and how it is traced, sharded and compiled: compile,
# run, show and suggest take all of them, search those of a program it
# shards itself (`SEARCH_PROGRAM`).
PROGRAM_OPTIONS = (
    Option.of("file", metavar="FILE",
               help="a .py file (a function is traced) or a .mlir module"),
    Option.of("--fn", metavar="NAME",
               help="the function to compile (default: the file's only "
                    "public function)"),
    Option.of("--mesh", metavar="SPEC",
               help="the device mesh, major to minor: x=4 or dp=2,tp=4"),
    Option.of("--axis-types", metavar="TYPES",
               help="how the function is traced over the mesh axes: "
                    "'auto' (default: the compiler propagates shardings) "
                    "or 'explicit' (shardings in the types, as "
                    "jax.make_mesh's default; reshard, auto_axes and "
                    "sharded types work), for every axis or per axis: "
                    "'explicit,auto' or 'dp=explicit'"),
    Option.of("--args", metavar="NAME", dest="args_fn",
               help="a function in FILE that returns the positional "
                    "arguments (pytrees of arrays or ShapeDtypeStructs, "
                    "e.g. from jax.eval_shape); their shardings are used"),
    Option.of("--keras-fit", action="store_true",
               help="--fn names a compiled Keras model: compile the train "
                    "step its fit() runs on the batch --args returns "
                    "((x, y)); inputs are named by Keras' variable paths"),
    Option.of("--factory", metavar="NAME",
              help="a function in FILE that takes the --knob values as keywords "
                   "and returns the program: (jitted_step, args), or "
                   "(jitted_step, args, context) with the function that "
                   "returns the context it lowers in; a knob combination it "
                   "rejects (it raises) is invalid"),
    Option.of("--knob", action="append", default=[], metavar="K=V",
              help="a keyword for --factory: a Python literal where V reads as "
                   "one (64, 1e-3, True), else the text (full) (repeatable)"),
    Option.of("--context", metavar="NAME", dest="context_fn",
               help="a function in FILE that returns a context manager "
                    "entered around tracing and lowering (e.g. "
                    "jax.set_mesh(mesh) with logical axis rules, as "
                    "MaxText's step needs)"),
    Option.of("--arg", action="append", default=[], metavar="NAME=TYPE",
               help="an argument's type, e.g. d=f32[1024] or d=f32[1024@x] "
                    "(default: the argument's string annotation)"),
    Option.of("--shard", action="append", default=[], metavar="PATTERN=SPEC",
               help="the sharding of the inputs whose path PATTERN matches "
                    "(a path, or a glob: '*' within a segment, '**' any "
                    "segments; the first rule that matches applies), one "
                    "entry per dimension: '_', 'x', 'x+y', with '?' to "
                    "leave it open, e.g. d=x,_ or 'params/**/w=_,tp'"),
    Option.of("--override-shard", action="append", default=[],
               metavar="PATTERN=SPEC",
               help="a --shard rule that applies before all --shard rules; "
                    "the last one given first (so it can be appended to a "
                    "command, as 'irshard suggest' proposes)"),
    Option.of("--out-shard", action="append", default=[],
               metavar="INDEX=SPEC", help="constrain output INDEX, e.g. 0=_,y"),
    Option.of("--constrain", action="append", default=[],
               metavar="MATCH=SPEC",
               help="constrain the results of the ops MATCH picks: OP "
                    "(dot_general), FILE:LINE, or OP@FILE:LINE, with #N "
                    "for the N-th, e.g. 'dot_general@model.py:12=_,tp' "
                    "(repeatable)"),
    Option.of("--grad", nargs="?", const=True, metavar="NAMES",
               help="compile the reverse-mode gradient of the (scalar) "
                    "function: with respect to the named arguments "
                    "(comma-separated), or all floating-point inputs"),
    Option.of("--static", metavar="NAMES",
               help="arguments that are static (bound to their value, "
                    "not traced), comma-separated names or numbers, as "
                    "jit's static_argnames and static_argnums (a jitted "
                    "function's own count too)"),
    Option.of("--donate", action="append", default=[], metavar="ARG",
               help="donate an argument (its number or name, as jit's "
                    "donate_argnums and donate_argnames) or the leaves a "
                    "path pattern picks ('state/opt/**'): XLA may reuse "
                    "their buffers for outputs (repeatable; a jitted "
                    "function's own donate_argnums count too)"),
    Option.of("--platform", choices=PLATFORMS, default="cpu",
               help="where the mesh lives: simulated CPU devices "
                    "(default) or a real accelerator"),
    Option.of("--target", metavar="TARGET",
               help="what to compile for: cpu (default), a TPU slice "
                    "tpu-v4|v5e|v5p|v6e:TOPOLOGY[,slices=N] (compiled by "
                    "libtpu, no TPU needed) or a GPU cluster "
                    "gpu-h100|h200|b200:NODESxGPUS (estimated without "
                    "GPUs); sets the hardware profile of the times"),
    Option.of("--profile", metavar="PATH",
               help="a hardware profile saved by 'irshard calibrate -o "
                    "PATH', replacing the target's link numbers"),
)
SEARCH_PROGRAM = ("file", "--fn", "--args", "--factory", "--context", "--arg",
                  "--grad", "--static", "--donate", "--target", "--profile")

# How compile and run report.
REPORT_OPTIONS = (
    Option.of("--budget", action="append", default=[], metavar="EXPR",
               help="fail (exit 1) when the report exceeds EXPR: "
                    "QUANTITY[@AXES] OP NUMBER[UNIT], e.g. "
                    "'all-gather@fsdp<=2', 'bytes<=64MiB' or "
                    "'peak@activation<=4GiB' (repeatable)"),
    Option.of("--emit", action="append", default=[], metavar="STAGE",
               help="print a stage's IR instead of the report: "
                    + ", ".join(STAGES) + " (repeatable)"),
    Option.of("--stage", default="optimized", metavar="STAGE",
               help="the HLO the report reads: optimized (default, what "
                    "runs) or partitioned (the partitioner's output)"),
    Option.of("--explain", action="store_true",
               help="say why each collective exists: the sharding of the "
                    "value it reads and where it was made, the sharding "
                    "its reader gets, where propagation got each mesh "
                    "axis from, and the decision that caused it"),
    Option.of("--verify", action="store_true",
               help="with --explain: confirm each collective's cause by "
                    "recompiling without it (a constraint dropped, an "
                    "input's sharding left open, an output's left to "
                    "XLA), one compile per decision; implies --explain"),
    Option.of("--jobs", type=jobs, default="auto", metavar="N",
               help="with --verify: run N of its recompiles at once, on "
                    "threads of this process, or auto (default: one per "
                    "core, at most 4)"),
    _format(("text", "json", "html", "trace"),
            "report format (default: text); html: one "
            "self-contained page (implies --explain); trace: the "
            "step simulated in the executable's schedule, as a "
            "Chrome/Perfetto trace (ui.perfetto.dev)"),
    Option.of("--full", action="store_true",
               help="on a terminal, list every row of long tables and "
                    "(run) every layout; by default they are folded "
                    "to the 20 heaviest rows (files and pipes get "
                    "everything)"),
    Option.of("--group-by", choices=GROUPINGS, metavar="KEY",
               help="sum the collectives by KEY under their table: line "
                    "(the innermost line of the model's code), scope "
                    "(JAX's name stack: the model's module names) or "
                    "caller (the line that called a helper many rows "
                    "share) or cause (the decision --explain names; "
                    "implies it); a folded table is summed by line "
                    "unless given"),
    _output("write the output to PATH instead of stdout"),
    Option.of("--debug-info", action="store_true",
               help="print MLIR stages with their source locations"),
)

# What run adds: the values, the check, the timing.
RUN_OPTIONS = (
    Option.of("--check", action="store_true",
               help="also run the function unsharded on one device and "
                    "compare every output (exit 1 on a mismatch)"),
    Option.of("--rtol", type=float, metavar="R",
               help="relative tolerance of --check (default by dtype: "
                    "f32 1e-5, f64 1e-10, f16 1e-3, bf16 1e-2)"),
    Option.of("--atol", type=float, metavar="A",
               help="absolute tolerance of --check (default by dtype: "
                    "f32 1e-6, f64 1e-12, f16 1e-3, bf16 1e-2)"),
    Option.of("--seed", type=int, default=0, metavar="N",
               help="seed of the random inputs (default 0); element "
                    "[i, j, ...] has the same value on any mesh"),
    Option.of("--random", action="store_true",
               help="draw every input from --seed, also those the --args "
                    "function gives concrete values (by default those "
                    "values are used, and only abstract leaves are drawn)"),
    Option.of("--input", action="append", default=[],
               metavar="NAME=PATH.npy",
               help="read argument NAME from a .npy file (memory-mapped; "
                    "each device reads its own slice)"),
    Option.of("--range", action="append", default=[], metavar="NAME=LO,HI",
               help="draw argument NAME's random values from [LO, HI) "
                    "(default: floats [-1, 1), integers [0, 16))"),
    Option.of("--reference", metavar="NAME",
               help="with --check: compare with function NAME of the same "
                    "file, run on one device (it takes the same inputs)"),
    Option.of("--repeat", type=int, metavar="N",
               help="time N runs after a warm-up; report the median and "
                    "minimum"),
    Option.of("--save", metavar="PATH.npz",
               help="save the outputs to a .npz file"),
    Option.of("--trace", metavar="PATH",
               help="write JAX's profile of 3 runs as a Chrome/Perfetto "
                    "trace, to set beside the simulated step "
                    "(--format trace)"),
)

# Where the processes of a multi-process run come from.
PROCESS_OPTIONS = (
    Option.of("--launcher", choices=("local", "ray"), default=None,
               help="with --processes: start them here (local, the "
                    "default) or as Ray tasks (ray: on the cluster at "
                    "--ray-address, or a local Ray instance)"),
    Option.of("--ray-address", metavar="ADDR",
               help="with --launcher ray: the Ray cluster to run on "
                    "(as ray.init takes it, e.g. 10.0.0.1:6379 or auto); "
                    "without it a local instance is started and stopped"),
    Option.of("--processes", type=int, metavar="N",
               help="run as N local processes forming one mesh "
                    "(jax.distributed on 127.0.0.1, gloo collectives), "
                    "each with devices/N devices"),
    Option.of("--coordinator", metavar="HOST:PORT",
               help="join a multi-process run coordinated at HOST:PORT "
                    "(with --process-id and --num-processes); under "
                    "Slurm or MPI these are read from the environment"),
    Option.of("--process-id", type=int, metavar="I"),
    Option.of("--num-processes", type=int, metavar="N"),
    Option.of("--timeout", type=seconds, metavar="S",
               help="with --processes: stop every process if the run "
                    "takes longer than S seconds (default 300)"),
    Option.of("--join-timeout", type=seconds, metavar="S",
               help="how long each process of a multi-process run waits "
                    "for the others to join (default: --timeout, else "
                    "300 s; a loaded machine may take minutes to start "
                    "them all)"),
)

# `opt` (and `irshard-opt`), as mlir-opt takes them.
OPT_OPTIONS = (
    Option.of("file", metavar="FILE.mlir", nargs="?",
               help="a StableHLO + Shardy module, as text or bytecode "
                    "('-' reads stdin)"),
    Option.of("-p", "--pipeline", "--pass-pipeline", metavar="PIPELINE",
               help="passes in MLIR's textual syntax, irshard's and "
                    "registered ones mixed, e.g. "
                    "'irshard-annotate{mesh=\"x=4\" args=\"0=x\"},"
                    "sdy-propagation-pipeline,irshard-print-shardings'; "
                    "or each pass as a flag, as mlir-opt takes them: "
                    "--sdy-propagation-pipeline --canonicalize"),
    _output("write the module to PATH instead of stdout"),
    Option.of("--list-passes", action="store_true",
               help="list irshard's passes and their options, then the "
                    "passes MLIR has registered"),
    Option.of("--split-input-file", action="store_true",
               help="treat each '// -----' chunk as its own module"),
    Option.of("--verify-diagnostics", action="store_true",
               help="check the diagnostics against the input's "
                    "expected-error/-warning/-remark/-note comments, as "
                    "mlir-opt does; exit 1 on any mismatch"),
    Option.of("--allow-unregistered-dialect", action="store_true",
               help="accept operations of dialects MLIR does not know"),
    Option.of("--print-ir-after-all", "--mlir-print-ir-after-all",
               action="store_true",
               help="print the module to stderr after every pass"),
    Option.of("--debug-info", "--mlir-print-debuginfo", action="store_true",
               help="print locations"),
)

DEVICES_OPTIONS = (
    Option.of("--platform", choices=PLATFORMS, default="cpu"),
    Option.of("--mesh", metavar="SPEC",
              help="simulate as many CPU devices as this mesh needs "
                   "(default: one per process)"),
    _format(),
)

COLLECTIVES_OPTIONS = (
    Option.of("path", metavar="PATH",
              help="an HLO text (.txt/.hlo) or HloModuleProto (.pb) file, "
                   "or a directory from XLA_FLAGS=--xla_dump_to=PATH"),
    Option.of("--mesh", metavar="SPEC",
              help="name the mesh axes (default: the mesh the module "
                   "records, if any)"),
    Option.of("--stage", default="optimized", metavar="STAGE",
              help="in a dump directory, read each module's optimized "
                   "(default) or partitioned HLO"),
    _format(("text", "json", "html"),
            "report format (default: text); html shows one "
            "module: a file's, or a dump's only sharded one"),
    Option.of("--group-by", choices=SOURCE_GROUPINGS, metavar="KEY",
              help="sum each module's collectives by KEY under their "
                   "table: line, scope or caller (as compile's)"),
    _output(),
)

SUGGEST_OPTIONS = (
    Option.of("--top", type=count, default=3, metavar="N",
              help="look at the N costliest collectives (default 3), and "
                   "every finding"),
    Option.of("--max-candidates", type=count, default=16, metavar="N",
              help="compile at most N changes (default 16)"),
    Option.of("--jobs", type=jobs, default="auto", metavar="N",
              help="compile N changes at once in separate processes, or "
                   "auto (default: when compiling takes longer than "
                   "tracing again, on as many cores as there are)"),
    _format(),
    _output(),
)

# The program options search takes, with what they mean for a search.
_SEARCH_HELP = {
    "file": "a .py file",
    "--fn": "the step function (default: the file's only public function)",
    "--args": "a function in FILE that returns the positional arguments "
              "(e.g. from jax.eval_shape)",
    "--arg": "an argument's type, e.g. d=f32[1024]",
    "--grad": "search for the reverse-mode gradient of the function",
    "--target": "search for a target: a TPU slice (tpu-v5e:4x4, "
                "tpu-v5p:2x2x4), a GPU cluster (gpu-h100:1x8, estimated) "
                "or cpu with --devices",
    "--factory": "a function in FILE that takes the --knob values as keywords "
                 "and returns the program: (jitted_step, args), or "
                 "(jitted_step, args, context) with the function that returns "
                 "the context it lowers in; a combination it rejects (it "
                 "raises) is listed as invalid"}

SEARCH_OPTIONS = tuple(
    o.helped(_SEARCH_HELP[o.names[0]]) if o.names[0] in _SEARCH_HELP else o
    for name in SEARCH_PROGRAM for o in PROGRAM_OPTIONS if o.names[0] == name) + (
    Option.of("--knob", action="append", default=[], metavar="K=V1,V2,...",
              help="search --factory's keyword K over these values (Python "
                   "literals where they read as one, else text), in every "
                   "combination with the other knobs (repeatable)"),
    Option.of("--per", metavar="KNOB",
              help="rank by the step per unit of this knob's value (a batch "
                   "knob: the step per example), where candidates do "
                   "different work"),
    Option.of("--mesh", metavar="SPEC",
              help="fix the mesh (e.g. data=2,fsdp=4: no mesh or rule "
                   "strategies, only knobs), or 'own': each candidate's mesh "
                   "and shardings are those the program gives its arguments"),
    Option.of("--devices", type=count, metavar="N",
              help="search for N simulated CPU devices"),
    Option.of("--axes", metavar="NAMES",
              help="the mesh axes to factor the devices over, major to "
                   "minor (default data,fsdp,tensor; also sequence, "
                   "expert)"),
    Option.of("--budget-time", default="10m", metavar="DURATION",
              help="stop compiling after DURATION: 600, 90s, 10m, 1h "
                   "(default 10m); candidates left are listed"),
    Option.of("--jobs", type=jobs, default="auto", metavar="N",
              help="compile N candidates at once in separate processes, or "
                   "as Ray tasks with --ray (default auto: one on two cores or "
                   "fewer, half the cores otherwise; with --ray, as many as "
                   "the cluster has CPUs)"),
    Option.of("--ray", metavar="ADDRESS",
              help="compile the candidates on a Ray cluster's workers: its "
                   "address (as ray.init takes it), or 'local' to start one "
                   "on 127.0.0.1 and stop it afterwards (pip install "
                   "'irshard[ray]')"),
    Option.of("--max-candidates", type=count, metavar="N",
              help="compile at most N candidates (the rest are listed as not "
                   "reached)"),
    Option.of("--memory-limit", type=byte_size, metavar="SIZE",
              help="the memory a candidate must fit per device, e.g. 16GiB "
                   "(default: the target's capacity; none on a CPU mesh)"),
    Option.of("--cache-dir", metavar="DIR",
              help="where compiled candidates are cached (default "
                   "$XDG_CACHE_HOME/irshard/search)"),
    Option.of("--no-cache", action="store_true",
              help="compile every candidate, reading and writing no cache"),
    _format(("text", "json", "html")),
    _output(),
)

DIFF_OPTIONS = (
    Option.of("a", metavar="A",
              help="the baseline: a JSON report (irshard compile --format "
                   "json -o A.json), an HLO file or an XLA dump directory"),
    Option.of("b", metavar="B", help="the report compared with A, the same way"),
    Option.of("--fail-on-regression", action="store_true",
              help="exit 1 when B moves more bytes per run or takes "
                   "longer than A"),
    Option.of("--module", metavar="NAME",
              help="in a dump with several modules, the one whose name "
                   "contains NAME"),
    Option.of("--stage", default="optimized", choices=REPORT_STAGES,
              help="in a dump directory, read the optimized (default) or "
                   "partitioned HLO"),
    _format(("text", "json", "html")),
    _output(),
)

CALIBRATE_OPTIONS = (
    Option.of("--mesh", required=True, metavar="SPEC",
              help="the mesh whose axes the collectives run over"),
    Option.of("--sizes", type=byte_sizes, metavar="LIST",
              help="result sizes per device, e.g. 4KiB,64KiB,1MiB "
                   "(default 4KiB to 4MiB, each twice the last)"),
    Option.of("--repeats", type=int, default=5, metavar="N",
              help="timed runs per measurement (default 5)"),
    Option.of("--platform", choices=PLATFORMS, default="cpu",
              help="the devices measured: simulated CPU devices "
                   "(default) or the GPUs present; a mesh of one "
                   "device measures its compute alone"),
    _format(),
    _output("save the fitted profile for --profile PATH"),
)

SHOW_OPTIONS = (_format(), _output())


def add(parser: argparse.ArgumentParser, *groups: tuple[Option, ...]) -> None:
    """Adds every option of `groups` to `parser`, in order."""
    for group in groups:
        for option in group:
            parser.add_argument(*option.names, **option.kwargs)
