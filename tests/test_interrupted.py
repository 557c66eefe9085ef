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
from irshard.backend import passrunner
def slow(operation, pipeline):
    open(os.environ["STARTED"], "w").close()
    time.sleep(60)
passrunner.run_pipeline = slow
"""


def _children(pid: int) -> list[int]:
    found = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except FileNotFoundError:
        return found            # it ended
    for task in tasks:
        try:
            with open(f"/proc/{pid}/task/{task}/children") as f:
                found += [int(c) for c in f.read().split()]
        except (FileNotFoundError, ProcessLookupError):
            pass                # a thread that ended since it was listed
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


# The command a start-up sweep interrupts: JAX's import and initialization,
# the user's file, tracing, XLA's compile, the report and its output file.
SWEPT = ["compile", HEAT, "--fn", "simulate_set", "--mesh", "x=4"]
# The program as installed (`irshard`), with SIGINT at its default.
PROGRAM = """
import signal, sys
signal.signal(signal.SIGINT, signal.default_int_handler)
sys.argv[1:] = sys.argv[2:]
from irshard.__main__ import main
sys.exit(main())
"""


def _launch(tmp_path, argv, name="run"):
    """The program running `argv`, once it has taken over SIGTERM (before
    that, the interpreter is still starting: Python's own handlers apply)."""
    temp = tmp_path / f"tmp-{name}"
    temp.mkdir()
    env = dict(os.environ, TMPDIR=str(temp))
    proc = subprocess.Popen([sys.executable, "-c", PROGRAM, "", *argv],
                            env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not _catches(proc.pid, signal.SIGTERM):
        assert proc.poll() is None and time.monotonic() < deadline
        time.sleep(0.002)
    return proc, temp


def _catches(pid: int, sig: int) -> bool:
    try:
        with open(f"/proc/{pid}/status") as f:
            caught = next(line for line in f if line.startswith("SigCgt:"))
    except (FileNotFoundError, StopIteration):
        return False
    return bool(int(caught.split()[1], 16) >> (sig - 1) & 1)


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc")
def test_an_interrupt_at_any_moment_ends_in_130_with_no_output(tmp_path):
    """Swept over the whole command, start-up included: once, a signal
    during jaxlib's initialization crashed it (SIGSEGV, SIGABRT), one in an
    import became the program's ImportError (exit 2, a traceback), one in
    JAX's garbage-collection callback was dropped ("Exception ignored") and
    the command went on to write its output, and one after the output was
    written killed the process (-2). Now each ends in 130, with one line,
    no output file and no temporary file; or, where it came after the
    command was done, in 0 with the whole output."""
    whole = tmp_path / "whole.txt"
    proc, _ = _launch(tmp_path, [*SWEPT, "-o", str(whole)])
    started = time.monotonic()
    _, err = proc.communicate(timeout=300)
    took = time.monotonic() - started
    assert proc.returncode == 0, err
    expected = whole.read_text()
    outcomes = []
    # Sixteen moments through the run `took` timed, then four after it,
    # spread to three times as long: a loaded machine (CI's two workers)
    # can make a later run slower than the timed one.
    moments = [took * k / 16 for k in range(16)] + [took * f for f in (1.25, 1.5, 2, 3)]
    for k, at in enumerate(moments):
        sig = (signal.SIGINT, signal.SIGTERM)[k % 2]
        out = tmp_path / f"out-{k}.txt"
        proc, temp = _launch(tmp_path, [*SWEPT, "-o", str(out)], str(k))
        time.sleep(at)
        proc.send_signal(sig)
        sent = time.monotonic()
        _, err = proc.communicate(timeout=120)
        waited = time.monotonic() - sent
        outcomes.append((round(at, 2), sig.name, proc.returncode))
        assert "Traceback" not in err and "ignored" not in err, (at, err)
        assert waited < 5, (at, waited)
        if proc.returncode == 130:
            assert err.strip() == "irshard: interrupted", (at, err)
            assert not out.exists(), at
        else:
            assert proc.returncode == 0, (at, sig, proc.returncode, err)
            assert out.read_text() == expected
        assert os.listdir(temp) == [], at
        assert not [f for f in os.listdir(tmp_path) if f.startswith(".irshard-")]
    # The sweep reached both: interrupted work, and a finished command.
    codes = [code for *_, code in outcomes]
    assert codes.count(130) >= 8 and 0 in codes, outcomes


@pytest.mark.multiprocess
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc")
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM],
                         ids=["SIGINT", "SIGTERM"])
def test_suggest_with_jobs_stops_its_compiles_at_once(tmp_path, sig):
    """`suggest --jobs 2` once took 15-19 s to exit after a signal: its
    threads waited for their `irshard compile` processes to finish. Now the
    signal stops them (only the parent is signalled here, as `kill` would)
    and the command exits 130 within a moment, leaving no process."""
    from tests.test_explain import REMAT
    path = tmp_path / "remat.py"
    path.write_text(REMAT)
    proc, temp = _launch(tmp_path, ["suggest", str(path), "--mesh", "x=4,y=2",
                                    "--jobs", "2", "--format", "json"])
    deadline = time.monotonic() + 120
    while not _children(proc.pid):
        assert proc.poll() is None and time.monotonic() < deadline, \
            proc.communicate()[1]
        time.sleep(0.02)
    children = _children(proc.pid)
    time.sleep(0.3)            # the candidates' processes are starting JAX
    proc.send_signal(sig)
    sent = time.monotonic()
    out, err = proc.communicate(timeout=60)
    assert time.monotonic() - sent < 3
    assert proc.returncode == 130, err
    assert err.strip() == "irshard: interrupted"
    assert out == ""
    assert not any(_alive(child) for child in children)
    assert os.listdir(temp) == []


