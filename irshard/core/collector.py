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
from typing import Any, Callable, Iterator


@contextlib.contextmanager
def young_only() -> Iterator[None]:
    """Collections in the block look only at objects made in it; where
    the process froze objects itself, or turned the collector off, nothing
    changes."""
    if gc.get_freeze_count() or not gc.isenabled():
        yield
        return
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def sparing(fn: Callable[..., Any]) -> Callable[..., Any]:
    """`fn`, called under `young_only()`."""
    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        with young_only():
            return fn(*args, **kwargs)
    return call
