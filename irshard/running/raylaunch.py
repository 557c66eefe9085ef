"""`--launcher ray`: the processes of a multi-process run as Ray tasks.

Each of the N tasks runs the same `irshard` command in a process of its
own (as the local launcher does), with the coordinator of JAX's distributed
runtime on the node of task 0; process 0's output is the command's. A task
watches its process and stops it at the run's deadline, or when the
launcher says so (another process failed), and returns its exit status,
stage, output and the tail of its stderr; the launcher then reports exactly
as the local one does.

Without `--ray-address` a local Ray instance is started for the run, bound
to 127.0.0.1 with usage statistics and the dashboard off, and shut down
after it: nothing of it is left running. With an address, the run joins
that cluster and leaves it as it was.

Resources: a task asks for one CPU; on `--platform gpu` for its share of
the mesh's devices as `num_gpus`, on `--platform tpu` as the custom
resource `TPU`. The command's FILE must be at the same path on every node
(a shared file system, or the working directory `ray job submit` ships).
"""

from __future__ import annotations

import os
import signal
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any, Sequence

from irshard.core import interrupts
from irshard.core.errors import UsageError, error_line
from irshard.running import distributed, processes, raytask
from irshard.running.raysignals import (Late, _alarm, _held, adopt_orphans,
                                        end_descendants, keep_dispositions,
                                        keep_handlers)

# Stopping the processes and shutting a local Ray instance down take this
# much of --timeout.
_STOP_BUDGET = 3.5


def _local_environment() -> None:
    """A local instance on the loopback interface only, with no usage
    statistics, that only this run can use (a token of its own, not one
    written to ~/.ray). Ray reads these when it is first imported (its node
    address and whether it serves other machines), so they are set before."""
    import secrets
    os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    os.environ["RAY_AUTH_MODE"] = "token"
    os.environ["RAY_AUTH_TOKEN"] = secrets.token_hex(32)
    os.environ.pop("RAY_AUTH_TOKEN_PATH", None)


def _import_ray(local: bool):
    if local:
        _local_environment()
    try:
        import ray
    except ImportError:
        raise UsageError("--launcher ray needs Ray, which is not installed; "
                         "pip install 'irshard[ray]' (or use --launcher local)") \
            from None
    return ray


@dataclass
class _Finished:
    """A task's process, as the launcher's verdict reads it (the local
    launcher's `_Child` has the same shape)."""

    index: int
    returncode: int | None
    stage_seen: str
    stdout: list[bytes]
    stderr: list[str]
    exited_at: float | None = None
    proc: Any = field(default=None, repr=False)

    def __post_init__(self):
        self.proc = self          # `_verdict` reads `child.proc.returncode`

    @property
    def stage(self) -> str:
        return self.stage_seen

    def poll(self) -> int | None:
        return self.returncode

    def stderr_lines(self) -> list[str]:
        return processes.meaningful(self.stderr)


def _session_dir() -> str:
    """Where a local instance keeps its sessions, logs and sockets: a
    directory of this run's own, removed after it. Unix socket paths are
    short (107 bytes), so a long $TMPDIR gives way to /tmp."""
    parent = tempfile.gettempdir()
    if len(parent) > 40 and os.access("/tmp", os.W_OK):
        parent = "/tmp"
    return interrupts.temp_dir(prefix="irshard-ray-", parent=parent)


