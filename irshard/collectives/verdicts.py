"""Whether a collective went: the verdict of a recompile without its
cause (`collectives.causes`), read from the two reports."""

from __future__ import annotations

import math
from collections import Counter

from irshard.core.specs import format_shape
from irshard.reporting.why import CHANGED, CONFIRMED, NOT_CONFIRMED


def _pass(c) -> str:
    """The part of the program a collective's op is in, by JAX's name for
    it: `jit(step)/jvp()` for the forward pass, `jit(step)/transpose(jvp())`
    for the backward (one line makes both; a recompile that removes the
    backward's collective and adds one to the forward has not kept it)."""
    return (c.op_name or "").rpartition("/")[0]


def _site(c) -> tuple | None:
    """A collective's line with the lines that called it: a helper's line
    is every caller's (a dense layer's kernel serves each projection), and
    each call's collectives are its own."""
    source = c.source
    if source is None:
        return None
    return tuple((f.file, f.line) for f in source.stack or ()) or \
        ((source.file, source.line),)


def collective_key(c) -> tuple:
    return c.kind, _site(c), _pass(c), tuple(sorted(c.mesh_axes or ()))


def _at_line(report, c) -> Counter:
    site = _site(c)
    if site is None:
        return Counter()
    return Counter(x.kind for x in report.collectives
                   if _site(x) == site and _pass(x) == _pass(c))


def _shape(c) -> tuple:
    """What tells one collective from another of its kind, axes and pass at
    one line: the arrays it makes (each weight's gather has its own)."""
    return c.dtype, c.shape, c.shapes


def verdict(c, baseline, without, decision_kind: str = "") -> tuple[str, str]:
    """(verdict, what the recompile showed) for collective `c` of
    `baseline`, against the report compiled `without` its cause. Where
    a line makes several collectives of one kind, axes and pass, `c` is
    told from the others by the arrays it makes: one of them going is not
    `c` going."""
    if c.shapes:
        return _combined_verdict(c, baseline, without, decision_kind)
    key, shape = collective_key(c), _shape(c)
    before = [x for x in baseline.collectives if collective_key(x) == key]
    after = [x for x in without.collectives if collective_key(x) == key]
    mine = [x for x in before if _shape(x) == shape]
    mine_after = [x for x in after if _shape(x) == shape]
    where = f" at {c.source.file}:{c.source.line}" if c.source else ""
    what = f"the {c.kind}{where}"
    it = "them" if decision_kind == "together" else "it"
    if len(mine_after) < len(mine):
        new = _at_line(without, c) - _at_line(baseline, c)
        # The same kind there making other arrays than before: `c` became
        # one of them.
        others = Counter(_shape(x) for x in after if _shape(x) != shape) \
            - Counter(_shape(x) for x in before if _shape(x) != shape)
        if new:
            became = ", ".join(f"{n} {kind}" for kind, n in sorted(new.items()))
            return CHANGED, f"without {it}, {what} becomes {became}"
        if others:
            made = ", ".join(sorted({x.shape_text for x in after
                                     if others[_shape(x)] > 0}))
            return CHANGED, f"without {it}, {what} makes {made} instead"
        gone = "goes" if not mine_after else f"goes ({len(mine)} -> {len(mine_after)})"
        return CONFIRMED, f"without {it}, {what} {gone}"
    moved = sum(x.bytes * x.executions for x in mine)
    moved_after = sum(x.bytes * x.executions for x in mine_after)
    if moved_after != moved:
        return CHANGED, (f"without {it}, {what} moves {moved_after} bytes "
                         f"instead of {moved}")
    if len(after) < len(before):
        return NOT_CONFIRMED, (f"without {it}, {what} stays ({c.shape_text}; "
                               f"another {c.kind} there goes)")
    return NOT_CONFIRMED, f"without {it}, {what} stays"


def _passes(c) -> set[str]:
    """The parts of the program a collective's ops are in: a combined
    collective's JAX op name lists its parts', `jit(step)/(a:b:c)`."""
    name = c.op_name or ""
    prefix, paren, rest = name.partition("/(")
    if paren and rest.endswith(")") and ":" in rest:
        return {f"{prefix}/{part.rpartition('/')[0]}".rstrip("/")
                for part in rest[:-1].split(":")}
    return {_pass(c)}


def _arrays(report, c, lines: set | None, passes: set[str]) -> Counter:
    """The arrays the collectives of `c`'s kind and axes make at `lines`
    (None: at any) in `passes`, each combined collective's one by one: (dtype, shape)
    -> how many."""
    axes = tuple(sorted(c.mesh_axes or ()))
    found: Counter = Counter()
    for x in report.collectives:
        if x.kind == c.kind and tuple(sorted(x.mesh_axes or ())) == axes \
                and (lines is None or x.source is not None
                     and (x.source.file, x.source.line) in lines) \
                and _passes(x) & passes:
            found.update(x.shapes or ((x.dtype, x.shape),))
    return found


def _combined_verdict(c, baseline, without, decision_kind: str) -> tuple[str, str]:
    """The verdict for a collective XLA combined from several: its arrays
    are looked for among the collectives of its kind and axes at any of
    its parts' lines, in their parts of the program, since the combined op
    takes the line of whichever part comes first (a GPT's gradients summed
    at the embedding's line, and without the embedding's sharding at the
    last layer's, all 21 of them still there)."""
    mine = Counter(c.shapes)
    parts = c.why.combined if c.why else ()
    # Where a part's line is not known (an input gathered), at any line.
    lines = None if not parts or any(v.source is None for v in parts) else \
        {(v.source.file, v.source.line) for v in parts}
    if lines is not None and c.source is not None:
        lines.add((c.source.file, c.source.line))
    passes = _passes(c)
    before = _arrays(baseline, c, lines, passes)
    after = _arrays(without, c, lines, passes)
    gone = sum(min(n, max(0, before[leaf] - after[leaf])) for leaf, n in mine.items())
    where = f" at {c.source.file}:{c.source.line}" if c.source else ""
    what = f"the {c.kind}{where} ({len(c.shapes)} combined)"
    it = "them" if decision_kind == "together" else "it"
    if gone == len(c.shapes):
        # What comes instead (a batch replicated: the weights' sums go,
        # the activations' partial sums come) is said, not judged.
        new = after - before
        came = ""
        if new:
            first = min(new, key=lambda leaf: (-math.prod(leaf[1]), leaf))
            came = (f" ({c.kind}s of {sum(new.values())} other arrays come, "
                    f"the largest {format_shape(*first)})")
        return CONFIRMED, f"without {it}, {what} goes{came}"
    if gone:
        return CHANGED, (f"without {it}, {gone} of the {len(c.shapes)} arrays of "
                         f"{what} go")
    moved = [x for x in without.collectives if x.kind == c.kind and x.shapes
             and Counter(x.shapes) == mine and x.source is not None
             and x.source != c.source]
    there = f", at {moved[0].source.file}:{moved[0].source.line} now" if moved else ""
    return NOT_CONFIRMED, f"without {it}, {what} stays{there}"
