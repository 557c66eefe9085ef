"""The exception hierarchy.

Every failure irshard can explain is an `IrshardError`. The command line turns
one into a single `irshard: error: ...` line and the exit code the class names
(a multi-line message, such as JAX's with its hints, follows that line with
its further lines indented);
library users catch the class they care about. Messages say what was wrong and
what would have been accepted, in the user's terms (their argument names, their
file and line), never in terms of irshard's internals.
"""

from __future__ import annotations


class IrshardError(Exception):
    """Base class. `exit_code` is what the command line exits with."""

    exit_code = 2


class UsageError(IrshardError):
    """Anything the user gave that irshard cannot use: a malformed command
    line or spec, a file, their code, IR, an output path (exit code 2). The
    Python API raises it (or a subclass) where the command line prints its
    error line."""


class SpecError(UsageError):
    """A mesh, type or sharding spec that does not follow the grammar, or does
    not fit the tensor it is applied to."""


class InputError(UsageError):
    """A problem with the user's file: missing, unreadable, no such function."""


class OutputError(UsageError):
    """The output cannot be written: a missing or read-only directory, a full
    disk, a closed standard output."""


class UserCodeError(UsageError):
    """An exception raised by the user's own code while it was imported or
    traced. The message points at their file and line."""


class RejectedKnobs(UserCodeError):
    """A factory raised on one combination of its knobs: the knobs' fault,
    which `search` lists as an invalid candidate; `reason` is what it
    said, in one line."""

    def __init__(self, message: str, reason: str):
        super().__init__(message)
        self.reason = reason


class IRError(UsageError):
    """Malformed or unsupported IR: MLIR that does not parse or verify, HLO
    text that XLA rejects, a module without an entry function."""


class PassError(UsageError):
    """A pass pipeline that does not parse, names an unknown pass, or a pass
    that failed on its input."""


class CheckFailed(IrshardError):
    """A check ran and failed (e.g. `run --check` found a mismatch)."""

    exit_code = 1


class BudgetExceeded(CheckFailed):
    """The report exceeds a collective budget (`--budget`,
    `report.check_budget`); `breaches` lists each one."""

    def __init__(self, message: str, breaches=()):
        super().__init__(message)
        self.breaches = tuple(breaches)


class Regression(CheckFailed):
    """`irshard diff --fail-on-regression`: B is worse than A."""


class BackendError(IrshardError):
    """A failure inside JAX/XLA that irshard could not explain in the user's
    terms."""

    exit_code = 3


# What every error line starts with, on stderr.
ERROR_PREFIX = "irshard: error: "


def error_line(message: str | BaseException) -> str:
    """`irshard: error: FIRST LINE`, then any further lines of a multi-line
    message (JAX's hints, the user's exception) indented by two spaces: the
    one form every error of irshard takes on stderr."""
    lines = [_shown(line) for line in str(message).splitlines()] \
        or [type(message).__name__]
    rest = ["  " + line if line.strip() else "" for line in lines[1:]]
    while rest and not rest[-1]:
        rest.pop()
    return "\n".join([ERROR_PREFIX + lines[0]] + rest)


def _shown(line: str) -> str:
    """`line` with its control characters escaped (`\\x1b`): a name from a
    program (a pytree key, an exception's text) sends no escape sequence to
    the terminal. Tabs stay, as do the bytes of a path that is not UTF-8
    (lone surrogates, which stderr writes back as bytes escaped)."""
    return "".join(
        c if c.isprintable() or c == "\t" or "\udc80" <= c <= "\udcff"
        else c.encode("unicode_escape").decode("ascii") for c in line)
