"""`irshard calibrate`: measure the collectives of the devices present and fit
the time model to them.

Each collective kind runs over each mesh axis at several sizes, inside a
loop run for two trip counts so that launch overhead cancels out; the time
of one collective is the difference over the difference in trips (median of
several runs). The link's latency `a` and bandwidth `W` are then fitted by
least squares to half the sizes (the smallest, the largest and every other
size between: `held_out_sizes`),

    T = a + wire / W                  (wire as in irshard.timemodel.links)

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

import statistics
import time
from dataclasses import dataclass, replace
from typing import Any, Callable, Sequence

from irshard import backend
from irshard.collectives import analysis
from irshard.core.errors import UsageError
from irshard.core.specs import MeshSpec
from irshard.measuring.computerates import measure_compute
from irshard.reporting.cells import human_bytes, human_time, table
from irshard.reporting.writer import dumps_json
from irshard.timemodel.profiles import Link

KINDS = ("all-gather", "reduce-scatter", "all-reduce", "all-to-all",
         "collective-permute")
DEFAULT_SIZES = tuple(1 << k for k in range(12, 23))    # 4 KiB to 4 MiB
_TRIPS = (2, 12)
_TARGET_SECONDS = 0.03      # the extra trips' time a measurement aims at
_RETRIES = 4                # measurements of one point before it is left out
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
    # A result is whole f32 elements, a multiple of the axis's size: sizes
    # closer than that measure the same collective twice.
    for axis in mesh.axes:
        if axis.size < 2:
            continue
        measured = sorted({measured_bytes(size, axis.size) for size in chosen})
        if len(measured) < MIN_SIZES:
            raise UsageError(
                f"--sizes: {', '.join(human_bytes(s) for s in chosen)} are "
                f"measured as {len(measured)} different size"
                f"{'s' if len(measured) > 1 else ''} over axis {axis.name} "
                f"({', '.join(human_bytes(s) for s in measured)}: a result is "
                f"whole f32 elements, a multiple of {axis.size}); give at least "
                f"{MIN_SIZES} sizes {human_bytes(4 * axis.size)} or more apart, "
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


def measured_bytes(size: int, n: int) -> int:
    """The bytes per device of the result measured for `size` over an axis
    of `n` devices: whole f32 elements, a multiple of `n`."""
    return max(n, size // 4 // n * n) * 4


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
    seconds = 0.0
    for _ in range(_RETRIES):
        base = _run(compiled, x, few, repeats)
        seconds = (_run(compiled, x, many, repeats) - base) / (many - few)
        if seconds > 0:
            return seconds
        # The host's noise outweighed the extra trips (a busy machine, one
        # repeat): measure again over four times as many.
        many = few + (many - few) * 4
    return 0.0      # never above the noise: left out of the fit


def measure(mesh: MeshSpec, sizes: Sequence[int] = DEFAULT_SIZES,
            repeats: int = 5, platform: str = "cpu") -> list[Measurement]:
    """Times every kind over every axis of `mesh` at `sizes` (bytes per
    device of the collective's result) on `platform`'s devices."""
    import jax
    import numpy as np
    from jax.sharding import NamedSharding, PartitionSpec as P

    devices = backend.devices(platform, mesh.num_devices)
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
                result = measured_bytes(size, n) // 4
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
    (irshard.timemodel.links): a collective of the host's devices is one
    rendezvous of its group's threads, whose time depends on the group's
    size (`Link.group_scale`: a collective-permute's is not), so that the
    fitted latency is that of a group of all the devices."""
    link = Link("host", 1.0, 0.0, rendezvous=dict(rendezvous))
    return [p if p.kind == "collective-permute"
            else replace(p, steps=link.group_scale(p.group)) for p in points]


# The link a platform's devices exchange collectives over, within one host.
LINKS = {"cpu": "host", "gpu": "nvlink", "tpu": "ici"}


def calibrate(mesh: MeshSpec, sizes: Sequence[int] = DEFAULT_SIZES,
              repeats: int = 5, platform: str = "cpu") -> dict[str, Any]:
    """Measures, fits on half the sizes, and reports the error on the
    others (`held_out_sizes`). A mesh with no axis of two or more devices
    has no collective to time: its devices' compute alone is measured."""
    measured = measure(mesh, sizes, repeats, platform)
    compute = measure_compute(mesh, repeats, platform)
    rendezvous = compute.pop("rendezvous")
    points = weighted(measured, rendezvous)
    result: dict[str, Any] = {
        "mesh": str(mesh), "platform": platform, "devices": mesh.num_devices,
        "links": {}, "compute": compute, "error": None, "held_out": 0,
        "bands": [], "measurements": [p.to_json() for p in points]}
    if not points:
        return result
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
                            "kinds": {}}
    if rendezvous:
        link["rendezvous"] = {str(g): s for g, s in rendezvous.items()}
    fitted = {}
    for kind in KINDS:
        mine = [p for p in train if p.kind == kind]
        if len(mine) >= 2:
            fitted[kind] = fit(mine)
            link["kinds"][kind] = {"latency": fitted[kind][0],
                                   "bandwidth": fitted[kind][1]}
    errors = [abs(predict(p, *fitted.get(p.kind, (latency, bandwidth)))
                  - p.seconds) / p.seconds for p in held]
    bands = []
    for label, low, high in BANDS:
        mine = [e for e, p in zip(errors, held) if low <= p.bytes < high]
        if mine:
            bands.append({"band": label, "held_out": len(mine),
                          "error": statistics.median(mine)})
    result.update(links={LINKS.get(platform, platform): link},
                  error=statistics.median(errors) if errors else None,
                  held_out=len(held), bands=bands)
    return result


