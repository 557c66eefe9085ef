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
    """A malformed command line: unknown option value, missing argument."""


class SpecError(UsageError):
    """A mesh, type or sharding spec that does not follow the grammar, or does
    not fit the tensor it is applied to."""


class InputError(IrshardError):
    """A problem with the user's file: missing, unreadable, no such function."""


class OutputError(IrshardError):
    """The output cannot be written: a missing or read-only directory, a full
    disk, a closed standard output."""


class UserCodeError(IrshardError):
    """An exception raised by the user's own code while it was imported or
    traced. The message points at their file and line."""


class IRError(IrshardError):
    """Malformed or unsupported IR: MLIR that does not parse or verify, HLO
    text that XLA rejects, a module without an entry function."""


class PassError(IrshardError):
    """A pass pipeline that does not parse, names an unknown pass, or a pass
    that failed on its input."""


class CheckFailed(IrshardError):
    """A check ran and failed (e.g. `run --check` found a mismatch)."""

    exit_code = 1


class BackendError(IrshardError):
    """A failure inside JAX/XLA that irshard could not explain in the user's
    terms."""

    exit_code = 3
