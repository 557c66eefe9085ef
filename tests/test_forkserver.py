"""A search's candidates are forked from a warm server
(`irshard.forkserver`, `irshard.strategy.forking`): each is still a
process of its own that looks, to irshard and to the program, like
`python -m irshard compile ...` started afresh, sees nothing of another
candidate, and never outlives the server."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from irshard.strategy import forking
from tests.conftest import gone, run_irshard

pytestmark = pytest.mark.skipif(not forking.available(), reason="Linux only")

# Writes what a process looks like from inside, at the program's import,
# into FACTS (a file named by the environment), and counts how often its
# helper module was imported in this process.
PROGRAM = """
import json, os, signal, sys, tempfile, threading

import jax
import jax.numpy as jnp

import helper

helper.IMPORTS[0] += 1
main = sys.modules["__main__"]
facts = {
    "argv0": sys.argv[0], "argv": sys.argv[1:], "cwd": os.getcwd(),
    "path0": sys.path[0], "main": main.__spec__.name if main.__spec__ else None,
    "tmpdir": os.environ.get("TMPDIR"), "gettempdir": tempfile.gettempdir(),
    "stdin": os.path.realpath(f"/proc/self/fd/0"),
    "sigint": getattr(signal.getsignal(signal.SIGINT), "__qualname__", None),
    "sigterm": getattr(signal.getsignal(signal.SIGTERM), "__qualname__", None),
    "threads": threading.active_count(), "imports": helper.IMPORTS[0],
    "x64": bool(jax.config.jax_enable_x64),
}
jax.config.update("jax_enable_x64", True)
with open(os.environ["FACTS"], "a") as f:
    f.write(json.dumps(facts) + "\\n")
if os.environ.get("SLEEP"):
    import time
    time.sleep(float(os.environ["SLEEP"]))


def step(w: "f32[64,64]", x: "f32[16@x,64]"):
    return jnp.tanh(x @ w).sum()
"""


@pytest.fixture
def program(tmp_path, monkeypatch):
    (tmp_path / "helper.py").write_text("IMPORTS = [0]\n")
    path = tmp_path / "program.py"
    path.write_text(PROGRAM)
    facts = tmp_path / "facts.jsonl"
    monkeypatch.setenv("FACTS", str(facts))
    monkeypatch.chdir(tmp_path)
    return str(path), facts


def _files(tmp_path, name):
    folder = tmp_path / name
    folder.mkdir()
    out, err = folder / "stdout", folder / "stderr"
    out.touch()
    err.touch()
    return folder, str(out), str(err)


def _forked(server, argv, tmp_path, name):
    folder, out, err = _files(tmp_path, name)
    handle = server.start(argv, dict(os.environ, TMPDIR=str(folder)), out, err)
    assert handle is not None
    code = handle.wait(120)
    return code, open(out).read(), open(err).read()


def _sleeping(server, tmp_path):
    """A forked compile whose program sleeps at its import (SLEEP), once
    forked: its handle, pid, temporary folder and stderr's path."""
    folder, out, err = _files(tmp_path, "sleeping")
    handle = server.start(ARGV, dict(os.environ, TMPDIR=str(folder)), out, err)
    deadline = time.monotonic() + 60
    while handle.pid is None:
        assert time.monotonic() < deadline and handle.returncode is None, handle.error
        time.sleep(0.01)
    return handle, handle.pid, folder, err


ARGV = ["compile", "program.py", "--fn", "step", "--mesh", "x=2", "--format", "json"]


def test_a_forked_compile_is_a_fresh_one(program, tmp_path):
    """The same command forked from the server and started afresh: the
    same report, and the program sees the same process (arguments,
    directories, streams, signal handlers, threads, JAX's config)."""
    _, facts = program
    server = forking.Server()
    try:
        code, out, err = _forked(server, ARGV, tmp_path, "forked")
    finally:
        server.close()
    assert code == 0, err
    folder, _, _ = _files(tmp_path, "fresh")
    fresh = subprocess.run([sys.executable, "-m", "irshard", *ARGV], capture_output=True,
                           text=True, env=dict(os.environ, TMPDIR=str(folder)),
                           stdin=subprocess.DEVNULL)
    assert fresh.returncode == 0, fresh.stderr
    assert json.loads(out) == json.loads(fresh.stdout)
    assert err == fresh.stderr
    forked_facts, fresh_facts = [json.loads(line) for line in facts.read_text().splitlines()]
    for name in ("tmpdir", "gettempdir"):
        assert forked_facts.pop(name) == str(tmp_path / "forked")
        assert fresh_facts.pop(name) == str(tmp_path / "fresh")
    assert forked_facts == fresh_facts
    assert forked_facts["main"] == "irshard.__main__"
    assert forked_facts["cwd"] == forked_facts["path0"] == str(tmp_path)
    assert forked_facts["stdin"] == os.devnull
    assert forked_facts["imports"] == 1 and forked_facts["x64"] is False


