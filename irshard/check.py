"""`run --check`: the same function, unsharded on one device, compared.

The reference runs on one device with the same input values: the Python
function jitted there (under a mesh of the same axis names, all of size 1, so
sharding constraints and manual regions still trace), or, for a module read
from a file, the module with its shardings stripped compiled for that device.
Outputs are compared elementwise with dtype-aware tolerances; in a
multi-process run the comparison happens on process 0 and every process gets
its verdict.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from irshard import backend
from irshard.errors import BackendError, CheckFailed
from irshard.stages import StableHLO, TensorDecl

# (rtol, atol) by dtype: loose enough for the reordered sums of a sharded
# reduction, tight enough to catch a wrong element.
TOLERANCES = {
    "f64": (1e-10, 1e-12), "c128": (1e-10, 1e-12),
    "f32": (1e-5, 1e-6), "c64": (1e-5, 1e-6),
    "f16": (1e-3, 1e-3), "bf16": (1e-2, 1e-2),
}


@dataclass(frozen=True)
class OutputCheck:
    index: int
    name: str
    passed: bool
    rtol: float
    atol: float
    max_abs_error: float
    abs_error_at: tuple[int, ...] | None
    max_rel_error: float
    rel_error_at: tuple[int, ...] | None
    value: Any = None            # sharded value at the worst element
    expected: Any = None         # reference value there

    def to_json(self) -> dict[str, Any]:
        return {
            "index": self.index, "name": self.name, "passed": self.passed,
            "rtol": self.rtol, "atol": self.atol,
            "max_abs_error": _json_float(self.max_abs_error),
            "max_abs_error_index": list(self.abs_error_at) if self.abs_error_at else None,
            "max_rel_error": _json_float(self.max_rel_error),
            "max_rel_error_index": list(self.rel_error_at) if self.rel_error_at else None,
        }

    def describe(self) -> str:
        where = list(self.abs_error_at) if self.abs_error_at is not None else []
        text = (f"output {self.index} ({self.name}) differs from the "
                f"single-device result: max abs error {self.max_abs_error:.3g} "
                f"at {where}")
        if self.value is not None:
            text += f" ({self.value!r} vs {self.expected!r})"
        rel = list(self.rel_error_at) if self.rel_error_at is not None else []
        return (text + f", max rel error {self.max_rel_error:.3g} at {rel} "
                f"(rtol {self.rtol:g}, atol {self.atol:g})")


def _json_float(x: float) -> float | str:
    return x if math.isfinite(x) else str(x)


def reference(lowered: StableHLO, info, sources) -> list[np.ndarray]:
    """The function run unsharded on one device, on the same values: the
    Python function jitted there, or, for a module read from a file, the
    module with its shardings stripped compiled for that device."""
    import jax
    from jax.sharding import Mesh
    device = lowered.devices[0]
    args = []
    for decl, source in zip(info.inputs, sources):
        whole = source(tuple(slice(0, n) for n in decl.shape))
        args.append(jax.device_put(np.asarray(whole), device))
    if lowered.function is None:
        return _module_reference(lowered, args, device)
    mesh = Mesh(np.array([device]).reshape((1,) * len(info.mesh.axes)),
                info.mesh.names)
    try:
        with jax.set_mesh(mesh):
            results = jax.jit(lowered.function)(*args)
    except Exception as e:
        raise BackendError(f"the single-device reference failed: "
                           f"{type(e).__name__}: {backend.first_line(e)}") from None
    return [np.asarray(r) for r in jax.tree_util.tree_leaves(results)]


def _module_reference(lowered: StableHLO, args, device) -> list[np.ndarray]:
    from irshard import shardy
    from irshard.passes.strip_shardings import StripShardingsPass
    module = shardy.clone_module(lowered.module)
    with module.context:
        if any(op.name == "sdy.manual_computation"
               for fn in shardy.functions(module) for op in shardy.walk(fn.operation)):
            raise BackendError(
                "--check cannot make a single-device reference of this module: "
                "its manual computations (sdy.manual_computation) are written "
                "per device")
    StripShardingsPass(num_partitions=True).apply(module)
    count = len(lowered.info.inputs), len(lowered.info.outputs)
    compiled = backend.compile_module(module, [device], [True] * count[0],
                                      [True] * count[1])
    per_output = backend.execute(compiled, args)
    return [np.asarray(arrays[0]) for arrays in per_output]


def compare(index: int, decl: TensorDecl, actual: np.ndarray,
            expected: np.ndarray, rtol: float | None,
            atol: float | None) -> OutputCheck:
    """Compares one output with the reference, |a - e| <= atol + rtol |e|."""
    default_rtol, default_atol = TOLERANCES.get(decl.dtype.name, (0.0, 0.0))
    exact = decl.dtype.name not in TOLERANCES
    rtol = 0.0 if exact else (default_rtol if rtol is None else rtol)
    atol = 0.0 if exact else (default_atol if atol is None else atol)
    a = np.asarray(actual).astype(np.complex128 if decl.dtype.name.startswith("c")
                                  else np.float64)
    e = np.asarray(expected).astype(a.dtype)
    both_nan = np.isnan(a) & np.isnan(e)
    diff = np.where(both_nan, 0.0, np.abs(a - e))
    diff = np.where(np.isnan(diff), np.inf, diff)
    scale = np.abs(e)
    rel = np.where(diff == 0, 0.0, diff / np.where(scale == 0, np.nan, scale))
    rel = np.where(np.isnan(rel), np.inf, rel)
    bad = diff > atol + rtol * scale
    if diff.size == 0:
        return OutputCheck(index, decl.name, True, rtol, atol, 0.0, None, 0.0, None)
    abs_at = tuple(int(i) for i in np.unravel_index(int(np.argmax(diff)), diff.shape))
    rel_at = tuple(int(i) for i in np.unravel_index(int(np.argmax(rel)), rel.shape))
    passed = not bool(np.any(bad))
    value = expected_value = None
    if not passed:
        value = np.asarray(actual)[abs_at].item()
        expected_value = np.asarray(expected)[abs_at].item()
    return OutputCheck(index, decl.name, passed, rtol, atol,
                       float(diff[abs_at]), abs_at, float(rel[rel_at]), rel_at,
                       value, expected_value)


def check(lowered, info, sources, values, options) -> tuple[OutputCheck, ...]:
    """Compares on process 0; the verdict is shared with every process."""
    checks: list[OutputCheck] = []
    if backend.process_index() == 0:
        reference_values = reference(lowered, info, sources)
        for i, decl in enumerate(info.outputs):
            checks.append(compare(i, decl, values[i], reference_values[i],
                                  options.rtol, options.atol))
    flags = backend.allgather_ints([int(c.passed) for c in checks]
                                   or [1] * len(info.outputs))
    if backend.process_index() != 0:
        checks = [OutputCheck(i, d.name, bool(flags[0][i]), 0.0, 0.0, 0.0, None,
                              0.0, None) for i, d in enumerate(info.outputs)]
    return tuple(checks)


def failure(checks: Sequence[OutputCheck] | None) -> CheckFailed | None:
    """The error to exit with when the check found a mismatch."""
    failed = [c for c in checks or () if not c.passed]
    if not failed:
        return None
    first = failed[0]
    more = f" ({len(failed) - 1} more output(s) differ)" if len(failed) > 1 else ""
    if first.abs_error_at is None:   # another process's verdict
        return CheckFailed(f"check failed: output {first.index} ({first.name}) "
                           f"differs from the single-device result{more}")
    return CheckFailed(f"check failed: {first.describe()}{more}")


