"""Ctrl-C and SIGTERM end every command with status 130, promptly, with no
child process and no temporary file left: also while work runs in a child
process (the Shardy pass forked for every `--explain` and page, the
candidates of a search)."""

import os
import signal
import subprocess
import sys
import time

import pytest

from tests.conftest import EXAMPLES

HEAT = os.path.join(EXAMPLES, "heat1d.py")

# Runs irshard's command line with SIGINT at its default (a suite started in
# the background inherits it ignored), after the `SETUP` code in argv[1].
LAUNCHER = """
import os, signal, sys, time
signal.signal(signal.SIGINT, signal.default_int_handler)
exec(sys.argv[1])
from irshard import cli
sys.exit(cli.main(sys.argv[2:]))
"""

# A signal that arrives while the process forks: Python runs its handler in
# fork's own hooks, where an exception is printed and dropped.
DURING_FORK = """
fired = []
def hook():
    if not fired:
        fired.append(1)
        os.kill(os.getpid(), signal.{sig})
os.register_at_fork(after_in_parent=hook)
"""

# The forked pass takes its time, and says when it has started.
SLOW_CHILD = """
from irshard.backend import lowering
def slow(operation, pipeline):
    open(os.environ["STARTED"], "w").close()
    time.sleep(60)
lowering.run_pipeline = slow
"""


def _children(pid: int) -> list[int]:
    found = []
    for task in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{task}/children") as f:
            found += [int(c) for c in f.read().split()]
    return found


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _start(tmp_path, setup: str):
    temp = tmp_path / "tmp"
    temp.mkdir()
    env = dict(os.environ, TMPDIR=str(temp), STARTED=str(tmp_path / "started"))
    proc = subprocess.Popen(
        [sys.executable, "-c", LAUNCHER, setup, "compile", HEAT, "--fn",
         "simulate_set", "--mesh", "x=4", "--explain"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return proc, temp


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc")
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM],
                         ids=["SIGINT", "SIGTERM"])
def test_an_interrupt_while_the_pass_forks(tmp_path, sig):
    """Once dropped in fork's hooks ("Exception ignored in _releaseLock"),
    and the command went on to exit 0."""
    proc, temp = _start(tmp_path, DURING_FORK.format(sig=sig.name))
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert err.strip() == "irshard: interrupted"
    assert out == ""
    assert os.listdir(temp) == []


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc")
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM],
                         ids=["SIGINT", "SIGTERM"])
def test_an_interrupt_while_the_forked_pass_runs(tmp_path, sig):
    """The parent ends its child and exits 130 at once; Ctrl-C reaches the
    whole process group, the child included, and changes nothing."""
    proc, temp = _start(tmp_path, SLOW_CHILD)
    deadline = time.monotonic() + 120
    while not (tmp_path / "started").exists():
        assert proc.poll() is None and time.monotonic() < deadline, \
            proc.communicate()[1]
        time.sleep(0.05)
    children = _children(proc.pid)
    assert children, "the pass did not run in a child"
    start = time.monotonic()
    proc.send_signal(sig)
    if sig == signal.SIGINT:
        for child in children:
            try:
                os.kill(child, sig)
            except ProcessLookupError:
                pass            # the parent ended it first
    out, err = proc.communicate(timeout=60)
    assert time.monotonic() - start < 5
    assert proc.returncode == 130, err
    assert err.strip() == "irshard: interrupted"
    assert not any(_alive(child) for child in children)
    assert os.listdir(temp) == []
