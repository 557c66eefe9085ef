"""Work that waits on native code, spread over threads.

XLA compiles without holding Python's lock, so several compiles of one
process run side by side on threads. `each` runs a function over items on
up to `jobs` daemon threads (a thread still inside XLA when the process
ends does not hold it up) while the calling thread waits where Ctrl-C
still reaches it.
"""

from __future__ import annotations

import queue
import threading
from typing import Any, Callable, Mapping, TypeVar

K = TypeVar("K")


def each(fn: Callable[[Any], Any], items: Mapping[K, Any],
         jobs: int) -> dict[K, tuple[Any, BaseException | None]]:
    """`{key: (fn(item), None)}`, or `(None, the exception it raised)`,
    for each of `items`, in their order; `jobs` at once. With one job (or
    one item) everything runs on the calling thread, and an interruption
    ends it there."""
    if jobs <= 1 or len(items) <= 1:
        return {key: _called(fn, item) for key, item in items.items()}
    work: queue.SimpleQueue = queue.SimpleQueue()
    for key, item in items.items():
        work.put((key, item))
    done: dict[K, tuple[Any, BaseException | None]] = {}
    lock = threading.Lock()

    def worker() -> None:
        while True:
            try:
                key, item = work.get_nowait()
            except queue.Empty:
                return
            try:
                outcome = _called(fn, item)
            except BaseException as e:  # handed to the caller like the rest
                outcome = None, e
            with lock:
                done[key] = outcome

    workers = [threading.Thread(target=worker, name=f"irshard-job-{n}", daemon=True)
               for n in range(min(jobs, len(items)))]
    for thread in workers:
        thread.start()
    for thread in workers:
        while thread.is_alive():
            thread.join(0.05)       # a short wait: Ctrl-C is seen between them
    return {key: done[key] for key in items}


def _called(fn: Callable[[Any], Any], item: Any) -> tuple[Any, BaseException | None]:
    try:
        return fn(item), None
    except Exception as e:  # handed back to the caller, who decides
        return None, e


def job_count(jobs: int | str | None, most: int = 4) -> int:
    """`--jobs` as a number: itself, or for `auto` (None) one per core, at
    most `most`."""
    import os
    if jobs is None or jobs == "auto":
        return max(1, min(most, os.cpu_count() or 1))
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
        from irshard.core.errors import UsageError
        raise UsageError(f"jobs: expected a positive whole number or 'auto', "
                         f"not {jobs!r}")
    return jobs
