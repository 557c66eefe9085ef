"""A fork server for `irshard compile` processes (`python -m
irshard.forkserver`): it imports JAX and irshard's command once, then
forks a process for each command it is asked to run, so that a search's
candidates do not each pay the interpreter's and the imports' start-up
(about half of a small program's compile on a 2-core host).

Each command still runs in a process of its own, forked from a server that
has run nothing but imports: no candidate sees another's state (the
program's modules, JAX's caches and config, a framework's name counters).
A child is made to look like `python -m irshard ARGV` started where and
as the request says: its working directory, environment, standard streams
(stdin is /dev/null) and the signal dispositions the server was started
with; `irshard/__main__.py` runs as `__main__`.

The protocol is JSON lines: requests on the server's stdin (`{"id": N,
"argv": [...], "env": {...}, "cwd": DIR, "stdout": PATH, "stderr": PATH}`
starts one, `{"id": N, "signal": S}` signals it while it runs), replies
on its stdout (`{"ready": true}` once the imports are done, `{"id": N,
"pid": P}`, then `{"id": N, "exit": CODE}` as `subprocess.Popen`'s
`returncode` gives it, or `{"id": N, "error": TEXT}` where it could not
start). When its stdin closes or it is sent SIGTERM, the server stops its
children (SIGTERM, then SIGKILL after a second) and ends; a child is
killed when the server dies, however it dies (Linux's parent-death
signal). Its own stdout and stderr go to /dev/null: nothing it imports
can break the protocol or write on the command's terminal.
"""

from __future__ import annotations

import importlib
import json
import os
import select
import signal
import sys
import time

# What an `irshard compile` imports that takes its time: JAX first, then
# irshard's command line and the pipeline. None of these starts a thread
# or a JAX backend (tests/test_forkserver.py checks both).
PRELOAD = (
    "jax", "jax.numpy", "irshard.cli", "irshard.commands", "irshard.frontend",
    "irshard.hosting", "irshard.library", "irshard.loading.fromfile",
    "irshard.loading.program", "irshard.stages.staged", "irshard.stages.output",
    "irshard.backend.shardy", "irshard.ir.annotation",
    "irshard.collectives.analysis", "irshard.timemodel.schedule",
    "irshard.running.distributed",
)
# The name a child runs under (`/proc/PID/comm`, at most 15 bytes).
COMMAND_NAME = b"irshard-compile"
# How long children have to end after SIGTERM when the server stops.
GRACE_S = 1.0
_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGCHLD)


