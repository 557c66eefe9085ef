"""What a device computes, as the step simulation times it: measured by
running programs on the devices of a mesh (`irshard calibrate`'s compute,
`measure_compute`), each sized for its platform (`PLANS`) and each run
whole, as a step runs, its launch taken off."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Any

from irshard import backend
from irshard.core.errors import BackendError
from irshard.core.specs import MeshSpec
from irshard.reporting.cells import human_bytes


@dataclass(frozen=True)
class ComputePlan:
    """What `measure_compute` runs on a platform's devices: matrix products
    of `dot_sides` in each of `dot_dtypes` (the first gives `flops`, a
    second `flops_f32`), and an elementwise op reading and writing each of
    `stream_bytes`; `strided`: whether slices of a stacked array read
    across their rows are timed (a CPU's cache sets)."""

    dot_sides: tuple[int, ...]
    dot_dtypes: tuple[str, ...]
    stream_bytes: tuple[int, ...]
    strided: bool
    # Whether the products' rate is kept by size (`flops_by_size`): a GPU
    # fills its cores only with large products.
    by_size: bool = False


# A CPU device's work is small; a GPU's products and streams must fill it
# (an 8192-wide bf16 product is about a millisecond on a Hopper GPU, a
# 1 GiB stream a quarter of one).
PLANS = {
    "cpu": ComputePlan((256, 512), ("float32",), (1 << 20, 1 << 22, 1 << 24), True),
    "gpu": ComputePlan((256, 512, 1024, 2048, 4096, 8192), ("bfloat16", "float32"),
                       (1 << 20, 1 << 24, 1 << 28, 1 << 30), False, by_size=True),
}
# The FLOPs a program of products in a row does at least, so that a small
# product's time is not lost in the launch's (at most `MAX_CHAIN` of them).
CHAIN_FLOPS = 1e11
MAX_CHAIN = 64
# The results of the program that times each result buffer, and the trips
# of the two loops that time a trip.
OUTPUTS = 33
TRIPS = (10, 110)
STREAM_BYTES = PLANS["cpu"].stream_bytes
DOT_SIDES = PLANS["cpu"].dot_sides
# The products of the stretches of compute between collectives whose
# rendezvous `measure_compute` times, and how many stretches a program has.
SKEW_SIDES = (256, 384)
SEGMENTS = 8
# The shape of each slice, per device, of the fusions that read slices of a
# stacked array in a transposed order (`measure_compute`'s
# `sliced_strided_bandwidth`), and how many slices the two read.
STRIDED_SHAPE = (8, 128, 256)
STRIDED_OPERANDS = (2, 6)
# The arithmetic of a fusion that is not a product, per device: chains of
# multiply-adds and of tanh over an array that stays in the caches
# (1 MiB), as many links as make it compute-bound.
ELEMENTWISE_ELEMENTS = 1 << 18
FMA_LINKS = 64
TANH_LINKS = 16


def measure_compute(mesh: MeshSpec, repeats: int = 5,
                    platform: str = "cpu") -> dict[str, Any]:
    """The compute of one of `mesh`'s devices while all of them run, as the
    step simulation times it (a CPU host's devices share its cores and its
    memory; the sizes are the platform's `PLANS`): `flops` per second of
    matrix products (`flops_f32` those of f32 where the first dtype is
    another, with `flops_dtype` naming it), `bandwidth` as
    `[bytes, bytes per second]` points of an elementwise op with a fresh
    result (caches and fresh pages make the rate depend on the size),
    `op_overhead`, the seconds each instruction takes beyond its work (tiny
    products in a row); on a CPU host `flops_elementwise` and
    `transcendentals`, per second, of a fusion's arithmetic that is not a
    product (chains of multiply-adds and of tanh over an array in the
    caches), `launch`, the seconds one execution of a program
    that does next to nothing takes.

    On a CPU host also `sliced_strided_bandwidth`, bytes per second of
    slices of a stacked array read out of their layout's order (an
    elementwise fusion of them written transposed, each read across its
    rows: the time more slices add, over their bytes), and, with two or
    more devices, `first_collective`, what an execution's first collective
    takes beyond the others (it wakes the devices' threads),
    `rendezvous_skew`, what a collective after a stretch of compute takes
    beyond the two alone (the threads the host's scheduler ran last are
    waited for), and `rendezvous`, the seconds of one tiny all-reduce among
    others in a row, for each size of group the devices split into. Each
    is a program run whole, as a step runs, its launch taken off."""
    plan = PLANS.get(platform, PLANS["gpu"])
    host = platform == "cpu"
    timer = _Timer(mesh.num_devices, platform, repeats)
    n = timer.n
    found: dict[str, Any] = {"devices": n}
    rendezvous: dict[int, float] = {}
    if host and n > 1:
        rendezvous, found["first_collective"] = _rendezvous(timer)
    overhead = _op_overhead(timer)
    # Each result buffer of an execution, and each trip of a loop.
    found["output"] = _beyond(timer, overhead, _results, (1, OUTPUTS))
    found["loop_trip"] = _beyond(timer, overhead, _loop, TRIPS)
    found.update(_product_rates(timer, plan))
    curve = _stream_curve(timer, plan)
    found["bandwidth"] = curve
    if plan.strided:
        found["sliced_strided_bandwidth"] = _strided_bandwidth(timer, curve[-1][1])
    if host:
        found.update(_elementwise_rates(timer))
    found["op_overhead"] = overhead
    if host and n > 1:
        found["rendezvous_skew"] = _rendezvous_skew(timer)
    # Every run of the program that does next to nothing, over the whole
    # measurement.
    found["launch"] = statistics.median(timer.bases)
    found["rendezvous"] = rendezvous
    return found


class _Timer:
    """Programs over a one-axis mesh of `n` devices, each timed whole
    beyond the launch: its runs alternate with runs of a program that does
    next to nothing (`bases`), so that the host's drifts (a shared
    machine's) fall on both."""

    def __init__(self, n: int, platform: str, repeats: int):
        self.n = n
        self.devices = backend.devices(platform, n)
        self.mesh = backend.make_mesh(("d",), (n,), self.devices)
        self.runs = max(20, 6 * repeats)
        # Many runs, for what is too short to time in few.
        self.many = max(100, 20 * repeats)
        nothing, x0 = self.compiled_on(lambda v: v + 1.0, (4,))
        self.baseline = (nothing, [x0])
        self.bases = list(backend.time_runs(*self.baseline, self.many))

    def compiled_on(self, body, shape, count: list | None = None, mesh=None,
                    dtype="float32", fill=0.5):
        import jax
        import jax.numpy as jnp
        import numpy as np
        from jax.sharding import NamedSharding, PartitionSpec as P
        mesh = mesh or self.mesh
        spec = P(mesh.axis_names)
        x = jax.device_put(np.full((self.n * shape[0],) + shape[1:], fill,
                                   jnp.dtype(dtype)),
                           NamedSharding(mesh, spec))
        compiled = jax.jit(jax.shard_map(
            body, mesh=mesh, in_specs=spec, out_specs=spec)).lower(x).compile()
        if count is not None:
            count.append(_executed(compiled.as_text()))
        backend.time_runs(compiled, [x], 1)
        return compiled, x

    def timed(self, body, shape, times: int | None = None, count: list | None = None,
              mesh=None, dtype="float32", fill=0.5) -> float:
        """The median seconds of `body` beyond the launch."""
        compiled, x = self.compiled_on(body, shape, count, mesh, dtype, fill)
        extra = []
        for _ in range(times or self.runs):
            base = backend.time_runs(*self.baseline, 1)[0]
            self.bases.append(base)
            extra.append(backend.time_runs(compiled, [x], 1)[0] - base)
        return statistics.median(extra)


def _rendezvous(timer: _Timer) -> tuple[dict[int, float], float]:
    """A step's first collective wakes every device's thread; those after
    it find them running (what the loops of `measure` time). A rendezvous
    of fewer of them (an axis of a larger mesh) takes less: one of eight in
    a row, for each size of group the devices split into. Returns those,
    and what the first collective takes beyond its rendezvous."""
    n = timer.n
    alone, rendezvous = {}, {}
    for group in (g for g in range(2, n + 1) if n % g == 0):
        mesh_g = backend.make_mesh(("r", "g"), (n // group, group), timer.devices)
        alone[group], eight = (
            timer.timed(_all_reduces(k, "g"), (4,), timer.many, mesh=mesh_g)
            for k in (1, 8))
        rendezvous[group] = max(0.0, (eight - alone[group]) / 7)
    return rendezvous, max(0.0, alone[n] - rendezvous[n])


def _op_overhead(timer: _Timer) -> float:
    """Instructions that do next to nothing: tiny products, each followed
    by an elementwise op; the seconds of one."""
    counts: list[int] = []
    chained = [timer.timed(_chain(k), (8, 8), timer.many, counts) for k in (0, 64)]
    return max(0.0, (chained[1] - chained[0]) / max(1, counts[1] - counts[0]))


def _beyond(timer: _Timer, overhead: float, program, counts: tuple[int, int]) -> float:
    """What one more of a unit takes beyond the instructions the
    simulation counts: `program(k)` has `k` of them, for each of
    `counts`."""
    made: list[int] = []
    few, many = (timer.timed(program(k), (4,), timer.many, made) for k in counts)
    return max(0.0, (many - few - (made[1] - made[0]) * overhead)
               / (counts[1] - counts[0]))


def _product_rates(timer: _Timer, plan: ComputePlan) -> dict[str, Any]:
    """Matrix products in a row of a matrix whose square is itself (every
    element 1/side, exact in every float type), for each of the plan's
    sides and types."""
    import jax.numpy as jnp
    found: dict[str, Any] = {}
    for i, dtype in enumerate(plan.dot_dtypes):
        points = []
        for side in plan.dot_sides:
            flops = 2.0 * side ** 3
            k = int(min(MAX_CHAIN, max(1, CHAIN_FLOPS // flops)))
            seconds = timer.timed(_products(k), (side, side), dtype=dtype,
                                  fill=1.0 / side) / k
            points.append([flops, flops / max(seconds, 1e-9)])
        rate = points[-1][1] if plan.by_size else \
            statistics.median(r for _, r in points)
        key = "flops" if i == 0 else "flops_f32"
        found[key] = rate
        if plan.by_size:
            found[key + "_by_size"] = points
        if i == 0 and dtype != "float32":
            found["flops_dtype"] = jnp.dtype(dtype).name
    return found


def _stream_curve(timer: _Timer, plan: ComputePlan) -> list[list[float]]:
    """`[bytes, bytes per second]` of an elementwise op with a fresh
    result, for each of the plan's sizes; a point lost in the launch's
    noise says nothing, and is left out (the largest is kept)."""
    streamed = [(nbytes, timer.timed(lambda v: v * 0.5 + 1.0, (nbytes // 8,)))
                for nbytes in plan.stream_bytes]
    if streamed[-1][1] <= 0:
        raise BackendError(f"calibrate: streaming {human_bytes(plan.stream_bytes[-1])} "
                           f"took no more time than doing nothing; the host was "
                           f"too busy to measure: run it again")
    noise = 0.1 * statistics.median(timer.bases)
    return [[b, b / t] for b, t in streamed
            if t > noise or b == plan.stream_bytes[-1]]


def _strided_bandwidth(timer: _Timer, stream: float) -> float:
    """The same fusion with more slices of one stacked array, each read
    across its rows: bytes per second of what they add (lost in the noise:
    no slower than the `stream`)."""
    few, many = (timer.timed(_transposed(k), (k,) + STRIDED_SHAPE)
                 for k in STRIDED_OPERANDS)
    more = (STRIDED_OPERANDS[1] - STRIDED_OPERANDS[0]) * 4 * math.prod(STRIDED_SHAPE)
    return min(more / (many - few) if many > few else math.inf, stream)


def _elementwise_rates(timer: _Timer) -> dict[str, float]:
    """A fusion's arithmetic, not a product's: what its flops and its
    transcendentals (XLA's count) take, each device running at once."""
    found: dict[str, float] = {}
    fma_s, tanh_s = (timer.timed(body, (ELEMENTWISE_ELEMENTS,))
                     for body in (_fmas(FMA_LINKS), _tanhs(TANH_LINKS)))
    if fma_s > 0:
        rate = 2.0 * FMA_LINKS * ELEMENTWISE_ELEMENTS / fma_s
        found["flops_elementwise"] = rate
        # Each tanh link also multiplies twice and adds once.
        left = tanh_s - 3.0 * TANH_LINKS * ELEMENTWISE_ELEMENTS / rate
        if left > 0:
            found["transcendentals"] = TANH_LINKS * ELEMENTWISE_ELEMENTS / left
    return found


def _rendezvous_skew(timer: _Timer) -> float:
    """A collective after a stretch of compute waits for the devices the
    host's scheduler ran last: what it takes beyond the compute and the
    collective alone, per collective."""
    import jax.numpy as jnp
    import numpy as np
    skews = []
    for side in SKEW_SIDES:
        w = jnp.asarray(np.eye(side, dtype=np.float32) * 0.999)
        parts = [timer.timed(lambda v, w=w, c=c: _segments(v, w, c), (side, side),
                             timer.runs // 2)
                 for c in ((True, False), (False, True), (True, True))]
        skews.append(max(0.0, (parts[2] - parts[0] - parts[1]) / SEGMENTS))
    return statistics.median(skews)


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


def _fmas(k: int):
    """`k` multiply-adds in a row on each element."""
    def body(v):
        for _ in range(k):
            v = v * 0.999 + 0.001
        return v
    return body


def _tanhs(k: int):
    """`k` tanh in a row on each element, each mixed with its input."""
    import jax.numpy as jnp

    def body(v):
        for _ in range(k):
            v = jnp.tanh(v) * 0.5 + v * 0.5
        return v
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


def _executed(hlo: str) -> float:
    """How many instructions the step simulation times in one execution of
    a program, every run of a loop's counted."""
    from irshard.timemodel import schedule
    from irshard.xla.hlo import HloModuleView
    counted = schedule.simulate(HloModuleView.from_text(hlo),
                                schedule.Rates(1e30, 1e30, 1.0),
                                lambda inst: (0.0, None))
    return round(counted.compute_s)


def _results(k: int):
    """`k` results, each its own buffer."""
    def body(v):
        return [v + float(i) for i in range(k)]
    return body


def _loop(trips: int):
    """A loop of `trips` trips around one elementwise op."""
    import jax

    def body(v):
        return jax.lax.fori_loop(0, trips, lambda i, w: w * 0.999 + 0.001, v)
    return body


def _products(k: int):
    """`k` products of a matrix with itself in a row."""
    def body(v):
        for _ in range(k):
            v = v @ v
        return v
    return body
