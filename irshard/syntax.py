"""Brackets and quotes in printed IR: small helpers for the few places that
read text which no library parses for us (HLO attributes, pass options)."""

from __future__ import annotations

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


_INNER = _nested(5)
_ATTRIBUTE = re.compile(
    r', ([a-z_][a-z0-9_]*)=((?:[^,()\[\]{}"\s]++|' + _QUOTED + r'|\((?:'
    + _INNER + r')*+\)|\[(?:' + _INNER + r')*+\]|\{(?:' + _INNER
    + r')*+\}| (?![a-z_][a-z0-9_]*=))++)')


def attribute_pairs(text: str, pos: int = 0) -> dict[str, str] | None:
    """`, a=1, b={x, y}` from `pos` on as {key: value}, where every
    attribute is a plain `key=value` with no top-level comma inside the
    value; None where the text needs `split_top_level` (what it returns
    then is what a split gives)."""
    attrs: dict[str, str] = {}
    for m in _ATTRIBUTE.finditer(text, pos):
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
