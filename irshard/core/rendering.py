"""A command's result that writes itself: `render(fmt)` for each of its
`FORMATS`, each by its `render_<fmt>` method (the whole text), or by its
`pieces_<fmt>` method where it has one (the text in pieces, made as they
are written: a report of a hundred thousand collectives is never held
whole). The command line's `--format` choices for a command are its
result's `FORMATS` (`tests/test_cli_errors.py` holds them together)."""

from __future__ import annotations

from typing import Iterator

from irshard.core.errors import UsageError


class Rendered:
    FORMATS: tuple[str, ...] = ("text", "json")

    def render(self, fmt: str = "text") -> str | Iterator[str]:
        """As `fmt`: the text, or its pieces where they are made as they
        are written."""
        if fmt not in self.FORMATS:
            raise UsageError(f"format '{fmt}': {type(self).__name__} is written as "
                             f"{', '.join(self.FORMATS)}")
        pieces = getattr(self, f"pieces_{fmt}", None)
        return pieces() if pieces is not None else getattr(self, f"render_{fmt}")()
