"""Prompt interruption, and temporary files that never outlive a command.

On the command line (`install`), Ctrl-C and SIGTERM end the process at
once: the handler removes every temporary directory and file made through
this module, stops the child processes it was told of, and exits with
status 130 (`exit_now`). It raises nothing: an exception raised from a
signal handler lands in whatever Python code runs at that moment (JAX's
garbage-collection callback, which drops it; an import, which turns it
into an ImportError; jaxlib's initialization), so it could be lost or
mistaken for another error. Code that stops its own children by unwinding
(the launchers) asks for the old behaviour, a `KeyboardInterrupt`, inside
`unwinding()`. Once a command's result is written (`settle`), later signals
are ignored: the process finishes what it wrote and exits as it would have.

Python runs a signal's handler only between bytecodes of the main thread,
so Ctrl-C during a long XLA compile (native code) would wait for the
compile to finish. `call` runs such work on a helper thread while the main
thread waits in short steps: the interrupt arrives at once.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
from typing import Any, Callable

_TEMP_DIRS: set[str] = set()
_TEMP_FILES: set[str] = set()
# Child processes (`subprocess.Popen`s) stopped on interruption.
_CHILDREN: set[Any] = set()
_LOCK = threading.RLock()
_INTERRUPTING = (signal.SIGINT, signal.SIGTERM)
# Copies of the real stderr while native code's is sent elsewhere
# (outermost first): where the interruption is said.
STDERR_COPIES: list[int] = []
# Whether `install` made signals end the process, and how many `unwinding`
# blocks are open (there, they raise KeyboardInterrupt instead).
# `closing`: the temporary files are being removed (the process is ending).
_STATE = {"installed": False, "unwinding": 0, "closing": False}
# How long a child process stopped by SIGTERM has to clean up before it is
# killed.
GRACE_S = 1.0


def temp_dir(prefix: str = "irshard-", parent: str | None = None) -> str:
    """A new temporary directory (in `parent`, or the system's), removed by
    `remove` or on interruption. Its name is registered before it exists,
    as `created` does."""
    import secrets
    parent = tempfile.gettempdir() if parent is None else parent
    for _ in range(100):
        path = os.path.join(os.path.abspath(parent), prefix + secrets.token_hex(6))
        try:
            created(path, _TEMP_DIRS, lambda: os.mkdir(path, 0o700))
            return path
        except FileExistsError:
            continue
    raise FileExistsError(f"no unused temporary name in {parent}")


def pinned(path: str) -> tuple[str, int | None]:
    """A name for the directory `path` that leads to it only while it
    exists, and the descriptor behind it (None where there is none; close
    it after removing `path`). Native work that goes on writing after an
    interruption (XLA dumping a compile's kernels from several threads) is
    given this name: it cannot create the directory again once removed, as
    it would under `path` itself; its writes fail instead. On Linux the
    name goes through `/proc/self/fd`; elsewhere it is `path`."""
    if not os.path.isdir("/proc/self/fd"):
        return path, None
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    return f"/proc/self/fd/{fd}", fd


def created(path: str, registry: set[str], make: Callable[[], Any]) -> Any:
    """`make()`, which creates `path`, with `path` registered in `registry`
    (removed on interruption) first. An interruption at any moment leaves
    nothing behind: one between creating and registering could (with
    `mkdtemp`), and so could another thread's creating while the handler
    removes what was registered, so creation holds the lock the handler
    takes and is refused (the thread waits for the process to end) once
    removal has begun."""
    with _LOCK:
        while _STATE["closing"]:
            _LOCK.release()
            try:
                time.sleep(3600)
            finally:
                _LOCK.acquire()
        registry.add(path)
        try:
            return make()
        except BaseException:
            registry.discard(path)
            raise


def remove(path: str) -> None:
    shutil.rmtree(path, ignore_errors=True)
    with _LOCK:
        _TEMP_DIRS.discard(path)


def temp_file(path: str, make: Callable[[], Any]) -> Any:
    """`make()`, which creates the file `path`, with `path` registered to
    be removed on interruption (until `forget_file`), as `created` does."""
    return created(path, _TEMP_FILES, make)


def forget_file(path: str) -> None:
    with _LOCK:
        _TEMP_FILES.discard(path)


def track(process: Any) -> None:
    """Registers a child process (a `subprocess.Popen`) to be stopped on
    interruption (until `untrack`)."""
    with _LOCK:
        _CHILDREN.add(process)


class Forked:
    """A child made by `fork`, as `stop` sees a `subprocess.Popen`: it
    runs native work with both interrupting signals blocked and has nothing
    to clean up, so `terminate` kills it at once; another thread's
    `waitpid` may reap it first, which counts as ended."""

    def __init__(self, pid: int):
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:
                self.returncode = 0
            else:
                if pid:
                    self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def terminate(self) -> None:
        self.kill()

    def kill(self) -> None:
        if self.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)

    def wait(self, timeout: float | None = None) -> int:
        while self.poll() is None:
            time.sleep(0.005)
        return self.returncode


def untrack(process: Any) -> None:
    with _LOCK:
        _CHILDREN.discard(process)


def stop(processes: Any) -> None:
    """Ends `processes`: SIGTERM (an irshard process removes its temporary
    files and exits), then, after `GRACE_S`, SIGKILL; each is waited for."""
    import subprocess
    processes = list(processes)
    for proc in processes:
        if proc.poll() is None:
            with contextlib.suppress(OSError):
                proc.terminate()
    end = time.monotonic() + GRACE_S
    for proc in processes:
        try:
            proc.wait(max(0.0, end - time.monotonic()))
        except subprocess.TimeoutExpired:
            with contextlib.suppress(OSError):
                proc.kill()
            proc.wait()


def remove_all() -> None:
    """Removes every temporary directory. Native work still running (an XLA
    dump after a pass) may recreate a directory while it is being removed,
    so removal repeats until each is gone."""
    with _LOCK:
        _STATE["closing"] = True
        paths = list(_TEMP_DIRS)
        files = list(_TEMP_FILES)
    for path in files:
        with contextlib.suppress(OSError):
            os.unlink(path)
    for _ in range(50):
        for path in paths:
            shutil.rmtree(path, ignore_errors=True)
        if not any(os.path.lexists(path) for path in paths):
            break
        time.sleep(0.01)
    with _LOCK:
        _TEMP_DIRS.difference_update(paths)
        _TEMP_FILES.difference_update(files)


def call(fn: Callable[..., Any], *args: Any, deadline: float | None = None,
         progress: Callable[[float | None], None] | None = None,
         **kwargs: Any) -> Any:
    """`fn(*args, **kwargs)` on a helper thread; the main thread stays
    interruptible while it runs. Exceptions propagate as raised. With
    `deadline` (seconds), a `TimeoutError` is raised when `fn` has not
    returned by then (it goes on running on its thread). With `progress`,
    it is called with the seconds elapsed about twice a second while `fn`
    runs, and with None when it is done."""
    if threading.current_thread() is not threading.main_thread() and deadline is None:
        return fn(*args, **kwargs)
    outcome: dict[str, Any] = {}

    def work() -> None:
        try:
            outcome["value"] = fn(*args, **kwargs)
        except BaseException as e:  # handed to the caller below
            outcome["error"] = e

    thread = threading.Thread(target=work, name="irshard-native", daemon=True)
    thread.start()
    begin = time.monotonic()
    end = None if deadline is None else begin + deadline
    shown = begin
    try:
        while thread.is_alive():
            thread.join(0.05)
            now = time.monotonic()
            if end is not None and now > end and thread.is_alive():
                raise TimeoutError(f"{getattr(fn, '__name__', 'work')} did not "
                                   f"finish within {deadline:g} s")
            if progress is not None and now - shown >= 0.5:
                shown = now
                progress(now - begin)
    finally:
        if progress is not None:
            progress(None)
    if "error" in outcome:
        raise outcome["error"].with_traceback(outcome["error"].__traceback__)
    return outcome.get("value")


def fork() -> int:
    """`os.fork()` that loses no Ctrl-C or SIGTERM. Python runs a signal's
    handler in fork's own hooks, where its KeyboardInterrupt would be
    printed and dropped; here a signal that comes while forking is held,
    and then the child is killed and the interrupt raised. The child starts
    with both signals blocked (its parent ends it) and, on Linux, is killed
    when the thread that forked it ends, however that ends."""
    import warnings
    caught: list[int] = []
    interrupting = (signal.SIGINT, signal.SIGTERM)
    main = threading.current_thread() is threading.main_thread()
    previous = {}
    if main:
        previous = {s: signal.signal(s, lambda signum, frame:
                                     caught.append(signum))
                    for s in interrupting}
    unblocked = signal.pthread_sigmask(signal.SIG_BLOCK, interrupting)
    pid = -1
    try:
        with warnings.catch_warnings():
            # Python warns that a forked child of a threaded process may
            # deadlock; callers run only native work there, and exit.
            warnings.simplefilter("ignore", DeprecationWarning)
            warnings.simplefilter("ignore", RuntimeWarning)   # JAX's own
            pid = os.fork()
    finally:
        if pid != 0:
            signal.pthread_sigmask(signal.SIG_SETMASK, unblocked)
            for s, handler in previous.items():
                signal.signal(s, handler)
    if pid == 0:
        try:
            import ctypes
            ctypes.CDLL(None).prctl(1, signal.SIGKILL)   # PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            pass
        return 0
    if caught:
        handler = previous[caught[0]]
        if callable(handler) or handler == signal.SIG_DFL:
            # The handler may end the process (exit_now) or raise: the
            # child goes first either way.
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            if callable(handler):
                handler(caught[0], None)
            else:
                signal.raise_signal(caught[0])
            raise KeyboardInterrupt
    return pid


def _interrupted(signum, frame) -> None:
    if _STATE["unwinding"]:
        raise KeyboardInterrupt
    exit_now()


def install() -> tuple[dict[int, Any], bool]:
    """Ctrl-C and SIGTERM end the process at once with status 130 (see the
    module docstring); main thread only. A Ctrl-C the process was started
    to ignore (`nohup`, a background job) stays ignored. Returns what it
    replaced, for `restore`."""
    saved: dict[int, Any] = {}
    installed = _STATE["installed"]
    # Python finds its temporary directory once, by writing and removing a
    # probe file there: an interruption in between would leave the probe.
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, _INTERRUPTING)
    try:
        tempfile.gettempdir()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
    if threading.current_thread() is threading.main_thread():
        for s in _INTERRUPTING:
            if s != signal.SIGINT or signal.getsignal(s) != signal.SIG_IGN:
                saved[s] = signal.signal(s, _interrupted)
        _STATE["installed"] = True
    return saved, installed


def restore(saved: tuple[dict[int, Any], bool]) -> None:
    """Puts back what `install` replaced."""
    handlers, _STATE["installed"] = saved
    if threading.current_thread() is threading.main_thread():
        for s, handler in handlers.items():
            signal.signal(s, handler if handler is not None else signal.SIG_DFL)


class unwinding:
    """Inside the block, Ctrl-C and SIGTERM raise `KeyboardInterrupt` (for
    code that stops its children as the exception unwinds) instead of
    ending the process at once; outside it, as before."""

    def __enter__(self):
        self.handlers = {}
        if threading.current_thread() is threading.main_thread():
            for s in _INTERRUPTING:
                if signal.getsignal(s) != signal.SIG_IGN:
                    self.handlers[s] = signal.signal(s, _interrupted)
        _STATE["unwinding"] += 1
        return self

    def __exit__(self, *exc):
        _STATE["unwinding"] -= 1
        for s, handler in self.handlers.items():
            signal.signal(s, handler if handler is not None else signal.SIG_DFL)
        return False


def settle() -> None:
    """The command's result is written: from now on, where `install` made
    signals end the process, they are ignored, and the process ends as it
    would have (never an exit status of 130 beside a complete output)."""
    if _STATE["installed"] and threading.current_thread() is threading.main_thread():
        for s in _INTERRUPTING:
            signal.signal(s, signal.SIG_IGN)


class committing:
    """Signals held for the block (the renames that put output files in
    place), then delivered, or, with `settle` (the command's result is then
    complete), ignored from then on: an interrupted command leaves its
    outputs either all in place or none."""

    def __init__(self, settle: bool = True):
        self.settle = settle

    def __enter__(self):
        self.main = threading.current_thread() is threading.main_thread()
        if self.main:
            self.mask = signal.pthread_sigmask(signal.SIG_BLOCK, _INTERRUPTING)
        return self

    def __exit__(self, *exc):
        if self.main:
            if exc[0] is None and self.settle:
                settle()
            signal.pthread_sigmask(signal.SIG_SETMASK, self.mask)
        return False


def exit_now(message: str = "irshard: interrupted") -> None:
    """Stops the child processes, removes the temporary files and ends the
    process with status 130, without waiting for native work still running
    on other threads."""
    for s in _INTERRUPTING:
        with contextlib.suppress(ValueError, OSError):
            signal.signal(s, signal.SIG_IGN)
    with _LOCK:
        children = list(_CHILDREN)
    try:
        stop(children)
    except Exception:
        pass
    remove_all()
    try:
        if STDERR_COPIES:
            # Said on the terminal's own descriptor: native work still
            # running writes on in the capture it was given.
            sys.stderr.flush()
            os.write(STDERR_COPIES[0], (message + "\n").encode())
        else:
            print(message, file=sys.stderr)
            sys.stderr.flush()
    except Exception:
        pass
    os._exit(130)
