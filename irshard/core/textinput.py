"""Text the user gives, checked before it is read: one line of printable
characters, quoted short in a message, a size in digits, `NAME=VALUE`,
what was given twice. Pure Python."""

from __future__ import annotations

import re

from irshard.core.errors import SpecError, UsageError

_INT = re.compile(r"[0-9]+\Z")
# Sizes have at most this many digits (below 10**18, well inside int64).
MAX_DIGITS = 18


def check_one_line(text: str, what: str) -> None:
    """Specs, names and paths are one line of printable text; anything else
    is shown escaped, so an error message stays one line."""
    if not all(c.isprintable() for c in text):
        raise SpecError(f"{what} {text!r} contains a control character (a "
                        f"newline, tab, ...); give it on one line")


def repeated(items) -> list:
    """The items given more than once, each once, in the order first seen."""
    seen, twice = set(), []
    for item in items:
        if item in seen and item not in twice:
            twice.append(item)
        seen.add(item)
    return twice


def shown(text: str, limit: int = 60) -> str:
    """`text` quoted for a message, cut short when it is long."""
    if len(text) <= limit:
        return f"'{text}'"
    return f"'{text[:limit - 20]}...' ({len(text)} characters)"


def parse_size(text: str) -> int | None:
    """A non-negative integer of ASCII digits, or None."""
    if not _INT.match(text) or len(text.lstrip("0")) > MAX_DIGITS:
        return None
    return int(text)


def split_assignment(text: str, option: str, value_name: str) -> tuple[str, str]:
    """`NAME=VALUE` -> (NAME, VALUE)."""
    check_one_line(text, option)
    name, eq, value = text.partition("=")
    if not eq or not name.strip():
        raise UsageError(f"{option} '{text}': expected NAME={value_name}")
    return name.strip(), value.strip()
