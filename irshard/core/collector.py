"""Python's cyclic garbage collector, kept to the objects a call makes.

A full collection walks every object the process holds: JAX's, the
framework's, the user's model, irshard's own modules. While a step is
traced, such collections come often enough that irshard's modules alone
made JAX's trace of the Flax guide's step three times slower (0.04 s against
0.13 s, measured by `benchmarks/overhead.py`). During an irshard call,
`young_only()` moves what already exists out of the collector's sight
(`gc.freeze`) and hands it back when the call ends (`gc.unfreeze`): the
call's own garbage is collected as before, nothing that existed is kept
from a later collection.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import threading
from typing import Any, Callable, Iterator


# How many `young_only` blocks are open (over all threads), and whether
# the first of them froze: the outermost block freezes and unfreezes.
# Nested blocks (an irshard call inside another) never ask the collector how
# much is frozen: `gc.get_freeze_count` walks every frozen object (about
# 7 ms a call once JAX is imported).
_OPEN = {"blocks": 0, "froze": False}
_LOCK = threading.Lock()


@contextlib.contextmanager
def young_only() -> Iterator[None]:
    """Collections in the block look only at objects made in it; where
    the process froze objects itself, or turned the collector off, nothing
    changes."""
    with _LOCK:
        if _OPEN["blocks"] == 0:
            _OPEN["froze"] = gc.isenabled() and not gc.get_freeze_count()
            if _OPEN["froze"]:
                gc.freeze()
        _OPEN["blocks"] += 1
    try:
        yield
    finally:
        with _LOCK:
            _OPEN["blocks"] -= 1
            if _OPEN["blocks"] == 0 and _OPEN["froze"]:
                _OPEN["froze"] = False
                gc.unfreeze()


def sparing(fn: Callable[..., Any]) -> Callable[..., Any]:
    """`fn`, called under `young_only()`."""
    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        with young_only():
            return fn(*args, **kwargs)
    return call
