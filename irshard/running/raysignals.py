"""Signals and processes around Ray: the handlers and dispositions Ray's
start-up and shutdown would replace held in place, signals that arrive
meanwhile held and acted on after, a deadline as an alarm, and the
processes Ray leaves behind found through /proc and ended.
"""

from __future__ import annotations

import os
import signal
import sys
import time


class keep_handlers:
    """While the block runs, attempts to replace the handlers of `signals`
    are ignored (Ray's `init` installs its own for SIGTERM and SIGINT,
    which exit the process at once: a signal during start-up left Ray's
    processes and directory behind); after it, the handlers are as before."""

    def __init__(self, *signals: int):
        self.signals = signals

    def __enter__(self):
        self.saved = {s: signal.getsignal(s) for s in self.signals}
        self.original = signal.signal
        kept = self

        def guarded(signum, handler):
            if signum in kept.signals:
                return kept.saved.get(signum)
            return kept.original(signum, handler)
        signal.signal = guarded
        return self

    def __exit__(self, *exc):
        import threading
        signal.signal = self.original
        if threading.current_thread() is threading.main_thread():
            for s, handler in self.saved.items():
                if handler is not None:
                    signal.signal(s, handler)
        return False


class keep_dispositions:
    """While the block runs, the handlers of `signals` stay as they are below
    Python too. Ray's `shutdown` sets SIGTERM back to the system's default
    in native code a moment in (Python still believes its handler is
    there), and a signal in the second that follows ended the process with
    Ray's agents still running. A thread watches the handlers (sigaction,
    glibc's layout) and puts them back; elsewhere it does nothing."""

    def __init__(self, *signals: int):
        self.signals = signals
        self.thread = None

    def __enter__(self):
        import ctypes
        import threading
        if not sys.platform.startswith("linux"):
            return self
        try:
            libc = ctypes.CDLL(None, use_errno=True)
        except OSError:
            return self

        class Sigaction(ctypes.Structure):
            _fields_ = [("handler", ctypes.c_void_p),
                        ("mask", ctypes.c_ulong * (128 // ctypes.sizeof(ctypes.c_ulong))),
                        ("flags", ctypes.c_int), ("restorer", ctypes.c_void_p)]

        saved = {}
        for s in self.signals:
            action = Sigaction()
            if libc.sigaction(int(s), None, ctypes.byref(action)) == 0:
                saved[int(s)] = action
        self.done = threading.Event()

        def watch():
            current = Sigaction()
            while not self.done.wait(0.002):
                for s, action in saved.items():
                    if libc.sigaction(s, None, ctypes.byref(current)) == 0 \
                            and current.handler != action.handler:
                        libc.sigaction(s, ctypes.byref(action), None)
        self.thread = threading.Thread(target=watch, name="irshard-signals",
                                       daemon=True)
        self.thread.start()
        return self

    def __exit__(self, *exc):
        if self.thread is not None:
            self.done.set()
            self.thread.join()
        return False


class Late(BaseException):   # not caught by Ray's own retries
    pass


class _alarm:
    """Raises `Late` in the main thread after `seconds` (between two
    Python steps: Ray's connection retries return to Python every few
    seconds)."""

    def __init__(self, seconds: float):
        self.seconds = seconds

    def _ring(self, signum, frame):
        raise Late

    def __enter__(self):
        import threading
        self.armed = threading.current_thread() is threading.main_thread()
        if self.armed:
            self.previous = signal.signal(signal.SIGALRM, self._ring)
            signal.setitimer(signal.ITIMER_REAL, self.seconds)
        return self

    def __exit__(self, *exc):
        if self.armed:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, self.previous)
        return False


class _held:
    """SIGTERM and Ctrl-C during the block are noted, not acted on; at its
    end they interrupt (KeyboardInterrupt), as they would have."""

    def __init__(self, *signals: int):
        self.signals = signals
        self.came: list[int] = []

    def __enter__(self):
        import threading
        self.saved = {}
        if threading.current_thread() is threading.main_thread():
            for s in self.signals:
                self.saved[s] = signal.signal(s, lambda n, _: self.came.append(n))
        return self

    def __exit__(self, kind, *rest):
        for s, handler in self.saved.items():
            signal.signal(s, handler if handler is not None else signal.SIG_DFL)
        if self.came and kind is None:
            raise KeyboardInterrupt
        return False


def _stat(pid: int | str) -> list[bytes] | None:
    """The fields of /proc/PID/stat after the command's name (state, parent,
    ...); None when the process is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    # pid (comm) state ppid ...: comm may hold spaces and parentheses.
    return stat[stat.rfind(b")") + 2:].split()


def _descendants() -> list[int]:
    """The processes below this one (Linux: read from /proc)."""
    children: dict[int, list[int]] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return []
    for entry in entries:
        fields = _stat(entry) if entry.isdigit() else None
        if fields and len(fields) > 1:
            children.setdefault(int(fields[1]), []).append(int(entry))
    found, todo = [], [os.getpid()]
    while todo:
        for child in children.get(todo.pop(), ()):
            found.append(child)
            todo.append(child)
    return found


def adopt_orphans() -> None:
    """This process becomes the reaper of its orphaned descendants (Linux's
    child subreaper): a process whose parent dies before it (Ray's agents,
    started by a raylet ended mid-start) stays below this one, where
    `end_descendants` finds it, instead of passing to init. Elsewhere it
    does nothing."""
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes
        ctypes.CDLL(None, use_errno=True).prctl(36, 1)   # PR_SET_CHILD_SUBREAPER
    except (OSError, AttributeError):
        pass


def end_descendants(grace: float = 2.0, rounds: int = 3) -> None:
    """Ends every process below this one: SIGTERM, then SIGKILL for those
    that outlive `grace`; then again for those that appeared meanwhile
    (started by one being ended, or orphaned below this one: see
    `adopt_orphans`), up to `rounds` times."""
    for _ in range(rounds):
        pids = [p for p in _descendants() if _alive(p)]
        if not pids:
            return
        for sig in (signal.SIGTERM, signal.SIGKILL):
            for pid in pids:
                try:
                    os.kill(pid, sig)
                except OSError:
                    pass
            end = time.monotonic() + grace
            while time.monotonic() < end and any(_alive(p) for p in pids):
                time.sleep(0.05)
            pids = [p for p in pids if _alive(p)]
            if not pids:
                break


def _alive(pid: int) -> bool:
    """Running, and not a zombie left for its parent to reap."""
    fields = _stat(pid)
    if not fields:
        return False
    if fields[0] == b"Z":
        try:
            os.waitpid(pid, os.WNOHANG)
        except OSError:
            pass
        return False
    return True
