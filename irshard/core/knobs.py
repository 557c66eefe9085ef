"""A program factory's knobs as the command line writes them (`--knob
K=V`): a value is a Python literal where it reads as one (`64`, `1e-3`,
`True`, `None`, `'64'`), else the text itself (`full`)."""

from __future__ import annotations

from typing import Any


def knob_value(text: str) -> Any:
    """A knob's value as given (see the module docstring)."""
    import ast
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return text


def knob_text(value: Any) -> str:
    """`value` as `knob_value` reads it back: a string that would read as
    another literal is quoted."""
    if isinstance(value, str) and knob_value(value) == value:
        return value
    return repr(value)


def knob_values(text: str) -> list[Any]:
    """`--knob K=V1,V2,...`'s values: a list of literals where the whole
    reads as one (`32,64`, `(1, 2),(2, 1)`), else the texts split at
    commas (`full,minimal`)."""
    import ast
    try:
        value = ast.literal_eval(f"[{text}]")
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return [knob_value(part.strip()) for part in text.split(",")]
    return list(value)
