"""`run --check`: the same function, unsharded on one device, compared.

The reference runs on one device with the same input values: the Python
function jitted there (under a mesh of the same axis names, all of size 1, so
sharding constraints and manual regions still trace), a reference function
the user names (`--reference NAME`), or, for a module read from a file, the
module with its shardings stripped compiled for that device.

Sharding reorders sums, so a correct sharded result is not bit-equal to the
unsharded one, and an element that is nearly zero after cancellation can
differ from it by more than any relative tolerance. The comparison therefore
follows how accurate the unsharded result itself is. Where the function can
also run in 64-bit floats, that run is the truth `t`, and the unsharded
result's own worst error `E = max |e - t|` measures what rounding does to this
computation; the sharded result `a` passes where

    |a - t| <= atol + rtol |t| + 4 E

(it is as accurate as the unsharded one, with room for a different order of
summation). Where no 64-bit run exists (integer outputs are compared exactly;
64-bit outputs, modules, jitted objects, `--reference` and functions that do
not trace in 64 bits fall back), the error is measured against the unsharded
result relative to the scale of the whole output, with room for what
rounding does to each element: `s`, how far it moves when the float inputs
move by a few units of their own roundoff (the largest of two such runs):

    |a - e| <= atol + rtol (|e| + max |e|) + 4 s

Elements that are NaN in both results are not compared but counted, and any
other non-finite element must match exactly. An output with no element finite
in both results has nothing to compare: it is "not compared" and fails. In a multi-process run the
comparison happens on process 0 and every process gets its verdict.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

from irshard import backend
from irshard.core.errors import CheckFailed
from irshard.stages.declared import TensorDecl
from irshard.running.reference import float64_reference, reference, rounding_spread, wide

# (rtol, atol) by dtype: the per-element part of the criterion.
TOLERANCES = {
    "f64": (1e-10, 1e-12), "c128": (1e-10, 1e-12),
    "f32": (1e-5, 1e-6), "c64": (1e-5, 1e-6),
    "f16": (1e-3, 1e-3), "bf16": (1e-2, 1e-2),
}
# Unit roundoff by dtype: a 64-bit run whose typical (median) element differs
# from the unsharded result by more than sqrt(eps) of the output's scale
# computes something else (its random numbers, say) and is not the truth.
_EPS = {"f32": 2.0 ** -24, "c64": 2.0 ** -24, "f16": 2.0 ** -11,
        "bf16": 2.0 ** -8}
# How much worse than the unsharded result's own worst error a sharded
# result may be.
ROUNDING_ROOM = 4.0


@dataclass(frozen=True)
class OutputCheck:
    index: int
    name: str
    passed: bool
    rtol: float
    atol: float
    max_abs_error: float                 # against the reference used
    abs_error_at: tuple[int, ...] | None
    max_rel_error: float
    rel_error_at: tuple[int, ...] | None
    value: Any = None                    # sharded value at the worst element
    expected: Any = None                 # reference value there
    reference: str = "exact"             # float64 | unsharded | exact
    reference_error: float = 0.0         # E: the unsharded result's own error
    worst_at: tuple[int, ...] | None = None   # largest error / allowed
    worst_error: float = 0.0
    worst_allowed: float = 0.0
    nan: int = 0                         # NaN in both results, not compared
    size: int = 0
    # The narrower float the program computes this output in (`bf16`), whose
    # tolerances apply; None where it is the output's own type.
    precision: str | None = None
    # Why the output was not compared at all: it has no element finite in
    # both results (`NaN`, `Inf`, `NaN or Inf`); such an output fails.
    not_compared: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "index": self.index, "name": self.name, "passed": self.passed,
            "rtol": self.rtol, "atol": self.atol,
            "reference": self.reference,
            "reference_error": _json_float(self.reference_error),
            "max_abs_error": _json_float(self.max_abs_error),
            "max_abs_error_index": list(self.abs_error_at) if self.abs_error_at else None,
            "max_rel_error": _json_float(self.max_rel_error),
            "max_rel_error_index": list(self.rel_error_at) if self.rel_error_at else None,
            "worst_index": list(self.worst_at) if self.worst_at is not None else None,
            "worst_error": _json_float(self.worst_error),
            "worst_allowed": _json_float(self.worst_allowed),
            "nan": self.nan,
            "size": self.size,
            **({"precision": self.precision} if self.precision else {}),
            **({"not_compared": self.not_compared} if self.not_compared
               else {}),
        }

    def describe(self) -> str:
        if self.not_compared:
            return (f"output {self.index} ({self.name}) is not compared: "
                    f"every element is {self.not_compared} in both results, "
                    f"so there is nothing finite to compare; give inputs in "
                    f"the function's domain with --range NAME=LO,HI")
        where = list(self.worst_at) if self.worst_at is not None else []
        against = {"float64": "the float64 result",
                   "unsharded": "the single-device result"}.get(
            self.reference, "the single-device result")
        text = (f"output {self.index} ({self.name}) differs from {against}: "
                f"error {self.worst_error:.3g} at {where}")
        if self.value is not None:
            text += f" ({self.value!r} vs {self.expected!r})"
        return text + f", allowed {self.worst_allowed:.3g}"

    @property
    def nan_warning(self) -> str | None:
        if not self.nan or self.not_compared:
            return None
        share = 100.0 * self.nan / max(1, self.size)
        return (f"output {self.index} ({self.name}): {self.nan} elements "
                f"({share:.3g}%) are NaN in both results and were not "
                f"compared; give inputs in the function's domain with "
                f"--range NAME=LO,HI")


def _json_float(x: float) -> float | str:
    return x if math.isfinite(x) else str(x)


# ---------------------------------------------------------------------------
# References


def _index(flat: int, shape) -> tuple[int, ...]:
    return tuple(int(i) for i in np.unravel_index(flat, shape))


def _ratio(diff: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """`diff / scale`, 0 where `diff` is, infinite where only `scale` is
    0 (or the ratio is not a number)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(diff == 0, 0.0, diff / np.where(scale == 0, np.nan, scale))
    return np.where(np.isnan(ratio), np.inf, ratio)


