"""Which ops a constraint applies to: `irshard-constrain{match=...}` and
`--constrain MATCH=SPEC`. Pure Python, so the command line checks a match
before JAX or MLIR load."""

from __future__ import annotations

from dataclasses import dataclass

from irshard.core.errors import SpecError


@dataclass(frozen=True)
class Match:
    """What `match=` selects: ops by name, by source line, or both, and
    optionally the N-th of them (from 1, in program order)."""

    op: str | None = None
    file: str | None = None
    line: int | None = None
    index: int | None = None

    @property
    def single(self) -> bool:
        """Whether it names one op (by index), not every op that fits."""
        return self.index is not None

    def op_matches(self, name: str) -> bool:
        return self.op is None or name == self.op or name.split(".", 1)[-1] == self.op


_FORMS = ("OP (stablehlo.dot_general or dot_general), FILE:LINE, "
          "OP@FILE:LINE, each with #N for the N-th match (e.g. "
          "dot_general@model.py:12#2)")


def parse_match(text: str) -> Match:
    """`dot_general`, `model.py:12`, `dot_general@model.py:12`, each with an
    optional `#N`."""
    body, sep, index_text = text.rpartition("#")
    if not sep:
        body, index_text = text, ""
    index = None
    if sep:
        if not index_text.isdigit() or int(index_text) < 1:
            raise SpecError(f"match '{text}': '#{index_text}' is not an index "
                            f"from 1; forms: {_FORMS}")
        index = int(index_text)
    op, at, where = body.partition("@")
    if not at:
        op, where = None, body
        head, colon, tail = where.rpartition(":")
        if not (colon and tail.isdigit() and head):
            op, where = body, ""
    file = line = None
    if where:
        head, colon, tail = where.rpartition(":")
        if not (colon and tail.isdigit() and head):
            raise SpecError(f"match '{text}': '{where}' is not FILE:LINE; "
                            f"forms: {_FORMS}")
        file, line = head, int(tail)
    if op is not None and not op.replace(".", "").replace("_", "").isalnum():
        raise SpecError(f"match '{text}': '{op}' is not an op name; forms: {_FORMS}")
    if op is None and file is None:
        raise SpecError(f"match '{text}' names no op and no line; forms: {_FORMS}")
    return Match(op, file, line, index)
