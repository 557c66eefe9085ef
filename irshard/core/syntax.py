"""Brackets and quotes in printed IR: small helpers for the few places that
read text which no library parses for us (HLO attributes, pass options),
and the checks of device lists that stand before XLA's parsers."""

from __future__ import annotations

import functools
import math
import re

_PAIRS = {"(": ")", "{": "}", "[": "]", "<": ">"}


_STRING_BODY = re.compile(r'(?:[^"\\]|\\.)*', re.S)


def end_of_string(text: str, i: int) -> int:
    """Index of the quote closing the string that opens at `text[i]`."""
    return _STRING_BODY.match(text, i + 1).end()


def matching_bracket(text: str, start: int, brackets: str = "({[") -> int:
    """Index of the bracket closing the one at `start`; strings are skipped.
    Raises ValueError when it is never closed."""
    stack = []
    search = _special(brackets + "".join(_PAIRS[b] for b in brackets)).search
    i = start
    while True:
        m = search(text, i)
        if m is None:
            break
        i = m.start()
        c = text[i]
        if c == '"':
            i = end_of_string(text, i)
        elif c in brackets:
            stack.append(_PAIRS[c])
        elif stack and c == stack[-1]:
            stack.pop()
            if not stack:
                return i
        i += 1
    raise ValueError(f"unbalanced brackets in {text[start:start + 80]!r}")


_SPECIAL: dict[str, re.Pattern] = {}


def _special(chars: str) -> re.Pattern:
    """A pattern finding the next of `chars` or a quote."""
    pattern = _SPECIAL.get(chars)
    if pattern is None:
        pattern = _SPECIAL[chars] = re.compile("[" + re.escape('"' + chars) + "]")
    return pattern


def split_top_level(text: str, sep: str = ",", brackets: str = "({[") -> list[str]:
    """Splits on `sep` outside brackets and strings; drops empty parts."""
    closing = "".join(_PAIRS[b] for b in brackets)
    parts, depth, start, i = [], 0, 0, 0
    search = _special(brackets + closing + sep).search
    while True:
        # Only quotes, brackets and separators need a look: jump between them.
        m = search(text, i)
        if m is None:
            break
        i = m.start()
        c = text[i]
        if c == '"':
            i = end_of_string(text, i)
        elif c in brackets:
            depth += 1
        elif c in closing:
            depth -= 1
        elif depth == 0:
            parts.append(text[start:i])
            start = i + 1
        i += 1
    parts.append(text[start:])
    return [p.strip() for p in parts if p.strip()]


# Attribute lists (`, key=value, key=value`) read by one pattern, for the
# many instructions of a large module: a value is a run of plain characters,
# quoted strings and bracketed groups (nested up to six deep), with no
# top-level comma. Possessive repeats keep a non-match linear.
_QUOTED = r'"[^"\\]*+(?:\\.[^"\\]*+)*+"'


def _nested(depth: int) -> str:
    inner = r'[^()\[\]{}"]++|' + _QUOTED
    for _ in range(depth):
        inner = (r'[^()\[\]{}"]++|' + _QUOTED + r'|\((?:' + inner + r')*+\)'
                 r'|\[(?:' + inner + r')*+\]|\{(?:' + inner + r')*+\}')
    return inner


@functools.cache
def _attribute(depth: int) -> re.Pattern:
    """One attribute with values nested `depth` + 1 brackets deep."""
    inner = _nested(depth)
    return re.compile(
        r', ([a-z_][a-z0-9_]*)=((?:[^,()\[\]{}"\s]++|' + _QUOTED + r'|\((?:'
        + inner + r')*+\)|\[(?:' + inner + r')*+\]|\{(?:' + inner
        + r')*+\}| (?![a-z_][a-z0-9_]*=))++)')


# A shallow pattern reads most lines; the deep one (tens of milliseconds to
# compile, megabytes to hold) is made for the first line that needs it.
_DEPTHS = (2, 5)


def attribute_pairs(text: str, pos: int = 0) -> dict[str, str] | None:
    """`, a=1, b={x, y}` from `pos` on as {key: value}, where every
    attribute is a plain `key=value` with no top-level comma inside the
    value; None where the text needs `split_top_level` (what it returns
    then is what a split gives)."""
    for depth in _DEPTHS:
        attrs = _pairs(_attribute(depth), text, pos)
        if attrs is not None:
            return attrs
    return None


def _pairs(pattern: re.Pattern, text: str, pos: int) -> dict[str, str] | None:
    attrs: dict[str, str] = {}
    for m in pattern.finditer(text, pos):
        if m.start() != pos:
            return None
        attrs[m.group(1)] = m.group(2)
        pos = m.end()
    return attrs if pos == len(text) else None


# The escapes XLA's printer writes in quoted strings (absl::CEscape): the
# named ones, three-digit octal for other bytes (UTF-8 included), and hex.
_C_ESCAPE = re.compile(rb'\\(?:([0-7]{1,3})|x([0-9A-Fa-f]{1,2})|(.))', re.S)
_C_NAMED = {b"n": b"\n", b"t": b"\t", b"r": b"\r", b"a": b"\a", b"b": b"\b",
            b"f": b"\f", b"v": b"\v", b"0": b"\0"}


