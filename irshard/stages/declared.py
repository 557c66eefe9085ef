"""The program as every stage declares it: each input and output as the
user's program has it (`TensorDecl`), and what every stage reports about
the program it came from (`ProgramInfo`).
"""

from __future__ import annotations

from dataclasses import dataclass

from irshard.core.dtypes import DType
from irshard.core.specs import MeshSpec, ShardingSpec
from irshard.hardware import targets


@dataclass(frozen=True)
class TensorDecl:
    """An input or output as declared: name (its path), dtype, global shape.
    A typed PRNG key is declared by its key data; `key` is its dtype's name
    (`key<fry>`)."""

    name: str
    dtype: DType
    shape: tuple[int, ...]
    key: str | None = None
    sharding: ShardingSpec | None = None      # as given, for an input
    donated: bool = False                     # an input XLA may reuse
    rule: str | None = None                   # what gave its sharding
    # The first input (index) whose sharding the same entry of a jitted
    # function's own `in_shardings` gave: one decision (a batch's prefix).
    sharing: int | None = None


@dataclass(frozen=True)
class ProgramInfo:
    """What every stage reports about the program it came from."""

    source: str                 # the file as the user named it
    function: str | None
    user_dir: str | None        # where the user's own sources live
    mesh: MeshSpec
    placement: targets.Placement    # target, platform, estimated, profile
    inputs: tuple[TensorDecl, ...]
    outputs: tuple[TensorDecl, ...]
    notes: tuple[str, ...] = ()

    @property
    def platform(self) -> str:
        return self.placement.platform

    @property
    def estimated(self) -> bool:
        """A GPU target compiled for stand-in CPUs."""
        return self.placement.estimated