def render_text(result: dict[str, Any]) -> str:
    lines = [f"calibration on mesh {result['mesh']}"
             + (f" ({result['platform']})" if result.get("platform", "cpu") != "cpu"
                else ""), ""]
    if not result["measurements"]:
        lines.append("no collectives: the mesh has no axis of 2 or more devices")
    for name, link in result["links"].items():
        lines += _render_link(result, name, link)
    c = result.get("compute")
    if c:
        lines += ["", f"compute of one device while all {c['devices']} run"
                  if c["devices"] > 1 else "compute of one device"]
        for key, dtype in (("flops", c.get("flops_dtype")), ("flops_f32", "f32")):
            if not c.get(key):
                continue
            named = f" ({dtype})" if dtype else ""
            lines.append(f"  matrix products{named}: {c[key] / 1e9:.3g} GFLOP/s")
            lines += [f"    of {_flop(flops)} each: {rate / 1e9:.3g} GFLOP/s"
                      for flops, rate in c.get(key + "_by_size", ())]
        lines += [f"  streaming {human_bytes(b)}: {human_bytes(int(r))}/s"
                  for b, r in c["bandwidth"]]
        if c.get("flops_elementwise"):
            lines.append(f"  a fusion's other arithmetic: "
                         f"{c['flops_elementwise'] / 1e9:.3g} GFLOP/s")
        if c.get("transcendentals"):
            lines.append(f"  transcendentals (tanh): "
                         f"{c['transcendentals'] / 1e9:.3g} G/s")
        if c.get("sliced_strided_bandwidth"):
            lines.append(f"  slices of a stacked array read across their rows: "
                         f"{human_bytes(int(c['sliced_strided_bandwidth']))}/s")
        lines.append(f"  each instruction: {human_time(c['op_overhead'])} more")
        lines.append(f"  launch: {human_time(c['launch'])} per execution")
        if "output" in c:
            lines.append(f"  each result: {human_time(c['output'])} more")
        if "loop_trip" in c:
            lines.append(f"  each trip of a loop: {human_time(c['loop_trip'])} more")
        if "first_collective" in c:
            lines.append(f"  the first collective of an execution: "
                         f"{human_time(c['first_collective'])} more")
        if "rendezvous_skew" in c:
            lines.append(f"  a collective after compute: up to "
                         f"{human_time(c['rendezvous_skew'])} more (the devices' "
                         f"threads meet)")
    return "\n".join(lines) + "\n"


def _flop(count: float) -> str:
    """`count` FLOPs in a unit that keeps it short: 33.6 MFLOP."""
    for unit, scale in (("TFLOP", 1e12), ("GFLOP", 1e9), ("MFLOP", 1e6)):
        if count >= scale:
            return f"{count / scale:.3g} {unit}"
    return f"{count:.3g} FLOP"


def _render_link(result: dict[str, Any], name: str, link: dict[str, Any]) -> list[str]:
    lines = ["measurements (one collective, launch overhead removed)"]
    lines += table(["kind", "axis", "group", "bytes", "wire", "time"],
                   [[m["kind"], m["axis"], str(m["group"]), str(m["bytes"]),
                     str(m["wire_bytes"]),
                     human_time(m["seconds"]) if m["seconds"] > 0 else "below noise"]
                    for m in result["measurements"]])
    error = result["error"]
    weighed = "x rendezvous(group) / rendezvous(all) " if link.get("rendezvous") else ""
    lines += ["", f"fitted ({name}): T = latency {weighed}+ wire / bandwidth"]
    lines += table(["kind", "bandwidth", "latency"],
                   [[kind, f"{human_bytes(int(v['bandwidth']))}/s",
                     human_time(v["latency"])]
                    for kind, v in link.get("kinds", {}).items()]
                   + [["(all kinds)", f"{human_bytes(int(link['bandwidth']['value']))}/s",
                       human_time(link["latency"]["value"])]])
    lines += [f"  rendezvous of {g} devices: {human_time(v)}"
              for g, v in sorted(link.get("rendezvous", {}).items(),
                                 key=lambda kv: int(kv[0]))]
    lines += [f"  median relative error on {result['held_out']} held-out "
              f"measurements: " + (f"{error:.1%}" if error is not None else "n/a")]
    lines += [f"    {b['band']}: {b['error']:.1%} ({b['held_out']})"
              for b in result.get("bands", ())]
    return lines


def calibrate_host(mesh: MeshSpec, sizes: Sequence[int] | None, repeats: int,
                   note: Callable[[str], None] = lambda text: None,
                   platform: str = "cpu") -> dict[str, Any]:
    """`irshard calibrate`: the plan checked, its duration told to `note`
    when over a minute, this host's devices of `platform` set up for
    `mesh` (simulated CPU devices, or the accelerators present), then
    `calibrate`."""
    planned = check_plan(mesh, sizes, repeats)
    seconds = expected_seconds(mesh, planned, repeats)
    if seconds > 60:
        note(f"{count(mesh, planned)} measurements x {repeats} runs, about "
             f"{seconds / 60:.0f} min")
    backend.configure(mesh.num_devices, platform)
    return calibrate(mesh, planned, repeats, platform)


def profile_json(result: dict[str, Any]) -> str:
    """The fitted links as a profile `--profile` reads back."""
    return dumps_json({"links": result["links"], "error": result["error"],
                       "devices": result["devices"],
                       "compute": result["compute"]}) + "\n"
