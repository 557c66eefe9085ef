"""Timing the compiled program as a training loop runs it: each run's
arguments made before its clock starts (a donated input fed the output
XLA aliased to it), Python's collector held off, a progress bar on a
terminal; and JAX's own profile of a few runs (`--trace`)."""

from __future__ import annotations

import sys
import time
from typing import Any, Callable

from irshard import backend
from irshard.core import files
from irshard.core.errors import BackendError


# Runs the measured profile (`--trace`) records.
PROFILED_RUNS = 3


def profile(exe, arguments: Callable[[], list[Any]], path: str) -> None:
    """`--trace PATH`: JAX's profile of `PROFILED_RUNS` runs, as a Chrome
    trace, beside the simulated one (`compile --format trace`)."""
    def work():
        for _ in range(PROFILED_RUNS):
            given = arguments()
            backend.block_until_ready(given)
            results = backend.execute(exe, given, timed=True)
            backend.block_until_ready([a for arrays in results for a in arrays])

    found = backend.profiled(work)
    if found is None:
        raise BackendError("--trace: JAX's profiler recorded no trace on this "
                           "platform")
    if backend.process_index() == 0:
        files.write(path, found, option="--trace")


def steady(exe, fresh: Callable[[], list[Any]], info, outs
            ) -> Callable[[list[list[Any]] | None], list[Any]]:
    """The arguments of each timed run, as a training loop gives them: a
    donated input XLA writes an output into (the executable's
    input/output aliasing) is that output of the run before; any other
    donated input is made anew; the rest are the same arrays each run.
    Called with the run before's per-device results (None for the first)."""
    import jax
    donated = [i for i, d in enumerate(info.inputs) if d.donated]
    if not donated:
        first = fresh()
        return lambda results: first
    aliases = {o: p for o, p in exe.output_aliases().items()
               if p in donated and o < len(outs)}
    anew = [i for i in donated if i not in aliases.values()]
    state: dict[str, list[Any]] = {}

    def arguments(results):
        if results is None or "given" not in state:
            state["given"] = fresh()
            return state["given"]
        given = list(state["given"])
        if anew:
            made = fresh()
            for i in anew:
                given[i] = made[i]
        for o, p in aliases.items():
            given[p] = jax.make_array_from_single_device_arrays(
                info.outputs[o].shape, outs[o].sharding, results[o])
        state["given"] = given
        return given
    return arguments


def time_runs(exe, arguments: Callable[[list[list[Any]] | None], list[Any]],
              repeat: int, progress: bool = True) -> list[float]:
    """Times `repeat` runs, each on `arguments(the run before's
    results)`, made before its clock starts (`steady`), with Python's
    garbage collector held off while they run (as `timeit` does: a
    collection of irshard's own objects is no part of the step); on a
    terminal (stdout and stderr both), a run that takes more than half a
    second shows a progress bar."""
    import gc
    timings = []
    terminal = progress and sys.stderr.isatty() and files.STDOUT.isatty()
    collecting = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        _timed_runs(exe, arguments, repeat, timings, terminal)
    finally:
        if collecting:
            gc.enable()
    return timings


def _timed_runs(exe, arguments, repeat: int, timings: list[float],
                terminal: bool) -> None:
    show = False
    begin = time.perf_counter()
    results = None
    for step in range(repeat):
        given = arguments(results)
        backend.block_until_ready(given)
        start = time.perf_counter()
        results = backend.execute(exe, given, timed=True)
        backend.block_until_ready([a for arrays in results for a in arrays])
        timings.append(time.perf_counter() - start)
        show = show or (terminal and time.perf_counter() - begin > 0.5)
        if show:
            done = (step + 1) * 30 // repeat
            sys.stderr.write(f"\r[{'#' * done}{'.' * (30 - done)}] "
                             f"{step + 1}/{repeat}")
            sys.stderr.flush()
    if show:
        sys.stderr.write("\r" + " " * 50 + "\r")
