"""The user's own code: which frames of a stack are theirs.

A frame is the user's unless its file belongs to Python's standard library,
JAX, jaxlib, NumPy or irshard — wherever those are installed here, and by the
shape of their paths for a module compiled on another machine — or is not a
file at all (`<string>`, `<frozen ...>`). The user's code may live anywhere:
a model in one directory called through a wrapper in another shows the
model's lines. Libraries the user builds on (Flax, optax) are theirs too, but
a frame outside any installed package comes first: a Flax model's own line,
not `nn.Dense`'s.

One notion serves every stack irshard reads: an HLO instruction's stack
frames, an MLIR location's call sites, and the traceback of an exception the
user's code raised.
"""

from __future__ import annotations

import functools
import os
import re
import sysconfig
import traceback
import types
from dataclasses import dataclass, field
from typing import Any, Iterable


@dataclass(frozen=True)
class Frame:
    file: str
    function: str
    line: int
    column: int = 0


@dataclass(frozen=True)
class SourceLocation:
    """Where in the user's code: the innermost frame, and the chain of user
    frames from it outwards (`stack`, innermost first)."""

    file: str
    line: int
    function: str | None
    stack: tuple["SourceLocation", ...] = field(default=(), compare=False)

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}"
        return f"{where} ({self.function})" if self.function else where

    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {"file": self.file, "line": self.line,
                             "function": self.function}
        if self.stack:
            d["stack"] = [{"file": s.file, "line": s.line,
                           "function": s.function} for s in self.stack]
        return d


@functools.lru_cache(maxsize=1)
def _library_dirs() -> tuple[str, ...]:
    paths = sysconfig.get_paths()
    # The standard library, and where console scripts (`irshard` itself)
    # are installed.
    dirs = {paths["stdlib"], paths["platstdlib"], paths["scripts"]}
    import irshard
    dirs.add(os.path.dirname(irshard.__file__))
    import importlib.util
    for name in ("irshard.passes", "irshard.tools", "jax", "jaxlib", "numpy",
                 "ml_dtypes"):
        # Found, not imported: reading a dump's stacks needs no JAX.
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            continue
        if spec is not None and spec.origin:
            dirs.add(os.path.dirname(spec.origin))
    return tuple(sorted(os.path.realpath(d) for d in dirs))


# Paths that are a library's wherever the module was compiled (an HLO dump
# may come from another machine): JAX's sources, an installed JAX, jaxlib,
# NumPy or irshard, and a Python's standard library.
_FOREIGN = (
    re.compile(r"(^|/)(jax/_src|jax/experimental|jaxlib)/"),
    re.compile(r"/(site|dist)-packages/(jax|jaxlib|numpy|ml_dtypes|irshard)/"),
    re.compile(r"(^|/)lib/python3\.\d+/(?!(site|dist)-packages/)"),
)


def is_installed(path: str) -> bool:
    parts = path.replace(os.sep, "/").split("/")
    return "site-packages" in parts or "dist-packages" in parts


@functools.lru_cache(maxsize=4096)
def is_library(path: str) -> bool:
    """Python's, JAX's, NumPy's or irshard's own code: never the user's."""
    if not path or path.startswith("<"):
        return True
    real = os.path.realpath(path)
    if any(real == d or real.startswith(d + os.sep) for d in _library_dirs()):
        return True
    shown = path.replace(os.sep, "/")
    return any(pattern.search(shown) for pattern in _FOREIGN)


class UserCode:
    """Picks the user's frames out of stacks; `user_dir` (where the program
    given on the command line lives) only shortens how paths are shown."""

    def __init__(self, user_dir: str | None = None):
        self.user_dir = os.path.realpath(user_dir) if user_dir else None
        # A module's stacks repeat (one per op of a line): each is resolved
        # once, and each path too.
        self._chosen: dict[tuple[Frame, ...], SourceLocation | None] = {}
        self._shown: dict[str, str] = {}
        self._by_identity: dict[int, tuple[tuple[Frame, ...], Any]] = {}

    def display(self, path: str) -> str:
        shown = self._shown.get(path)
        if shown is None:
            shown = self._shown[path] = self._display(path)
        return shown

    def _display(self, path: str) -> str:
        real = os.path.realpath(path)
        if self.user_dir and real.startswith(self.user_dir + os.sep) \
                and not is_installed(real):
            return os.path.relpath(real, self.user_dir)
        return display_path(path)

    def frames(self, frames: Iterable[Frame]) -> list[Frame]:
        """The user's frames, innermost first, in the order given."""
        return [f for f in frames if f.file and f.line > 0
                and not is_library(f.file)]

    def choose(self, frames: Iterable[Frame]) -> SourceLocation | None:
        """The innermost user frame (outside installed packages if there is
        one), with the chain of user frames from there outwards."""
        # The same stack often comes as the same tuple: found by identity
        # (the tuple is kept, so its identity is not reused), else by value.
        if type(frames) is tuple:
            known = self._by_identity.get(id(frames))
            if known is not None:
                return known[1]
        frames = tuple(frames)
        if frames not in self._chosen:
            self._chosen[frames] = self._choose(frames)
        chosen = self._chosen[frames]
        self._by_identity[id(frames)] = (frames, chosen)
        return chosen

    def _choose(self, frames: tuple[Frame, ...]) -> SourceLocation | None:
        mine = []
        for f in self.frames(frames):
            # A frame JAX records once per level of its own that it passes
            # through (a loop's body, a jit) repeats: keep one.
            if not mine or (mine[-1].file, mine[-1].line) != (f.file, f.line):
                mine.append(f)
        if not mine:
            return None
        start = next((i for i, f in enumerate(mine) if not is_installed(f.file)), 0)
        chain = tuple(self._location(f) for f in mine[start:])
        first = chain[0]
        return SourceLocation(first.file, first.line, first.function, chain)

    def _location(self, frame: Frame) -> SourceLocation:
        return SourceLocation(self.display(frame.file), frame.line,
                              frame.function or None)

    def raised_at(self, tb: types.TracebackType | None
                  ) -> traceback.FrameSummary | None:
        """The innermost frame of a traceback in the user's code."""
        found = None
        for summary in traceback.extract_tb(tb):
            if not is_library(summary.filename):
                if found is None or not is_installed(summary.filename) \
                        or is_installed(found.filename):
                    found = summary
        return found


def display_path(path: str) -> str:
    """`path` relative to the working directory when it lies below it."""
    absolute = os.path.abspath(path)
    relative = os.path.relpath(absolute)
    return absolute if relative.startswith("..") else relative
