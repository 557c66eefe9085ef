"""A candidate of the decision engine: one change to the program, as the
flags `irshard compile` appends for it and as the parts a compile in this
process applies to a traced program.

`suggest` proposes local changes (an input's sharding, a constraint at a
line, an output left as computed); `search` proposes whole strategies (a
mesh and its rule set) and a factory's knobs; both are `Change`s, compiled
by the same compilers and judged by the same verdict.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import Any

from irshard.core.knobs import knob_text


@dataclass(frozen=True)
class Change:
    """What a candidate changes, and what it is, in words.

    `mesh` and `rules` replace the program's (`--mesh`, `--shard`: a search's
    whole strategy); `overrides` apply before the program's own rules
    (`--override-shard`); `outputs`, `constraints` and `knobs` add theirs
    (`--out-shard`, `--constrain`, a factory's `--knob`). `inputs` say the
    same as `rules` and `overrides` by the traced program's input index,
    for a compile of that program in this process (which cannot change its
    mesh or knobs)."""

    description: str = ""
    mesh: tuple[tuple[str, int], ...] | None = None
    rules: tuple[tuple[str, str], ...] = ()
    overrides: tuple[tuple[str, str], ...] = ()
    outputs: tuple[tuple[int, str], ...] = ()
    constraints: tuple[tuple[str, str], ...] = ()
    knobs: tuple[tuple[str, Any], ...] = ()
    inputs: tuple[tuple[int, str], ...] = ()
    # A search's name of the strategy (`FSDP+TP`), and where a candidate
    # came from: canonical, combined, move, suggestion, knobs.
    strategy: str = ""
    origin: str = "suggestion"
    # Proposed for a program that does not fit its memory.
    memory: bool = False
    # What a table calls it, where shorter than its description.
    label: str = ""

    @property
    def name(self) -> str:
        return self.label or self.description or self.command_text

    @property
    def mesh_text(self) -> str:
        return ",".join(f"{name}={size}" for name, size in self.mesh or ())

    @property
    def knobs_text(self) -> str:
        """The knobs as the factory takes them: `remat=full batch=64`."""
        return " ".join(f"{k}={knob_text(v)}" for k, v in self.knobs)

    @property
    def key(self) -> tuple[Any, ...]:
        """What decides the compile: two changes of the same key are one."""
        return (self.mesh, self.rules, self.overrides, self.outputs,
                self.constraints, tuple((k, repr(v)) for k, v in self.knobs))

    def flags(self) -> list[str]:
        """The flags that make it, appended to the program's command."""
        flags: list[str] = []
        if self.mesh is not None:
            flags += ["--mesh", self.mesh_text]
        for name, value in self.knobs:
            flags += ["--knob", f"{name}={knob_text(value)}"]
        for pattern, spec in self.rules:
            flags += ["--shard", f"{pattern}={spec}"]
        for pattern, spec in self.overrides:
            flags += ["--override-shard", f"{pattern}={spec}"]
        for index, spec in self.outputs:
            flags += ["--out-shard", f"{index}={spec}"]
        for match, spec in self.constraints:
            flags += ["--constrain", f"{match}={spec}"]
        return flags

    @property
    def command_text(self) -> str:
        return " ".join(shlex.quote(f) for f in self.flags())

