"""Input values and checksums that do not depend on how an array is split.

Random inputs are a counter-based hash of (seed, argument, global index):
element [i, j, ...] has the same value whichever device or process makes it,
so a device materialises only its own shard and every mesh sees the same
array. Checksums are sums of a hash of (global index, value bits) modulo
2**64: shards are summed independently and combined, so equal arrays give
equal checksums on any mesh and any number of processes.

Pure NumPy; nothing here imports JAX.
"""

from __future__ import annotations

import math
import os
from typing import Sequence

import numpy as np

from irshard.core import files
from irshard.core.errors import InputError
from irshard.core.dtypes import DType
from irshard.core.specs import TensorType

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_MASK64 = (1 << 64) - 1

Index = tuple[slice, ...]


def _mix(x: np.ndarray) -> np.ndarray:
    """SplitMix64's finaliser, elementwise on uint64 (wrapping)."""
    with np.errstate(over="ignore"):
        x = (x ^ (x >> np.uint64(30))) * _M1
        x = (x ^ (x >> np.uint64(27))) * _M2
        return x ^ (x >> np.uint64(31))


def _bounds(index: Index, shape: Sequence[int]) -> list[tuple[int, int]]:
    bounds = []
    for s, n in zip(index, shape):
        start, stop, step = s.indices(n)
        if step != 1:
            raise ValueError("strided shard indices are not supported")
        bounds.append((start, stop))
    return bounds


def flat_indices(index: Index, shape: Sequence[int]) -> np.ndarray:
    """Row-major global flat index of every element of the block `index`."""
    if not shape:
        return np.zeros((), dtype=np.uint64)
    bounds = _bounds(index, shape)
    strides = [int(np.prod(shape[k + 1:], dtype=np.int64)) for k in range(len(shape))]
    flat = np.zeros([b - a for a, b in bounds], dtype=np.uint64)
    for k, ((a, b), stride) in enumerate(zip(bounds, strides)):
        axis = np.arange(a, b, dtype=np.uint64) * np.uint64(stride)
        flat = flat + axis.reshape([-1 if j == k else 1 for j in range(len(shape))])
    return flat


def _key(seed: int, argument: int) -> np.uint64:
    return _mix(np.array([(seed * 1_000_003 + argument + 1) & _MASK64],
                         dtype=np.uint64))[0]


# Default value ranges: floats in [-1, 1), integers in [0, 16).
DEFAULT_FLOAT_RANGE = (-1.0, 1.0)
DEFAULT_INT_RANGE = (0, 16)


def random_block(seed: int, argument: int, dtype: DType,
                 shape: Sequence[int], index: Index,
                 value_range: tuple[float, float] | None = None) -> np.ndarray:
    """The block `index` of argument `argument`'s random value.

    Floats are uniform in [-1, 1) (complex: both parts), integers in [0, 16)
    (usable as indices into any axis of at least 16), booleans fair coin
    flips; `value_range` (LO, HI) replaces the interval [LO, HI).
    """
    with np.errstate(over="ignore"):
        bits = _mix(flat_indices(index, shape) * _GOLDEN ^ _key(seed, argument))
    np_dtype = numpy_dtype(dtype)
    if dtype.name == "pred":
        return (bits & np.uint64(1)).astype(bool)
    if dtype.is_integer:
        low, high = value_range or DEFAULT_INT_RANGE
        span = int(high) - int(low)
        offset = bits if span >= 2 ** 64 else bits % np.uint64(span)
        # low + offset lies in the dtype's range: wrapping 64-bit arithmetic
        # then reading the bits as signed gives it exactly.
        with np.errstate(over="ignore"):
            values = offset + np.uint64(int(low) % 2 ** 64)
        if np_dtype.kind == "i":
            values = values.view(np.int64)
        return values.astype(np_dtype)
    low, high = value_range or DEFAULT_FLOAT_RANGE

    def uniform(b):
        unit = (b >> np.uint64(11)).astype(np.float64) * (2.0 ** -53)
        return low + (high - low) * unit

    if dtype.name.startswith("c"):
        return (uniform(bits) + 1j * uniform(_mix(bits))).astype(np_dtype)
    return uniform(bits).astype(np_dtype)


def check_range(value_range: tuple[float, float], dtype: DType,
                what: str) -> None:
    """A `--range` must be a non-empty interval the dtype can hold."""
    low, high = value_range
    if dtype.name == "pred":
        raise InputError(f"{what}: booleans take no range (they are fair "
                         f"coin flips)")
    if not (math.isfinite(low) and math.isfinite(high)) or not low < high:
        raise InputError(f"{what}: expected LO < HI, two finite numbers")
    if dtype.is_integer:
        if low != int(low) or high != int(high):
            raise InputError(f"{what}: an integer argument needs integer "
                             f"bounds")
        info = np.iinfo(numpy_dtype(dtype))
        if low < info.min or high - 1 > info.max:
            raise InputError(f"{what}: {dtype.name} holds [{info.min}, "
                             f"{info.max}]; [LO, HI) must lie within it")


def numpy_dtype(dtype: DType) -> np.dtype:
    if dtype.name == "bf16":
        import ml_dtypes
        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(dtype.numpy)


def _value_bits(block: np.ndarray) -> np.ndarray:
    """Each element's bits as uint64 (complex: both parts folded in)."""
    block = np.ascontiguousarray(block)
    if block.dtype == bool:
        return block.astype(np.uint64)
    if block.dtype.kind == "c":
        parts = block.view(np.float64 if block.dtype.itemsize == 16 else np.float32)
        parts = _value_bits(parts.reshape(block.shape + (2,)))
        return parts[..., 0] ^ _mix(parts[..., 1])
    unsigned = np.dtype(f"u{block.dtype.itemsize}")
    return block.view(unsigned).astype(np.uint64)


def block_checksum(block: np.ndarray, index: Index,
                   shape: Sequence[int]) -> int:
    """This block's share of the whole array's checksum."""
    with np.errstate(over="ignore"):
        hashed = _mix(flat_indices(index, shape) * _GOLDEN ^ _value_bits(block))
    return int(np.sum(hashed, dtype=np.uint64)) & _MASK64


def combine(parts: Sequence[int]) -> int:
    return sum(parts) & _MASK64


def format_checksum(value: int) -> str:
    return f"{value:016x}"


def load_npy(path: str, name: str, ttype: TensorType) -> np.ndarray:
    """A `.npy` file, memory-mapped, checked against the argument's type."""
    if not os.path.exists(files.here(path)):
        raise InputError(f"--input {name}: file '{path}' does not exist")
    files.check_regular(path, f"--input {name}: file")
    try:
        array = np.load(files.here(path), mmap_mode="r", allow_pickle=False)
    except (OSError, ValueError) as e:
        raise InputError(f"--input {name}: cannot read '{path}' as a .npy "
                         f"array: {str(e).splitlines()[0]}") from None
    if not isinstance(array, np.ndarray):
        raise InputError(f"--input {name}: '{path}' holds several arrays; "
                         f"give a .npy file with one")
    expected = numpy_dtype(ttype.dtype)
    if tuple(array.shape) != tuple(ttype.shape) or array.dtype != expected:
        raise InputError(
            f"--input {name}: '{path}' holds {array.dtype}{list(array.shape)} "
            f"but argument '{name}' is {ttype} ({expected}"
            f"{list(ttype.shape)})")
    return array
