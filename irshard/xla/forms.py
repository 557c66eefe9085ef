"""Computations that cost the same, told by their text.

An unrolled model holds one copy of each fusion per layer: printed alike
but for the numbers XLA appends to names (`%add.12`) and the metadata
that names the layer. `form` gives such copies one key, so what a copy
computes and moves is read once for all of them.
"""

from __future__ import annotations

import re
from typing import Container

# What a computation's cost does not depend on: its instructions' metadata
# and the numbers XLA appends to names.
_METADATA = re.compile(r", metadata=\{[^}]*\}")
_NUMBERED = re.compile(r"\.\d+(?![\w.\-])")
_DEFINED = re.compile(r"^ *(?:ROOT )?%?([^\s=]+) = ", re.M)
_REFERENCE = re.compile(r"%([\w.\-]+)")


def form(text: str, known: Container[str] = ()) -> str | None:
    """The key of a computation whose instructions are printed as `text`:
    the text without metadata and without the numbers appended to names,
    or, where those numbers are what tells two instructions apart, with
    each instruction named by its place. None where the computation calls
    another (a key would not say which). `known`: keys already given,
    which need no check."""
    if "calls=" in text:
        return None
    text = _METADATA.sub("", text)
    alike = _NUMBERED.sub("", text)
    if alike in known or _distinct(alike):
        return alike
    alike = _NUMBERED.sub("", _renamed(text))
    return alike if alike in known or _distinct(alike) else None


def _distinct(text: str) -> bool:
    """Whether every instruction of `text` has a name of its own."""
    names = _DEFINED.findall(text)
    return len(set(names)) == len(names)


def _renamed(text: str) -> str:
    """`text` with each instruction's name replaced by its place, where it
    is defined and where it is used."""
    place = {name: f"%{i}" for i, name in enumerate(_DEFINED.findall(text))}
    return _REFERENCE.sub(lambda m: place.get(m.group(1), m.group(0)), text)
