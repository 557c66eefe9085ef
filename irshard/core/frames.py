"""The user's own code: which frames of a stack are theirs.

A frame is the user's unless it is not a file (`<string>`, `<frozen ...>`)
or its file belongs to

- Python's standard library, JAX, jaxlib, NumPy or irshard, or
- the frameworks' own plumbing: what a model is written with rather than
  the model (Flax, Keras, Equinox, optax, chex, orbax, einops, the type
  checkers, Penzai's core, layers and trainers),

wherever those are installed here, and by the shape of their paths for a
module compiled on another machine. Everything else is the user's, a model
library installed from a package registry (MaxText's layers, keras-hub's,
Penzai's models) as much as a file beside the program: its innermost frame
is the line shown, and the chain from it outwards is the `stack`.

A stack is read only below irshard: the frames that called irshard (a
script's `irshard.compile(...)` line) are never the model's. A frame that
only repeats (a scanned body's, once per level JAX passes through) is kept
once.

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


# What a report's collectives are summed by (`--group-by`): the model's
# line, its scope, or the caller of a helper many rows share.
GROUPINGS = ("line", "scope", "caller", "cause")
# The groupings a report read back from dumps (not explained) has.
SOURCE_GROUPINGS = GROUPINGS[:3]


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

    @classmethod
    def from_json(cls, d: dict[str, Any] | None) -> "SourceLocation | None":
        """A location read back from its JSON form (None for null, or one
        with no file)."""
        if not d or d.get("file") is None:
            return None
        return cls(d["file"], int(d.get("line") or 0), d.get("function"),
                   tuple(cls(s["file"], int(s.get("line") or 0), s.get("function"))
                         for s in d.get("stack") or () if s.get("file") is not None))


def chain_of(source: SourceLocation | None) -> tuple[SourceLocation, ...]:
    """A location's user frames, innermost first (none for None)."""
    if source is None:
        return ()
    return source.stack or (source,)


def frame_paths(chains: Iterable[tuple[SourceLocation, ...]]
                ) -> dict[tuple[str, int], set[tuple[tuple[str, int], ...]]]:
    """Each frame of `chains` (by file and line): the paths that reach it,
    the frames outside it as each chain has them."""
    paths: dict[tuple[str, int], set[tuple[tuple[str, int], ...]]] = {}
    for chain in chains:
        where = tuple((f.file, f.line) for f in chain)
        for i, frame in enumerate(where):
            paths.setdefault(frame, set()).add(where[i + 1:])
    return paths


def called_once(chain: tuple[SourceLocation, ...], paths, ways=len) -> int:
    """Where in `chain` the helpers end: the first frame, from the
    innermost outwards, that one path reaches (`ways(paths)` counts them;
    the outermost where every frame is reached several ways)."""
    at = 0
    while at + 1 < len(chain) and \
            ways(paths.get((chain[at].file, chain[at].line), ())) > 1:
        at += 1
    return at


# The frameworks' plumbing, by import name: where it is installed here is
# found (not imported) at first use. A name with a `/` is a part of a
# package (Penzai's models are model code, its core and trainers are not).
PLUMBING = ("flax", "keras", "equinox", "optax", "chex", "orbax", "einops",
            "jaxtyping", "beartype", "typeguard", "treescope", "penzai/core",
            "penzai/nn", "penzai/toolshed", "penzai/deprecated",
            "penzai/experimental", "penzai/pz")
_OWN = ("irshard", "irshard.passes", "irshard.tools")


def _found_dirs(names: Iterable[str]) -> set[str]:
    """Where the packages (`a/b`: a folder of package `a`) are installed."""
    import importlib.util
    dirs = set()
    for name in names:
        top, _, part = name.partition("/")
        # Found, not imported: reading a dump's stacks needs no JAX.
        try:
            spec = importlib.util.find_spec(top)
        except (ImportError, ValueError):
            continue
        if spec is not None and spec.origin:
            dirs.add(os.path.join(os.path.dirname(spec.origin), part)
                     if part else os.path.dirname(spec.origin))
    return dirs