# Threads that create temporary directories and files as fast as they can,
# and the main thread's own, when the signal comes (SIGINT at its default,
# as in `LAUNCHER`).
CREATING = """
import os, signal, sys, threading
signal.signal(signal.SIGINT, signal.default_int_handler)
from irshard.core import files, interrupts
interrupts.install()
def churn():
    while True:
        path = interrupts.temp_dir()
        fd, name = files.new_beside(path)
        os.close(fd)
        interrupts.forget_file(name)
        interrupts.remove(path)
for _ in range(3):
    threading.Thread(target=churn, daemon=True).start()
os.write(1, b"ready\\n")
churn()
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="signals")
def test_a_temporary_directory_is_never_left_by_an_interrupt(tmp_path):
    """A directory made with `mkdtemp` and registered after it was left
    behind when the signal came between the two, or when another thread
    made it while the handler removed what was registered. Now its name is
    registered first and creation waits once removal has begun."""
    for k in range(12):
        temp = tmp_path / f"tmp-{k}"
        temp.mkdir()
        proc = subprocess.Popen([sys.executable, "-c", CREATING],
                                env=dict(os.environ, TMPDIR=str(temp)),
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        assert proc.stdout.readline() == b"ready\n"
        time.sleep(0.01 * k)
        proc.send_signal((signal.SIGINT, signal.SIGTERM)[k % 2])
        try:
            _, err = proc.communicate(timeout=30)
        finally:
            # One that did not stop is not left running (and churning).
            proc.kill()
            proc.wait()
        assert proc.returncode == 130, err
        assert os.listdir(temp) == [], k


def test_a_removed_dump_folder_stays_removed_while_xla_compiles_on(monkeypatch):
    """An interruption removes XLA's dump folder while XLA goes on
    compiling, writing each kernel's IR from several threads. Once, XLA
    wrote the folder back after the removal, and it was left behind (the
    sweep above found it). Here the folder is removed as an interruption
    removes it, once XLA has written its first kernel, and must still be
    gone when the compile is done."""
    import random
    import threading

    import jax.numpy as jnp

    import irshard
    from irshard.core import interrupts

    removed, came_back = {}, []
    temp_dir, remove = interrupts.temp_dir, interrupts.remove

    def removed_while_compiling(prefix="irshard-", parent=None):
        path = temp_dir(prefix, parent)
        removed[path] = threading.Event()

        def interrupt():
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and not any(
                    name.endswith(".ll") for name in os.listdir(path)):
                time.sleep(0.001)
            try:
                interrupts.remove_all()     # as `exit_now` does
            finally:
                with interrupts._LOCK:
                    interrupts._STATE["closing"] = False
                removed[path].set()
        threading.Thread(target=interrupt, daemon=True).start()
        return path

    def removed_after_compiling(path):
        if path in removed:
            removed[path].wait(60)
            came_back.append(os.path.lexists(path))
        remove(path)

    monkeypatch.setattr(interrupts, "temp_dir", removed_while_compiling)
    monkeypatch.setattr(interrupts, "remove", removed_after_compiling)
    salt = random.random()      # never a cached executable

    def step(x):
        for i in range(40):     # a kernel each, dumped as XLA builds it
            x = jnp.sin(x @ x.T) + (i + salt)
        return x

    irshard.compile(step, jnp.ones((64, 64)), mesh="x=2")
    assert came_back == [False]


TWO_CONSTRAINTS = '''\
import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P


def step(x, y, w):
    h = jax.lax.with_sharding_constraint(jnp.tanh(x @ w), P(None, "x"))
    g = jax.lax.with_sharding_constraint(jnp.tanh(y @ w), P(None, "x"))
    return jnp.where(h > 0, h, 0.1 * h), jnp.where(g > 0, g, 0.1 * g)


def args():
    return jnp.ones((256, 512)), jnp.ones((256, 512)), jnp.ones((512, 1024))
'''


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc")
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM],
                         ids=["SIGINT", "SIGTERM"])
def test_an_interrupt_while_recompiles_run_at_once(tmp_path, sig):
    """`--verify --jobs 2`: a signal while two recompiles are in XLA (two
    of their dump folders at once) ends the command in 130 at once, the
    threads still compiling left behind with the process, their folders
    removed."""
    program = tmp_path / "two.py"
    program.write_text(TWO_CONSTRAINTS)
    out = tmp_path / "out.txt"
    proc, temp = _launch(tmp_path, ["compile", str(program), "--fn", "step",
                                    "--args", "args", "--mesh", "x=4",
                                    "--shard", "x=x,_", "--shard", "y=x,_",
                                    "--verify", "--jobs", "2", "-o", str(out)])
    deadline = time.monotonic() + 120
    while len(os.listdir(temp)) < 2:
        assert proc.poll() is None and time.monotonic() < deadline, \
            proc.communicate()[1]
        time.sleep(0.002)
    start = time.monotonic()
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    assert time.monotonic() - start < 5
    assert proc.returncode == 130, err
    assert err.strip() == "irshard: interrupted"
    assert not out.exists()
    assert os.listdir(temp) == []