def compare(index: int, decl: TensorDecl, actual: np.ndarray,
            expected: np.ndarray, rtol: float | None, atol: float | None,
            truth: np.ndarray | None = None,
            precision: str | None = None,
            spread: np.ndarray | None = None) -> OutputCheck:
    """Compares one output with its references (see the module docstring):
    `expected` is the unsharded result, `truth` the 64-bit one if any;
    `precision` the narrower float the program computes it in, if any;
    `spread` how far rounding moves each element, where no truth is."""
    name = decl.dtype.name
    exact = name not in TOLERANCES
    default_rtol, default_atol = TOLERANCES.get(precision or name, (0.0, 0.0))
    rtol = 0.0 if exact else (default_rtol if rtol is None else rtol)
    atol = 0.0 if exact else (default_atol if atol is None else atol)
    complex_ = name.startswith("c")
    a = wide(actual, complex_)
    e = wide(expected, complex_)
    size = int(a.size)
    if size == 0:
        return OutputCheck(index, decl.name, True, rtol, atol, 0.0, None, 0.0,
                           None, size=0)

    finite = np.isfinite(a) & np.isfinite(e)
    both_nan = np.isnan(a) & np.isnan(e)
    # Non-finite elements must agree exactly (the same infinity, or NaN).
    nonfinite_bad = ~finite & ~both_nan & ~(a == e)

    if exact:
        reference, against, allowed, reference_error = \
            "exact", e, np.zeros(a.shape), 0.0
    else:
        reference, against, allowed, reference_error = _allowed(
            a, e, finite, name, complex_, truth, spread, rtol, atol)
    with np.errstate(invalid="ignore"):     # inf - inf where not finite
        diff = np.where(finite, np.abs(a - against), 0.0)
    diff = np.where(nonfinite_bad, np.inf, diff)
    bad = (diff > allowed) | nonfinite_bad

    rel = _ratio(diff, np.abs(against))
    abs_at = _index(int(np.argmax(diff)), diff.shape)
    rel_at = _index(int(np.argmax(rel)), rel.shape)
    ratio = _ratio(diff, allowed)
    worst_at = _index(int(np.argmax(ratio)), ratio.shape)
    passed = not bool(np.any(bad))
    # An output with no element finite in both results compares nothing:
    # it is never a pass.
    not_compared = None
    if passed and not np.any(finite):
        not_compared = " or ".join(label for label, found in
                                   (("NaN", np.any(np.isnan(a))),
                                    ("Inf", np.any(np.isinf(a)))) if found)
        passed = False
    value, expected_value = (None, None) if passed or not_compared else \
        (np.asarray(actual)[worst_at].item(), np.asarray(against)[worst_at].item())
    return OutputCheck(
        index, decl.name, passed, rtol, atol, float(diff[abs_at]), abs_at,
        float(rel[rel_at]), rel_at, value, expected_value, reference,
        reference_error, worst_at, float(diff[worst_at]),
        float(np.broadcast_to(allowed, a.shape)[worst_at]),
        int(np.count_nonzero(both_nan)), size, precision, not_compared)


