"""`irshard calibrate`: measure the collectives of the devices present and fit
the time model to them.

Each collective kind runs over each mesh axis at several sizes, inside a
loop run for two trip counts so that launch overhead cancels out; the time
of one collective is the difference over the difference in trips (median of
several runs). The link's latency `a` and bandwidth `W` are then fitted by
least squares to half the sizes,

    T = a * steps + wire / W          (steps, wire as in irshard.hardware.cost)

for each kind (the CPU's "links" are memory copies between threads, and
each kind copies differently) and for all kinds together; the model is
judged on the other half: `error` is the median relative error of the
fitted times on sizes it was not fitted on. `-o PATH` saves the profile for
`--profile PATH`.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from irshard import backend
from irshard.collectives import analysis
from irshard.core.errors import UsageError
from irshard.core.specs import MeshSpec
from irshard.reporting.text import human_bytes, human_time, table
from irshard.reporting.writer import dumps_json

KINDS = ("all-gather", "reduce-scatter", "all-reduce", "all-to-all",
         "collective-permute")
DEFAULT_SIZES = (1 << 12, 1 << 14, 1 << 16, 1 << 18, 1 << 20, 1 << 22)
_TRIPS = (2, 12)
_TARGET_SECONDS = 0.03      # the extra trips' time a measurement aims at


@dataclass(frozen=True)
class Measurement:
    kind: str
    axis: str
    group: int
    bytes: int            # per device, the collective's result
    wire: int             # what one device sends
    steps: int
    seconds: float        # one collective

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "axis": self.axis, "group": self.group,
                "bytes": self.bytes, "wire_bytes": self.wire,
                "seconds": self.seconds}


MAX_REPEATS = 1000
MIN_SIZES = 4           # two to fit latency and bandwidth on, two to judge
_COMPILE_SECONDS = 0.15  # compiling one measurement's loop, about


def check_plan(mesh: MeshSpec, sizes: Sequence[int] | None,
               repeats: int) -> list[int]:
    """The distinct sizes to measure, after checking that `mesh`, `sizes`
    and `repeats` make a calibration that fits this host and ends."""
    import os
    if not any(a.size > 1 for a in mesh.axes):
        raise UsageError(f"--mesh {mesh}: calibration needs an axis of at "
                         f"least 2 devices")
    if not 1 <= repeats <= MAX_REPEATS:
        raise UsageError(f"--repeats {repeats}: give a number of runs from 1 "
                         f"to {MAX_REPEATS}")
    chosen = sorted(set(sizes or DEFAULT_SIZES))
    if len(chosen) < MIN_SIZES:
        raise UsageError(
            f"--sizes: {len(chosen)} different size"
            f"{'s' if len(chosen) > 1 else ''}; give at least "
            f"{MIN_SIZES} (half fit the latency and bandwidth, half check "
            f"the fit), e.g. 4KiB,64KiB,1MiB,4MiB")
    # A reduce-scatter's carry is n times its result on each of n devices,
    # and a run holds about three copies of it.
    n = max(a.size for a in mesh.axes)
    try:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        memory = 8 << 30
    largest = max(1 << 12, memory // 2 // (3 * n * n))
    if chosen[-1] > largest:
        raise UsageError(
            f"--sizes: {human_bytes(chosen[-1])} per device does not fit this "
            f"host's memory over {n} devices; give sizes up to "
            f"{human_bytes(largest)}")
    return chosen


def count(mesh: MeshSpec, sizes: Sequence[int]) -> int:
    """How many measurements a calibration takes."""
    return sum(len(KINDS) * len(sizes) for a in mesh.axes if a.size > 1)


def expected_seconds(mesh: MeshSpec, sizes: Sequence[int], repeats: int) -> float:
    """Roughly how long `calibrate` runs: each measurement compiles, probes
    and times the loop `repeats` times at two trip counts, the longer aiming
    at `_TARGET_SECONDS` more than the shorter."""
    return count(mesh, sizes) * (_COMPILE_SECONDS
                                 + repeats * (2 * _TARGET_SECONDS + 0.002))


def _steps(kind: str, n: int) -> int:
    if kind == "collective-permute":
        return 1
    return 2 * (n - 1) if kind == "all-reduce" else n - 1


def _program(kind: str, axis: str, n: int):
    """A loop of `kind` over `axis`, its carry shaped for the collective."""
    import jax
    import jax.numpy as jnp

    def body(_, x):
        if kind == "all-reduce":
            return jax.lax.psum(x, axis) * (1.0 / n)
        if kind == "all-gather":
            return jax.lax.all_gather(x, axis, tiled=True)[:x.shape[0]]
        if kind == "reduce-scatter":
            y = jax.lax.psum_scatter(x, axis, tiled=True)
            return jnp.concatenate([y] * n)
        if kind == "all-to-all":
            return jax.lax.all_to_all(x, axis, 0, 0, tiled=True)
        perm = [(i, (i + 1) % n) for i in range(n)]
        return jax.lax.ppermute(x, axis, perm)

    def run(x, trips):
        return jax.lax.fori_loop(0, trips, body, x)

    return run


def _run(compiled, x, trips: int, repeats: int) -> float:
    import numpy as np
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        compiled(x, np.int32(trips)).block_until_ready()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _per_collective(compiled, x, repeats: int) -> float:
    """The time of one collective: runs of the loop with few and with many
    trips (enough for tens of milliseconds more), the difference divided by
    the difference in trips, so launch overhead cancels out."""
    few = _TRIPS[0]
    _run(compiled, x, few, 1)                       # warm up
    probe = _run(compiled, x, _TRIPS[1], 1) - _run(compiled, x, few, 1)
    each = max(probe / (_TRIPS[1] - few), 1e-6)
    many = few + int(min(max(_TARGET_SECONDS / each, 10), 2000))
    base = _run(compiled, x, few, repeats)
    return max(0.0, (_run(compiled, x, many, repeats) - base) / (many - few))


def measure(mesh: MeshSpec, sizes: Sequence[int] = DEFAULT_SIZES,
            repeats: int = 5) -> list[Measurement]:
    """Times every kind over every axis of `mesh` at `sizes` (bytes per
    device of the collective's result)."""
    import jax
    import numpy as np
    from jax.sharding import NamedSharding, PartitionSpec as P

    devices = backend.devices("cpu", mesh.num_devices)
    jax_mesh = backend.make_mesh(mesh.names, mesh.shape, devices)
    results = []
    for axis in mesh.axes:
        n = axis.size
        if n < 2:
            continue
        for kind in KINDS:
            fn = _program(kind, axis.name, n)
            for size in sizes:
                # The carry each device holds (f32 elements, a multiple of n).
                result = max(n, size // 4 // n * n)
                carry = result * n if kind == "reduce-scatter" else result
                sharded = jax.shard_map(
                    fn, mesh=jax_mesh, in_specs=(P(axis.name), P()),
                    out_specs=P(axis.name), check_vma=False)
                compiled = jax.jit(sharded).lower(
                    jax.ShapeDtypeStruct((carry * n,), np.float32,
                                         sharding=NamedSharding(jax_mesh, P(axis.name))),
                    jax.ShapeDtypeStruct((), np.int32)).compile()
                x = jax.device_put(np.ones(carry * n, np.float32),
                                   NamedSharding(jax_mesh, P(axis.name)))
                seconds = _per_collective(compiled, x, repeats)
                nbytes = result * 4
                results.append(Measurement(
                    kind, axis.name, n, nbytes,
                    analysis.wire_bytes(kind, nbytes, n), _steps(kind, n), seconds))
    return results


def fit(points: Sequence[Measurement]) -> tuple[float, float]:
    """(latency per step, bandwidth) minimizing the relative squared error
    of `a * steps + wire / W`."""
    import numpy as np
    rows = np.array([[p.steps / p.seconds, p.wire / p.seconds] for p in points
                     if p.seconds > 0])
    target = np.ones(len(rows))
    (latency, inverse), *_ = np.linalg.lstsq(rows, target, rcond=None)
    latency = max(float(latency), 0.0)
    bandwidth = 1.0 / float(inverse) if inverse > 0 else float("inf")
    return latency, bandwidth


def predict(point: Measurement, latency: float, bandwidth: float) -> float:
    return latency * point.steps + point.wire / bandwidth


def calibrate(mesh: MeshSpec, sizes: Sequence[int] = DEFAULT_SIZES,
              repeats: int = 5) -> dict[str, Any]:
    """Measures, fits on every other size, and reports the held-out error."""
    points = measure(mesh, sizes, repeats)
    ordered = sorted(set(sizes))
    fitted_on = {s for i, s in enumerate(ordered) if i % 2 == 0}

    def size_of(p: Measurement) -> int:
        return min(ordered, key=lambda s: abs(s - p.bytes))

    train = [p for p in points if size_of(p) in fitted_on]
    held = [p for p in points if size_of(p) not in fitted_on and p.seconds > 0]
    source = (f"measured by irshard calibrate --mesh {mesh} on "
              f"{time.strftime('%Y-%m-%d')}")
    latency, bandwidth = fit(train)
    link: dict[str, Any] = {"bandwidth": {"value": bandwidth, "source": source},
                            "latency": {"value": latency, "source": source},
                            "kinds": {}}
    fitted = {}
    for kind in KINDS:
        mine = [p for p in train if p.kind == kind]
        if len(mine) >= 2:
            fitted[kind] = fit(mine)
            link["kinds"][kind] = {"latency": fitted[kind][0],
                                   "bandwidth": fitted[kind][1]}
    errors = [abs(predict(p, *fitted.get(p.kind, (latency, bandwidth)))
                  - p.seconds) / p.seconds for p in held]
    error = statistics.median(errors) if errors else None
    return {
        "mesh": str(mesh),
        "links": {"host": link},
        "error": error,
        "held_out": len(held),
        "measurements": [p.to_json() for p in points],
    }


def render_text(result: dict[str, Any]) -> str:
    host = result["links"]["host"]
    lines = [f"calibration on mesh {result['mesh']}", "",
             "measurements (one collective, launch overhead removed)"]
    lines += table(["kind", "axis", "group", "bytes", "wire", "time"],
                   [[m["kind"], m["axis"], str(m["group"]), str(m["bytes"]),
                     str(m["wire_bytes"]), human_time(m["seconds"])]
                    for m in result["measurements"]])
    error = result["error"]
    lines += ["", "fitted: T = latency x steps + wire / bandwidth"]
    lines += table(["kind", "bandwidth", "latency per step"],
                   [[kind, f"{human_bytes(int(v['bandwidth']))}/s",
                     human_time(v["latency"])]
                    for kind, v in host.get("kinds", {}).items()]
                   + [["(all kinds)", f"{human_bytes(int(host['bandwidth']['value']))}/s",
                       human_time(host["latency"]["value"])]])
    lines += [
              f"  median relative error on {result['held_out']} held-out "
              f"measurements: " + (f"{error:.1%}" if error is not None else "n/a")]
    return "\n".join(lines) + "\n"


def calibrate_host(mesh: MeshSpec, sizes: Sequence[int] | None, repeats: int,
                   note: Callable[[str], None] = lambda text: None
                   ) -> dict[str, Any]:
    """`irshard calibrate`: the plan checked, its duration told to `note`
    when over a minute, this host's CPU devices set up for `mesh`, then
    `calibrate`."""
    planned = check_plan(mesh, sizes, repeats)
    seconds = expected_seconds(mesh, planned, repeats)
    if seconds > 60:
        note(f"{count(mesh, planned)} measurements x {repeats} runs, about "
             f"{seconds / 60:.0f} min")
    backend.configure(mesh.num_devices, "cpu")
    return calibrate(mesh, planned, repeats)


def profile_json(result: dict[str, Any]) -> str:
    """The fitted links as a profile `--profile` reads back."""
    return dumps_json({"links": result["links"], "error": result["error"]}) + "\n"


def render(result: dict[str, Any], fmt: str) -> str:
    """The calibration as `fmt` (text or json)."""
    if fmt == "json":
        return dumps_json(result) + "\n"
    return render_text(result)


def measure_compute(repeats: int = 5) -> dict[str, float]:
    """This host's compute, as the step simulation times it, on one CPU
    device (which uses every core): `flops` per second of a 1024x1024
    matmul, `bandwidth` in bytes per second of an elementwise op over
    64 MiB, `op_overhead` seconds per instruction of a loop over a 4-element
    array. Each from loops of few and of many trips, so launch cancels."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    from irshard.collectives import schedule
    from irshard.xla.hlo import HloModuleView

    def loop(body):
        return jax.jit(lambda x, trips: jax.lax.fori_loop(0, trips,
                                                          lambda _, v: body(v), x))

    def per_trip(fn, x) -> tuple[float, Any]:
        compiled = fn.lower(x, np.int32(0)).compile()
        return _per_collective(lambda v, t: compiled(v, t), x, repeats), compiled

    n = 1024
    w = jnp.asarray(np.eye(n, dtype=np.float32) * 0.5)
    matmul, _ = per_trip(loop(lambda v: v @ w), jnp.ones((n, n), jnp.float32))
    big = 16 * 1024 * 1024
    stream, _ = per_trip(loop(lambda v: v * 0.5 + 1.0), jnp.ones(big, jnp.float32))
    tiny, compiled = per_trip(loop(lambda v: v * 0.5 + 1.0), jnp.ones(4, jnp.float32))
    # The instructions one trip of the tiny loop runs, as the simulation
    # counts them: each timed at one second, the rest at none.
    view = HloModuleView.from_text(compiled.as_text())
    counted = schedule.simulate(view, schedule.Rates(1e30, 1e30, 1.0),
                                lambda inst: (0.0, None))
    per_iteration = max(1, sum(1 for e in counted.events if e.iteration == (0,)))
    return {"flops": 2.0 * n ** 3 / max(matmul, 1e-9),
            "bandwidth": 2.0 * 4 * big / max(stream, 1e-9),
            "op_overhead": tiny / per_iteration}
