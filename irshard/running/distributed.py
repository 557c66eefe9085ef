"""Running one command as several processes that form one mesh.

Two ways in, one runtime (`jax.distributed`, CPU collectives through gloo):

- `--processes N`: the launcher here (`processes`) starts N copies of the
  command on this machine, each process with devices/N local devices.
- Under a cluster launcher (`srun`, `mpirun`) each process is already one of
  many: `detect` reads where this process stands from `--coordinator
  --process-id --num-processes`, or from Slurm's, Open MPI's or MPICH's
  environment, and the command joins instead of spawning.

The launcher imports no JAX; it only starts and watches processes.
"""

from __future__ import annotations

import os
import re
import socket
from dataclasses import dataclass
from typing import Mapping, Sequence

from irshard import backend
from irshard.core.errors import UsageError

DEFAULT_TIMEOUT = 300.0


@dataclass(frozen=True)
class ClusterSpec:
    """Where this process stands among the processes of one run."""

    coordinator: str      # HOST:PORT of process 0's coordination service
    process_id: int
    num_processes: int
    source: str           # what said so: "command line", "Slurm", ...
    # Listen on the coordinator's address only (not on every interface):
    # it was given explicitly (--coordinator, IRSHARD_COORDINATOR) or is an
    # IP address. A host name derived from Slurm or MPI may resolve to a
    # loopback alias on its own machine, so JAX's default is kept for it.
    bind: bool = False


def _int(environ: Mapping[str, str], name: str) -> int | None:
    value = environ.get(name, "")
    return int(value) if value.strip().isdigit() else None


def first_slurm_host(nodelist: str) -> str:
    """The first host of a Slurm hostlist: `node[03-05,07],gpu1` -> node03."""
    m = re.match(r"([^,\[]+)(?:\[([^\]]+)\])?", nodelist.strip())
    if not m:
        raise UsageError(f"cannot read the Slurm node list '{nodelist}'")
    prefix, ranges = m.group(1), m.group(2)
    if not ranges:
        return prefix
    first = ranges.split(",")[0].split("-")[0]
    return prefix + first


def _port(environ: Mapping[str, str], job: str | None) -> int:
    """The coordinator's port: IRSHARD_COORDINATOR_PORT, or one derived from
    the job id so every process of the job computes the same."""
    explicit = _int(environ, "IRSHARD_COORDINATOR_PORT")
    if explicit:
        return explicit
    digits = re.sub(r"\D", "", job or "")
    return 12000 + (int(digits) % 20000 if digits else 0)


def _ompi_host(environ: Mapping[str, str]) -> str:
    """The host in `OMPI_MCA_orte_hnp_uri` (`JOB.0;tcp://HOST[,HOST]:PORT`):
    where `mpirun` runs."""
    m = re.search(r"//\[?([^\]/:;,]+)", environ.get("OMPI_MCA_orte_hnp_uri", ""))
    return m.group(1) if m else ""


def _ompi_job(environ: Mapping[str, str]) -> str:
    return (environ.get("OMPI_MCA_ess_base_jobid")
            or environ.get("OMPI_MCA_orte_hnp_uri", "").split(".")[0])


def _is_address(coordinator: str) -> bool:
    """Whether HOST in HOST:PORT is an IP address (not a host name, which
    may resolve to a loopback alias on its own machine)."""
    import ipaddress
    host = coordinator.rpartition(":")[0].strip("[]")
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def parse_coordinator(text: str, option: str = "--coordinator") -> str:
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise UsageError(f"{option} '{text}': expected HOST:PORT, e.g. "
                         f"node01:12345")
    return text


