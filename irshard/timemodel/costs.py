"""What an instruction computes and moves, as XLA's cost analysis counts
it: flops (two per multiply-add of a dot, one per element of an
elementwise op), transcendentals apart, and the bytes it reads and writes
(a slice what it keeps, an in-place update its update, a fusion what its
fused instructions touch). Each fused computation is read once, and
computations printed alike (an unrolled model's copies of one fusion,
where the view tells them: `ScannedModule.form`) once for all.

Of the bytes read, `strided` are those read in an order other than their
layout's: the operands of a transpose or a copy that changes the order of
the dimensions in memory, and, in a fusion, every parameter that flows
into one (the fusion walks its result in the transposed order, so each such
operand is read one element per cache line). Of them, `sliced` are large
slices of larger arrays (a scan's layer of its stacked weights and
activations): their rows lie a large power of two apart in every operand
alike, so they fall on the same few cache sets, and a CPU reads them many
times slower than a stream (`rates.Rates.sliced_strided_bandwidth`;
measured on this machine's CPU: 1 MiB slices 30 times slower, 256 KiB
ones 4 times, separate arrays about as fast as a stream).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Callable

from irshard.xla.convolution import convolution_flops
from irshard.xla.hlo import HloModuleView, Instruction
from irshard.xla.shapes import ArrayShape, shape_bytes, shape_leaves

# What moves no data and computes nothing.
FREE = frozenset({
    "parameter", "constant", "get-tuple-element", "tuple", "bitcast",
    "after-all", "partition-id", "replica-id", "opt-barrier",
    "add-dependency", "domain", "get-dimension-size", "set-dimension-size",
})
_TRANSCENDENTAL = frozenset({
    "exponential", "exponential-minus-one", "log", "log-plus-one", "tanh",
    "logistic", "sqrt", "rsqrt", "cbrt", "power", "sine", "cosine", "tan",
    "atan2", "erf",
})
# Ops that move data without arithmetic.
_MOVES = frozenset({
    "copy", "copy-start", "transpose", "broadcast", "slice", "dynamic-slice",
    "dynamic-update-slice", "concatenate", "pad", "reshape", "reverse",
    "gather", "scatter", "iota", "convert", "select", "sort",
})
# Ops that read only part of their first operand: what they keep.
_SLICING = frozenset({"dynamic-slice", "slice", "gather"})


@dataclass(frozen=True)
class Cost:
    flops: float = 0.0
    transcendentals: float = 0.0
    bytes: float = 0.0
    strided: float = 0.0       # of `bytes`: read out of their layout's order
    sliced: float = 0.0        # of `strided`: large slices of larger arrays
    products: float = 0.0      # of `flops`: matrix products and convolutions
    wide: float = 0.0          # of `products`: those of 32- or 64-bit floats

    def __add__(self, other: "Cost") -> "Cost":
        return Cost(self.flops + other.flops,
                    self.transcendentals + other.transcendentals,
                    self.bytes + other.bytes, self.strided + other.strided,
                    self.sliced + other.sliced, self.products + other.products,
                    self.wide + other.wide)


# The element types whose products a GPU multiplies at its f32 rate
# (`rates.Rates.wide_flops`), not at its 16-bit one.
WIDE = frozenset({"f32", "f64", "c64", "c128"})
# The library calls a GPU executable makes for a matrix product (cuBLAS,
# cuBLASLt): the product's dimension numbers are in their backend config.
GEMM_TARGETS = frozenset({"__cublas$gemm", "__cublas$lt$matmul",
                          "__cublas$lt$matmul$f8"})


def gemm_dimensions(inst: Instruction) -> dict | None:
    """A library matrix product's dimension numbers (`dot_dimension_numbers`
    of its `gemm_backend_config`), or None where `inst` is no such call or
    they cannot be read."""
    if inst.opcode != "custom-call" or \
            inst.attrs.get("custom_call_target", "").strip('"') not in GEMM_TARGETS:
        return None
    config = inst.backend_config.get("gemm_backend_config")
    found = config.get("dot_dimension_numbers") if isinstance(config, dict) else None
    return found if isinstance(found, dict) else None


# The smallest slice whose rows, read across, fall on the same cache sets
# as its neighbours' (see the module's docstring).
ALIASED_SLICE_BYTES = 512 * 1024

# The layout printed after an array shape: `f32[8,4]{1,0}` (a TPU's tiling
# after a colon).
_LAYOUT = re.compile(r"= [a-z][a-z0-9]*\[[^\]]*\]\{([\d,]*)[:}]")


def layout(inst: Instruction) -> tuple[int, ...] | None:
    """The minor-to-major order of `inst`'s (array) result, where printed."""
    m = _LAYOUT.search(inst.text)
    if m is None or not isinstance(inst.shape, ArrayShape):
        return None
    found = tuple(int(d) for d in m.group(1).split(",") if d)
    return found if sorted(found) == list(range(len(inst.shape.dims))) else None


