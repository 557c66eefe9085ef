"""Running an executable: arguments placed by their shardings, execution,
results gathered, and JAX's distributed runtime started and joined.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

from irshard.backend.compiling import CompiledExecutable
from irshard.backend.devices import (_jax, first_line, message, partition_spec,
                                     platform_devices)
from irshard.core import interrupts
from irshard.core.errors import BackendError, SpecError
from irshard.core.specs import ShardingSpec


# ---------------------------------------------------------------------------
# Running


def jax_sharding(hlo_sharding, mesh, entries: Sequence[str] | None):
    """The `jax.sharding.Sharding` of an executable's parameter or result:
    a NamedSharding over `mesh` when the tiling is a mesh sharding (its
    mesh axes per dimension, `entries`: `x+y` or `_`), else XLA's own
    sharding wrapped as JAX does internally."""
    from jax.sharding import NamedSharding
    if entries is not None:
        return NamedSharding(mesh, partition_spec(
            [d.axes for d in ShardingSpec.of_entries(entries).dims]))
    from jax._src.sharding_impls import GSPMDSharding
    return GSPMDSharding(tuple(mesh.devices.flat), hlo_sharding)


def execute(compiled: CompiledExecutable, arguments: Sequence[Any],
            timed: bool = False) -> list[list[Any]]:
    """Runs the executable on global arrays; per output, the single-device
    arrays of this process's devices. The call runs on a helper thread so
    that Ctrl-C is heard, unless `timed` (a run already known to finish,
    whose time must not include a thread's start)."""
    if compiled.executable is None:
        raise BackendError(f"XLA built no executable to run: "
                           f"{first_line(compiled.refused or 'none was built')}")
    run = compiled.executable.execute_sharded
    try:
        results = run(list(arguments)) if timed else \
            interrupts.call(run, list(arguments))
        return results.disassemble_into_single_device_arrays()
    except Exception as e:
        raise BackendError(f"XLA failed to run the program: {message(e)}") from None


def time_runs(compiled, arguments: Sequence[Any], runs: int) -> list[float]:
    """Seconds of each of `runs` executions of a `jax.jit(...).compile()`d
    program, run as `execute` runs irshard's executables (so that the time
    is what `irshard run --repeat` measures)."""
    import time
    executable = compiled.runtime_executable()
    seconds = []
    for _ in range(runs):
        start = time.perf_counter()
        results = executable.execute_sharded(list(arguments))
        arrays = results.disassemble_into_single_device_arrays()
        block_until_ready([a for out in arrays for a in out])
        seconds.append(time.perf_counter() - start)
    return seconds


def profiled(work: Callable[[], None]) -> bytes | None:
    """The trace JAX's profiler records while `work()` runs, as Chrome
    trace JSON (what ui.perfetto.dev opens); None where the profiler wrote
    none. On CPU it has each device thread's thunks (fusions, collectives
    with their rendezvous)."""
    import glob
    import gzip
    import os
    import tempfile
    jax = _jax()
    with tempfile.TemporaryDirectory(prefix="irshard-profile-") as tmp:
        jax.profiler.start_trace(tmp, create_perfetto_trace=True)
        try:
            work()
        finally:
            jax.profiler.stop_trace()
        found = sorted(glob.glob(os.path.join(tmp, "**", "perfetto_trace.json.gz"),
                                 recursive=True))
        if not found:
            return None
        with gzip.open(found[-1], "rb") as f:
            return f.read()


def gather(array) -> Any:
    """The whole value of a global array as a NumPy array, on every process."""
    import numpy as np
    if array.is_fully_addressable:
        return np.asarray(array)
    from jax.experimental import multihost_utils
    return np.asarray(multihost_utils.process_allgather(array, tiled=True))


def allgather_ints(values: Sequence[int]) -> list[list[int]]:
    """Every process's `values` (unsigned 64-bit), in process order."""
    import numpy as np
    jax = _jax()
    if jax.process_count() == 1:
        return [list(values)]
    from jax.experimental import multihost_utils
    # JAX arrays are 32-bit unless x64 is on: send each value as two halves.
    halves = np.array([[v >> 32, v & 0xFFFFFFFF] for v in values],
                      dtype=np.uint32).reshape(-1, 2)
    gathered = np.asarray(multihost_utils.process_allgather(halves))
    gathered = gathered.reshape(jax.process_count(), -1, 2)
    return [[(int(hi) << 32) | int(lo) for hi, lo in row] for row in gathered]


def block_until_ready(arrays: Sequence[Any]) -> None:
    for a in arrays:
        a.block_until_ready()


def describe_devices(platform: str) -> dict[str, Any]:
    """The platform's global devices and each process's addressable ones."""
    jax = _jax()
    try:
        devices = platform_devices(platform)
    except RuntimeError:
        raise SpecError(f"platform '{platform}' is not available here") from None
    processes: dict[int, list[int]] = {}
    for d in devices:
        processes.setdefault(d.process_index, []).append(d.id)
    return {
        "platform": devices[0].platform if devices else platform,
        "process_count": jax.process_count(),
        "process_index": jax.process_index(),
        "processes": [{"index": p, "devices": ids}
                      for p, ids in sorted(processes.items())],
        "devices": [{"id": d.id, "process": d.process_index,
                     "kind": d.device_kind} for d in devices],
    }


def initialize_distributed(coordinator: str, num_processes: int,
                           process_id: int, timeout: float,
                           bind: bool = False) -> None:
    """Joins the processes of one run through `jax.distributed` (CPU
    collectives through gloo) within `timeout` seconds. With `bind`, process
    0's coordination service listens on the coordinator's address only (not
    on every interface).

    When the others do not all join in time, XLA's client ends the process
    with a fatal error of its own; the join therefore runs on a helper thread
    and a `BackendError` marked `hard_exit` names what did not join first.
    """
    import time

    jax = _jax()
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    deadline = time.monotonic() + timeout
    if process_id != 0:
        # JAX's client retries a coordinator that is not up yet only after a
        # second or so; waiting for the port to open avoids that pause.
        _wait_for_port(coordinator, timeout)
    remaining = max(1.0, deadline - time.monotonic())

    def initialize():
        jax.distributed.initialize(
            coordinator_address=coordinator, num_processes=num_processes,
            process_id=process_id, cluster_detection_method="deactivate",
            # XLA's own deadline comes after ours: it aborts the process.
            initialization_timeout=int(remaining) + 60,
            coordinator_bind_address=coordinator if bind else None)

    try:
        interrupts.call(initialize, deadline=remaining)
    except TimeoutError:
        if process_id == 0:
            what = (f"process 0 waited {timeout:g} s for the run's "
                    f"{num_processes} processes to join at {coordinator}, and "
                    f"not all of them did; start every process (--process-id "
                    f"0 to {num_processes - 1}) with --coordinator "
                    f"{coordinator}, or give a longer --join-timeout (on a "
                    f"loaded machine they may take minutes to start)")
        else:
            what = (f"process {process_id} could not join the run coordinated "
                    f"at {coordinator} within {timeout:g} s; is process 0 "
                    f"running there, and reachable? (--join-timeout sets how "
                    f"long to wait)")
        error = BackendError(what)
        error.hard_exit = True
        raise error from None
    except Exception as e:
        raise BackendError(f"process {process_id} could not join the run "
                           f"coordinated at {coordinator}: {message(e)}") from None


def _wait_for_port(address: str, timeout: float) -> None:
    import socket
    import time
    host, _, port = address.rpartition(":")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((host.strip("[]"), int(port)), timeout=1):
                return
        except OSError:
            time.sleep(0.02)
