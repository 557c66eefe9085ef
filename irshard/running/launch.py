"""Where a command runs: this process's place in a multi-process run (given,
or read from Slurm or MPI), the processes of `--processes N` started here or
as Ray tasks, and the devices a run sees.
"""

from __future__ import annotations

from typing import Any, Sequence

from irshard import backend
from irshard.core.errors import UsageError
from irshard.running import distributed, raylaunch
from irshard.running.processes import run_launcher

# A launcher's own options, which its processes do not get.
_LAUNCHER_OPTIONS = ("--processes", "--timeout", "--launcher", "--ray-address")


def cluster(processes: int | None, coordinator: str | None,
            process_id: int | None, num_processes: int | None,
            launcher: str | None = None, ray_address: str | None = None):
    """This process's place in a multi-process run, or None; the launcher
    options checked against each other."""
    if launcher is not None and processes is None:
        raise UsageError(f"--launcher {launcher} starts the processes of "
                         f"--processes N; give --processes too")
    if ray_address is not None and launcher != "ray":
        raise UsageError("--ray-address is for --launcher ray; give both")
    if processes is not None and (coordinator or process_id is not None
                                  or num_processes):
        raise UsageError("--processes launches the processes itself; do not "
                         "combine it with --coordinator/--process-id/"
                         "--num-processes")
    return distributed.detect(coordinator, process_id, num_processes)


def launch(argv: Sequence[str], processes: int, timeout: float | None,
           total_devices: int, platform: str, launcher: str | None = None,
           ray_address: str | None = None, output: str | None = None) -> int:
    """`--processes N`: this process only starts and watches the others,
    each running `argv` less the launcher's options; the exit code."""
    for option in _LAUNCHER_OPTIONS:
        argv = distributed.strip_option(argv, option, True)
    if timeout is None:
        timeout = distributed.DEFAULT_TIMEOUT
    if launcher == "ray":
        return raylaunch.run_launcher(argv, processes, timeout, total_devices,
                                      platform, ray_address, output)
    return run_launcher(argv, processes, timeout, total_devices,
                                    platform)


def devices(count: int, found_cluster, platform: str,
            timeout: float | None) -> dict[str, Any] | None:
    """`irshard devices`: the devices this process (and, joined, the
    run's others) sees, as JAX lists them; None in a process other than
    the first, which reports."""
    backend.configure(distributed.local_devices(count, found_cluster, platform),
                      platform, exact=found_cluster is not None)
    if found_cluster is not None:
        distributed.join(found_cluster, timeout)
    # First the platform's devices: a platform this machine lacks is the
    # user's error line.
    listing = backend.describe_devices(platform)
    if backend.process_index() != 0:
        return None
    return listing
