"""Numbers and names as a report's cells: times and bytes in human units,
a change between two figures, names made printable, aligned tables."""

from __future__ import annotations

import re


def human_time(seconds: float) -> str:
    """`812 ns`, `12.3 us`, `1.23 ms`, `4.56 s`."""
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if seconds >= scale:
            return f"{seconds / scale:.3g} {unit}"
    return f"{seconds * 1e9:.3g} ns" if seconds else "0 s"


def human_bytes(n: int) -> str:
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"):
        if value < 1024 or unit == "EiB":
            return f"{n} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{n} B"


def change_text(a: float, b: float, fmt) -> str:
    """`+2.0 MiB (+49.6%)`: from `a` to `b`, each shown by `fmt`."""
    if a == b:
        return "="
    sign = "+" if b > a else "-"
    text = f"{sign}{fmt(abs(b - a))}"
    if a:
        text += f" ({sign}{abs(b - a) / a * 100:.3g}%)"
    return text


# What a terminal would act on rather than show: control characters (an
# escape sequence could clear the screen or retitle the window), line and
# paragraph separators, and the marks that reorder text.
_UNPRINTABLE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u200e\u200f"
                          "\u202a-\u202e\u2066-\u2069]")


def printable(text: str) -> str:
    """`text` with what a terminal would act on written as Python writes it
    in a string (`\\x1b`, `\\u202e`): a name from a program (a pytree key,
    a file name) is shown, never run."""
    def escaped(m: re.Match) -> str:
        code = ord(m.group())
        return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"
    return _UNPRINTABLE.sub(escaped, text)


def table(header: list[str], rows: list[list[str]], indent: str = "  ") -> list[str]:
    """Left-aligned columns; numeric columns (all digits) right-aligned."""
    if not rows:
        return []
    header = [printable(str(c)) for c in header]
    rows = [[printable(str(c)) for c in r] for r in rows]
    widths = [max(len(str(r[i])) for r in [header] + rows)
              for i in range(len(header))]
    numeric = [all(str(r[i]).replace(",", "").isdigit() for r in rows)
               for i in range(len(header))]

    def fmt(row):
        cells = [str(c).rjust(w) if num else str(c).ljust(w)
                 for c, w, num in zip(row, widths, numeric)]
        return (indent + "  ".join(cells)).rstrip()

    return [fmt(header)] + [fmt(r) for r in rows]
