"""A run's inputs: the values given for them (the API's arrays, `--input`
files read slice by slice), the seeded values drawn for the rest, each
checked against the program's inputs, and the checksums of what ran."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from irshard import backend
from irshard.core import tree
from irshard.core.errors import InputError, UsageError
from irshard.core.specs import TensorType
from irshard.loading import data
from irshard.stages.declared import TensorDecl

# `options` below is the run's `execution.RunOptions` (its seed, --input
# files, --range rules and the values given).


def given_values(decls: Sequence[TensorDecl],
                  options: Any) -> dict[str, np.ndarray]:
    """The concrete values given for inputs, as whole host arrays of the
    inputs' types. In a multi-process run every process computed its own
    (each calls the `--args` function); they must be the same values, or
    the run would mix several programs' inputs: an input whose values
    differ between processes is an error."""
    paths = dict(options.inputs)
    values: dict[str, np.ndarray] = {}
    for decl in decls:
        if decl.name not in options.given or decl.name in paths:
            continue
        value = options.given[decl.name]
        # A global array (one spanning processes) is gathered whole.
        value = backend.gather(value) if hasattr(value, "addressable_shards") \
            else np.asarray(value)
        if value.shape != tuple(decl.shape):
            raise InputError(f"input '{decl.name}': the value given has shape "
                             f"{list(value.shape)}, the program's input "
                             f"{list(decl.shape)}")
        if value.dtype != decl.dtype.numpy:
            value = value.astype(decl.dtype.numpy)
        values[decl.name] = value
    if values:
        names = list(values)
        sums = backend.allgather_ints([data.block_checksum(
            values[n], tuple(slice(0, k) for k in values[n].shape),
            values[n].shape) for n in names])
        for i, name in enumerate(names):
            differ = [p for p, row in enumerate(sums) if row[i] != sums[0][i]]
            if differ:
                raise UsageError(
                    f"input '{name}' has other values in process {differ[0]} "
                    f"than in process 0: each process computes the given "
                    f"values itself, so they must not depend on the process "
                    f"(seed their random numbers), or give --random to draw "
                    f"every input from --seed")
    return values


def input_source(index: int, decl: TensorDecl, options: Any,
                  given: Mapping[str, np.ndarray]):
    """A function from a block index to the input's values there."""
    if decl.name in given:
        value = given[decl.name]
        return (lambda idx: np.array(value[idx])), "given"
    paths = dict(options.inputs)
    if decl.name in paths:
        array = data.load_npy(paths[decl.name], decl.name,
                              TensorType(decl.dtype, decl.shape))
        return (lambda idx: np.array(array[idx])), paths[decl.name]
    rule = tree.first_match(options.range_rules(), decl.name)
    value_range = rule.value if rule else None
    origin = "random"
    if value_range is not None:
        data.check_range(value_range, decl.dtype,
                         f"--range {decl.name}={value_range[0]:g},"
                         f"{value_range[1]:g}")
        origin = f"random [{value_range[0]:g}, {value_range[1]:g})"
    return (lambda idx: data.random_block(options.seed, index, decl.dtype,
                                          decl.shape, idx, value_range)), origin


@dataclass(frozen=True)
class Digest:
    """What is computed from every element of an array: its checksum and
    how many elements are not finite."""

    checksum: str
    nan: int
    inf: int


def digest(array) -> Digest:
    """The array's digest, combined over shards and processes."""
    local, nan, inf = 0, 0, 0
    for shard in array.addressable_shards:
        if shard.replica_id == 0:
            block = np.asarray(shard.data)
            local = data.combine([local, data.block_checksum(
                block, shard.index, array.shape)])
            if block.dtype.kind in "fc" or block.dtype.name == "bfloat16":
                nan += int(np.count_nonzero(np.isnan(block)))
                inf += int(np.count_nonzero(np.isinf(block)))
    parts = backend.allgather_ints([local, nan, inf])
    return Digest(data.format_checksum(data.combine(p[0] for p in parts)),
                  sum(p[1] for p in parts), sum(p[2] for p in parts))


def check_named(names: Sequence[str], options: Any) -> None:
    """Each --input names an input, each --range matches one drawn at
    random (not one given a concrete value)."""
    for name, _ in options.inputs:
        if name not in names:
            raise InputError(f"--input {name}: there is no input '{name}'; "
                             f"the inputs are {tree.listing(names)}")
    for rule in tree.unmatched(options.range_rules(), names):
        raise InputError(f"--range {rule.text}: '{rule.pattern}' matches no "
                         f"input; the inputs are {tree.listing(names)}")
    drawn = [n for n in names if n not in options.given]
    for rule in tree.unmatched(options.range_rules(), drawn):
        raise InputError(f"--range {rule.text}: '{rule.pattern}' matches only "
                         f"inputs given concrete values, which run as they "
                         f"are; --random draws every input, --range included")
