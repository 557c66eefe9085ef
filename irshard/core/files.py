"""Reading the user's files and writing output: whole, or not at all.

Output goes to what the user named (DESIGN.md): a regular file is replaced
atomically by a complete new one with the old one's mode (a new file gets the
usual mode, 0666 less the umask); a symlink is followed; a character device,
FIFO or socket is written through, never replaced. Every failure to write is
an `OutputError` (exit 2) naming the path and the reason.

The command line holds its output files until the command ends
(`held_outputs`): each is written whole beside its place, then all are
renamed into place together, with signals held, so an interrupted command
leaves none of them. It also anchors the paths the user gave to the
directory it started in (`anchor`): the user's code may change directory
(a module-level `os.chdir`, a `--context`), and an output still lands
where the user asked.

Standard output is claimed once per command (`claim_stdout`): the report goes
to the real stdout, and whatever else writes there while the user's code runs
(its `print`s, a `jax.debug.print`, native libraries) goes to stderr, so a JSON
report stays parseable.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import sys
from typing import IO, Callable, Iterable, Iterator

from irshard.core import interrupts
from irshard.core.errors import InputError, OutputError
from irshard.core.stdstreams import TEXT as _TEXT, Stdout, describe as _describe

# The directory relative paths the user gave are taken from (`anchor`),
# and the outputs written but not yet renamed into place (`held_outputs`):
# (the complete temporary file, its place).
_STATE: dict = {"anchor": None, "held": None}


def anchor(directory: str | None = None) -> None:
    """Relative paths given to this module are taken from `directory` (the
    current one by default) from now on, wherever the process moves."""
    _STATE["anchor"] = os.path.abspath(directory or os.getcwd())


def here(path: str) -> str:
    """`path` as the user meant it: relative to the anchored directory."""
    if _STATE["anchor"] is None or os.path.isabs(path):
        return path
    return os.path.join(_STATE["anchor"], path)


@contextlib.contextmanager
def held_outputs() -> Iterator[None]:
    """Output files written in the block are renamed into place when it
    ends (not when each is written), together and with signals held; an
    interruption (which ends the process) leaves none of them."""
    _STATE["held"] = []
    try:
        yield
    except KeyboardInterrupt:
        _discard(_STATE["held"])
        raise
    finally:
        held, _STATE["held"] = _STATE["held"], None
        with interrupts.committing():
            _commit(held)


def _commit(held: list[tuple[str, str, str, str]]) -> None:
    """Renames each held `(file, place, option, path)` into place."""
    for at, (tmp, real, option, path) in enumerate(held):
        try:
            os.replace(tmp, real)
        except OSError as e:
            _discard(held[at:])
            raise OutputError(f"{option} {path}: cannot write: "
                              f"{_describe(e)}") from None
        interrupts.forget_file(tmp)


def _discard(held: list[tuple[str, str, str, str]]) -> None:
    for tmp, *_ in held:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        interrupts.forget_file(tmp)


# Text out is UTF-8; a path that is not (its bytes held as lone surrogates)
# is written back as its own bytes.
def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def check_writable(path: str | None, option: str = "-o") -> None:
    """Fails before any work if `path` cannot be written."""
    if path is None:
        return
    if not path:
        raise OutputError(f"{option} '': give a file path")
    shown, path = path, here(path)
    if os.path.islink(path):
        try:
            os.path.realpath(path, strict=True)
        except OSError as e:
            if e.errno == errno.ELOOP:
                raise OutputError(f"{option} {shown}: a loop of symbolic links; "
                                  f"give a file path") from None
    real = os.path.realpath(path)
    if os.path.isdir(real):
        raise OutputError(f"{option} {shown}: is a directory; give a file path")
    if os.path.exists(real) and not stat.S_ISREG(os.stat(real).st_mode):
        if not os.access(real, os.W_OK):
            raise OutputError(f"{option} {shown}: not writable")
        return
    directory = os.path.dirname(real)
    # The directory the file would be made in: where a link points.
    where = directory if os.path.islink(path) else os.path.dirname(shown) or "."
    if not os.path.isdir(directory):
        raise OutputError(f"{option} {shown}: directory '{where}' does not exist")
    if not os.access(directory, os.W_OK):
        raise OutputError(f"{option} {shown}: cannot create files in "
                          f"'{where}' (not writable)")


@contextlib.contextmanager
def _through(real: str, binary: bool) -> Iterator[IO]:
    """Writes into an existing node (a device, a FIFO, a file with other
    names) without replacing it."""
    fd = os.open(real, os.O_WRONLY | os.O_TRUNC | getattr(os, "O_CLOEXEC", 0))
    with os.fdopen(fd, "wb" if binary else "w",
                   **({} if binary else _TEXT)) as f:
        yield f


def new_beside(directory: str, prefix: str = ".irshard-") -> tuple[int, str]:
    """A new file in `directory` (open for writing, 0600) and its path,
    removed on interruption until `interrupts.forget_file`. The name is
    registered before the file exists: an interruption at any moment
    leaves no file behind (with `mkstemp` one could come between the file's
    creation and its registration)."""
    import secrets
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0) \
        | getattr(os, "O_NOFOLLOW", 0)
    for _ in range(100):
        path = os.path.join(directory, prefix + secrets.token_hex(6))
        try:
            return interrupts.temp_file(
                path, lambda: os.open(path, flags, 0o600)), path
        except FileExistsError:
            continue
    raise FileExistsError(errno.EEXIST, "no unused temporary name", directory)


@contextlib.contextmanager
def _replacing(real: str, binary: bool, option: str, path: str) -> Iterator[IO]:
    """Writes a new file beside `real` and renames it over `real` once
    complete (or, in `held_outputs`, when the block ends); on an error the
    new file is removed and `real` is untouched."""
    directory = os.path.dirname(real)
    existing = os.stat(real) if os.path.exists(real) else None
    fd, tmp = new_beside(directory)
    try:
        with os.fdopen(fd, "wb" if binary else "w",
                       **({} if binary else _TEXT)) as f:
            yield f
            f.flush()
            if existing is not None:
                os.fchmod(f.fileno(), stat.S_IMODE(existing.st_mode))
                with contextlib.suppress(OSError):
                    os.fchown(f.fileno(), existing.st_uid, existing.st_gid)
            else:
                os.fchmod(f.fileno(), 0o666 & ~_umask())
    except BaseException:
        _discard([(tmp, real, option, path)])
        raise
    held = _STATE["held"]
    if held is None:
        with interrupts.committing(settle=False):
            _commit([(tmp, real, option, path)])
        return
    # Written twice in one command: the last one counts.
    _discard([h for h in held if h[1] == real])
    held[:] = [h for h in held if h[1] != real] + [(tmp, real, option, path)]


@contextlib.contextmanager
def output(path: str, binary: bool = False, option: str = "-o") -> Iterator[IO]:
    """A file to write the output to; see the module docstring."""
    check_writable(path, option)
    real = os.path.realpath(here(path))
    try:
        found = os.stat(real) if os.path.exists(real) else None
        # A device or FIFO, or a file with other names (kept), is written
        # through; anything else is replaced.
        through = found is not None and (not stat.S_ISREG(found.st_mode)
                                         or found.st_nlink > 1)
        with (_through(real, binary) if through
              else _replacing(real, binary, option, path)) as f:
            yield f
    except OSError as e:
        raise OutputError(f"{option} {path}: cannot write: {_describe(e)}") from None


def write(path: str, data: str | bytes | Iterable[str], option: str = "-o") -> None:
    """Writes `data` (or its pieces, in order) to `path` whole (see
    `output`)."""
    with output(path, isinstance(data, bytes), option) as f:
        if isinstance(data, (str, bytes)):
            f.write(data)
        else:
            for piece in data:
                f.write(piece)


# ---------------------------------------------------------------------------
# Standard output


STDOUT = Stdout()


def claim_stdout() -> None:
    """From now on, `print` and native writes to fd 1 go to stderr; reports
    written with `emit` go to the real stdout."""
    STDOUT.claim()


def release_stdout() -> None:
    STDOUT.release()


def error_stream() -> IO:
    """Where irshard's error line goes: stderr as it was before the
    program ran (a program may replace `sys.stderr`)."""
    return STDOUT.stderr or sys.stderr


def emit(path: str | None, data: str | bytes | Iterable[str],
         option: str = "-o") -> None:
    """The command's output (whole, or pieces made as they are written):
    to stdout, or whole to `path`."""
    if path is None:
        if isinstance(data, (str, bytes)):
            STDOUT.write(data if isinstance(data, str) else data.decode())
        else:
            for piece in _batched(data):
                STDOUT.write(piece)
    else:
        write(path, data, option)


def _batched(pieces: Iterable[str], size: int = 1 << 20) -> Iterator[str]:
    """Small pieces joined into writes of about `size` characters."""
    batch: list[str] = []
    length = 0
    for piece in pieces:
        batch.append(piece)
        length += len(piece)
        if length >= size:
            yield "".join(batch)
            batch, length = [], 0
    if batch:
        yield "".join(batch)


# ---------------------------------------------------------------------------
# Reading


def unusable_directory(directory: str) -> str | None:
    """Why `directory` cannot hold files this process writes (it is made
    if missing), or None."""
    if not directory:
        return "is empty"
    try:
        os.makedirs(directory, exist_ok=True)
    except FileExistsError:
        return "is not a directory"
    except OSError as e:
        return f"cannot be made: {e.strerror or e}"
    if not os.path.isdir(directory):
        return "is not a directory"
    if not os.access(directory, os.W_OK | os.X_OK):
        return "is not writable"
    return None


class Unreadable(Exception):
    """Why a file that is there is not read (`read_regular`)."""


def read_regular(path: str, limit: int,
                 check: Callable[[os.stat_result], str | None] | None = None
                 ) -> bytes | None:
    """The bytes of `path`, where it is a regular file of at most `limit`
    bytes, opened without following a link or waiting for a FIFO's writer
    (a file others may have replaced with anything); None where nothing is
    there; `Unreadable` saying why otherwise. `check` may refuse the file
    by its status (its owner, its mode)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK
                     | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        return None
    except OSError as e:
        raise Unreadable(f"it cannot be opened as a file ({_describe(e)})") from None
    try:
        found = os.fstat(fd)
        why = "it is not a regular file" if not stat.S_ISREG(found.st_mode) \
            else check(found) if check is not None else None
        if why is None and found.st_size > limit:
            why = f"it is larger than {limit} bytes"
        if why is not None:
            raise Unreadable(why)
        with os.fdopen(os.dup(fd), "rb") as f:
            data = f.read(limit + 1)
    except OSError as e:
        raise Unreadable(f"it cannot be read ({_describe(e)})") from None
    finally:
        os.close(fd)
    if len(data) > limit:
        raise Unreadable(f"it is larger than {limit} bytes")
    return data


