"""Running one command as several processes that form one mesh.

Two ways in, one runtime (`jax.distributed`, CPU collectives through gloo):

- `--processes N`: the launcher here starts N copies of the command on this
  machine, the coordinator on 127.0.0.1 at a free port, each process with
  devices/N local devices; process 0's output is the command's output, the
  others stay quiet unless they fail. If any process dies or hangs, all are
  stopped within a bounded time and the culprit is named with the last lines
  of its stderr.
- Under a cluster launcher (`srun`, `mpirun`) each process is already one of
  many: `detect` reads where this process stands from `--coordinator
  --process-id --num-processes`, or from Slurm's, Open MPI's or MPICH's
  environment, and the command joins instead of spawning.

The launcher imports no JAX; it only starts and watches processes.
"""

from __future__ import annotations

import collections
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from typing import Mapping, Sequence

from irshard import backend
from irshard.core import files, interrupts
from irshard.core.errors import UsageError, error_line

DEFAULT_TIMEOUT = 300.0
_GRACE = 5.0           # how long the others may take to follow a failure
_KILL_WAIT = 0.5       # between SIGTERM and SIGKILL
# --timeout bounds the whole run: stopping the processes starts this long
# before it ends, so that the launcher itself is gone by then.
_STOP_BUDGET = 1.0
_STDERR_TAIL = 12
_PORT_RETRIES = 3
_NOISE = re.compile(r"\[Gloo\]|connected peer ranks")


def meaningful(lines: Sequence[str]) -> list[str]:
    """A process's stderr without the runtime's noise: Gloo's per-rank
    greetings, and the blank lines around them (two threads greeting at
    once print their texts on one line, then two line ends)."""
    kept = [line for line in lines if not _NOISE.search(line)]
    while kept and not kept[0].strip():
        kept.pop(0)
    while kept and not kept[-1].strip():
        kept.pop()
    return kept
_PORT_IN_USE = re.compile(r"Failed to add port|[Aa]ddress already in use|"
                          r"No address added")


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


def _die_with_parent() -> None:
    """In the child, before exec: be killed if the launcher dies (Linux)."""
    try:
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)     # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


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


