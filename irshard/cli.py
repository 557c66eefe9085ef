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
from typing import Callable, Sequence

from irshard import __version__, commands, options
from irshard.core.errors import IrshardError, UsageError, error_line

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
# The commands, as data: each one's help, its options (in order) and the
# function of `commands` that runs it.


@dataclass(frozen=True)
class Command:
    name: str
    help: str
    options: tuple[tuple[options.Option, ...], ...]
    handler: str


COMMANDS = (
    Command("compile", "partition a function or module and report its "
            "collectives (or print a stage's IR)",
            (options.PROGRAM_OPTIONS, options.REPORT_OPTIONS), "cmd_compile"),
    Command("run", "compile as 'compile' does and execute the program on the "
            "mesh; --check compares with one device",
            (options.PROGRAM_OPTIONS, options.REPORT_OPTIONS,
             options.RUN_OPTIONS, options.PROCESS_OPTIONS), "cmd_run"),
    Command("show", "which device holds which slice of every input and "
            "output, from the shardings alone",
            (options.PROGRAM_OPTIONS, options.SHOW_OPTIONS), "cmd_show"),
    Command("devices", "the platform's devices, per process",
            (options.DEVICES_OPTIONS, options.PROCESS_OPTIONS), "cmd_devices"),
    Command("collectives", "the collective report of an HLO text file or of "
            "every module in an XLA dump directory",
            (options.COLLECTIVES_OPTIONS,), "cmd_collectives"),
    Command("suggest", "try changes that would remove the costliest "
            "collectives, recompile each, and list those that help",
            (options.PROGRAM_OPTIONS, options.SUGGEST_OPTIONS), "cmd_suggest"),
    Command("search", "find the sharding strategy for a program and a "
            "target: mesh shapes times rule sets (data, FSDP, tensor "
            "parallel and their mixes), each compiled for real and ranked by "
            "its simulated step", (options.SEARCH_OPTIONS,), "cmd_search"),
    Command("diff", "compare two reports by source line and kind: "
            "collectives added and removed, bytes, time, memory",
            (options.DIFF_OPTIONS,), "cmd_diff"),
    Command("calibrate", "time each collective kind on the devices present "
            "and fit the time model (latency + bytes / bandwidth), with its "
            "error on held-out sizes", (options.CALIBRATE_OPTIONS,),
            "cmd_calibrate"),
    Command("opt", "run a pass pipeline (irshard's passes and Shardy's) over "
            "a StableHLO + Shardy module; also installed as irshard-opt",
            (options.OPT_OPTIONS,), "cmd_opt"),
)


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
    for command in COMMANDS:
        p = sub.add_parser(command.name, help=command.help)
        options.add(p, *command.options)
        p.set_defaults(handler=getattr(commands, command.handler))
    return parser


def _parse(parser: argparse.ArgumentParser, argv: list[str]) -> argparse.Namespace:
    """The arguments; `opt` also takes mlir-opt's spellings: single-dash long
    options, and passes as flags (`-sdy-propagation-pipeline`)."""
    if argv[:1] != ["opt"]:
        return parser.parse_args(argv)
    from irshard.ir import pipeline
    probe = argparse.ArgumentParser(add_help=False)
    options.add(probe, options.OPT_OPTIONS)
    names = {s for a in probe._actions for s in a.option_strings}
    valued = {s for a in probe._actions if a.nargs is None for s in a.option_strings}
    args, flags = parser.parse_known_args(
        ["opt", *pipeline.long_options(argv[1:], names | {"--help"}, valued)])
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


def main(argv: Sequence[str] | None = None, program: bool | None = None) -> int:
    """The command line `argv` (the program's own by default). As the
    `program` (the default without `argv`), a signal after the command is
    done is ignored; called otherwise (a test, a tool), the caller's signal
    handlers are restored."""
    from irshard.core import interrupts
    saved = interrupts.install()
    try:
        return _main(argv)
    finally:
        if program or (program is None and argv is None):
            # Done, however it ended: a late signal no longer changes it.
            interrupts.settle()
        else:
            interrupts.restore(saved)


def _main(argv: Sequence[str] | None) -> int:
    from irshard.core import files, interrupts, phases
    phases.record_from_environment()
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
        print(error_line(e), file=files.error_stream())
        if getattr(e, "hard_exit", False):
            # Native threads are still running and would end the process
            # their own way (a fatal error of XLA's): leave now.
            files.error_stream().flush()
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
                         f"IRSHARD_TRACEBACK=1 for the traceback)"),
              file=files.error_stream())
        return 3
    finally:
        if claimed:
            files.release_stdout()


if __name__ == "__main__":
    sys.exit(main())
