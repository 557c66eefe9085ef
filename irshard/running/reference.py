"""What a sharded run is checked against: the same function run on one
device with the same inputs (or the module itself, where the function
cannot be run so), in float64 where the outputs are floats, and how far
rounding alone moves each output (the inputs nudged a few ulps)."""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from irshard import backend
from irshard.core import interrupts
from irshard.core.errors import BackendError, UsageError, UserCodeError
from irshard.loading.loader import describe_user_exception, raised_by_user_code
from irshard.stages.staged import StableHLO


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


def rounding_spread(lowered: StableHLO, info, sources,
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
                gap = np.abs(wide(moved, complex_) - wide(was, complex_))
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


def float64_reference(fn: Callable, lowered: StableHLO, info,
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


def wide(x: np.ndarray, complex_: bool) -> np.ndarray:
    return np.asarray(x).astype(np.complex128 if complex_ else np.float64)
