"""`irshard calibrate`: measure the collectives of the devices present and fit
the time model to them.

Each collective kind runs over each mesh axis at several sizes, inside a
loop run for two trip counts so that launch overhead cancels out; the time
of one collective is the difference over the difference in trips (median of
several runs). The link's latency `a` and bandwidth `W` are then fitted by
least squares to half the sizes (the smallest, the largest and every other
size between: `held_out_sizes`),

    T = a + wire / W                  (wire as in irshard.hardware.cost)

for each kind (the CPU's "links" are memory copies between threads, and
each kind copies differently) and for all kinds together, the latency
weighed by the rendezvous of the collective's group against that of all
the devices (`weighted`, measured by `measure_compute`); the model is
judged on the other half, each between two sizes it was fitted on:
`error` is the median relative error of the fitted times on sizes it was
not fitted on (`bands`: by message size). A
CPU host's devices share its cores, so what it measures holds for that
number of devices (`devices`); `compute` is what the step simulation
times a device's compute with (`measure_compute`). `-o PATH` saves the profile for
`--profile PATH`.
"""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass, replace
from typing import Any, Callable, Sequence

from irshard import backend
from irshard.collectives import analysis
from irshard.core.errors import BackendError, UsageError
from irshard.core.specs import MeshSpec
from irshard.hardware.targets import Link
from irshard.reporting.text import human_bytes, human_time, table
from irshard.reporting.writer import dumps_json

KINDS = ("all-gather", "reduce-scatter", "all-reduce", "all-to-all",
         "collective-permute")
DEFAULT_SIZES = tuple(1 << k for k in range(12, 23))    # 4 KiB to 4 MiB
_TRIPS = (2, 12)
_TARGET_SECONDS = 0.03      # the extra trips' time a measurement aims at
# Message sizes the held-out error is given for: (label, from, below) bytes.
BANDS = (("under 64 KiB", 0, 1 << 16), ("64 KiB to 1 MiB", 1 << 16, 1 << 20),
         ("1 MiB and over", 1 << 20, 1 << 62))


@dataclass(frozen=True)
class Measurement:
    kind: str
    axis: str
    group: int
    bytes: int            # per device, the collective's result
    wire: int             # what one device sends
    steps: float          # the latency's weight (`weighted`)
    seconds: float        # one collective

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "axis": self.axis, "group": self.group,
                "bytes": self.bytes, "wire_bytes": self.wire,
                "seconds": self.seconds}


MAX_REPEATS = 1000
MIN_SIZES = 4           # three to fit latency and bandwidth on, one to judge
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
            f"{MIN_SIZES} (the smallest, the largest and every other size "
            f"between fit the latency and bandwidth, the rest check the fit), "
            f"e.g. 4KiB,64KiB,1MiB,4MiB")
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
                    analysis.wire_bytes(kind, nbytes, n), 1.0, seconds))
    return results


def fit(points: Sequence[Measurement]) -> tuple[float, float]:
    """(latency per step, bandwidth) minimizing the relative squared error
    of `a * steps + wire / W`."""
    import numpy as np
    rows = np.array([[p.steps / p.seconds, p.wire / p.seconds] for p in points
                     if p.seconds > 0])
    target = np.ones(len(rows))
    (latency, inverse), *_ = np.linalg.lstsq(rows, target, rcond=None)
    if inverse > 0:
        return max(float(latency), 0.0), 1.0 / float(inverse)
    # No time grows with the size measured (all latency): the bandwidth is
    # what moves the largest message within the times' spread (the most
    # the measurements cannot tell apart), the latency what is left.
    timed = [p for p in points if p.seconds > 0]
    times = [p.seconds for p in timed]
    spread = (max(times) - min(times)) or min(times) / 1000
    bandwidth = max(p.wire for p in timed) / spread
    latency = statistics.median((p.seconds - p.wire / bandwidth) / p.steps
                                for p in timed)
    return max(latency, 0.0), bandwidth


def predict(point: Measurement, latency: float, bandwidth: float) -> float:
    return latency * point.steps + point.wire / bandwidth


def held_out_sizes(sizes: Sequence[int]) -> set[int]:
    """The sizes a calibration judges its fit on: every other one of
    `sizes` between the smallest and the largest, which it fits on (a
    held-out size lies between two fitted ones, never beyond them)."""
    ordered = sorted(set(sizes))
    return {s for i, s in enumerate(ordered) if i % 2 and i < len(ordered) - 1}


