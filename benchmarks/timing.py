"""Timing whole processes, shared by the benchmark scripts."""

import subprocess
import time


def timed(command: list[str]) -> float:
    """Wall-clock seconds of one run of `command` (which must succeed)."""
    start = time.perf_counter()
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start
