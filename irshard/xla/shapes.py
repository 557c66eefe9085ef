"""Shapes as HLO prints them (`f32[8,4]{1,0}`, tuples of them), their
bytes, and a cursor over printed text."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from irshard.core.dtypes import lookup_dtype
from irshard.core.syntax import matching_bracket, split_top_level

# A tuple element's index, as XLA prints it in long tuples.
INDEX_COMMENT = re.compile(r"/\*index=\d+\*/")

# Sizes of HLO element types the tensor grammar has no name for.
_EXTRA_ITEMSIZES = {"token": 0, "opaque": 0}


def element_size(dtype: str) -> int:
    """Bytes per element of an HLO element type (`f32`, `s32`, `f8e4m3fn`)."""
    known = lookup_dtype(dtype)
    if known is not None:
        return known.itemsize
    if dtype in _EXTRA_ITEMSIZES:
        return _EXTRA_ITEMSIZES[dtype]
    m = re.match(r"[a-z]+(\d+)", dtype)
    return max(1, int(m.group(1)) // 8) if m else 0


@dataclass(frozen=True)
class ArrayShape:
    """An array shape as HLO prints it: `f32[8,4]{1,0}`."""

    dtype: str
    dims: tuple[int, ...]

    @property
    def nbytes(self) -> int:
        return math.prod(self.dims) * element_size(self.dtype)

    def __str__(self) -> str:
        return f"{self.dtype}[{','.join(map(str, self.dims))}]"


Shape = Any  # ArrayShape, or a tuple of Shape


def shape_leaves(shape: Shape) -> list[ArrayShape]:
    if isinstance(shape, ArrayShape):
        return [shape]
    return [leaf for element in shape for leaf in shape_leaves(element)]


def shape_bytes(shape: Shape) -> int:
    found = _NBYTES.get(shape)
    if found is None:
        found = sum(leaf.nbytes for leaf in shape_leaves(shape))
        if len(_NBYTES) < 4096:
            _NBYTES[shape] = found
    return found


# Bytes of shapes seen (a module repeats a few shapes many times).
_NBYTES: dict[Any, int] = {}


class Scanner:
    """A cursor over printed HLO text."""

    def __init__(self, text: str, pos: int = 0):
        self.text = text
        self.pos = pos

    def peek(self) -> str:
        return self.text[self.pos] if self.pos < len(self.text) else ""

    def skip_spaces(self) -> None:
        while self.peek() == " ":
            self.pos += 1

    def balanced(self) -> str:
        """The text of a bracketed group starting here, brackets included."""
        start = self.pos
        end = matching_bracket(self.text, start)
        self.pos = end + 1
        return self.text[start:self.pos]


def parse_shape(text: str) -> Shape:
    """`f32[8,4]{1,0}`, `(f32[4], s32[])`, `f32[<=8]`, `token[]`."""
    text = INDEX_COMMENT.sub("", text).strip()
    if text.startswith("("):
        inner = text[1:matching_bracket(text, 0)]
        return tuple(parse_shape(part) for part in split_top_level(inner))
    m = re.match(r"([a-z][a-z0-9]*)\[([^\]]*)\]", text)
    if not m:
        raise ValueError(f"not an HLO shape: {text!r}")
    dims = tuple(int(d.strip().lstrip("<=")) for d in m.group(2).split(",")
                 if d.strip())
    return ArrayShape(m.group(1), dims)
