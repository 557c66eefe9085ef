"""Inside a Ray task of `--launcher ray`: one process of the command run
and watched until it exits, its time is up or the launcher says stop; and
the node's place (its id, address and a free port) for the coordinator.
Ray imports this module on its workers: it imports nothing heavy."""

from __future__ import annotations

import os
import signal
import sys
import tempfile
import time

from irshard.running import processes

# How often a task looks at its process and the launcher's word.
POLL = 0.1


def _watch(proc, deadline: float, stopper) -> tuple[bool, bool]:
    """Waits for `proc` to exit; (stopped, timed_out): whether `stopper`
    said stop, or the deadline passed, first."""
    last_check = 0.0
    while proc.poll() is None:
        now = time.monotonic()
        if now > deadline:
            return False, True
        if stopper is not None and now - last_check > 0.25:
            last_check = now
            import ray
            try:
                if ray.get(stopper.stopped.remote(), timeout=2):
                    return True, False
            except Exception:
                pass
        time.sleep(POLL)
    return False, False


def _stop(proc) -> None:
    """Stops `proc`'s process group (politely, then not) and reaps it;
    None: it did not exit by itself."""
    import subprocess
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            proc.wait(timeout=processes._KILL_WAIT)
            break
        except subprocess.TimeoutExpired:
            continue
    proc.wait()
    return None


def run_process(index: int, argv: list[str], seconds: float, stopper,
                 cwd: str, temp: str | None = None) -> dict:
    """Inside a Ray task: runs `irshard ARGV` (in the launcher's directory
    `cwd` where this node has it, for the paths on the command line) and
    watches it until it exits, `seconds` pass, or `stopper` says stop. Its
    files go under `temp` (a local instance's directory, removed with it
    however the task ends) where given."""
    import subprocess
    stopper.start.remote(index)
    if temp is not None and not os.path.isdir(temp):
        temp = None

    with tempfile.TemporaryDirectory(prefix="irshard-ray-", dir=temp) as tmp:
        stage_file = os.path.join(tmp, "stage")
        out_path, err_path = os.path.join(tmp, "out"), os.path.join(tmp, "err")
        env = dict(os.environ, IRSHARD_STAGE_FILE=stage_file)
        deadline = time.monotonic() + seconds
        with open(out_path, "wb") as out, open(err_path, "wb") as err:
            proc = subprocess.Popen(
                [sys.executable, "-m", "irshard", *argv], env=env,
                cwd=cwd if os.path.isdir(cwd) else None,
                stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                start_new_session=True,
                preexec_fn=processes._die_with_parent
                if sys.platform == "linux" else None)
            stopped, timed_out = _watch(proc, deadline, stopper)
            try:
                with open(stage_file) as f:
                    stage = f.read().strip() or "starting"
            except OSError:
                stage = "starting"
            # What a process said before it was stopped, not its dying words.
            seen = os.path.getsize(err_path) if proc.poll() is None else None
            code = proc.returncode if proc.poll() is not None else _stop(proc)
        with open(out_path, "rb") as f:
            stdout = f.read()
        with open(err_path, "rb") as f:
            stderr = f.read(seen).decode("utf-8", "replace").splitlines()[-400:]
    return {"index": index, "returncode": code, "stage": stage,
            "stdout": stdout, "stderr": stderr, "timed_out": timed_out,
            "stopped": stopped}


def place() -> tuple[str, str, int]:
    """Inside a Ray task: this node's id and address, and a free port on it
    for the coordinator."""
    import socket

    import ray
    context = ray.get_runtime_context()
    address = ray.util.get_node_ip_address()
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((address, 0))
        port = s.getsockname()[1]
    return context.get_node_id(), address, port
