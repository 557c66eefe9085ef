"""Where a compile's time goes: named phases, timed when asked.

`benchmarks/overhead.py` enters `recording()` around an API call, and runs
the command with `IRSHARD_PHASES=FILE`, to read each phase's CPU and wall
time back; otherwise `phase(name)` costs one test of a global. A phase's
time is its own: a phase inside another (in the same thread) is taken out
of the outer one's.

CPU time is the process's (`time.process_time`): XLA's compile threads
count, as they count against the machine.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from typing import Iterator

# name -> [CPU seconds, wall seconds, calls]; None while nothing records.
_TIMES: dict[str, list[float]] | None = None
# Each thread's open phases, innermost last: [name, CPU start, wall start,
# CPU of inner phases, wall of inner phases].
_THREAD = threading.local()


@contextlib.contextmanager
def phase(name: str) -> Iterator[None]:
    """Times the block as phase `name` while something records."""
    if _TIMES is None:
        yield
        return
    entry = [name, time.process_time(), time.perf_counter(), 0.0, 0.0]
    opened = _THREAD.__dict__.setdefault("open", [])
    opened.append(entry)
    try:
        yield
    finally:
        opened.pop()
        cpu = time.process_time() - entry[1]
        wall = time.perf_counter() - entry[2]
        if opened:
            opened[-1][3] += cpu
            opened[-1][4] += wall
        if _TIMES is not None:
            spent = _TIMES.setdefault(name, [0.0, 0.0, 0])
            spent[0] += cpu - entry[3]
            spent[1] += wall - entry[4]
            spent[2] += 1


@contextlib.contextmanager
def recording() -> Iterator[dict[str, list[float]]]:
    """Records the phases run in the block: name -> [CPU s, wall s, calls]."""
    global _TIMES
    before, _TIMES = _TIMES, {}
    try:
        yield _TIMES
    finally:
        _TIMES = before


def record_from_environment() -> None:
    """With `IRSHARD_PHASES` set to a file name, records every phase of the
    process and writes them there at exit (one `name<TAB>cpu<TAB>wall`
    line each); with it set to 1, to stderr."""
    global _TIMES
    where = os.environ.get("IRSHARD_PHASES")
    if not where or _TIMES is not None:
        return
    _TIMES = {}
    import atexit
    atexit.register(_write, where, _TIMES)


def _write(where: str, times: dict[str, list[float]]) -> None:
    lines = "".join(f"{name}\t{cpu:.6f}\t{wall:.6f}\n"
                    for name, (cpu, wall, _) in times.items())
    if where == "1":
        sys.stderr.write(lines)
        return
    try:
        with open(where, "a", encoding="utf-8") as f:
            f.write(lines)
    except OSError as e:
        sys.stderr.write(f"irshard: warning: IRSHARD_PHASES: cannot write "
                         f"{where}: {e.strerror or e}\n")
