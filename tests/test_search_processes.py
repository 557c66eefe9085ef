"""`irshard search` compiles each candidate in a process of its own, one
at a time as well as several: a candidate that crashes is that candidate's
failure, one that hangs is stopped at the budget, and a search whose every
candidate fails is that failure's error line."""

import json
import os
import subprocess
import sys
import time

import pytest

from tests.conftest import run_irshard

# Candidates crash or hang by their mesh; the search itself (no --mesh)
# traces the program as usual. The candidates come in the order data, fsdp,
# tensor.
CRASHY = """
import ctypes
import sys
import time

import jax.numpy as jnp


def _mesh():
    return sys.argv[sys.argv.index("--mesh") + 1] if "--mesh" in sys.argv else ""


def step(w: "f32[64,64]", x: "f32[16,64]"):
    if _mesh().startswith("fsdp="):
        ctypes.string_at(0)
    if _mesh().startswith("tensor="):
        time.sleep(600)
    return jnp.tanh(x @ w).sum()
"""

BROKEN = """
import sys

import jax.numpy as jnp


def step(w: "f32[64,64]", x: "f32[16,64]"):
    if "--mesh" in sys.argv:
        raise ValueError("the program's own mistake")
    return jnp.tanh(x @ w).sum()
"""

SEGFAULT = """
import ctypes
import sys

import jax.numpy as jnp


def step(w: "f32[64,64]", x: "f32[16,64]"):
    if "--mesh" in sys.argv:
        ctypes.string_at(0)
    return jnp.tanh(x @ w).sum()
"""


@pytest.mark.multiprocess
def test_a_crash_fails_its_candidate_and_a_hang_ends_at_the_budget(write, tmp_path):
    """Once exit 139 with no word (the crash), and a search that never
    ended (the hang), with --jobs 1."""
    path = write("crashy.py", CRASHY)
    temp = tmp_path / "tmp"
    temp.mkdir()
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "irshard", "search", path, "--devices", "2",
         "--jobs", "1", "--no-cache", "--budget-time", "10s", "--format", "json"],
        capture_output=True, text=True, env=dict(os.environ, TMPDIR=str(temp)))
    assert done.returncode == 0, done.stderr
    assert time.monotonic() - started < 40
    data = json.loads(done.stdout)
    status = {c["mesh"][0]["name"]: (c["status"], c.get("reason"))
              for c in data["candidates"]}
    assert status["data"] == ("ok", None)
    assert status["fsdp"] == ("failed", "the compile crashed (SIGSEGV)")
    assert status["tensor"] == ("skipped", "the time budget ran out")
    assert data["winner"]["mesh"] == [{"name": "data", "size": 2}]
    assert os.listdir(temp) == []


def test_every_candidate_failing_is_the_programs_error(write):
    """Once exit 0 and "3 candidates compiled", each failed."""
    path = write("broken.py", BROKEN)
    done = run_irshard("search", path, "--devices", "2", "--no-cache")
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.strip().splitlines() == [
        "irshard: error: search: every candidate failed to compile (3 tried): "
        f"{path}:9: in step: ValueError: the program's "
        "own mistake"]


def test_every_candidate_crashing_is_an_error_of_irshard(write):
    done = run_irshard("search", write("segv.py", SEGFAULT), "--devices", "2",
                       "--no-cache")
    assert done.returncode == 3
    assert done.stderr.strip().splitlines() == [
        "irshard: error: search: every candidate failed to compile (3 tried): "
        "the compile crashed (SIGSEGV)"]

