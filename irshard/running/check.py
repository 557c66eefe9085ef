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
from irshard.core import interrupts
from irshard.core.errors import BackendError, CheckFailed, UsageError, UserCodeError
from irshard.loading.loader import describe_user_exception, raised_by_user_code
from irshard.stages.declared import TensorDecl
from irshard.stages.staged import StableHLO

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


def _whole_inputs(info, sources) -> list[np.ndarray]:
    return [np.asarray(source(tuple(slice(0, n) for n in decl.shape)))
            for decl, source in zip(info.inputs, sources)]


def _run_on_one_device(fn: Callable, arrays: Sequence[np.ndarray], device,
                       info, x64: bool) -> list[np.ndarray]:
    """`fn` jitted on `device` under a mesh of the same axis names and
    types, all of size 1 (with 64-bit types on where asked). On explicit
    axes each input carries its sharding over that mesh, so the program
    sees the same sharded types."""
    import jax

    mesh_spec = info.mesh

    def work():
        with jax.enable_x64(x64 or jax.config.jax_enable_x64):
            mesh = backend.make_mesh(mesh_spec.names, (1,) * len(mesh_spec.axes),
                                     [device], [a.type for a in mesh_spec.axes])
            args = [jax.device_put(a, jax.sharding.NamedSharding(
                        mesh, backend.partition_spec(
                            [d.axes for d in decl.sharding.dims]))
                        if mesh_spec.explicit and decl.sharding is not None
                        else device)
                    for a, decl in zip(arrays, info.inputs)]
            with jax.set_mesh(mesh):
                results = jax.jit(fn)(*args)
            return [np.asarray(r) for r in jax.tree_util.tree_leaves(results)]

    return interrupts.call(work)


def reference(lowered: StableHLO, info, sources,
              reference_fn: Callable | None = None,
              arrays: Sequence[np.ndarray] | None = None
              ) -> tuple[list[np.ndarray], str | None]:
    """The function run unsharded on one device, on the same values: the
    Python function (or `reference_fn`) jitted there, or, for a module read
    from a file, the module with its shardings stripped compiled there.
    Where the function cannot run again on one device because of the
    program's own mesh, the stripped module stands in for it, and the
    second value says why (None otherwise). `arrays` replace the inputs'
    values where given."""
    device = lowered.devices[0]
    if arrays is None:
        arrays = _whole_inputs(info, sources)
    if lowered.function is None:
        return _module_reference(lowered, arrays, device), None
    fn = reference_fn or lowered.function
    try:
        return _run_on_one_device(fn, arrays, device, info, False), None
    except (Exception, SystemExit) as e:
        if reference_fn is None and _caused_by_mesh(e):
            # The function names the program's own mesh (a NamedSharding
            # built at import, a mesh it enters): one device cannot trace
            # it again, but the traced module, its shardings stripped,
            # runs on one.
            try:
                found = _module_reference(lowered, arrays, device)
            except UsageError:
                pass
            else:
                return found, (
                    f"the traced module with its shardings stripped: "
                    f"'{info.function}' does not run again on one device "
                    f"because of its own mesh ("
                    f"{backend.message(e).splitlines()[0]})")
        raise _reference_error(e, info, reference_fn is not None) from None


# JAX's error for a function whose shardings name devices other than the
# ones it runs on (a mesh of its own, built from all the devices).
_INCOMPATIBLE_DEVICES = "Received incompatible devices for jitted computation"
# What JAX (and libraries on it, Equinox) say when a program's own mesh
# cannot stand on one device: shardings naming other devices, a mesh of
# another size entered inside the function.
_MESH_CAUSED = (
    _INCOMPATIBLE_DEVICES,
    "cannot change the size of the mesh",      # use_abstract_mesh
    "incompatible devices",
    "incompatible with the mesh",
)


def _caused_by_mesh(e: BaseException) -> bool:
    text = str(e)
    return any(fragment in text for fragment in _MESH_CAUSED)


def _reference_error(e: BaseException, info, named: bool) -> Exception:
    text = str(e)
    if not named and "should match the mesh passed to shard_map" in text:
        return UsageError(
            f"--check: the single-device reference cannot run "
            f"'{info.function}': its shard_map is bound to the {info.mesh} "
            f"mesh (one it names, or the context mesh it was first called "
            f"under: JAX keeps that one), and one device cannot stand in for "
            f"it; name a single-device reference with --reference NAME")
    if not named and _INCOMPATIBLE_DEVICES in text:
        return UsageError(
            f"--check: the single-device reference cannot run "
            f"'{info.function}': it shards values over a mesh of its own "
            f"(a NamedSharding of the program's mesh), which one device "
            f"cannot stand in for; name a single-device reference with "
            f"--reference NAME\n  {backend.message(e).splitlines()[0]}")
    what = "the reference function" if named else "the single-device reference"
    if raised_by_user_code(e):
        return UserCodeError(f"{what} failed: "
                             f"{describe_user_exception(e, info.user_dir or '.')}")
    return BackendError(f"{what} failed: {type(e).__name__}: "
                        f"{backend.message(e)}")


# How far each float input is nudged, in units of its own roundoff, to
# measure how much rounding moves each output (`_rounding_spread`), and how
# many nudged runs are taken.
NUDGE_ULPS = 4.0
NUDGES = 2


