"""Brackets and quotes in printed IR: small helpers for the few places that
read text which no library parses for us (HLO attributes, pass options)."""

from __future__ import annotations

_PAIRS = {"(": ")", "{": "}", "[": "]", "<": ">"}


def end_of_string(text: str, i: int) -> int:
    """Index of the quote closing the string that opens at `text[i]`."""
    i += 1
    while i < len(text) and text[i] != '"':
        i += 2 if text[i] == "\\" else 1
    return i


def matching_bracket(text: str, start: int, brackets: str = "({[") -> int:
    """Index of the bracket closing the one at `start`; strings are skipped.
    Raises ValueError when it is never closed."""
    stack = []
    i = start
    while i < len(text):
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


def split_top_level(text: str, sep: str = ",", brackets: str = "({[") -> list[str]:
    """Splits on `sep` outside brackets and strings; drops empty parts."""
    closing = "".join(_PAIRS[b] for b in brackets)
    parts, depth, start, i = [], 0, 0, 0
    while i < len(text):
        c = text[i]
        if c == '"':
            i = end_of_string(text, i)
        elif c in brackets:
            depth += 1
        elif c in closing:
            depth -= 1
        elif c == sep and depth == 0:
            parts.append(text[start:i])
            start = i + 1
        i += 1
    parts.append(text[start:])
    return [p.strip() for p in parts if p.strip()]