def c_unescape(text: str) -> str:
    """The string a quoted HLO string stands for, without its quotes:
    `params[\\'embed\\']` -> `params['embed']`, `\\303\\251` -> `é`."""
    if "\\" not in text:
        return text

    def one(m: re.Match) -> bytes:
        octal, hexa, char = m.groups()
        if octal is not None:
            return bytes([int(octal, 8) & 0xFF])
        if hexa is not None:
            return bytes([int(hexa, 16)])
        return _C_NAMED.get(char, char)

    raw = _C_ESCAPE.sub(one, text.encode("utf-8"))
    return raw.decode("utf-8", "replace")


def unquote(text: str) -> str:
    """A quoted HLO string (`"a\\"b"`) as the string it stands for."""
    if len(text) >= 2 and text[0] == text[-1] == '"':
        text = text[1:-1]
    return c_unescape(text)


# ---------------------------------------------------------------------------
# Device lists. XLA CHECK-fails (aborting the process) on one whose size does
# not match its tiles, so printed text is checked before XLA sees it.

MAX_DEVICES = 1 << 24

_IOTA = re.compile(r"\[([-\d,\s]*)\]<=\[([-\d,\s]*)\](?:T\(([-\d,\s]*)\))?")
_LISTED = re.compile(r"devices=\[([-\d,\s]*)\]((?:-?\d+,)*-?\d+)")
_MESH_GROUPS = re.compile(r"replica_groups=mesh\[([^\]]*)\][^{}=]*\{([^{}]*)\}")


def _int_list(text: str | None) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()] if text else []


def iota_problem(dims: list[int], reshape: list[int],
                 perm: list[int] | None) -> str | None:
    """What is wrong with the iota `[dims]<=[reshape]T(perm)` (`perm` None
    where it has no transpose), or None."""
    if not dims or not reshape or min(dims + reshape) < 1:
        return "every dimension must be at least 1"
    total, tiles = math.prod(reshape), math.prod(dims)
    if total > MAX_DEVICES:
        return f"more than {MAX_DEVICES} devices"
    if tiles != total:
        return f"{tiles} tiles or groups but an iota of {total} devices"
    if perm is not None and sorted(perm) != list(range(len(reshape))):
        return (f"T({','.join(map(str, perm))}) is not a permutation of the "
                f"{len(reshape)} iota dimensions")
    return None


def device_list_problem(text: str) -> str | None:
    """What is wrong with the iota (`[2,2]<=[4]`, `[4]<=[2,2]T(1,0)`),
    listed (`devices=[2]0,1`) and mesh-form (`mesh['x'=4] {'x'}`) device
    lists in printed HLO, or None."""
    for m in _IOTA.finditer(text):
        perm = _int_list(m.group(3)) if m.group(3) is not None else None
        problem = iota_problem(_int_list(m.group(1)), _int_list(m.group(2)), perm)
        if problem:
            return f"'{m.group(0)}': {problem}"
    for m in _MESH_GROUPS.finditer(text):
        axes = re.findall(r"'?([\w.\-]+)'?\s*=\s*(-?\d+)", m.group(1))
        names = [a for a, _ in axes]
        if not axes or min(int(n) for _, n in axes) < 1:
            return f"'{m.group(0)}': every mesh axis must have a size of at least 1"
        for item in filter(None, (i.strip() for i in m.group(2).split(","))):
            name = re.match(r"'?([\w.\-]*)'?", item).group(1)
            if name not in names and not (name.isdigit() and int(name) < len(names)):
                return f"'{m.group(0)}': '{name}' is not an axis of the mesh"
    for m in _LISTED.finditer(text):
        dims, ids = _int_list(m.group(1)), _int_list(m.group(2))
        tiles = math.prod(dims)
        if not dims or min(dims) < 1 or tiles > MAX_DEVICES:
            return f"'{m.group(0)}': tile counts must be from 1 to {MAX_DEVICES}"
        if tiles != len(ids) or min(ids) < 0:
            return f"'{m.group(0)}': {tiles} tiles but {len(ids)} device ids"
    return None


def parameter_problem(text: str) -> str | None:
    """A computation whose `parameter(N)` numbers are not below its number
    of parameters (XLA's parser CHECK-fails on one), or None."""
    numbers: list[int] = []
    name = None
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.endswith("{") and "=" not in stripped.split("(", 1)[0]:
            name, numbers = stripped.split(" ", 1)[0], []
        elif stripped == "}" and name is not None:
            if numbers and max(numbers) >= len(numbers):
                return (f"computation {name} has {len(numbers)} parameters "
                        f"but a parameter({max(numbers)})")
            name = None
        elif name is not None and " parameter(" in stripped:
            m = re.search(r" parameter\((\d+)\)", stripped)
            if m:
                numbers.append(int(m.group(1)))
    return None