class _Child:
    """One launched process, its output collected by reader threads."""

    def __init__(self, index: int, argv: list[str], env: dict[str, str],
                 stage_file: str):
        self.index = index
        self.stage_file = stage_file
        # No reader thread runs yet while children are started, so running
        # code in the child before exec is safe.
        self.proc = subprocess.Popen(
            argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, start_new_session=True,
            preexec_fn=_die_with_parent if sys.platform == "linux" else None)
        self.stdout: list[bytes] = []
        self.stderr: collections.deque[str] = collections.deque(maxlen=400)
        self.exited_at: float | None = None
        self.stage_seen = "starting"
        self.stderr_seen: list[str] | None = None
        self.threads = [
            threading.Thread(target=self._read, args=(self.proc.stdout, True),
                             daemon=True),
            threading.Thread(target=self._read, args=(self.proc.stderr, False),
                             daemon=True)]

    def start_reading(self) -> None:
        for t in self.threads:
            t.start()

    @property
    def stage(self) -> str:
        try:
            with open(self.stage_file) as f:
                return f.read().strip() or "starting"
        except OSError:
            return "starting"

    def _read(self, stream, is_stdout: bool) -> None:
        for line in iter(stream.readline, b""):
            if is_stdout:
                self.stdout.append(line)
            else:
                self.stderr.append(line.decode("utf-8", "replace").rstrip("\n"))
        stream.close()

    def poll(self) -> int | None:
        code = self.proc.poll()
        if code is not None and self.exited_at is None:
            self.exited_at = time.monotonic()
        return code

    def signal_group(self, sig: int) -> None:
        try:
            os.killpg(self.proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    def finish_reading(self) -> None:
        for t in self.threads:
            if t.is_alive():
                t.join(timeout=2)

    def stderr_lines(self) -> list[str]:
        return meaningful(self.stderr_seen if self.stderr_seen is not None
                          else self.stderr)


def stop_all(children: Sequence[_Child]) -> None:
    """SIGTERM every process group, give them a moment, then SIGKILL what is
    left (including anything a process started)."""
    alive = [c for c in children if c.proc.poll() is None]
    for child in alive:
        child.signal_group(signal.SIGTERM)
    deadline = time.monotonic() + _KILL_WAIT
    while alive and time.monotonic() < deadline:
        alive = [c for c in alive if c.proc.poll() is None]
        time.sleep(0.05)
    for child in children:
        child.signal_group(signal.SIGKILL)
        child.proc.wait()
        child.poll()


@dataclass
class LaunchResult:
    exit_code: int
    stdout: bytes
    stderr: list[str]            # lines to show, in order


def _describe_status(code: int | None) -> str:
    if code is None:
        return "was still running"
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with status {code}"


def launch(argv: Sequence[str], num_processes: int, timeout: float,
           env: Mapping[str, str] | None = None) -> LaunchResult:
    """Runs `irshard ARGV` as `num_processes` processes forming one mesh,
    all of it (port retries included) within `timeout` seconds."""
    deadline = time.monotonic() + timeout - _STOP_BUDGET
    for attempt in range(_PORT_RETRIES):
        port = free_port()
        children = []
        with tempfile.TemporaryDirectory(prefix="irshard-run-") as status_dir:
            try:
                for i in range(num_processes):
                    child_argv = [sys.executable, "-m", "irshard", *argv,
                                  "--coordinator", f"127.0.0.1:{port}",
                                  "--process-id", str(i),
                                  "--num-processes", str(num_processes)]
                    child_env = dict(env if env is not None else os.environ)
                    stage_file = os.path.join(status_dir, f"stage.{i}")
                    child_env["IRSHARD_STAGE_FILE"] = stage_file
                    children.append(_Child(i, child_argv, child_env, stage_file))
                for child in children:
                    child.start_reading()
                result = _watch(children, deadline, timeout)
            finally:
                stop_all(children)
                for child in children:
                    child.finish_reading()
        # Another program took the port between our look and process 0's
        # bind: process 0 then fails while starting the coordination service.
        lead = children[0]
        port_taken = lead.proc.returncode != 0 and (
            lead.stage_seen == "joining"
            or any(_PORT_IN_USE.search(line) for line in lead.stderr))
        if (result.exit_code != 0 and port_taken and attempt + 1 < _PORT_RETRIES
                and time.monotonic() < deadline):
            continue
        return result
    return result


def _watch(children: list[_Child], deadline: float, timeout: float) -> LaunchResult:
    first_failure: _Child | None = None
    while True:
        codes = [c.poll() for c in children]
        if all(code is not None for code in codes):
            break
        now = time.monotonic()
        failed = [c for c in children if c.poll() not in (None, 0)]
        if failed and first_failure is None:
            first_failure = min(failed, key=lambda c: c.exited_at)
        if first_failure is not None and now - first_failure.exited_at > _GRACE:
            break
        if now > deadline:
            break
        time.sleep(0.05)
    timed_out = time.monotonic() > deadline and any(c.poll() is None for c in children)
    running = [c for c in children if c.poll() is None]
    for child in children:
        # What a process said before it was stopped: not its dying words.
        child.stage_seen = child.stage
        if child.poll() is None:
            child.stderr_seen = list(child.stderr)
    stop_all(running)
    for child in children:
        child.finish_reading()
    return _verdict(children, running, timed_out, timeout, first_failure)


def _verdict(children, running, timed_out, timeout, first_failure) -> LaunchResult:
    lead = children[0]
    codes = [c.proc.returncode for c in children]
    if not running and len(set(codes)) == 1 and codes[0] in (0, 1, 2):
        # Every process finished the same way: the command's own result
        # (success, a failed check, a user error) as process 0 reports it.
        return LaunchResult(codes[0], b"".join(lead.stdout), lead.stderr_lines())
    if timed_out and first_failure is None:
        culprit = min(running, key=lambda c: (_stage_rank(c.stage_seen), c.index))
        what = (f"process {culprit.index} of {len(children)} did not finish "
                f"within {timeout:g} s (it was {culprit.stage_seen}")
        ahead = sorted({c.stage_seen for c in children if c is not culprit})
        what += f"; the others: {', '.join(ahead)})" if ahead else ")"
    else:
        culprit = first_failure or next(c for c in children if c.proc.returncode)
        if timed_out:
            timed_out = False
        what = (f"process {culprit.index} of {len(children)} "
                f"{_describe_status(culprit.proc.returncode)}")
    others = [c.index for c in children if c is not culprit and c in running]
    if others:
        what += (f"; stopped process{'es' if len(others) > 1 else ''} "
                 f"{', '.join(map(str, others))}")
    tail = culprit.stderr_lines()[-_STDERR_TAIL:]
    lines = [error_line(what)]
    if tail:
        lines.append(f"last lines of process {culprit.index}'s stderr:")
        lines += [f"  | {line}" for line in tail]
    code = culprit.proc.returncode
    exit_code = code if code in (1, 2) and not timed_out else 3
    return LaunchResult(exit_code, b"", lines)


def _stage_rank(stage: str) -> int:
    return PHASES.index(stage) if stage in PHASES else len(PHASES)


def check_launch(num_processes: int, timeout: float, total_devices: int,
                 platform: str) -> None:
    """What any launcher needs of `--processes` and `--timeout`."""
    if num_processes < 1:
        raise UsageError(f"--processes {num_processes}: give at least 1")
    if platform == "cpu" and total_devices % num_processes:
        raise UsageError(f"--processes {num_processes}: the mesh's "
                         f"{total_devices} devices cannot be split evenly over "
                         f"{num_processes} processes")
    if timeout <= 0:
        raise UsageError(f"--timeout {timeout:g}: give a positive number of seconds")


def relay(run, output: str | None = None) -> int:
    """Runs a launch (`run()` -> LaunchResult), prints process 0's output
    (or writes it to `output`) and the launcher's lines, and returns the
    exit code; SIGTERM and Ctrl-C stop every process."""
    try:
        with interrupts.unwinding():
            result = run()
    except KeyboardInterrupt:
        # Ended here, past the interpreter's exit hooks (a cluster runtime's
        # would stop again what is stopped, or crash on the way).
        interrupts.exit_now("irshard: interrupted; stopped every process")
        return 130
    if output is None or result.stdout:
        files.emit(output, result.stdout.decode("utf-8", "replace"))
    for line in result.stderr:
        print(line, file=sys.stderr)
    return result.exit_code


def run_launcher(argv: Sequence[str], num_processes: int, timeout: float,
                 total_devices: int, platform: str) -> int:
    """Launches, relays process 0's output, and returns the exit code."""
    check_launch(num_processes, timeout, total_devices, platform)
    return relay(lambda: launch(argv, num_processes, timeout))


class quiet_stderr:
    """Sends what this process writes to its stderr (file descriptor 2,
    from Python or native code) to nowhere for a while: a cluster runtime's
    start-up chatter is not the command's output."""

    def __enter__(self):
        sys.stderr.flush()
        self.saved = os.dup(2)
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 2)
        os.close(devnull)
        return self

    def __exit__(self, *exc):
        sys.stderr.flush()
        os.dup2(self.saved, 2)
        os.close(self.saved)
        return False


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