def test_no_candidate_sees_anothers_state(program, tmp_path):
    """Each forked command imports the program and its helper anew, with
    JAX's config as the server left it: the first one's changes (a
    module's counter, `jax_enable_x64`, its mesh's devices) do not reach
    the second."""
    _, facts = program
    server = forking.Server()
    try:
        for i, mesh in enumerate(("x=4", "x=2")):
            argv = [*ARGV[:4], "--mesh", mesh, "--format", "json"]
            code, out, err = _forked(server, argv, tmp_path, f"run{i}")
            assert code == 0, err
            assert json.loads(out)["mesh"]["devices"] == int(mesh[2:])
    finally:
        server.close()
    first, second = [json.loads(line) for line in facts.read_text().splitlines()]
    assert first["imports"] == second["imports"] == 1
    assert first["x64"] is second["x64"] is False


def test_another_environment_is_not_forked(program, tmp_path):
    """JAX reads its environment when imported: a command asked for with
    another environment than the server's (beyond its TMPDIR) is left to
    the caller to start afresh."""
    server = forking.Server()
    try:
        folder, out, err = _files(tmp_path, "other")
        env = dict(os.environ, TMPDIR=str(folder), JAX_ENABLE_X64="1")
        assert server.start(ARGV, env, out, err) is None
    finally:
        server.close()


def test_a_terminated_compile_cleans_up_and_says_so(program, tmp_path, monkeypatch):
    """SIGTERM to a forked compile ends it as it ends a fresh one: status
    130, 'irshard: interrupted', its temporary files removed."""
    monkeypatch.setenv("SLEEP", "120")
    server = forking.Server()
    try:
        handle, pid, folder, err = _sleeping(server, tmp_path)
        while not os.path.exists(os.environ["FACTS"]):
            assert handle.poll() is None, open(err).read()
            time.sleep(0.05)
        handle.terminate()
        assert handle.wait(30) == 130
        assert open(err).read().strip().endswith("irshard: interrupted")
        assert gone(pid)
        assert sorted(os.listdir(folder)) == ["stderr", "stdout"]
    finally:
        server.close()


@pytest.mark.parametrize("how", ["closed", "killed"])
def test_no_compile_outlives_its_server(program, tmp_path, monkeypatch, how):
    """The server's stdin closed (its user is done, or died) stops what
    it runs; the server killed outright takes its children with it."""
    monkeypatch.setenv("SLEEP", "120")
    server = forking.Server()
    try:
        handle, pid, folder, err = _sleeping(server, tmp_path)
        if how == "killed":
            server.proc.send_signal(signal.SIGKILL)
    finally:
        started = time.monotonic()
        server.close()
    assert time.monotonic() - started < 10
    assert handle.wait(10) is not None
    deadline = time.monotonic() + 10
    while not gone(pid):
        assert time.monotonic() < deadline, "the compile outlived its server"
        time.sleep(0.05)
    assert server.start(ARGV, dict(os.environ), err, err) is None


def test_a_search_is_the_same_without_the_server(tmp_path):
    """`IRSHARD_FORK_SERVER=0` starts each candidate afresh: the search's
    report is the same, byte for byte."""
    path = tmp_path / "tiny.py"
    path.write_text("import jax.numpy as jnp\n\n\n"
                    "def step(w: 'f32[64,64]', x: 'f32[16,64]'):\n"
                    "    return jnp.tanh(x @ w).sum()\n")
    argv = ["search", str(path), "--devices", "2", "--no-cache", "--format", "json"]
    forked = run_irshard(*argv)
    assert forked.returncode == 0, forked.stderr
    fresh = subprocess.run([sys.executable, "-m", "irshard", *argv], capture_output=True,
                           text=True, env=dict(os.environ, IRSHARD_FORK_SERVER="0"))
    assert fresh.returncode == 0, fresh.stderr
    assert json.loads(forked.stdout)["compiled"] >= 3
    assert forked.stdout == fresh.stdout


def test_a_candidate_the_server_never_forked_is_started_afresh(tmp_path, monkeypatch):
    """The server dying after it was asked for a candidate, before it
    forked it: the candidate is compiled in a fresh process, not failed."""
    from irshard.strategy import compilers
    from irshard.reporting.report import CollectiveReport
    path = tmp_path / "tiny.py"
    path.write_text("import jax.numpy as jnp\n\n\n"
                    "def step(x: 'f32[16@x,64]'):\n    return jnp.tanh(x).sum()\n")
    asked = []
    start = forking.Server.start

    def start_then_die(self, *args):
        handle = start(self, *args)
        asked.append(handle)
        self.proc.kill()        # still importing: it never forks it
        return handle

    monkeypatch.setattr(forking.Server, "start", start_then_die)
    compiler = compilers.Processes([str(path), "--fn", "step"], 1)
    try:
        [result] = compiler.compile_all([(None, ["--mesh", "x=2"])])
    finally:
        compiler.close()
    assert asked and asked[0] is not None and asked[0].pid is None
    assert asked[0].error == "the fork server ended before it started the compile"
    assert isinstance(result, CollectiveReport), result
    assert result.mesh.num_devices == 2