def _real(dirs: Iterable[str]) -> tuple[str, ...]:
    return tuple(sorted({os.path.realpath(d) for d in dirs}))


@functools.lru_cache(maxsize=1)
def _own_dirs() -> tuple[str, ...]:
    """irshard's own code, where it is installed here: the package this
    module is part of (`irshard/core/..`), and the others of `_OWN`."""
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    return _real({package} | _found_dirs(_OWN[1:]))


@functools.lru_cache(maxsize=1)
def _stdlib_dirs() -> tuple[str, ...]:
    """The standard library, and where console scripts (`irshard` itself)
    are installed. In a virtual environment the standard library's
    `platstdlib` is the environment's `lib/pythonX.Y`, which holds its
    `site-packages`: what is installed there is not the standard library."""
    paths = sysconfig.get_paths()
    return _real({paths["stdlib"], paths["platstdlib"], paths["scripts"]})


@functools.lru_cache(maxsize=1)
def _library_dirs() -> tuple[str, ...]:
    """JAX's, NumPy's, the frameworks' plumbing and irshard's."""
    dirs = _found_dirs(("jax", "jaxlib", "numpy", "ml_dtypes") + PLUMBING)
    return _real(dirs) + _own_dirs()


# Paths that are a library's wherever the module was compiled (an HLO dump
# may come from another machine): JAX's sources, an installed JAX, jaxlib,
# NumPy, irshard or framework plumbing, and a Python's standard library.
_PACKAGES = "|".join(re.escape(name) for name in
                     ("jax", "jaxlib", "numpy", "ml_dtypes", "irshard") + PLUMBING)
_FOREIGN = (
    re.compile(r"(^|/)(jax/_src|jax/experimental|jaxlib)/"),
    re.compile(rf"/(site|dist)-packages/({_PACKAGES})/"),
    re.compile(r"(^|/)lib/python3\.\d+/(?!(site|dist)-packages/)"),
)
_FOREIGN_OWN = re.compile(r"/(site|dist)-packages/irshard/")


def is_installed(path: str) -> bool:
    parts = path.replace(os.sep, "/").split("/")
    return "site-packages" in parts or "dist-packages" in parts


def _under(path: str, dirs: tuple[str, ...]) -> bool:
    real = os.path.realpath(path)
    return any(real == d or real.startswith(d + os.sep) for d in dirs)


@functools.lru_cache(maxsize=4096)
def is_library(path: str) -> bool:
    """Python's, JAX's, NumPy's, irshard's or a framework's plumbing: never
    the user's."""
    if not path or path.startswith("<"):
        return True
    if _under(path, _library_dirs()) or (
            _under(path, _stdlib_dirs()) and not is_installed(path)):
        return True
    shown = path.replace(os.sep, "/")
    return any(pattern.search(shown) for pattern in _FOREIGN)


@functools.lru_cache(maxsize=4096)
def is_irshard(path: str) -> bool:
    """irshard's own code: where a stack read upwards reaches the caller."""
    if not path or path.startswith("<"):
        return False
    return _under(path, _own_dirs()) or bool(
        _FOREIGN_OWN.search(path.replace(os.sep, "/")))


# The frames that called irshard's API (a script's `irshard.compile(...)`
# line, a test's), by file, line and function: never the model's, though
# JAX records them at the outer end of each op's stack (a lambda written on
# that line is another function, and stays). Only ever grows, by the call
# sites of one process.
_CALLERS: set[tuple[str, int, str]] = set()


def note_callers() -> None:
    """Remembers the frames outside irshard that called it."""
    import sys
    frame = sys._getframe(1)
    while frame is not None and is_irshard(frame.f_code.co_filename):
        frame = frame.f_back
    while frame is not None:
        code = frame.f_code
        if not is_library(code.co_filename):
            # The function as JAX records it: its qualified name.
            _CALLERS.add((code.co_filename, frame.f_lineno,
                          getattr(code, "co_qualname", code.co_name)))
        frame = frame.f_back


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

    def choose(self, frames: Iterable[Frame]) -> SourceLocation | None:
        """The innermost user frame below irshard, with the chain of user
        frames from there outwards (each once)."""
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
        seen = set()
        for f in frames:
            if (f.file, f.line, f.function) in _CALLERS or (
                    f.file and is_irshard(f.file)):
                # What called irshard (a script's `irshard.compile(...)`
                # line) is not the model.
                break
            if not f.file or f.line <= 0 or is_library(f.file):
                continue
            # A frame JAX records once per level of its own that it passes
            # through (a loop's body, a jit, a scan) repeats: kept once.
            if (f.file, f.line) not in seen:
                seen.add((f.file, f.line))
                mine.append(f)
        if not mine:
            return None
        chain = tuple(self._location(f) for f in mine)
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
                found = summary
        return found