def _rounding_spread(lowered: StableHLO, info, sources,
                     reference_fn: Callable | None,
                     unsharded: Sequence[np.ndarray]) -> list[np.ndarray | None]:
    """Where no 64-bit run tells how accurate the single-device result is:
    how far each output element moves when the float inputs move by a few
    units of their roundoff (`NUDGE_ULPS`, random signs, `NUDGES` runs, the
    largest move kept). A sharded program rounds differently (its sums in
    another order), and an element that rounding moves a lot (Adam's first
    step divides a gradient that cancelled to about zero by its own size)
    may differ by as much; a well-conditioned element moves by about its
    roundoff, so a wrong shard still fails. None for an output where the
    nudged runs do not give the same shapes."""
    rng = np.random.default_rng(0)
    base = _whole_inputs(info, sources)
    spread: list[np.ndarray | None] = [
        np.zeros(np.shape(u)) if np.asarray(u).dtype.kind in "fc" else None
        for u in unsharded]
    for _ in range(NUDGES):
        nudged = [_nudged(a, rng) for a in base]
        found, _ = reference(lowered, info, sources, reference_fn, nudged)
        for i, (moved, was) in enumerate(zip(found, unsharded)):
            if spread[i] is None or np.shape(moved) != np.shape(was):
                spread[i] = None
                continue
            complex_ = np.asarray(was).dtype.kind == "c"
            with np.errstate(invalid="ignore"):
                gap = np.abs(_wide(moved, complex_) - _wide(was, complex_))
            spread[i] = np.fmax(spread[i], np.where(np.isfinite(gap), gap, 0.0))
    return spread


def _nudged(a: np.ndarray, rng) -> np.ndarray:
    """`a` with each float element moved by up to `NUDGE_ULPS` of its own
    roundoff (unchanged where it is not float)."""
    a = np.asarray(a)
    if a.dtype.kind not in "fc" and a.dtype.name != "bfloat16":
        return a
    eps = float(np.finfo(np.float32 if a.dtype.name == "bfloat16" else a.dtype).eps) \
        if a.dtype.name != "bfloat16" else 2.0 ** -8
    factor = 1.0 + NUDGE_ULPS * eps * rng.uniform(-1.0, 1.0, size=a.shape)
    return (a.astype(np.complex128 if a.dtype.kind == "c" else np.float64)
            * factor).astype(a.dtype)


def _float64_reference(fn: Callable, lowered: StableHLO, info,
                       sources) -> list[np.ndarray] | None:
    """The function run in 64-bit floats (inputs widened), or None where it
    does not run that way."""
    arrays = []
    for a in _whole_inputs(info, sources):
        if a.dtype.kind == "c":
            a = a.astype(np.complex128)
        elif a.dtype.kind == "f" or a.dtype.name == "bfloat16":
            a = a.astype(np.float64)
        arrays.append(a)
    try:
        return _run_on_one_device(fn, arrays, lowered.devices[0], info, True)
    except (Exception, SystemExit):
        return None


_GSPMD_MANUAL = ("SPMDFullToShardShape", "SPMDShardToFullShape")


def _module_reference(lowered: StableHLO, arrays, device) -> list[np.ndarray]:
    import jax

    from irshard.backend import shardy
    from irshard.ir.annotation import strip_shardings
    module = shardy.clone_module(lowered.module)
    with module.context:
        ops = [op for fn in shardy.functions(module) for op in shardy.walk(fn.operation)]
        if any(op.name == "sdy.manual_computation" for op in ops):
            raise UsageError(
                "--check cannot make a single-device reference of this module: "
                "its manual computations (sdy.manual_computation) are written "
                "per device")
        if any(op.name == "stablehlo.custom_call" and str(
                op.attributes["call_target_name"]).strip('"') in _GSPMD_MANUAL
               for op in ops if "call_target_name" in op.attributes):
            raise UsageError(
                "--check cannot make a single-device reference of this module: "
                "its GSPMD manual regions (SPMDFullToShardShape ... "
                "SPMDShardToFullShape) are written per device")
    strip_shardings(module, num_partitions=True)
    count = len(lowered.info.inputs), len(lowered.info.outputs)
    try:
        compiled = backend.compile_module(module, [device], [True] * count[0],
                                          [True] * count[1])
    except BackendError as e:
        raise BackendError(f"--check: the single-device reference (the module "
                           f"with its shardings stripped) does not compile: "
                           f"{e}") from None
    args = [jax.device_put(a, device) for a in arrays]
    per_output = backend.execute(compiled, args)
    return [np.asarray(arrays[0]) for arrays in per_output]


# ---------------------------------------------------------------------------
# Comparing


def _wide(x: np.ndarray, complex_: bool) -> np.ndarray:
    return np.asarray(x).astype(np.complex128 if complex_ else np.float64)


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
    a = _wide(actual, complex_)
    e = _wide(expected, complex_)
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
        t = _wide(truth, complex_)
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
            found = _float64_reference(reference_fn or lowered.function,
                                       lowered, info, sources)
            if found is not None and len(found) == len(info.outputs):
                truths = found
        narrow = lowered.sixteen_bit_float
        precisions = [narrow if narrow and decl.dtype.name in _WIDER else None
                      for decl in info.outputs]
        spreads: list[np.ndarray | None] = [None] * len(info.outputs)
        if any(d.dtype.name in _EPS and (p or truths[i] is None)
               for i, (d, p) in enumerate(zip(info.outputs, precisions))):
            spreads = _rounding_spread(lowered, info, sources, reference_fn,
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
