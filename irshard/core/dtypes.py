"""Element types: their names in the spec grammar, in NumPy, in HLO and
in MLIR, and their sizes."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class DType:
    """An element type: its name in the grammar, in NumPy, and its size."""

    name: str
    numpy: str
    itemsize: int

    @property
    def is_float(self) -> bool:
        return self.name[0] in "fbc"

    @property
    def is_integer(self) -> bool:
        return self.name[0] in "iu"

    @property
    def is_64bit(self) -> bool:
        """Needs JAX's 64-bit mode (i64, u64, f64, c128)."""
        return self.name in ("i64", "u64", "f64", "c128")


_DTYPE_LIST = [
    DType("pred", "bool", 1),
    DType("i8", "int8", 1),
    DType("i16", "int16", 2),
    DType("i32", "int32", 4),
    DType("i64", "int64", 8),
    DType("u8", "uint8", 1),
    DType("u16", "uint16", 2),
    DType("u32", "uint32", 4),
    DType("u64", "uint64", 8),
    DType("f16", "float16", 2),
    DType("bf16", "bfloat16", 2),
    DType("f32", "float32", 4),
    DType("f64", "float64", 8),
    DType("c64", "complex64", 8),
    DType("c128", "complex128", 16),
]
DTYPES: dict[str, DType] = {d.name: d for d in _DTYPE_LIST}

# Other spellings of the same types: NumPy's names (what `jax.typeof` prints),
# `bool`, and HLO's signed-integer names (`s32`).
_DTYPE_ALIASES: dict[str, str] = {"bool": "pred"}
for _d in _DTYPE_LIST:
    _DTYPE_ALIASES[_d.numpy] = _d.name
    if _d.name.startswith("i"):
        _DTYPE_ALIASES["s" + _d.name[1:]] = _d.name

# MLIR's spelling of element types (`i1`, `ui32`, `complex<f32>`).
_MLIR_DTYPES = {"i1": "pred", "complex<f32>": "c64", "complex<f64>": "c128"}
for _d in _DTYPE_LIST:
    if _d.name.startswith("u"):
        _MLIR_DTYPES["ui" + _d.name[1:]] = _d.name
    elif _d.name != "pred" and not _d.name.startswith("c"):
        _MLIR_DTYPES[_d.name] = _d.name

DTYPE_NAMES = " ".join(DTYPES)


def lookup_dtype(name: str) -> DType | None:
    """The dtype called `name` in the grammar, NumPy, or HLO; else None."""
    canonical = _DTYPE_ALIASES.get(name, name)
    return DTYPES.get(canonical)


def dtype_from_mlir(name: str) -> DType | None:
    """The dtype of an MLIR element type such as `f32`, `i1` or `ui8`."""
    canonical = _MLIR_DTYPES.get(name)
    return DTYPES.get(canonical) if canonical else None