def display_path(path: str) -> str:
    """`path` relative to the working directory when it lies below it; an
    installed module's as its import path names it (`maxtext/layers/...`)."""
    shown = path.replace(os.sep, "/")
    for marker in ("/site-packages/", "/dist-packages/"):
        if marker in shown:
            return shown.rsplit(marker, 1)[1]
    absolute = os.path.abspath(path)
    relative = os.path.relpath(absolute)
    return absolute if relative.startswith("..") else relative


# ---------------------------------------------------------------------------
# Scopes: the name stack JAX records in each op's `op_name`
#
# `jit(train_step)/transpose(jvp(decoder))/layers/mlp/dot_general` is the
# op `dot_general` in the scope `decoder/layers/mlp`: the names a model
# gives its parts (`jax.named_scope`, Flax's and Keras' module names), under
# the transformations JAX applied (`jvp(...)`, `transpose(...)`, `vmap(...)`
# wrap a part's name) and its own structure (a `jit(f)`, a loop's
# `while/body`, an einsum's equation), which are not the model's. A
# combiner's op
# (`prefix/(a/add:b/mul)`) is in each of its parts' scopes.

_WRAPPED = re.compile(r"^([A-Za-z_][\w.]*)\((.*)\)$", re.S)
_STRUCTURE = re.compile(
    r"^(while|body|cond|branch_\d+_fun|scan|checkpoint|remat|rematted_computation"
    r"|closed_call|core_call|custom_jvp_call|custom_vjp_call|custom_vjp_call_jaxpr"
    r"|shmap_body|shard_map|pjit|jit|named_call|eval_jaxpr)$")
# Transformations whose parentheses name a function, not a part.
_CALLS = frozenset({"jit", "pjit", "xla_computation", "xla_pmap", "pmap",
                    "shard_map", "custom_jvp_call", "custom_vjp_call",
                    "remat", "checkpoint", "named_call"})


def _split(text: str, separator: str) -> list[str]:
    """`text` split at `separator` outside parentheses."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth = max(depth - 1, 0)
        elif ch == separator and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return parts


def _scope_parts(component: str) -> list[str]:
    """The model's names in one component of a name stack."""
    wrapped = _WRAPPED.match(component)
    while wrapped is not None:
        if wrapped.group(1) in _CALLS:
            return []
        component = wrapped.group(2)
        wrapped = _WRAPPED.match(component)
    if not component or _STRUCTURE.match(component) or "->" in component:
        # JAX's own structure, or the scope `jnp.einsum` names by its
        # equation (`...k,k->...k`).
        return []
    if "/" in component:
        return [p for part in _split(component, "/") for p in _scope_parts(part)]
    return [component]


@functools.lru_cache(maxsize=65536)
def scope_of(op_name: str | None) -> str | None:
    """The model's scope of an op named `op_name` (the last component is
    the primitive): `decoder/layers/mlp`, several joined by `, ` for a
    combined op's parts, or None outside any."""
    if not op_name:
        return None
    components = _split(op_name, "/")
    last = components[-1]
    if last.startswith("(") and last.endswith(")"):
        prefix = "/".join(components[:-1])
        found: list[str] = []
        for part in _split(last[1:-1], ":"):
            scope = scope_of(f"{prefix}/{part}" if prefix else part)
            if scope and scope not in found:
                found.append(scope)
        return ", ".join(found) or None
    names = [p for c in components[:-1] for p in _scope_parts(c)]
    return "/".join(names) or None