def reorders(inst: Instruction, operand: Instruction | None) -> bool:
    """Whether `inst` (a transpose or a copy) reads `operand` in an order
    other than its layout's: the dimensions of more than one element, in
    the order memory holds them, differ between the two."""
    if inst.opcode not in ("transpose", "copy") or operand is None:
        return False
    out, source = layout(inst), layout(operand)
    if out is None or source is None or not isinstance(operand.shape, ArrayShape):
        return False
    if inst.opcode == "transpose":
        permutation = _dims(inst.attrs.get("dimensions"))
        if sorted(permutation) != list(range(len(out))):
            return False
        out = tuple(permutation[d] for d in out)
    dims = operand.shape.dims
    return [d for d in out if dims[d] > 1] != [d for d in source if dims[d] > 1]


def _elements(shape) -> int:
    return sum(math.prod(leaf.dims) for leaf in shape_leaves(shape))


def _dims(text: str) -> list[int]:
    return [int(d) for d in re.findall(r"\d+", text or "")]


class Costs:
    """Flops, transcendentals and bytes of instructions, as XLA's cost
    analysis counts them, each computation's read once."""

    def __init__(self, view: HloModuleView):
        self.view = view
        # Costs by the computation's form where the view tells computations
        # printed alike (an unrolled model's copies of one fusion), else by
        # its name.
        self._form: Callable[[str], str] = getattr(view, "form", str)
        self._inner: dict[str, Cost] = {}
        self._traffic: dict[str, tuple[dict[int, float], float | None]] = {}
        self._strided: dict[str, frozenset[int]] = {}

    def shape_of(self, name: str, computation: str):
        inst = self.view.get(name, computation)
        return inst.shape if inst is not None else ()

    def arithmetic(self, inst: Instruction, fused: str | None = None) -> Cost:
        """What `inst` computes, without memory traffic (`fused`: the
        computation a fusion calls, where known)."""
        op = inst.opcode
        if op in FREE or op in _MOVES:
            return Cost()
        if op == "fusion":
            return self.inner(_fused(inst) if fused is None else fused)
        if op == "custom-call":
            return self._library_call(inst)
        out = _elements(inst.shape)
        if op == "dot":
            return self._product(inst, out, _dims(inst.attrs.get("lhs_contracting_dims")))
        if op == "convolution" and len(inst.operands) > 1:
            lhs, rhs = (self.shape_of(o, inst.computation) for o in inst.operands[:2])
            if isinstance(lhs, ArrayShape) and isinstance(rhs, ArrayShape) \
                    and isinstance(inst.shape, ArrayShape):
                flops = convolution_flops(lhs.dims, rhs.dims, inst.shape.dims,
                                          inst.attrs)
                return Cost(flops=flops, products=flops,
                            wide=flops if lhs.dtype in WIDE else 0.0)
        if op in ("reduce", "reduce-window", "all-reduce", "reduce-scatter"):
            inputs = sum(_elements(self.shape_of(o, inst.computation))
                         for o in inst.operands[:max(1, len(inst.operands) // 2)])
            return Cost(flops=float(inputs))
        if op in _TRANSCENDENTAL:
            return Cost(transcendentals=float(out))
        return Cost(flops=float(out))

    def _product(self, inst: Instruction, out: int, contracting) -> Cost:
        """A matrix product of `out` elements, contracting the dimensions
        `contracting` of its first operand."""
        lhs = self.shape_of(inst.operands[0], inst.computation) \
            if inst.operands else ()
        dims = lhs.dims if isinstance(lhs, ArrayShape) else ()
        k = math.prod(dims[int(d)] for d in contracting if int(d) < len(dims))
        flops = 2.0 * out * k
        return Cost(flops=flops, products=flops,
                    wide=flops if isinstance(lhs, ArrayShape) and lhs.dtype in WIDE
                    else 0.0)

    def _library_call(self, inst: Instruction) -> Cost:
        """What a custom call computes where it is a library's matrix
        product (`known`); nothing otherwise."""
        numbers = gemm_dimensions(inst)
        if numbers is None:
            return Cost()
        result = _result(inst.shape)
        return self._product(inst, _elements(result) if result is not None else 0,
                             numbers.get("lhs_contracting_dimensions") or ())

    @staticmethod
    def known(inst: Instruction) -> bool:
        """Whether what `inst` computes can be counted: everything but a
        custom call other than a library's matrix product."""
        return inst.opcode != "custom-call" or gemm_dimensions(inst) is not None

    def inner(self, computation: str) -> Cost:
        """What a fused computation computes."""
        form = self._form(computation)
        found = self._inner.get(form)
        if found is None:
            found = Cost()
            for inst in self.view.instructions_of(computation):
                found = found + self.arithmetic(inst)
            self._inner[form] = found
        return found

    def memory(self, inst: Instruction, fused: str | None = None) -> float:
        """Bytes `inst` reads and writes: a slice reads only what it keeps,
        an in-place update writes only its update, and a fusion's operands
        and result count as its fused instructions use them."""
        op = inst.opcode
        if op in FREE:
            return 0.0
        if op in _SLICING:
            return 2.0 * shape_bytes(inst.shape)
        if op == "dynamic-update-slice" and len(inst.operands) > 1:
            return 2.0 * shape_bytes(self.shape_of(inst.operands[1], inst.computation))
        if op == "custom-call" and gemm_dimensions(inst) is not None:
            # The product and its operands; its scratch space (the tuple's
            # second element) is the library's.
            read = sum(shape_bytes(self.shape_of(o, inst.computation))
                       for o in inst.operands)
            result = _result(inst.shape)
            return float(read + (shape_bytes(result) if result is not None else 0))
        if op == "fusion":
            reads, written = self.fused_traffic(
                _fused(inst) if fused is None else fused)
            total = sum(self._read(inst, i, reads) for i in range(len(inst.operands)))
            return total + (shape_bytes(inst.shape) if written is None else written)
        read = sum(shape_bytes(self.shape_of(o, inst.computation))
                   for o in inst.operands)
        return float(read + shape_bytes(inst.shape))

    def fused_traffic(self, computation: str) -> tuple[dict[int, float], float | None]:
        """What a fused computation reads of each parameter that it does not
        read whole (by parameter number: the bytes of the slices it takes,
        none for the buffer it updates in place), and what it writes where
        its result is updated in place (else None)."""
        form = self._form(computation)
        if form in self._traffic:
            return self._traffic[form]
        reads: dict[int, float] = {}
        for inst in self.view.instructions_of(computation):
            if inst.opcode != "parameter":
                continue
            number = _parameter_number(inst)
            users = self.view.users(inst)
            if number is None or not users:
                continue
            if all(u.opcode in _SLICING and u.operands[:1] == [inst.name]
                   for u in users):
                reads[number] = float(sum(shape_bytes(u.shape) for u in users))
            elif all(u.opcode == "dynamic-update-slice" and u.operands[:1] == [inst.name]
                     for u in users):
                reads[number] = 0.0
        root = self.view.root(computation)
        written = None
        if root is not None:
            parts = [self.view.get(o, computation) for o in root.operands] \
                if root.opcode == "tuple" else [root]
            updated = [self._updated_bytes(p, computation) for p in parts]
            if any(u is not None for u in updated):
                written = float(sum(
                    u if u is not None else (shape_bytes(p.shape) if p else 0)
                    for u, p in zip(updated, parts)))
        self._traffic[form] = (reads, written)
        return reads, written

    def _updated_bytes(self, inst: Instruction | None, computation: str) -> float | None:
        """The bytes of the update where `inst` (through bitcasts) is an
        in-place dynamic-update-slice, else None."""
        while inst is not None and inst.opcode == "bitcast" and inst.operands:
            inst = self.view.get(inst.operands[0], computation)
        if inst is None or inst.opcode != "dynamic-update-slice" or len(inst.operands) < 2:
            return None
        return float(shape_bytes(self.shape_of(inst.operands[1], computation)))

    def strided(self, inst: Instruction, fused: str | None = None) -> tuple[float, float]:
        """Bytes `inst` reads out of their layout's order, and of them those
        it reads as large slices of larger arrays (see the module's
        docstring)."""
        op = inst.opcode
        if op in ("transpose", "copy"):
            operand = self.view.get(inst.operands[0], inst.computation) \
                if inst.operands else None
            if not reorders(inst, operand):
                return 0.0, 0.0
            return float(shape_bytes(operand.shape)), 0.0
        if op != "fusion":
            return 0.0, 0.0
        computation = _fused(inst) if fused is None else fused
        numbers = self.strided_parameters(computation)
        if not numbers:
            return 0.0, 0.0
        reads, _ = self.fused_traffic(computation)
        total = sliced = 0.0
        for i in numbers:
            if i < len(inst.operands):
                read = self._read(inst, i, reads)
                total += read
                if i in reads and read >= ALIASED_SLICE_BYTES:
                    sliced += read
        return total, sliced

    def _read(self, inst: Instruction, i: int, reads: dict[int, float]) -> float:
        """Bytes a fusion reads of its operand `i`: what its computation
        reads of that parameter where it does not read it whole."""
        read = reads.get(i)
        return float(shape_bytes(self.shape_of(inst.operands[i], inst.computation))) \
            if read is None else read

    def strided_parameters(self, computation: str) -> frozenset[int]:
        """The parameters of a fused computation that flow into a transpose
        or copy reordering memory: its loop reads them in that order. A
        broadcast's operand is not followed (it is read again and again
        whatever the order)."""
        form = self._form(computation)
        found = self._strided.get(form)
        if found is not None:
            return found
        numbers: set[int] = set()
        for inst in self.view.instructions_of(computation):
            if inst.opcode not in ("transpose", "copy") or not inst.operands:
                continue
            if not reorders(inst, self.view.get(inst.operands[0], computation)):
                continue
            seen: set[str] = set()
            stack = [inst.operands[0]]
            while stack:
                name = stack.pop()
                if name in seen:
                    continue
                seen.add(name)
                source = self.view.get(name, computation)
                if source is None or source.opcode in ("broadcast", "constant", "iota"):
                    continue
                if source.opcode == "parameter":
                    number = _parameter_number(source)
                    if number is not None:
                        numbers.add(number)
                    continue
                # A slice's start indices are scalars: only what it slices
                # is read in order.
                operands = source.operands[:1] if source.opcode in _SLICING \
                    else source.operands[:2] if source.opcode == "dynamic-update-slice" \
                    else source.operands
                stack.extend(operands)
        found = self._strided[form] = frozenset(numbers)
        return found

    def of(self, inst: Instruction, fused: str | None = None) -> Cost:
        found = self.arithmetic(inst, fused)
        return Cost(found.flops, found.transcendentals, self.memory(inst, fused),
                    *self.strided(inst, fused), products=found.products,
                    wide=found.wide)


def _result(shape) -> ArrayShape | None:
    """A library call's result: its shape, or the first of its tuple."""
    while isinstance(shape, tuple) and shape:
        shape = shape[0]
    return shape if isinstance(shape, ArrayShape) else None


def _parameter_number(inst: Instruction) -> int | None:
    m = re.search(r"parameter\((\d+)\)", inst.text)
    return int(m.group(1)) if m is not None else None


def _fused(inst: Instruction) -> str:
    return dict(inst.called_computations()).get("calls", "")
