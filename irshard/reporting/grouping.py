"""Collectives summed by what a reader would change (`--group-by`).

- `line`: the innermost line of the model's code (the row's `source`).
- `scope`: JAX's name stack, the model's own names for its parts.
- `cause`: the decision `--explain` names as the collective's cause (a
  constraint's line, an input's or output's sharding, an op's kind).
- `caller`: the line that called a helper. A frame reached along several
  paths (a dense layer's `__call__` and the kernel it calls, a
  sharding-constraint shim) is a helper: a row is summed under the first
  frame of its stack, from the innermost outwards, that only one path
  reaches — the attention layer's line that projects, rather than the
  dense layer all projections share.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from irshard.core.frames import (GROUPINGS, SourceLocation, called_once, chain_of,
                                  frame_paths)
from irshard.core.errors import UsageError
from irshard.reporting.report import Collective
from irshard.reporting.why import Cause

NONE = "-"


def checked(by: str | None) -> str | None:
    if by is not None and by not in GROUPINGS:
        raise UsageError(f"unknown grouping '{by}'; group_by is one of "
                         f"{', '.join(GROUPINGS)}")
    return by


def keys(collectives: Sequence[Collective], by: str) -> list[str]:
    """Each collective's group under `by`, in order."""
    if by == "scope":
        return [c.scope or NONE for c in collectives]
    if by == "line":
        return [str(c.source) if c.source else NONE for c in collectives]
    if by == "cause":
        return [c.why.cause.decision.key()
                if c.why is not None and c.why.cause is not None else NONE
                for c in collectives]
    # Collectives alike share one source object: each chain is read once.
    chains: dict[int, tuple[SourceLocation, ...]] = {}
    for c in collectives:
        if id(c.source) not in chains:
            chains[id(c.source)] = chain_of(c.source)
    paths = frame_paths(chains.values())
    chosen = {key: str(chain[called_once(chain, paths)]) if chain else NONE
              for key, chain in chains.items()}
    return [chosen[id(c.source)] for c in collectives]


@dataclass(frozen=True)
class CauseTotal:
    """The collectives one cause made (`cause` None: those with none
    named), what they move per run, their simulated time and its share of
    all the collectives' time (None where a collective has no time)."""

    cause: Cause | None
    collectives: tuple[Collective, ...]
    bytes_per_run: int
    time_s: float | None
    share: float | None


def by_cause(collectives: Sequence[Collective]) -> list[CauseTotal]:
    """The collectives summed by cause (`--group-by cause`), the costliest
    first (by time where every collective has one, else by bytes)."""
    groups: dict[str, list[Collective]] = {}
    for c, key in zip(collectives, keys(collectives, "cause")):
        groups.setdefault(key, []).append(c)
    timed = all(c.time_s is not None for c in collectives)
    total = sum(c.time_s * c.executions for c in collectives) if timed else 0.0
    found = []
    for key, group in groups.items():
        cause = group[0].why.cause if key != NONE else None
        spent = sum(c.time_s * c.executions for c in group) if timed else None
        found.append(CauseTotal(cause, tuple(group),
                                sum(c.bytes * c.executions for c in group), spent,
                                spent / total if timed and total else None))
    return sorted(found, key=lambda t: (-(t.time_s or 0.0), -t.bytes_per_run,
                                        t.cause.decision.key() if t.cause else NONE))
