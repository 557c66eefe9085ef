"""`irshard compile` processes forked from a warm server
(`irshard.forkserver`) instead of started afresh: each candidate of a
search is still a process of its own, without the interpreter's and the
imports' start-up (about 1.5 s of a small program's 3 s compile here).

`Server.start` returns a handle that `interrupts.stop` and
`compilers.Processes` use as they use a `subprocess.Popen`, or None where
the server cannot run this command as `subprocess.Popen` would (another
environment than the server's, the server gone, not Linux): the caller
then starts the process itself. `IRSHARD_FORK_SERVER=0` turns the server
off.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from typing import Any, Sequence

from irshard.core import interrupts

# What a child may set differently from the server's environment: each
# candidate's temporary directory.
_PER_CHILD = ("TMPDIR",)


def available() -> bool:
    """Whether commands may be forked from a server here: Linux (a forked
    child of a process that imported JAX is safe there while no thread
    runs; elsewhere the system's own libraries may not be), unless
    `IRSHARD_FORK_SERVER=0`."""
    return sys.platform.startswith("linux") and hasattr(os, "fork") and \
        os.environ.get("IRSHARD_FORK_SERVER", "1") != "0"


class Started:
    """A command the server runs, as a `subprocess.Popen` is seen:
    `poll`, `wait`, `terminate`, `kill`, `returncode` (negative for a
    signal); `error` says why it never ran, where it did not."""

    def __init__(self, server: "Server", key: int):
        self.server = server
        self.key = key
        self.pid: int | None = None
        self.returncode: int | None = None
        self.error: str | None = None
        self._done = threading.Event()

    def _end(self, returncode: int, error: str | None = None) -> None:
        if self.returncode is None:
            self.error = error
            self.returncode = returncode
            self._done.set()

    def poll(self) -> int | None:
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if not self._done.wait(timeout):
            raise subprocess.TimeoutExpired("irshard compile", timeout or 0.0)
        assert self.returncode is not None
        return self.returncode

    def send_signal(self, signum: int) -> None:
        """Signals the command while it runs. Its pid is known once
        forked; before that the server is asked to (which needs the
        request channel free: an interruption in the middle of a request
        stops the server instead, and it its children)."""
        if self.returncode is not None:
            return
        if self.pid is not None:
            try:
                os.kill(self.pid, signum)
            except ProcessLookupError:
                pass
            return
        self.server.send({"id": self.key, "signal": int(signum)}, wait=False)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


class Server:
    """A fork server started with this process's environment, its
    commands' handles, and the thread that reads its replies."""

    def __init__(self) -> None:
        self.env = dict(os.environ)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "irshard.forkserver"], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=self.env)
        interrupts.track(self.proc)
        self.alive = True
        self._handles: dict[int, Started] = {}
        self._next = 0
        self._writing = threading.Lock()
        self._reader = threading.Thread(target=self._read, name="irshard-fork-server",
                                        daemon=True)
        self._reader.start()

    def start(self, argv: Sequence[str], env: dict[str, str], stdout: str,
              stderr: str) -> Started | None:
        """`python -m irshard ARGV` in a process forked from the server,
        with `env`, in this process's working directory, its stdout and
        stderr appended to the files named; None where the server cannot
        run it as a fresh process would run."""
        if not self.alive or not _same(env, self.env):
            return None
        self._next += 1
        handle = Started(self, self._next)
        self._handles[handle.key] = handle
        request = {"id": handle.key, "argv": list(argv), "env": env,
                   "cwd": os.getcwd(), "stdout": stdout, "stderr": stderr}
        if not self.send(request):
            self._handles.pop(handle.key, None)
            return None
        return handle

    def send(self, message: dict[str, Any], wait: bool = True) -> bool:
        """Writes one request whole; False where the server is gone (or,
        with `wait=False`, another request is being written)."""
        data = (json.dumps(message) + "\n").encode()
        if not self._writing.acquire(blocking=wait):
            return False
        try:
            assert self.proc.stdin is not None
            fd = self.proc.stdin.fileno()
            while data:
                data = data[os.write(fd, data):]
            return True
        except (OSError, ValueError):
            self.alive = False
            return False
        finally:
            self._writing.release()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            try:
                message = json.loads(line)
            except ValueError:
                continue
            handle = self._handles.get(message.get("id")) if isinstance(message, dict) \
                else None
            if handle is None:
                continue
            if "pid" in message:
                handle.pid = int(message["pid"])
            elif "exit" in message:
                self._handles.pop(handle.key, None)
                handle._end(int(message["exit"]))
            elif "error" in message:
                self._handles.pop(handle.key, None)
                handle._end(3, str(message["error"]))
        # The server is gone, and with it every child it had (each is
        # killed when it dies).
        self.alive = False
        for handle in list(self._handles.values()):
            handle._end(-signal.SIGKILL, "the fork server ended before the compile did"
                        if handle.pid is not None else
                        "the fork server ended before it started the compile")
        self._handles.clear()

    def close(self) -> None:
        """Ends the server (its stdin closed: it stops what still runs) and
        waits for it."""
        try:
            if self.proc.stdin is not None:
                self.proc.stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(interrupts.GRACE_S * 3)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        interrupts.untrack(self.proc)
        self._reader.join(interrupts.GRACE_S)
        if self.proc.stdout is not None:
            self.proc.stdout.close()


def _same(env: dict[str, str], base: dict[str, str]) -> bool:
    """Whether `env` is `base` but for what each child sets itself."""
    def rest(e):
        return {k: v for k, v in e.items() if k not in _PER_CHILD}
    return rest(env) == rest(base)
