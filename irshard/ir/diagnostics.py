"""MLIR's diagnostics as `irshard opt` shows them (one line each, notes
indented, at the line of the text parsed), and `--verify-diagnostics`: the
`expected-*` comments read and matched as mlir-opt matches them."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from irshard.core.errors import IrshardError


@dataclass
class Diagnostic:
    """One diagnostic MLIR (or an irshard pass) produced: its severity
    (`error`, `warning`, `remark`, `note`), where (the parsed text's line
    and column; None where it has no location in the text, `other` where
    it points into another file), its message, and its notes."""

    kind: str
    line: int | None
    column: int
    message: str
    other: str | None = None
    notes: list["Diagnostic"] = field(default_factory=list)


def diagnostic(info: Any) -> Diagnostic:
    from irshard.backend import locations
    kind = str(info.severity).rsplit(".", 1)[-1].lower()
    found = locations.file_locations(info.location)
    line, column, other = None, 0, None
    if found:
        file, line, column, _ = found[0]
        if file not in ("-", ""):
            other = f"{file}:{line}:{column}"
            line = None
    return Diagnostic(kind, line, column, info.message, other,
                      [diagnostic(n) for n in getattr(info, "notes", [])])


def infos(error: Any) -> list[Diagnostic]:
    return [diagnostic(d) for d in getattr(error, "error_diagnostics", [])]


def failure(kind: type, message: str, diagnostics: list[Diagnostic],
             source: str, first_line: int) -> IrshardError:
    """An error whose line is `message` (MLIR's first diagnostic), followed
    by MLIR's other diagnostics and notes, indented; it keeps them all
    (`diagnostics`) for `--verify-diagnostics`."""
    rest = diagnostic_lines(diagnostics, source, first_line)[1:]
    error = kind(message + "".join(f"\n  {line}" for line in rest))
    error.diagnostics = diagnostics
    return error


def diagnostic_lines(diagnostics: list[Diagnostic], source: str,
                     first_line: int = 1) -> list[str]:
    """`file:line:col: severity: message` for each diagnostic and its
    notes, as mlir-opt prints them."""
    lines = []
    for d in diagnostics:
        for one in [d] + d.notes:
            where = (f"{source}:{one.line + first_line - 1}:{one.column}"
                     if one.line is not None else one.other or source)
            lines.append(f"{where}: {one.kind}: {one.message}")
    return lines


_EXPECTED = re.compile(r"expected-(error|note|remark|warning)(-re)? *"
                       r"(@([+-][0-9]+|above|below|unknown))? *\{\{(.*)\}\}$")


@dataclass
class Expected:
    """An `expected-<kind>` comment: the diagnostic it asks for."""

    kind: str
    line: int | None            # in the chunk, 1-based; None: @unknown
    text: str
    at: int                     # the comment's own line
    pattern: re.Pattern | None = None
    matched: bool = False

    def matches(self, message: str) -> bool:
        if self.pattern is not None:
            return self.pattern.search(message) is not None
        return self.text in message


def _regex(text: str) -> re.Pattern:
    """`-re`: literal text with `{{regex}}` parts."""
    parts, pos = [], 0
    for m in re.finditer(r"\{\{(.*?)\}\}", text):
        parts.append(re.escape(text[pos:m.start()]))
        parts.append(f"(?:{m.group(1)})")
        pos = m.end()
    parts.append(re.escape(text[pos:]))
    return re.compile("".join(parts))


def expected_diagnostics(text: str) -> tuple[list[Expected], list[tuple[int, str]]]:
    """The `expected-*` comments of a chunk, and (line, problem) for each
    that cannot be read (a bad `-re` regex)."""
    found: list[Expected] = []
    problems = []
    lines = text.split("\n")
    last_plain = 0
    below: list[Expected] = []
    for number, line in enumerate(lines, 1):
        m = _EXPECTED.search(line.rstrip())
        if m is None:
            for e in below:
                e.line = number
            below.clear()
            last_plain = number
            continue
        e = Expected(m.group(1), number, m.group(5), number)
        if m.group(2):
            try:
                e.pattern = _regex(e.text)
            except re.error as err:
                problems.append((number, f"invalid regex in expected-"
                                         f"{e.kind}-re: {err}"))
                continue
        offset = m.group(4)
        if offset is None:
            pass
        elif offset[0] in "+-":
            e.line = number + int(offset)
        elif offset == "unknown":
            e.line = None
        elif offset == "above":
            e.line = last_plain
        else:
            e.line = len(lines)          # a dangling @below
            below.append(e)
        found.append(e)
    return found, problems


# An operation as MLIR prints it: its results, then `dialect.op` (or its
# quoted generic form).
_OPERATION = re.compile(r'(?:%[\w#:.$-]+(?:\s*,\s*%[\w#:.$-]+)*\s*=\s*)?'
                        r'"?[A-Za-z_][\w$]*\.[\w$.]+"?(?:\s|\(|<|\{|$)')


def _prints_operation(diagnostic: Diagnostic, note: Diagnostic) -> bool:
    """Whether `note` is the one MLIR attaches to print the operation at
    fault: mlir-opt turns it off while it verifies diagnostics (MLIR's own
    `see current operation:`, and Shardy's warnings that print the op
    alone), where MLIR's Python context cannot."""
    if note.message.startswith("see current operation:"):
        return True
    return note.kind == "note" and note.line == diagnostic.line \
        and note.other == diagnostic.other and _OPERATION.match(note.message) is not None


def verify(diagnostics: list[Diagnostic], expected: list[Expected],
           source: str, first_line: int) -> list[str]:
    """What differs between the diagnostics a chunk produced and those it
    expects, as mlir-opt's verifier words it; empty when all match."""
    problems = []

    def where(line: int | None, column: int = 0) -> str:
        if line is None:
            return source
        return f"{source}:{line + first_line - 1}" + (f":{column}" if column else "")

    for d in diagnostics:
        for one in [d] + [n for n in d.notes if not _prints_operation(d, n)]:
            near = None
            done = False
            for e in expected:
                if one.other is not None or e.line != one.line \
                        or not e.matches(one.message):
                    continue
                if e.kind == one.kind:
                    e.matched = done = True
                    break
                near = e
            if done:
                continue
            if near is not None:
                problems.append(f"{where(near.at)}: error: '{one.kind}' diagnostic "
                                f"emitted when expecting a '{near.kind}'")
            else:
                at = where(one.line, one.column) if one.other is None else one.other
                problems.append(f"{at}: error: unexpected {one.kind}: {one.message}")
    for e in expected:
        if not e.matched:
            problems.append(f"{where(e.at)}: error: expected {e.kind} "
                            f"\"{e.text}\" was not produced")
    return problems
