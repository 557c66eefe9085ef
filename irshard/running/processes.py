"""The launcher of `--processes N`: N copies of the command started on
this machine, the coordinator on 127.0.0.1 at a free port, each watched;
process 0's output is the command's, the others stay quiet unless they
fail. If any process dies or hangs, all are stopped within a bounded time
and the culprit is named with the last lines of its stderr.

Imports no JAX; it only starts and watches processes.
"""

from __future__ import annotations

import collections
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from typing import Mapping, Sequence

from irshard.core import files, interrupts
from irshard.core.errors import UsageError, error_line
from irshard.running import distributed
from irshard.running.distributed import PHASES

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


def _die_with_parent() -> None:
    """In the child, before exec: be killed if the launcher dies (Linux)."""
    try:
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)     # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
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
        port = distributed.free_port()
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
