"""Loading the user's Python file and choosing the function to compile.

The file is imported from its own directory (that directory goes first on
`sys.path`, as when Python runs a script), so its local imports work. Syntax
errors and exceptions raised while importing are reported as the user's, at
their file and line.
"""

from __future__ import annotations

import ast
import hashlib
import importlib.util
import inspect
import os
import sys
import types
from dataclasses import dataclass
from typing import Any, Callable

from irshard.core import files
from irshard.core.errors import InputError, UserCodeError
from irshard.core.frames import UserCode, display_path


def exception_text(exc: BaseException, limit: int = 40) -> str:
    """`Type: message`, whole (JAX's hints are in its later lines), at most
    `limit` lines. `sys.exit(N)` reads as what it is."""
    if isinstance(exc, SystemExit):
        return f"the program called sys.exit({exc.code!r})"
    lines = str(exc).strip().splitlines()
    if len(lines) > limit:
        lines = lines[:limit] + [f"... ({len(lines) - limit} more lines)"]
    body = "\n".join(lines)
    return f"{type(exc).__name__}: {body}" if body else type(exc).__name__


def program_failure(exc: BaseException) -> bool:
    """Whether `exc`, raised while the user's code ran, is the program's
    failure: any exception, `sys.exit`, or another `BaseException` the
    program defines; not an interruption (Ctrl-C) nor a generator's end."""
    return not isinstance(exc, (KeyboardInterrupt, GeneratorExit))


def raised_by_user_code(exc: BaseException) -> bool:
    """Whether the user's code (not JAX alone) raised `exc` or called what
    did, or it is their `sys.exit` or a `BaseException` of their own (JAX
    raises `Exception`s)."""
    return not isinstance(exc, Exception) or \
        UserCode().raised_at(exc.__traceback__) is not None


def describe_user_exception(exc: BaseException, user_dir: str) -> str:
    """Where in the user's code `exc` was raised, and what it says (all of
    it: a multi-line message keeps its later lines)."""
    text = exception_text(exc)
    frame = UserCode(user_dir).raised_at(exc.__traceback__)
    if frame is None:
        return text
    return f"{display_path(frame.filename)}:{frame.lineno}: in {frame.name}: {text}"


def read_source(path: str) -> str:
    """A Python file's text, decoded as Python does: UTF-8 unless a coding
    declaration (PEP 263) or a BOM says otherwise."""
    import tokenize
    with tokenize.open(path) as f:
        return f.read()


def load_module(path: str) -> types.ModuleType:
    """Imports the Python file at `path` as a module."""
    if not os.path.exists(path):
        raise InputError(f"file '{path}' does not exist")
    if os.path.isdir(path):
        raise InputError(f"'{path}' is a directory; expected a .py or .mlir file")
    files.check_regular(path, "file")
    if not path.endswith(".py"):
        raise InputError(f"'{path}' is not a Python file; expected a .py file "
                         f"(or a .mlir module)")
    try:
        source = read_source(path)
    except (OSError, UnicodeDecodeError, SyntaxError) as e:
        raise InputError(f"cannot read '{path}': {e}") from None
    try:
        # The code's file name goes into JAX's locations (C++ strings): a
        # path that is not UTF-8 goes as it is shown.
        code = compile(source, files.shown_path(path), "exec")
    except SyntaxError as e:
        where = f"{display_path(path)}:{e.lineno}"
        if e.offset:
            where += f":{e.offset}"
        raise InputError(f"{where}: syntax error: {e.msg}") from None

    directory = os.path.dirname(os.path.abspath(path))
    if directory not in sys.path:
        sys.path.insert(0, directory)
    stem = os.path.splitext(os.path.basename(path))[0]
    name = stem if stem.isidentifier() and stem not in sys.modules \
        else "_irshard_user_" + hashlib.sha1(
            os.fsencode(os.path.abspath(path))).hexdigest()[:12]
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        exec(code, module.__dict__)
    except BaseException as e:  # The user's module failed to import.
        if not program_failure(e):
            raise
        del sys.modules[name]
        described = describe_user_exception(e, directory)
        from irshard import backend
        if backend.ran_without_devices(e):
            raise UserCodeError(
                f"{display_path(path)} runs a JAX computation when imported, "
                f"and a TPU target's devices are only described here, with no "
                f"TPU to run it on: guard that code with `if __name__ == "
                f"\"__main__\":`, or compile for this machine (leave out "
                f"--target)\n{described}") from None
        raise UserCodeError(described) from None
    return module


def public_functions(module: types.ModuleType) -> list[str]:
    """Names of the functions the module itself defines, not starting with _."""
    return sorted(
        name for name, obj in vars(module).items()
        if inspect.isfunction(obj) and obj.__module__ == module.__name__
        and not name.startswith("_"))


def select_function(module: types.ModuleType, path: str, name: str | None,
                    option: str = "--fn") -> tuple[str, Callable[..., Any]]:
    """The function `name`, or the module's only public function."""
    candidates = public_functions(module)
    shown = display_path(path)
    if name is not None:
        obj = getattr(module, name, None)
        if not callable(obj):
            listed = ", ".join(candidates) if candidates else "none"
            prefix = "" if option == "--fn" else f"{option} {name}: "
            raise InputError(f"{prefix}no function '{name}' in {shown}; "
                             f"candidates: {listed}")
        return name, obj
    if len(candidates) == 1:
        return candidates[0], getattr(module, candidates[0])
    if not candidates:
        raise InputError(f"{shown} defines no public function; define one or "
                         f"name one with --fn NAME")
    raise InputError(f"{shown} defines {len(candidates)} public functions "
                     f"({', '.join(candidates)}); choose one with --fn NAME")


@dataclass(frozen=True)
class Parameter:
    """A parameter of the user's function as irshard sees it."""

    name: str
    annotation: str | None   # the type string from the annotation, if any
    has_default: bool
    default: Any = None
    kind: str = "positional"   # positional-only, positional or keyword-only


def annotation_text(annotation: Any) -> str | None:
    """The type string of a parameter annotation, or None if it is not one.

    `d: "f32[8]"` gives "f32[8]"; under `from __future__ import annotations`
    the same annotation arrives as "'f32[8]'" and gives the same.
    """
    if not isinstance(annotation, str):
        return None
    text = annotation.strip()
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        try:
            value = ast.literal_eval(text)
        except (ValueError, SyntaxError):
            return None
        return value if isinstance(value, str) else None
    return text


def parameters(fn: Callable[..., Any], fn_name: str) -> list[Parameter]:
    """The parameters of `fn`; variadic ones are rejected."""
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError) as e:
        raise InputError(f"cannot read the signature of '{fn_name}': {e}") from None
    result = []
    for p in signature.parameters.values():
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            star = "*" if p.kind == p.VAR_POSITIONAL else "**"
            raise InputError(
                f"'{fn_name}' takes {star}{p.name}; irshard needs a fixed list "
                f"of parameters, each with a type")
        has_default = p.default is not p.empty
        kind = {p.POSITIONAL_ONLY: "positional-only",
                p.KEYWORD_ONLY: "keyword-only"}.get(p.kind, "positional")
        result.append(Parameter(p.name, annotation_text(p.annotation),
                                has_default,
                                p.default if has_default else None, kind))
    return result
