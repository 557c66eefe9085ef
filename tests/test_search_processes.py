"""`irshard search` compiles each candidate in a process of its own, one
at a time as well as several: a candidate that crashes is that candidate's
failure, one that hangs is stopped at the budget, and a search whose every
candidate fails is that failure's error line."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from tests.conftest import gone, run_irshard

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
    assert status["tensor"] == ("not reached", "the time budget ran out")
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


def _descendants(pid: int) -> list[int]:
    found = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except FileNotFoundError:
        return found            # it ended since it was listed
    for task in tasks:
        try:
            with open(f"/proc/{pid}/task/{task}/children") as f:
                children = f.read().split()
        except (FileNotFoundError, ProcessLookupError):
            continue            # a thread that ended since it was listed
        for child in children:
            found += [int(child), *_descendants(int(child))]
    return found


def _compiles(pid: int) -> list[int]:
    """The `irshard compile` processes that the search `pid` runs: started
    afresh (their command line says so) or forked from the fork server
    (named `irshard-compile`)."""
    found = []
    for child in _descendants(pid):
        try:
            with open(f"/proc/{child}/cmdline", "rb") as f:
                fresh = b"\0compile\0" in f.read()
            with open(f"/proc/{child}/comm", "rb") as f:
                forked = f.read().strip() == b"irshard-compile"
        except FileNotFoundError:
            continue
        if fresh or forked:
            found.append(child)
    return found


SLOW = """
import jax.numpy as jnp


def step(x: "bf16[256,256]"):
    for i in range(300):
        x = jnp.tanh(x @ x.T + i)
    return x
"""


@pytest.mark.multiprocess
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc")
def test_an_interrupted_search_leaves_no_process_and_no_temporary_file(write, tmp_path):
    """SIGTERM to the search alone, while its --jobs 2 compiles write their
    temporary files: they once were killed before they could remove them
    (9 runs of 9 left some)."""
    path = write("slow.py", SLOW)
    temp = tmp_path / "tmp"
    temp.mkdir()
    proc = subprocess.Popen(
        [sys.executable, "-m", "irshard", "search", path, "--devices", "2",
         "--jobs", "2", "--no-cache"], stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, env=dict(os.environ, TMPDIR=str(temp)))
    deadline = time.monotonic() + 120
    while len(_compiles(proc.pid)) < 2 \
            or sum(len(files) for _, _, files in os.walk(temp)) == 0:
        assert proc.poll() is None and time.monotonic() < deadline, \
            proc.communicate()
        time.sleep(0.05)
    time.sleep(0.5)
    compiles = _descendants(proc.pid)
    assert sum(len(files) for _, _, files in os.walk(temp)), "the compiles ended"
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert err.strip().endswith("irshard: interrupted")
    assert all(gone(pid) for pid in compiles)
    assert os.listdir(temp) == []


def test_a_program_named_like_an_option(tmp_path):
    """`irshard search -- -x.py`: its compiles once took the name for an
    option, and every candidate failed."""
    (tmp_path / "-x.py").write_text(
        "import jax.numpy as jnp\n\n\ndef step(w: 'f32[64,64]', x: 'f32[16,64]'):\n"
        "    return jnp.tanh(x @ w).sum()\n")
    done = run_irshard("search", "--devices", "2", "--jobs", "2", "--no-cache",
                       "--format", "json", "--", "-x.py", cwd=str(tmp_path))
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert data["winner"] is not None
    assert data["compiled"] >= 3
    assert all(c["status"] == "ok" for c in data["candidates"]
               if c["strategy"] in ("DP", "FSDP"))
    # What reproduces a candidate names it as the program too.
    assert data["command"][0] == os.path.join(".", "-x.py")


def test_no_constraint_is_proposed_for_a_scalar(write):
    """`reduce@tiny.py:5=` was proposed for the sum to a scalar: it does not
    parse, and the candidate failed."""
    path = write("tiny.py", "import jax.numpy as jnp\n\n\n"
                 "def step(w: 'f32[64,64]', x: 'f32[16,64]'):\n"
                 "    return jnp.tanh(x @ w).sum()\n")
    done = run_irshard("search", path, "--devices", "2", "--no-cache",
                       "--format", "json")
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert data["compiled"] >= 3
    assert [c for c in data["candidates"] if c["status"] == "failed"] == []
    assert all(spec for c in data["candidates"]
               for _, spec in c.get("constraints", []))
