"""What a device computes per second, and what each instruction costs on
top: the rates the step simulation (`schedule`) times compute with, from a
target's profile (its measured numbers where it has them, else its peak
numbers) and, on a TPU, the clock that turns libtpu's estimated cycles
into seconds."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass


@dataclass(frozen=True)
class Rates:
    """What a device does per second, and what each instruction costs on
    top (the runtime's dispatch of a kernel or thunk)."""

    peak_flops: float
    memory_bandwidth: float
    overhead_s: float = 0.0
    transcendentals: float | None = None     # per second; peak_flops if None
    # FLOPs per second of arithmetic that is not a product (a fusion's
    # elementwise ops, reductions), where measured; peak_flops if None.
    elementwise_flops: float | None = None
    launch_s: float = 0.0        # once per execution: the runtime's start
    first_collective_s: float = 0.0   # more for an execution's first collective
    # At most this much more for a collective after compute: the wait for
    # the devices a CPU host's scheduler ran last.
    rendezvous_skew_s: float = 0.0

    # Memory bandwidth by the bytes an instruction moves: (bytes, rate)
    # points, log-interpolated; `memory_bandwidth` where there are none.
    bandwidth_curve: tuple[tuple[float, float], ...] = ()
    # Bytes per second of large slices of larger arrays read out of their
    # layout's order (through a transpose: `costs.Cost.sliced`); as any
    # other bytes where None.
    sliced_strided_bandwidth: float | None = None
    # FLOPs per second of matrix products by their size (`Cost.products`
    # of one instruction): (flops, rate) points, log-interpolated;
    # `peak_flops` where there are none. A GPU reaches its peak only with
    # large products.
    flops_curve: tuple[tuple[float, float], ...] = ()
    # The same for products of 32- or 64-bit floats (`Cost.wide`), where
    # they differ (a GPU's f32 products: TF32): a rate, and by size.
    wide_flops: float | None = None
    wide_curve: tuple[tuple[float, float], ...] = ()
    # Once per execution for each array it returns (the runtime makes each
    # result buffer), counted into `launch_s`'s part of the step.
    output_s: float = 0.0
    # Each trip of a while loop beyond its instructions (the runtime reads
    # the condition back: a GPU's host waits for it).
    loop_trip_s: float = 0.0
    # A TPU's clock, where sourced: an instruction libtpu's cost model
    # estimates (`tpufusions.estimated_cycles`) takes that many cycles, and
    # the rates above time only what it does not estimate.
    clock_hz: float | None = None

    def bandwidth(self, nbytes: float) -> float:
        return along(self.bandwidth_curve, nbytes, self.memory_bandwidth)

    def fastest_products(self, peak: float | None = None) -> float:
        """The fastest rate at which these rates (or the chip's `peak`,
        where faster) compute matrix products, whatever their size or
        type: what no product is timed faster than."""
        found = [self.peak_flops, *(r for _, r in self.flops_curve),
                 *(r for _, r in self.wide_curve)]
        if self.wide_flops:
            found.append(self.wide_flops)
        if peak:
            found.append(peak)
        return max(found)

    def seconds(self, flops: float, transcendentals: float, nbytes: float,
                sliced: float = 0.0, wide: float = 0.0,
                products: float = 0.0) -> float:
        products = max(products, wide)
        narrow = products - wide
        compute = (flops - products) / (self.elementwise_flops or self.peak_flops)
        if narrow:
            compute += narrow / along(self.flops_curve, narrow, self.peak_flops)
        if wide:
            compute += wide / along(self.wide_curve, wide,
                                    self.wide_flops or self.peak_flops)
        compute += transcendentals / (self.transcendentals or self.peak_flops)
        if not nbytes:
            return self.overhead_s + compute
        stream = self.bandwidth(nbytes)
        memory = nbytes / stream
        if sliced and self.sliced_strided_bandwidth:
            sliced = min(sliced, nbytes)
            memory += sliced / self.sliced_strided_bandwidth - sliced / stream
        return self.overhead_s + max(compute, memory)


def along(curve: tuple[tuple[float, float], ...], x: float, default: float) -> float:
    """The rate at `x` on `curve`'s (x, rate) points, log-interpolated and
    held at its ends; `default` where it has none."""
    if not curve:
        return default
    if x <= curve[0][0]:
        return curve[0][1]
    for (b0, r0), (b1, r1) in zip(curve, curve[1:]):
        if x <= b1:
            t = math.log(x / b0) / math.log(b1 / b0)
            return math.exp(math.log(r0) + t * (math.log(r1) - math.log(r0)))
    return curve[-1][1]


def rates(placement, devices: int, cores: int | None = None) -> Rates | None:
    """What one device of `placement`'s target computes per second: the
    profile's measured compute numbers where it has them, else its peak
    numbers; None where it has neither. A CPU host's numbers are for one
    device while as many run as measured nearest to `devices` (its
    `by_devices`), or else for the whole host, shared by the simulated
    devices that run on its cores."""
    profile = placement.profile
    cpu = placement.target.kind == "cpu"
    if cpu:
        profile = profile.for_devices(devices)
    found = profile.compute
    if found.get("flops") and found.get("bandwidth"):
        bandwidth = found["bandwidth"]
        curve = _points(bandwidth) if isinstance(bandwidth, list) else ()
        flat = curve[-1][1] if curve else float(bandwidth)
        overhead = found.get("op_overhead", 0.0)
        if cpu and not found.get("devices"):
            cores = cores or os.cpu_count() or 1
            share = max(1, devices)
            def shared(key):
                return found[key] / share if found.get(key) else None
            return Rates(found["flops"] / share, flat / share,
                         overhead * max(1.0, devices / cores),
                         launch_s=profile.launch,
                         transcendentals=shared("transcendentals"),
                         elementwise_flops=shared("flops_elementwise"))
        return Rates(found["flops"], flat, overhead, launch_s=profile.launch,
                     clock_hz=profile.clock_hz,
                     transcendentals=found.get("transcendentals"),
                     elementwise_flops=found.get("flops_elementwise"),
                     bandwidth_curve=curve,
                     sliced_strided_bandwidth=found.get("sliced_strided_bandwidth"),
                     flops_curve=_points(found.get("flops_by_size")),
                     wide_flops=found.get("flops_f32"),
                     wide_curve=_points(found.get("flops_f32_by_size")),
                     output_s=found.get("output", 0.0),
                     loop_trip_s=found.get("loop_trip", 0.0),
                     first_collective_s=found.get("first_collective", 0.0),
                     rendezvous_skew_s=found.get("rendezvous_skew", 0.0))
    if profile.peak_flops and profile.hbm_bandwidth:
        return Rates(profile.peak_flops, profile.hbm_bandwidth,
                     launch_s=profile.launch, clock_hz=profile.clock_hz)
    return None


def _points(found) -> tuple[tuple[float, float], ...]:
    """A profile's `[x, rate]` points, in order of x."""
    return tuple((float(x), float(r)) for x, r in sorted(found or ()))


def assumed(placement, devices: int) -> str:
    """What the time model takes for granted of a CPU host: how many
    devices share how many cores, and at which device count its rates were
    measured (the nearest to this one)."""
    if placement.target.kind != "cpu":
        return ""
    profile = placement.profile
    cores = os.cpu_count() or 1
    said = f"{devices} simulated device{'s' if devices != 1 else ''} on " \
           f"{cores} core{'s' if cores != 1 else ''}"
    measured = profile.for_devices(devices).compute.get("devices")
    if measured:
        said += f", at the rates measured with {measured} running at once"
    else:
        said += ", sharing the rates measured for the whole host"
    return said