def weighted(points: Sequence[Measurement],
             rendezvous: dict[int, float]) -> list[Measurement]:
    """`points` with their latency weighed as the cost model weighs it
    (irshard.hardware.cost): a collective of the host's devices is one
    rendezvous of its group's threads, whose time depends on the group's
    size (`Link.group_scale`: a collective-permute's is not), so that the
    fitted latency is that of a group of all the devices."""
    link = Link("host", 1.0, 0.0, rendezvous=dict(rendezvous))
    return [p if p.kind == "collective-permute"
            else replace(p, steps=link.group_scale(p.group)) for p in points]


def calibrate(mesh: MeshSpec, sizes: Sequence[int] = DEFAULT_SIZES,
              repeats: int = 5) -> dict[str, Any]:
    """Measures, fits on half the sizes, and reports the error on the
    others (`held_out_sizes`)."""
    measured = measure(mesh, sizes, repeats)
    compute = measure_compute(mesh, repeats)
    rendezvous = compute.pop("rendezvous")
    points = weighted(measured, rendezvous)
    ordered = sorted(set(sizes))
    held_out = held_out_sizes(ordered)

    def size_of(p: Measurement) -> int:
        return min(ordered, key=lambda s: abs(s - p.bytes))

    train = [p for p in points if size_of(p) not in held_out]
    held = [p for p in points if size_of(p) in held_out and p.seconds > 0]
    source = (f"measured by irshard calibrate --mesh {mesh} on "
              f"{time.strftime('%Y-%m-%d')}")
    latency, bandwidth = fit(train)
    link: dict[str, Any] = {"bandwidth": {"value": bandwidth, "source": source},
                            "latency": {"value": latency, "source": source},
                            "kinds": {},
                            "rendezvous": {str(g): s for g, s in rendezvous.items()}}
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
    bands = []
    for label, low, high in BANDS:
        mine = [e for e, p in zip(errors, held) if low <= p.bytes < high]
        if mine:
            bands.append({"band": label, "held_out": len(mine),
                          "error": statistics.median(mine)})
    return {
        "mesh": str(mesh),
        "devices": mesh.num_devices,
        "links": {"host": link},
        "compute": compute,
        "error": error,
        "held_out": len(held),
        "bands": bands,
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
    lines += ["", "fitted: T = latency x rendezvous(group) / rendezvous(all) "
                  "+ wire / bandwidth"]
    lines += table(["kind", "bandwidth", "latency"],
                   [[kind, f"{human_bytes(int(v['bandwidth']))}/s",
                     human_time(v["latency"])]
                    for kind, v in host.get("kinds", {}).items()]
                   + [["(all kinds)", f"{human_bytes(int(host['bandwidth']['value']))}/s",
                       human_time(host["latency"]["value"])]])
    lines += [f"  rendezvous of {g} devices: {human_time(v)}"
              for g, v in sorted(host.get("rendezvous", {}).items(),
                                 key=lambda kv: int(kv[0]))]
    lines += [f"  median relative error on {result['held_out']} held-out "
              f"measurements: " + (f"{error:.1%}" if error is not None else "n/a")]
    lines += [f"    {b['band']}: {b['error']:.1%} ({b['held_out']})"
              for b in result.get("bands", ())]
    c = result.get("compute")
    if c:
        lines += ["", f"compute of one device while all {c['devices']} run"]
        lines.append(f"  matrix products: {c['flops'] / 1e9:.3g} GFLOP/s")
        lines += [f"  streaming {human_bytes(b)}: {human_bytes(int(r))}/s"
                  for b, r in c["bandwidth"]]
        if c.get("sliced_strided_bandwidth"):
            lines.append(f"  slices of a stacked array read across their rows: "
                         f"{human_bytes(int(c['sliced_strided_bandwidth']))}/s")
        lines.append(f"  each instruction: {human_time(c['op_overhead'])} more")
        lines.append(f"  launch: {human_time(c['launch'])} per execution")
        lines.append(f"  the first collective of an execution: "
                     f"{human_time(c['first_collective'])} more")
        lines.append(f"  a collective after compute: up to "
                     f"{human_time(c['rendezvous_skew'])} more (the devices' "
                     f"threads meet)")
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
    return dumps_json({"links": result["links"], "error": result["error"],
                       "devices": result["devices"],
                       "compute": result["compute"]}) + "\n"


def render(result: dict[str, Any], fmt: str) -> str:
    """The calibration as `fmt` (text or json)."""
    if fmt == "json":
        return dumps_json(result) + "\n"
    return render_text(result)


# Bytes one device reads and writes in the streaming measurements, and the
# sides of the matrix products, for `measure_compute`.
STREAM_BYTES = (1 << 20, 1 << 22, 1 << 24)
DOT_SIDES = (256, 512)
# The products of the stretches of compute between collectives whose
# rendezvous `measure_compute` times, and how many stretches a program has.
SKEW_SIDES = (256, 384)
SEGMENTS = 8
# The shape of each slice, per device, of the fusions that read slices of a
# stacked array in a transposed order (`measure_compute`'s
# `sliced_strided_bandwidth`), and how many slices the two read.
STRIDED_SHAPE = (8, 128, 256)
STRIDED_OPERANDS = (2, 6)


def measure_compute(mesh: MeshSpec, repeats: int = 5) -> dict[str, Any]:
    """The compute of one of `mesh`'s devices while all of them run, as the
    step simulation times it (a CPU host's devices share its cores and its
    memory): `flops` per second of matrix products (`DOT_SIDES`),
    `bandwidth` as `[bytes, bytes per second]` points of an elementwise op
    with a fresh result (`STREAM_BYTES` read and written: caches and fresh
    pages make the rate depend on the size), `op_overhead`, the seconds
    each instruction takes beyond its work (tiny products in a row),
    `sliced_strided_bandwidth`, bytes per second of slices of a stacked
    array read out of their layout's order (an elementwise fusion of them
    written transposed, each read across its rows: the time more slices
    add, over their bytes),
    `launch`, the seconds one execution of a program that does next to
    nothing takes, `first_collective`, what an execution's first collective
    takes beyond the others (it wakes the devices' threads), and
    `rendezvous_skew`, what a collective after a stretch of compute takes
    beyond the two alone (the threads the host's scheduler ran last are
    waited for), and `rendezvous`, the seconds of one tiny all-reduce among
    others in a row, for each size of group the devices split into. Each
    is a program run whole, as a step runs, its launch taken off."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import NamedSharding, PartitionSpec as P

    n = mesh.num_devices
    devices = backend.devices("cpu", n)
    jax_mesh = backend.make_mesh(("d",), (n,), devices)
    runs = max(20, 6 * repeats)

    def compiled_on(body, shape, count: list | None = None, mesh=jax_mesh):
        spec = P(mesh.axis_names)
        x = jax.device_put(np.full((n * shape[0],) + shape[1:], 0.5, np.float32),
                           NamedSharding(mesh, spec))
        compiled = jax.jit(jax.shard_map(
            body, mesh=mesh, in_specs=spec, out_specs=spec)).lower(x).compile()
        if count is not None:
            count.append(_instructions(compiled.as_text()))
        backend.time_runs(compiled, [x], 1)
        return compiled, x

    nothing, x0 = compiled_on(lambda v: v + 1.0, (4,))
    baseline = (nothing, [x0])

    def timed(body, shape, times: int = runs, count: list | None = None,
              mesh=jax_mesh) -> float:
        """Seconds of `body` beyond the launch: its runs alternate with
        runs of a program that does next to nothing, so that the host's
        drifts (a shared machine's) fall on both."""
        compiled, x = compiled_on(body, shape, count, mesh)
        extra = []
        for _ in range(times):
            base = backend.time_runs(*baseline, 1)[0]
            bases.append(base)
            extra.append(backend.time_runs(compiled, [x], 1)[0] - base)
        return statistics.median(extra)

    bases = backend.time_runs(*baseline, max(100, 20 * repeats))
    # A step's first collective wakes every device's thread; those after it
    # find them running (what the loops of `measure` time). A rendezvous of
    # fewer of them (an axis of a larger mesh) takes less: one of eight in a
    # row, for each size of group the devices split into.
    alone, rendezvous = {}, {}
    for group in (g for g in range(2, n + 1) if n % g == 0):
        mesh_g = backend.make_mesh(("r", "g"), (n // group, group), devices)
        alone[group], eight = (
            timed(_all_reduces(k, "g"), (4,), max(100, 20 * repeats), mesh=mesh_g)
            for k in (1, 8))
        rendezvous[group] = max(0.0, (eight - alone[group]) / 7)
    first = max(0.0, alone[n] - rendezvous[n])
    # Instructions that do next to nothing: tiny products, each followed by
    # an elementwise op.
    counts: list[int] = []
    chained = [timed(_chain(k), (8, 8), max(100, 20 * repeats), counts)
               for k in (0, 64)]
    overhead = max(0.0, (chained[1] - chained[0]) / max(1, counts[1] - counts[0]))
    rates = []
    for side in DOT_SIDES:
        w = jnp.asarray(np.full((side, side), 1.0 / side, np.float32))
        seconds = timed(lambda v, w=w: v @ w, (side, side))
        rates.append(2.0 * side ** 3 / max(seconds, 1e-9))
    streamed = [(nbytes, timed(lambda v: v * 0.5 + 1.0, (nbytes // 8,)))
                for nbytes in STREAM_BYTES]
    # A point lost in the launch's noise says nothing; the largest is kept.
    if streamed[-1][1] <= 0:
        raise BackendError(f"calibrate: streaming {human_bytes(STREAM_BYTES[-1])} "
                           f"took no more time than doing nothing; the host was "
                           f"too busy to measure: run it again")
    curve = [[b, b / t] for b, t in streamed
             if t > 0.1 * statistics.median(bases) or b == STREAM_BYTES[-1]]
    # The same fusion with more slices of one stacked array, each read
    # across its rows.
    few, many = (timed(_transposed(k), (k,) + STRIDED_SHAPE)
                 for k in STRIDED_OPERANDS)
    more = (STRIDED_OPERANDS[1] - STRIDED_OPERANDS[0]) \
        * 4 * math.prod(STRIDED_SHAPE)
    # Lost in the noise: no slower than the stream.
    strided = min(more / (many - few) if many > few else math.inf, curve[-1][1])
    # A collective after a stretch of compute waits for the devices the
    # host's scheduler ran last: what it takes beyond the compute and the
    # collective alone, per collective.
    skews = []
    for side in SKEW_SIDES:
        w = jnp.asarray(np.eye(side, dtype=np.float32) * 0.999)
        alone = [timed(lambda v, w=w, c=c: _segments(v, w, c), (side, side), runs // 2)
                 for c in ((True, False), (False, True), (True, True))]
        skews.append(max(0.0, (alone[2] - alone[0] - alone[1]) / SEGMENTS))
    # Every run of the program that does next to nothing, over the whole
    # measurement.
    launch = statistics.median(bases)
    return {"devices": n, "flops": statistics.median(rates),
            "bandwidth": curve, "sliced_strided_bandwidth": strided,
            "op_overhead": overhead, "launch": launch,
            "first_collective": first, "rendezvous_skew": statistics.median(skews),
            "rendezvous": rendezvous}


def _all_reduces(k: int, axis: str):
    """`k` all-reduces over `axis` in a row."""
    import jax

    def body(v):
        for _ in range(k):
            v = jax.lax.psum(v, axis) * 0.5
        return v
    return body


def _segments(v, w, what: tuple[bool, bool]):
    """`SEGMENTS` stretches of a product and a tanh, each followed by an
    all-reduce: `what` says which of the two are there."""
    import jax
    import jax.numpy as jnp
    compute, collective = what
    for _ in range(SEGMENTS):
        if compute:
            v = jnp.tanh(v @ w)
        if collective:
            v = jax.lax.psum(v, "d") * 0.125
    return v


def _transposed(k: int):
    """The `k` slices of an array stacked on a leading axis summed
    elementwise and written with their last dimension first (a weight
    gradient's transpose of a scan's activations): one fusion that reads
    each across its rows."""
    import jax.numpy as jnp

    def body(v):
        total = v[0]
        for i in range(1, k):
            total = total * 0.5 + v[i]
        return jnp.transpose(total, (total.ndim - 1,) + tuple(range(total.ndim - 1)))[None]
    return body


def _chain(k: int):
    import jax.numpy as jnp
    import numpy as np
    weights = [np.eye(8, dtype=np.float32) * (1 + i / 1024) for i in range(k)]

    def body(v):
        for w in weights:
            v = jnp.tanh(v @ w)
        return v
    return body


def _instructions(hlo: str) -> int:
    """The instructions of a program the step simulation times."""
    from irshard.collectives import schedule
    from irshard.xla.hlo import HloModuleView
    counted = schedule.simulate(HloModuleView.from_text(hlo),
                                schedule.Rates(1e30, 1e30, 1.0),
                                lambda inst: (0.0, None))
    return sum(1 for e in counted.events if e.track == "compute")
