"""A command's result that writes itself: `render(fmt)` for each of its
`FORMATS`, each by its `render_<fmt>` method. The command line's
`--format` choices for a command are its result's `FORMATS`
(`tests/test_cli_errors.py` holds them together)."""

from __future__ import annotations

from irshard.core.errors import UsageError


class Rendered:
    FORMATS: tuple[str, ...] = ("text", "json")

    def render(self, fmt: str = "text") -> str:
        if fmt not in self.FORMATS:
            raise UsageError(f"format '{fmt}': {type(self).__name__} is written as "
                             f"{', '.join(self.FORMATS)}")
        return getattr(self, f"render_{fmt}")()