def _reachable(address: str, seconds: float) -> None:
    """A HOST:PORT address that refuses connections is a mistake said at
    once: Ray itself would retry it for a minute or more in native code."""
    import socket
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit() or "/" in host:
        return                        # "auto", "ray://...": Ray's to resolve
    hint = ("check --ray-address (the head node's GCS address, as `ray start "
            "--head` prints it)")
    wait = min(5.0, max(seconds, 0.5))
    try:
        with socket.create_connection((host.strip("[]"), int(port)),
                                      timeout=wait) as connection:
            # A GCS serves gRPC: HTTP/2, which answers the client's preface
            # with its SETTINGS frame. Anything else (an HTTP/1 server, a
            # silent port) would hold ray.init in native code for a minute.
            connection.sendall(_HTTP2_PREFACE)
            answer = b""
            while len(answer) < 9:
                part = connection.recv(9 - len(answer))
                if not part:
                    break
                answer += part
    except socket.timeout:
        raise UsageError(f"the server at {address} does not answer as a Ray "
                         f"cluster's GCS (nothing within {wait:g} s); "
                         f"{hint}") from None
    except OSError as e:
        reason = e.strerror or type(e).__name__
        raise UsageError(f"cannot reach the Ray cluster at {address}: "
                         f"{reason}; {hint}") from None
    if len(answer) < 9 or answer[3] != 0x4:
        said = "an HTTP/1 server" if answer.startswith(b"HTTP/") else \
            "not an HTTP/2 (gRPC) server"
        raise UsageError(f"the server at {address} is not a Ray cluster's GCS "
                         f"({said}); {hint}")


# HTTP/2's client preface and an empty SETTINGS frame.
_HTTP2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])


def _init(ray, address: str | None, num_processes: int, seconds: float,
          timeout: float) -> str | None:
    """Starts a local instance or joins the cluster at `address` within
    `seconds`; returns the local instance's directory."""
    import logging
    options: dict[str, Any] = dict(include_dashboard=False, log_to_driver=False,
                                   logging_level=logging.ERROR,
                                   configure_logging=False)
    session = None
    if address is None:
        # A local instance for this run only, on the loopback interface;
        # every process it starts stays below this one until ended.
        adopt_orphans()
        session = _session_dir()
        options.update(_node_ip_address="127.0.0.1", _temp_dir=session,
                       num_cpus=max(num_processes, os.cpu_count() or 1),
                       object_store_memory=80 * 1024 * 1024)
    else:
        os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
        options["address"] = address
        _reachable(address, seconds)
    where = f"join the Ray cluster at {address}" if address else \
        "start a local Ray instance"
    try:
        # Ray retries an unreachable address for minutes (and must start on
        # the main thread): an alarm keeps --timeout. Ray installs handlers
        # of its own for SIGTERM and SIGINT, which would end this process
        # without stopping the run: the launcher's stay.
        with processes.quiet_stderr(), _alarm(max(seconds, 1.0)), \
                keep_handlers(signal.SIGTERM, signal.SIGINT):
            ray.init(**options)
    except BaseException as e:
        # Interrupted, late or refused: whatever of Ray started is stopped.
        _shutdown(ray, session)
        if isinstance(e, Late):
            raise UsageError(
                f"cannot {where} within --timeout {timeout:g} s"
                + ("; check --ray-address" if address else "")) from None
        if not isinstance(e, Exception):
            raise
        raise UsageError(f"cannot {where}: "
                         f"{str(e).splitlines()[0] if str(e) else type(e).__name__}"
                         + ("; check --ray-address" if address else "")) from None
    return session


def launch(argv: Sequence[str], num_processes: int, timeout: float,
           total_devices: int, platform: str, address: str | None
           ) -> processes.LaunchResult:
    """Runs `irshard ARGV` as `num_processes` Ray tasks forming one mesh,
    within `timeout` seconds (starting Ray included)."""
    deadline = time.monotonic() + timeout - _STOP_BUDGET
    ray = _import_ray(local=address is None)
    session = _init(ray, address, num_processes, deadline - time.monotonic(),
                    timeout)
    try:
        return _run(ray, argv, num_processes, deadline, timeout, total_devices,
                    platform, session)
    finally:
        _shutdown(ray, session)


def _shutdown(ray, session: str | None) -> None:
    """Disconnects from Ray; a local instance (`session`, its directory) is
    stopped whole: Ray's `shutdown` knows only the processes of an instance
    that finished starting, so every process this one started (the GCS,
    the raylet, the dashboard and their agents, the workers) is ended too,
    then the directory removed. A signal meanwhile is held until all that
    is done (stopping halfway would leave Ray's agents running)."""
    with _held(signal.SIGTERM, signal.SIGINT):
        with processes.quiet_stderr(), \
                keep_dispositions(signal.SIGTERM, signal.SIGINT):
            try:
                ray.shutdown()
            except Exception:
                pass
        if session is not None:
            end_descendants()
            interrupts.remove(session)