def detect(coordinator: str | None, process_id: int | None,
           num_processes: int | None,
           environ: Mapping[str, str] = os.environ) -> ClusterSpec | None:
    """This process's place in a multi-process run, or None if it runs alone.

    Explicit options win; otherwise Slurm (`SLURM_NTASKS`, `SLURM_PROCID`,
    the first host of `SLURM_STEP_NODELIST`), Open MPI
    (`OMPI_COMM_WORLD_SIZE/RANK`, the host in `OMPI_MCA_orte_hnp_uri`) and
    MPICH's Hydra (`PMI_SIZE/RANK`, the host in `PMI_PORT`) are read. The
    coordinator may always be given as `--coordinator` or
    `IRSHARD_COORDINATOR`; its port defaults to one derived from the job id.
    """
    given = [coordinator is not None, process_id is not None,
             num_processes is not None]
    if any(given):
        if not all(given):
            raise UsageError("--coordinator, --process-id and --num-processes "
                             "go together; give all three (or none, under "
                             "Slurm or MPI)")
        if num_processes < 1 or not 0 <= process_id < num_processes:
            raise UsageError(f"--process-id {process_id} is not in 0..."
                             f"{num_processes - 1} (--num-processes "
                             f"{num_processes})")
        return ClusterSpec(parse_coordinator(coordinator), process_id,
                           num_processes, "command line", bind=True)

    override = environ.get("IRSHARD_COORDINATOR")
    if override:
        parse_coordinator(override, "IRSHARD_COORDINATOR")

    size = _int(environ, "SLURM_STEP_NUM_TASKS") or _int(environ, "SLURM_NTASKS")
    rank = _int(environ, "SLURM_PROCID")
    if size and size > 1 and rank is not None:
        nodes = environ.get("SLURM_STEP_NODELIST") or environ.get("SLURM_JOB_NODELIST")
        if not override and not nodes:
            raise UsageError("Slurm gives no node list; set --coordinator HOST:PORT")
        address = override or (f"{first_slurm_host(nodes)}:"
                                f"{_port(environ, environ.get('SLURM_JOB_ID'))}")
        return ClusterSpec(address, rank, size, "Slurm",
                           bind=bool(override) or _is_address(address))

    for source, size_var, rank_var, host, job in (
            ("Open MPI", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK",
             _ompi_host, _ompi_job),
            ("MPICH", "PMI_SIZE", "PMI_RANK",
             lambda env: env.get("PMI_PORT", "").rpartition(":")[0],
             lambda env: env.get("PMI_ID"))):
        size, rank = _int(environ, size_var), _int(environ, rank_var)
        if size and size > 1 and rank is not None:
            address = override
            if not address:
                if not host(environ):
                    raise UsageError(f"{source} does not say where rank 0 runs; "
                                     f"set --coordinator HOST:PORT or "
                                     f"IRSHARD_COORDINATOR")
                address = f"{host(environ)}:{_port(environ, job(environ))}"
            return ClusterSpec(address, rank, size, source,
                               bind=bool(override) or _is_address(address))
    return None


# ---------------------------------------------------------------------------
# The local launcher


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def strip_option(argv: Sequence[str], option: str, takes_value: bool) -> list[str]:
    """`argv` without `option` (as `--opt V` or `--opt=V`)."""
    result, skip = [], False
    for arg in argv:
        if skip:
            skip = False
            continue
        if arg == option:
            skip = takes_value
            continue
        if takes_value and arg.startswith(option + "="):
            continue
        if takes_value and len(option) == 2 and arg.startswith(option) \
                and not arg.startswith("--"):
            continue                      # -oPATH
        result.append(arg)
    return result


# Where a process is in its run; on a timeout, the process that got least far
# is the one the others are waiting for.
PHASES = ("starting", "joining", "loading", "tracing", "compiling", "running",
          "writing")


def report_stage(stage: str) -> None:
    """Records this process's stage for its launcher (no-op when alone)."""
    path = os.environ.get("IRSHARD_STAGE_FILE")
    if path:
        try:
            with open(path, "w") as f:
                f.write(stage)
        except OSError:
            pass


# ---------------------------------------------------------------------------
# Inside one of the processes


def local_devices(total: int, cluster: ClusterSpec | None, platform: str) -> int:
    """How many of the mesh's `total` devices this process owns."""
    if cluster is None:
        return total
    if platform == "cpu" and total % cluster.num_processes:
        raise UsageError(f"the mesh's {total} devices cannot be split evenly "
                         f"over {cluster.num_processes} processes")
    return max(1, total // cluster.num_processes)


def join(cluster: ClusterSpec, timeout: float | None) -> None:
    """Joins the run's other processes (after `backend.configure`)."""
    report_stage("joining")
    backend.initialize_distributed(
        cluster.coordinator, cluster.num_processes, cluster.process_id,
        timeout or DEFAULT_TIMEOUT, bind=cluster.bind)
    report_stage("loading")
