"""MLIR locations read through the bindings' location classes: the
source frames (file, line, function) a location holds, innermost first,
and the name a `loc("name"(...))` gives an operation."""

from __future__ import annotations

from jaxlib.mlir import ir

from irshard.core.frames import Frame


_LOCATION_KINDS = (ir.FileLineColLoc, ir.NameLoc, ir.CallSiteLoc, ir.FusedLoc,
                   ir.UnknownLoc)


def typed_location(location: ir.Location) -> ir.Location:
    """The location as its own class (`FileLineColLoc`, `NameLoc`, ...);
    diagnostics hand out plain `Location`s."""
    if isinstance(location, _LOCATION_KINDS):
        return location
    for kind in _LOCATION_KINDS:
        try:
            return kind(location)
        except (ValueError, TypeError):
            continue
    return location


def location_name(location: ir.Location) -> str | None:
    """The name of a `loc("name")` or `loc("name"(...))` location."""
    location = typed_location(location)
    return location.name_str if isinstance(location, ir.NameLoc) else None


def file_locations(location: ir.Location,
                   function: str = "") -> list[tuple[str, int, int, str]]:
    """(file, line, column, function) of every file location in `location`,
    innermost first (a call site's callee before its caller); the function
    is the name JAX wraps a frame's file location in, or ''."""
    location = typed_location(location)
    if isinstance(location, ir.FileLineColLoc):
        return [(location.filename, location.start_line, location.start_col,
                 function)]
    if isinstance(location, ir.NameLoc):
        child = typed_location(location.child_loc)
        name = location.name_str if isinstance(child, ir.FileLineColLoc) else ""
        return file_locations(child, name)
    if isinstance(location, ir.CallSiteLoc):
        return file_locations(location.callee) + file_locations(location.caller)
    if isinstance(location, ir.FusedLoc):
        return [f for part in location.locations for f in file_locations(part)]
    return []


def frames(location: ir.Location) -> list[Frame]:
    """The Python frames an MLIR location holds, innermost first: what
    `UserCode.choose` picks the user's line from."""
    return [Frame(f, fn, line) for f, line, fn in location_frames(location)]


def location_frames(location: ir.Location) -> list[tuple[str, int, str]]:
    """(file, line, function) of every file location, innermost first."""
    return [(f, line, fn) for f, line, _, fn in file_locations(location)]


def diagnostic_text(error: ir.MLIRError, source: str | None = None,
                    first_line: int = 1, with_location: bool = True) -> str:
    """The first diagnostic of an MLIRError as `file:line:col: message`.

    With `source`, the file is `source` and lines count from `first_line`
    (a chunk of a larger file); without, the location's own file is kept.
    `with_location=False` gives the message alone."""
    diagnostics = list(error.error_diagnostics)
    if not diagnostics:
        return f"{source}: {error.message}" if source else error.message
    d = diagnostics[0]
    found = file_locations(d.location) if with_location else []
    if not found:
        return f"{source}: {d.message}" if source and with_location else d.message
    file, line, column, _ = found[0]
    if source is not None:
        file, line = source, line + first_line - 1
    return f"{file}:{line}:{column}: {d.message}"
