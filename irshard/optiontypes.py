"""What an option of the command line is, as data (`Option`), and the
argparse types that parse its values: seconds, byte sizes, counts, jobs."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Option:
    """One option as data: its names and what argparse takes for it."""

    names: tuple[str, ...]
    kwargs: dict[str, Any]

    @classmethod
    def of(cls, *names: str, **kwargs: Any) -> "Option":
        return cls(names, kwargs)

    def helped(self, text: str) -> "Option":
        """The same option with the help `text` (as one command says it)."""
        return Option(self.names, {**self.kwargs, "help": text})


def seconds(text: str) -> float:
    """A positive, finite number of seconds (argparse type)."""
    import math
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(
            f"'{text}' is not a positive number of seconds")
    return value


def byte_sizes(text: str) -> list[int]:
    """`4KiB,64KiB,1MiB` -> bytes (argparse type)."""
    from irshard.reporting.budget import UNITS
    import re
    sizes = []
    for item in text.split(","):
        m = re.fullmatch(r"\s*([0-9]{1,12})\s*(B|KiB|MiB|GiB)?\s*", item)
        if not m or int(m.group(1)) == 0:
            raise argparse.ArgumentTypeError(
                f"'{item}' is not a size; give sizes such as 4KiB,64KiB,1MiB")
        sizes.append(int(m.group(1)) * int(UNITS[m.group(2) or "B"]))
    return sizes


def byte_size(text: str) -> int:
    """`16GiB`, `512MiB`, `4096` -> bytes (argparse type)."""
    import re

    from irshard.reporting.budget import UNITS
    m = re.fullmatch(r"\s*([0-9]{1,15})\s*(B|KiB|MiB|GiB|TiB)?\s*", text)
    if not m or int(m.group(1)) == 0:
        raise argparse.ArgumentTypeError(
            f"'{text}' is not a size; give one such as 16GiB or 512MiB")
    unit = m.group(2) or "B"
    return int(m.group(1)) * (1 << 40 if unit == "TiB" else int(UNITS[unit]))


def count(text: str) -> int:
    """A positive whole number (argparse type)."""
    if text.isdigit() and int(text) > 0:
        return int(text)
    raise argparse.ArgumentTypeError(f"'{text}' is not a positive whole number")


def jobs(text: str) -> int | str:
    """`--jobs`: a positive count, or auto (argparse type)."""
    if text == "auto":
        return text
    if text.isdigit() and int(text) > 0:
        return int(text)
    raise argparse.ArgumentTypeError(f"'{text}' is not a positive number or auto")
