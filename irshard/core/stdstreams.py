"""Standard output and error while a command runs (`files.claim_stdout`):
the report goes to the real stdout, and whatever else writes there while
the user's code runs goes to stderr, through a stand-in the program may
close. Pure Python; imports only `irshard.core.errors`."""

from __future__ import annotations

import contextlib
import io
import os
import sys
from typing import IO

from irshard.core.errors import OutputError

# How irshard reads and writes text: undecodable bytes kept as they are.
TEXT = {"encoding": "utf-8", "errors": "surrogateescape"}


def describe(error: OSError) -> str:
    return error.strerror or str(error)


class ToStderr:
    """`sys.stdout` while reports are kept apart: what the program prints
    goes to `sys.stderr` (whichever it is at the time), and a program that
    closes its stdout closes nothing of irshard's (it would have closed
    stderr, and irshard's error line with it)."""

    def write(self, text):
        return sys.stderr.write(text)

    def writelines(self, lines):
        return sys.stderr.writelines(lines)

    def flush(self):
        with contextlib.suppress(Exception):
            sys.stderr.flush()

    def close(self):
        self.flush()

    @property
    def closed(self) -> bool:
        return False

    def __getattr__(self, name):
        return getattr(sys.stderr, name)


class Stdout:
    """Where reports go while other writes to stdout are sent to stderr."""

    def __init__(self) -> None:
        self.stream: IO | None = sys.stdout
        self._saved_fd: int | None = None
        self._saved_sys: IO | None = None
        # stderr as it was before the program ran (which may replace it).
        self.stderr: IO | None = None

    def claim(self) -> None:
        if self._saved_sys is not None:
            return
        self._saved_sys = sys.stdout
        self.stderr = sys.stderr
        real = sys.stdout
        try:
            fd = real.fileno() if real is not None else -1
        except (AttributeError, OSError, io.UnsupportedOperation):
            fd = -1
        if fd == 1:
            try:
                sys.stdout.flush()
                self._saved_fd = os.dup(1)
                os.dup2(2, 1)
                real = os.fdopen(self._saved_fd, "w", closefd=False, **TEXT)
            except OSError:
                self._saved_fd = None
        self.stream = real
        sys.stdout = ToStderr()

    def release(self) -> None:
        if self._saved_sys is None:
            return
        with contextlib.suppress(Exception):
            sys.stderr.flush()
        if self._saved_fd is not None:
            with contextlib.suppress(Exception):
                self.stream.flush()
            # Closed here (not its descriptor): a write that failed leaves
            # data in its buffer, which Python 3.13 would try to flush again
            # when the object is collected, after the descriptor is gone.
            with contextlib.suppress(Exception):
                self.stream.close()
            with contextlib.suppress(OSError):
                os.dup2(self._saved_fd, 1)
                os.close(self._saved_fd)
            self._saved_fd = None
        sys.stdout = self._saved_sys
        self.stream = self._saved_sys
        self._saved_sys = None
        if self.stderr is not None:
            sys.stderr = self.stderr
            self.stderr = None

    def isatty(self) -> bool:
        try:
            return self.stream is not None and self.stream.isatty()
        except (AttributeError, ValueError, OSError):
            return False

    def discard(self) -> None:
        """After a broken pipe: what is left to flush goes nowhere."""
        null = os.open(os.devnull, os.O_WRONLY)
        with contextlib.suppress(OSError, AttributeError, ValueError):
            os.dup2(null, self._saved_fd if self._saved_fd is not None
                    else self.stream.fileno())
        os.close(null)

    def write(self, data: str) -> None:
        if self.stream is None:
            raise OutputError("cannot write the output: standard output is "
                              "closed; give -o PATH")
        try:
            self.stream.write(data)
            self.stream.flush()
        except BrokenPipeError:
            raise
        except (OSError, ValueError) as e:
            reason = describe(e) if isinstance(e, OSError) else "it is closed"
            raise OutputError(f"cannot write the output to standard output: "
                              f"{reason}; give -o PATH") from None
