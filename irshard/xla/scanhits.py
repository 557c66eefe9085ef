"""Where, in a block of a printed HLO module, the lines the scan reads
are: found by the literals they hold, at memory speed; and the lines no
scan reads (which XLA's parser is to judge)."""

from __future__ import annotations

import heapq
import re

from irshard.xla.hlo import COLLECTIVE_OPCODES
from irshard.xla.hlolines import NeedsParser

# Lines the report reads, found by the literals they hold (a search for one
# literal, or a few sharing their first or last bytes, runs at memory
# speed; one pattern of many alternatives does not): collectives and their
# async halves, anything that calls a computation (`calls=%f`,
# `branch_computations={%a, %b}`), sends between slices, the entry's
# parameters, the first printed mesh, and top-level lines (computation
# headers and ends).
_LITERALS = [re.compile(pattern) for pattern in (
    rb"=\{?%", rb"-(?:start|done)\(",
    rb" (?:all-|reduce-scatter\(|collective-|ragged-)", rb"_xla_megascale",
    rb"mesh\[", rb"\n[%E}]")]
_MESH = 4
# An indented line that is not an instruction: a module XLA's parser is to
# judge (and name what is wrong with).
_NOT_INSTRUCTION = re.compile(rb"\n +(?! |(?:ROOT )?%?[\w.\-]+ = )")
# Where to look for one: lines that start with neither `%` nor more space
# (a root, a name printed without `%`, or something else).
_UNUSUAL_START = re.compile(rb"\n +[^ %]")
# The entry's parameters: looked for in the entry only.
_PARAMETER = re.compile(re.escape(b" parameter("))
# A collective's line, read in the scan's bytes without decoding: where it
# is, its name (to pair a `-start` with its `-done`) and its opcode.
COLLECTIVE_LINE = re.compile(
    rb" *(?:ROOT )?%?([^\s=]+) = (?:\((?:[^()]|\([^()]*\))*\)|\S+) +("
    + b"|".join(re.escape(op).encode() for op in
                sorted(COLLECTIVE_OPCODES, key=len, reverse=True))
    + rb")\(")
# What a fusion calls, after `calls=` (the last of its call attributes).
FUSED = re.compile(rb"%?([\w.\-]+)(?=[,\n]|$)")


def check_lines(block: bytes) -> None:
    """Raises `NeedsParser` where a line of `block` is neither an
    instruction nor a computation's start or end (a form this scan does
    not read)."""
    odd = _UNUSUAL_START.search(block)
    if odd is not None:
        odd = _NOT_INSTRUCTION.search(block, odd.start())
    if odd is not None:
        end = block.find(b"\n", odd.start() + 1)
        raise NeedsParser(f"not an instruction: {block[odd.start() + 1:end][:80]!r}")


def hits(block: bytes, in_entry: bool):
    """Where in `block` the literals that make a line worth reading are,
    in order (the entry's parameters too, from where it starts), and
    whether a mesh is named in it."""
    found = [[m.start() for m in literal.finditer(block)] for literal in _LITERALS]
    entry_at = 0 if in_entry else block.find(b"\nENTRY")
    if entry_at >= 0:
        found.append([m.start() for m in _PARAMETER.finditer(block, entry_at)])
    return heapq.merge(*found), bool(found[_MESH])