def cache_dir(*parts: str) -> str:
    """irshard's folder in the user's cache (`$XDG_CACHE_HOME/irshard`, else
    `~/.cache/irshard`), joined with `parts`."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(
        os.path.expanduser("~"), ".cache")
    return os.path.join(base, "irshard", *parts)


def check_regular(path: str, what: str) -> None:
    """A path the user gave as a file must be a readable regular file (a FIFO
    would block the read forever; a directory is a mistake)."""
    shown, path = path, here(path)
    if not os.path.exists(path):
        raise InputError(f"{what} '{shown}' does not exist")
    mode = os.stat(path).st_mode
    if stat.S_ISDIR(mode):
        raise InputError(f"{what} '{shown}' is a directory; give a file")
    if not stat.S_ISREG(mode):
        raise InputError(f"{what} '{shown}' is not a regular file (a FIFO or "
                         f"device); give a file")


def shown_path(path: str) -> str:
    """`path` as text every writer can print: a name that is not UTF-8
    (its bytes held as lone surrogates, PEP 383) shows those bytes as
    `\\xNN`, as Python prints them."""
    try:
        path.encode("utf-8")
        return path
    except UnicodeEncodeError:
        return os.fsencode(path).decode("utf-8", "backslashreplace")


def real_path(shown: str) -> str:
    """The path `shown_path` showed as `shown` (`\\xNN` of a byte that is
    not UTF-8 back to that byte)."""
    if "\\x" not in shown:
        return shown
    import re
    return re.sub(r"\\x([89a-f][0-9a-f])", lambda m: chr(0xdc00 + int(m.group(1), 16)),
                  shown)