@dataclass
class _Stopper:
    """The launcher's word to the tasks (stop), and theirs to it (which
    have started: a task Ray has not placed cannot be asked to stop)."""

    flag: bool = False
    begun: set = field(default_factory=set)

    def stop(self) -> None:
        self.flag = True

    def stopped(self) -> bool:
        return self.flag

    def start(self, index: int) -> None:
        self.begun.add(index)

    def started(self) -> list:
        return sorted(self.begun)


def _run(ray, argv, num_processes, deadline, timeout, total_devices, platform,
         session=None):
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    def left() -> float:
        return max(0.5, deadline - time.monotonic())

    # The coordinator and process 0 on the launcher's own node where it can
    # (its output is the command's), elsewhere where it cannot.
    here = NodeAffinitySchedulingStrategy(
        ray.get_runtime_context().get_node_id(), soft=True)
    try:
        node_id, host, port = ray.get(
            ray.remote(num_cpus=0)(raytask.place).options(scheduling_strategy=here)
            .remote(), timeout=left())
    except ray.exceptions.GetTimeoutError:
        return processes.LaunchResult(3, b"", [error_line(
            f"Ray did not run the launcher's first task within {timeout:g} s "
            f"(`ray status` shows the cluster's state)")])
    stopper = ray.remote(num_cpus=0)(_Stopper).remote()
    share = max(1, total_devices // num_processes)
    resources: dict[str, Any] = {"num_cpus": 1}
    if platform == "gpu":
        resources["num_gpus"] = share
    elif platform == "tpu":
        resources["resources"] = {"TPU": share}
    task = ray.remote(max_retries=0)(raytask.run_process)
    refs = []
    for i in range(num_processes):
        child = [*argv, "--coordinator", f"{host}:{port}", "--process-id", str(i),
                 "--num-processes", str(num_processes)]
        strategy = NodeAffinitySchedulingStrategy(node_id, soft=False) if i == 0 \
            else "SPREAD"
        refs.append(task.options(scheduling_strategy=strategy, **resources)
                    .remote(i, child, left(), stopper, os.getcwd(), session))
    tasks = _Tasks(ray, refs, stopper)
    tasks.wait(deadline)
    if tasks.unplaced and tasks.first_failure is None:
        try:
            started = ray.get(stopper.started.remote(), timeout=1.0)
        except Exception:
            started = []
        return _unplaced(tasks.unplaced, num_processes, resources, timeout,
                         tasks.infeasible, started)
    return tasks.verdict(num_processes, timeout)


def _ended(i: int, returncode: int | None, stderr: list[str] = (),
           timed_out: bool = False, stopped: bool = True) -> dict:
    """The result of process `i`'s task where the task gave none."""
    return {"index": i, "returncode": returncode, "stage": "starting",
            "stdout": b"", "stderr": list(stderr), "timed_out": timed_out,
            "stopped": stopped}


class _Tasks:
    """The processes' Ray tasks, waited for: each one's result, when it
    ended, the first that failed, and those Ray never placed. Once one
    has failed (and the others had `processes._GRACE` to follow), one
    could not be placed, or the deadline passed, the others are stopped."""

    def __init__(self, ray, refs, stopper):
        self.ray, self.refs, self.stopper = ray, refs, stopper
        self.index_of = {ref: i for i, ref in enumerate(refs)}
        self.results: dict[int, dict] = {}
        self.exited: dict[int, float] = {}
        self.first_failure: int | None = None
        self.unplaced: list[int] = []
        self.infeasible = False
        self.deadline_hit = False

    def wait(self, deadline: float) -> None:
        ray = self.ray
        pending = list(self.refs)
        stop_sent = 0.0
        while pending:
            ready, pending = ray.wait(pending, num_returns=1, timeout=raytask.POLL)
            now = time.monotonic()
            for ref in ready:
                self.collect(ref, now)
            failing = self.first_failure is not None and \
                now - self.exited[self.first_failure] > processes._GRACE
            if pending and not stop_sent and (failing or self.unplaced
                                              or now > deadline):
                self.stopper.stop.remote()
                stop_sent = now
                self.deadline_hit = not (failing or self.unplaced)
            if stop_sent and pending and now > stop_sent + 1.0:
                self.cancel(pending, late=now > stop_sent + 3.0)

    def collect(self, ref, now: float) -> None:
        """The result of a task that is done."""
        i = self.index_of[ref]
        try:
            self.results[i] = self.ray.get(ref)
        except self.ray.exceptions.TaskUnschedulableError:
            self.unplaced.append(i)
            self.infeasible = True
            self.results[i] = _ended(i, None)
            return
        except Exception as e:   # the task itself failed (its worker died)
            said = str(e).splitlines()[0] if str(e) else e
            self.results[i] = _ended(i, -int(signal.SIGKILL),
                                     [f"the Ray task failed: {said}"],
                                     stopped=False)
        self.exited[i] = now
        if self.results[i]["returncode"] not in (0, None) \
                and self.first_failure is None:
            self.first_failure = i

    def cancel(self, pending: list, late: bool) -> None:
        """Tasks Ray never placed are cancelled; started ones have a little
        longer to stop their processes themselves (until `late`)."""
        try:
            started = set(self.ray.get(self.stopper.started.remote(), timeout=1.0))
        except Exception:          # the actor is gone: cancel them all
            started = set()
        for ref in list(pending):
            i = self.index_of[ref]
            if i in started and not late:
                continue
            self.ray.cancel(ref, force=True)
            pending.remove(ref)
            if i not in started:
                self.unplaced.append(i)
            self.results[i] = _ended(i, None, timed_out=True)

    def verdict(self, num_processes: int, timeout: float):
        results, first_failure = self.results, self.first_failure
        finished = []
        for i in range(num_processes):
            r = results[i]
            finished.append(_Finished(i, r["returncode"], r["stage"],
                                      [r["stdout"]] if r["stdout"] else [],
                                      list(r["stderr"]), self.exited.get(i)))
        running = [f for f in finished if f.returncode is None]
        timed_out = bool(running) and first_failure is None and (
            self.deadline_hit or any(results[f.index]["timed_out"] for f in running))
        failure = finished[first_failure] if first_failure is not None else None
        return processes._verdict(finished, running, timed_out, timeout, failure)


def _unplaced(indices, num_processes, resources, timeout, at_once, started):
    """Processes Ray never started: the resources their tasks asked for."""
    need = {"CPU": resources["num_cpus"]}
    if "num_gpus" in resources:
        need["GPU"] = resources["num_gpus"]
    need.update(resources.get("resources", {}))
    needs = ", ".join(f"{k}: {v}" for k, v in need.items())
    which = (f"process{'es' if len(indices) > 1 else ''} "
             f"{', '.join(map(str, sorted(indices)))} of {num_processes}")
    if at_once:
        what = (f"Ray cannot start {which}: no node of the cluster has "
                f"{{{needs}}}")
    else:
        what = (f"Ray did not start {which} within {timeout:g} s: no node had "
                f"{{{needs}}} free")
    what += " (`ray status` lists the cluster's resources)"
    if started:
        what += (f"; stopped process{'es' if len(started) > 1 else ''} "
                 f"{', '.join(map(str, sorted(started)))}")
    return processes.LaunchResult(3, b"", [error_line(what)])


def run_launcher(argv: Sequence[str], num_processes: int, timeout: float,
                 total_devices: int, platform: str, address: str | None,
                 output: str | None = None) -> int:
    """`--launcher ray`: launches, relays process 0's output (written here
    to `output`: process 0 may run on another node), returns the exit
    code."""
    processes.check_launch(num_processes, timeout, total_devices, platform)
    argv = distributed.strip_option(argv, "-o", True)
    argv = distributed.strip_option(argv, "--output", True)

    def run():
        return launch(argv, num_processes, timeout, total_devices, platform,
                      address)
    return processes.relay(run, output)