def _allowed(a: np.ndarray, e: np.ndarray, finite: np.ndarray, name: str,
             complex_: bool, truth: np.ndarray | None,
             spread: np.ndarray | None, rtol: float, atol: float):
    """What a float output is compared against and how far each element
    may be from it: the 64-bit result where it computes the same thing,
    else the unsharded one. Returns the reference's name, its values, the
    room each element has, and the reference's own error."""
    reference_error = 0.0
    t = None
    if truth is not None and name in _EPS:
        t = wide(truth, complex_)
        tf = np.isfinite(t) & finite
        scale = float(np.max(np.abs(t[tf]), initial=0.0))
        gaps = np.abs(e[tf] - t[tf])
        gap = float(np.max(gaps, initial=0.0))
        # Whether it computes the same thing is read from the typical
        # element, not the worst: an ill-conditioned element (Adam's first
        # step divides a gradient that cancelled to ~0 by its own size) may
        # differ by any amount, and that is the unsharded result's error,
        # the room the sharded one gets.
        typical = float(np.median(gaps)) if gaps.size else 0.0
        if t.shape != a.shape or typical > math.sqrt(_EPS[name]) * scale + atol:
            t = None
        else:
            reference_error = gap
    if t is not None:
        return ("float64", t,
                atol + rtol * np.abs(t) + ROUNDING_ROOM * reference_error,
                reference_error)
    scale = float(np.max(np.abs(e[finite]), initial=0.0))
    allowed = atol + rtol * (np.abs(e) + scale)
    if spread is not None and spread.shape == a.shape:
        reference_error = float(np.max(spread, initial=0.0))
        allowed = allowed + ROUNDING_ROOM * spread
    return "unsharded", e, allowed, reference_error


# Float outputs a program may compute through a 16-bit float.
_WIDER = ("f32", "f64")


def check(lowered, info, sources, values, options,
          reference_fn: Callable | None = None
          ) -> tuple[tuple[OutputCheck, ...], str | None]:
    """Compares on process 0; the verdict is shared with every process.
    The second value says what stood in for the single-device run, where
    that is not the function itself (see `reference`)."""
    checks: list[OutputCheck] = []
    note = None
    if backend.process_index() == 0:
        unsharded, note = reference(lowered, info, sources, reference_fn)
        truths: list[np.ndarray | None] = [None] * len(info.outputs)
        wants_truth = any(d.dtype.name in _EPS for d in info.outputs)
        if lowered.function is not None and wants_truth:
            found = float64_reference(reference_fn or lowered.function,
                                       lowered, info, sources)
            if found is not None and len(found) == len(info.outputs):
                truths = found
        narrow = lowered.sixteen_bit_float
        precisions = [narrow if narrow and decl.dtype.name in _WIDER else None
                      for decl in info.outputs]
        spreads: list[np.ndarray | None] = [None] * len(info.outputs)
        if any(d.dtype.name in _EPS and (p or truths[i] is None)
               for i, (d, p) in enumerate(zip(info.outputs, precisions))):
            spreads = rounding_spread(lowered, info, sources, reference_fn,
                                       unsharded)
        for i, decl in enumerate(info.outputs):
            # An output the program computes through a narrower float is
            # held to that float's tolerances; its float64 run keeps the
            # program's casts, so it is no truth for it.
            checks.append(compare(i, decl, values[i], unsharded[i],
                                  options.rtol, options.atol,
                                  None if precisions[i] else truths[i],
                                  precisions[i], spreads[i]))
    flags = backend.allgather_ints([int(c.passed) for c in checks]
                                   or [1] * len(info.outputs))
    if backend.process_index() != 0:
        checks = [OutputCheck(i, d.name, bool(flags[0][i]), 0.0, 0.0, 0.0, None,
                              0.0, None) for i, d in enumerate(info.outputs)]
    return tuple(checks), note


def failure(checks: Sequence[OutputCheck] | None) -> CheckFailed | None:
    """The error to exit with when the check found a mismatch."""
    failed = [c for c in checks or () if not c.passed]
    if not failed:
        return None
    first = failed[0]
    more = f" ({len(failed) - 1} more output(s) differ)" if len(failed) > 1 else ""
    if first.worst_at is None:   # another process's verdict
        return CheckFailed(f"check failed: output {first.index} ({first.name}) "
                           f"differs from the single-device result{more}")
    return CheckFailed(f"check failed: {first.describe()}{more}")
