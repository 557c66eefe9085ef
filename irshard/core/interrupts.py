"""Prompt interruption, and temporary files that never outlive a command.

Python delivers a signal to its handler only between bytecodes of the main
thread, so Ctrl-C during a long XLA compile (native code) would wait for the
compile to finish. `call` runs such work on a helper thread while the main
thread waits in short steps: the interrupt arrives at once. SIGTERM is turned
into the same `KeyboardInterrupt`. The command line then calls `exit_now`,
which removes every temporary directory made through `temp_dir` and ends the
process with status 130 without waiting for the native work.
"""

from __future__ import annotations

import os
import shutil
import signal
import sys
import tempfile
import threading
import time
from typing import Any, Callable

_TEMP_DIRS: set[str] = set()
_LOCK = threading.Lock()


def temp_dir(prefix: str = "irshard-", parent: str | None = None) -> str:
    """A new temporary directory (in `parent`, or the system's), removed by
    `remove` or on interruption."""
    path = tempfile.mkdtemp(prefix=prefix, dir=parent)
    with _LOCK:
        _TEMP_DIRS.add(path)
    return path


def remove(path: str) -> None:
    shutil.rmtree(path, ignore_errors=True)
    with _LOCK:
        _TEMP_DIRS.discard(path)


def remove_all() -> None:
    """Removes every temporary directory. Native work still running (an XLA
    dump after a pass) may recreate a directory while it is being removed,
    so removal repeats until each is gone."""
    with _LOCK:
        paths = list(_TEMP_DIRS)
    for _ in range(50):
        for path in paths:
            shutil.rmtree(path, ignore_errors=True)
        if not any(os.path.lexists(path) for path in paths):
            break
        time.sleep(0.01)
    with _LOCK:
        _TEMP_DIRS.difference_update(paths)


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
        try:
            if callable(handler):
                handler(caught[0], None)
            elif handler == signal.SIG_DFL:
                signal.raise_signal(caught[0])
        except BaseException:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            raise
    return pid


def _terminate(signum, frame) -> None:
    raise KeyboardInterrupt


def install() -> None:
    """SIGTERM interrupts like Ctrl-C (main thread only)."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _terminate)


def exit_now(message: str = "irshard: interrupted") -> None:
    """Removes the temporary files and ends the process with status 130,
    without waiting for native work still running on other threads."""
    remove_all()
    try:
        print(message, file=sys.stderr)
        sys.stderr.flush()
    except Exception:
        pass
    os._exit(130)