class _Server:
    def __init__(self, requests: int, replies: int):
        self.requests = requests
        self.replies = replies
        self.children: dict[int, int] = {}        # pid -> request id
        self.buffer = b""
        self.stopping = False
        # What a child's signals start as: those this process was started
        # with (a Ctrl-C its parent was started to ignore stays ignored).
        self.initial = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
        self.path0 = sys.path[0] if sys.path and sys.path[0] == os.getcwd() else None
        self.wake_r, self.wake_w = os.pipe()
        os.set_blocking(self.wake_w, False)
        signal.set_wakeup_fd(self.wake_w)
        signal.signal(signal.SIGCHLD, lambda signum, frame: None)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, self._stop)

    def _stop(self, signum, frame) -> None:
        self.stopping = True

    def reply(self, message: dict) -> None:
        data = (json.dumps(message) + "\n").encode()
        while data:
            data = data[os.write(self.replies, data):]

    def serve(self) -> None:
        while not self.stopping:
            try:
                ready, _, _ = select.select([self.requests, self.wake_r], [], [], 1.0)
            except InterruptedError:
                ready = []
            if self.wake_r in ready:
                os.read(self.wake_r, 4096)
            self._reap()
            if self.requests in ready:
                chunk = os.read(self.requests, 1 << 16)
                if not chunk:
                    break
                self.buffer += chunk
                *lines, self.buffer = self.buffer.split(b"\n")
                for line in lines:
                    try:
                        request = json.loads(line)
                    except ValueError:
                        continue
                    if isinstance(request, dict) and "id" in request:
                        self._handle(request)
        self._end_children()

    def _handle(self, request: dict) -> None:
        if "signal" in request:
            for pid, key in self.children.items():
                if key == request["id"]:
                    try:
                        os.kill(pid, int(request["signal"]))
                    except ProcessLookupError:
                        pass
            return
        try:
            pid = self._fork(request)
        except OSError as e:
            self.reply({"id": request["id"], "error": f"could not fork: {e}"})
            return
        self.children[pid] = request["id"]
        self.reply({"id": request["id"], "pid": pid})

    def _fork(self, request: dict) -> int:
        mask = signal.pthread_sigmask(signal.SIG_BLOCK, _SIGNALS)
        try:
            pid = os.fork()
        except BaseException:
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)
            raise
        if pid == 0:
            code = 1
            try:
                code = self._child(request, mask)
            finally:
                os._exit(code)
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        return pid

    def _child(self, request: dict, mask) -> int:
        """Becomes `python -m irshard ARGV` as `request` says; returns its
        exit status."""
        import ctypes
        import tempfile
        server = os.getppid()
        try:
            libc = ctypes.CDLL(None)
            libc.prctl(1, signal.SIGKILL)                # PR_SET_PDEATHSIG
            # What `ps` and `top` name it (its command line is the
            # server's).
            libc.prctl(15, COMMAND_NAME)                 # PR_SET_NAME
        except (OSError, AttributeError):
            pass
        if os.getppid() != server:
            return 1
        signal.set_wakeup_fd(-1)
        for fd in (self.requests, self.replies, self.wake_r, self.wake_w):
            os.close(fd)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        for s, handler in self.initial.items():
            signal.signal(s, handler)
        try:
            null = os.open(os.devnull, os.O_RDONLY)
            out = os.open(request["stdout"], os.O_WRONLY | os.O_APPEND)
            err = os.open(request["stderr"], os.O_WRONLY | os.O_APPEND)
            os.chdir(request["cwd"])
        except OSError:
            return 3
        for fd, target in ((null, 0), (out, 1), (err, 2)):
            os.dup2(fd, target)
            os.close(fd)
        os.environ.clear()
        os.environ.update(request["env"])
        tempfile.tempdir = None
        if self.path0 is not None:
            sys.path[0] = os.getcwd()
        sys.argv = ["irshard", *request["argv"]]
        # irshard's own handlers before any signal is let in, as its
        # __main__ installs them before it imports anything.
        from irshard.core import interrupts
        interrupts.install()
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        return _run_main()

    def _reap(self) -> None:
        while self.children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            key = self.children.pop(pid, None)
            if key is not None:
                self.reply({"id": key, "exit": os.waitstatus_to_exitcode(status)})

    def _end_children(self) -> None:
        for pid in list(self.children):
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        end = time.monotonic() + GRACE_S
        while self.children and time.monotonic() < end:
            self._reap()
            time.sleep(0.01)
        for pid in list(self.children):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        while self.children:
            try:
                pid, _ = os.waitpid(-1, 0)
            except ChildProcessError:
                break
            self.children.pop(pid, None)


def _run_main() -> int:
    """`irshard/__main__.py` run as `python -m irshard` runs it; its exit
    status as Python's would be."""
    import atexit
    import runpy
    import traceback
    code: object = 0
    try:
        runpy.run_module("irshard", run_name="__main__", alter_sys=True)
    except SystemExit as e:
        code = e.code
    except BaseException:
        traceback.print_exc()
        code = 1
    # What Python's own exit would still do: the exit handlers irshard's
    # end did not run (it runs those registered before it), the streams
    # flushed.
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BaseException:
            pass
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


def main() -> None:
    requests, replies = os.dup(0), os.dup(1)
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    server = _Server(requests, replies)
    for name in PRELOAD:
        try:
            importlib.import_module(name)
        except BaseException:
            pass
    server.reply({"ready": True})
    server.serve()


if __name__ == "__main__":
    main()
