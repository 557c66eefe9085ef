"""`--launcher ray`: the processes of a run as Ray tasks.

Every Ray instance here is local, on 127.0.0.1 only, with usage statistics
and the dashboard off.
"""

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from irshard.running import distributed
from tests.conftest import EXAMPLES, ROOT, interruptible, require
from tests.test_distributed import _checksums, _survivors

# One Ray cluster at a time: under pytest-xdist these run on one worker
# (`make test` runs the multiprocess tests in one process anyway).
pytestmark = [pytest.mark.multiprocess, pytest.mark.xdist_group("ray")]



@pytest.fixture(autouse=True)
def _ray_installed():
    require("ray", "the Ray launcher")


# A Ray instance these tests start themselves, and anything it spawns: the
# same loopback-only settings irshard uses for its own local instance.
LOCAL = {"RAY_USAGE_STATS_ENABLED": "0", "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}


def _irshard(*args, env=None, timeout=300, cwd=None):
    return subprocess.run([sys.executable, "-m", "irshard", *args],
                          capture_output=True, text=True, env=env,
                          timeout=timeout, cwd=cwd)


@pytest.fixture
def short_tmp():
    """A temporary directory with a short path, as Ray's sockets need (a
    long $TMPDIR makes irshard keep Ray's files under /tmp instead)."""
    import shutil
    import tempfile
    path = tempfile.mkdtemp(prefix="irs-", dir="/tmp")
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _environment(tmp_path, temp, **extra):
    """A home and a temporary directory of the test's own, to see what a
    run leaves behind."""
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    return dict(os.environ, HOME=str(home), TMPDIR=temp, **extra)


def _ray_processes() -> set[str]:
    """Every process of Ray's on this machine: workers, raylets, GCS."""
    found = set()
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmdline = f.read().replace(b"\0", b" ").decode(errors="replace")
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    continue             # already dead, not yet reaped
        except OSError:
            continue
        if cmdline.startswith("ray::") or "/ray/core/src/ray/" in cmdline \
                or "ray/dashboard/agent.py" in cmdline \
                or "ray/_private/runtime_env/agent" in cmdline:
            found.add(f"{pid}: {cmdline[:120]}")
    return found


def _with_descendants(pids: set[int]) -> set[int]:
    """`pids` and every process below them."""
    parent = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    parent[int(entry)] = int(f.read().rsplit(")", 1)[1].split()[1])
            except OSError:
                continue
    found = set(pids)
    while True:
        more = {p for p, pp in parent.items() if pp in found} - found
        if not more:
            return found
        found |= more


def _left_behind(before: set[str], marker: str | None = None) -> list[str]:
    """Ray processes that were not running before, and processes whose
    command line names `marker`; given a moment to finish exiting (up to
    15 s: Ray's own processes exit slowly on a machine busy with other
    tests)."""
    for _ in range(60):
        left = sorted(_ray_processes() - before)
        if marker:
            left += _survivors(marker)
        if not left:
            return []
        time.sleep(0.25)
    return left


@pytest.mark.parametrize("args", [
    ["heat1d.py", "--fn", "simulate_roll", "--mesh", "x=4"],
    ["mlp.py", "--grad", "--mesh", "dp=2,tp=2"],
], ids=["heat", "mlp-grad"])
def test_two_ray_tasks_match_one_process(args, tmp_path, short_tmp):
    """Paths are the launcher's: FILE relative to its directory, `-o`
    written by it."""
    import shutil
    work = tmp_path / "work"
    work.mkdir()
    shutil.copy(os.path.join(EXAMPLES, args[0]), work)
    env = _environment(tmp_path, short_tmp)
    before = _ray_processes()
    single = _irshard("run", *args, "--check", "--format", "json", env=env,
                      cwd=work)
    assert single.returncode == 0, single.stderr
    result = _irshard("run", *args, "--check", "--format", "json",
                      "--processes", "2", "--launcher", "ray", "-o", "r.json",
                      env=env, cwd=work)
    assert result.returncode == 0, result.stderr
    assert result.stdout == result.stderr == ""
    one = json.loads(single.stdout)
    two = json.loads((work / "r.json").read_text())
    assert two["run"]["processes"] == 2
    assert _checksums(two) == _checksums(one)
    assert all(_checksums(two)[2])
    processes = {p["process"] for t in two["run"]["inputs"] for p in t["layout"]}
    assert processes == {0, 1}
    # The report is the command's, whichever launcher ran it.
    del one["run"]["processes"], two["run"]["processes"]
    assert two["collectives"] == one["collectives"]
    # The local instance is gone, with its files; nothing went to ~/.ray.
    assert _left_behind(before) == []
    assert os.listdir(env["TMPDIR"]) == []
    assert os.listdir(env["HOME"]) == []


DIES = """\
import os
import signal
import sys

import jax


def f(a: "f32[8@x]"):
    if jax.process_index() == 1:
        print("process 1 stops here", file=sys.stderr, flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
    return a * 2
"""

HANGS = """\
import time

import jax


def f(a: "f32[8@x]"):
    if jax.process_index() == 1:
        time.sleep(600)
    return a * 2
"""


def test_a_ray_task_whose_process_dies_stops_the_run(write, tmp_path, short_tmp):
    path = write("dies.py", DIES)
    env = _environment(tmp_path, short_tmp)
    before = _ray_processes()
    start = time.monotonic()
    result = _irshard("run", path, "--mesh", "x=4", "--processes", "2",
                      "--launcher", "ray", "--timeout", "90", env=env)
    assert time.monotonic() - start < 90
    assert result.returncode == 3
    lines = result.stderr.splitlines()
    assert lines[0] == ("irshard: error: process 1 of 2 was killed by SIGKILL; "
                        "stopped process 0")
    assert lines[1] == "last lines of process 1's stderr:"
    assert "  | process 1 stops here" in lines
    assert _left_behind(before, path) == []
    assert os.listdir(env["TMPDIR"]) == []


def test_a_ray_task_that_hangs_is_named_within_the_timeout(write, tmp_path, short_tmp):
    path = write("hangs.py", HANGS)
    env = _environment(tmp_path, short_tmp)
    before = _ray_processes()
    start = time.monotonic()
    result = _irshard("run", path, "--mesh", "x=4", "--processes", "2",
                      "--launcher", "ray", "--timeout", "20", env=env)
    assert time.monotonic() - start < 20 + 1.5   # Ray's start and stop included
    assert result.returncode == 3
    assert result.stderr.startswith(
        "irshard: error: process 1 of 2 did not finish within 20 s (it was "
        "tracing; the others: "), result.stderr
    assert "stopped process 0" in result.stderr.splitlines()[0]
    assert _left_behind(before, path) == []
    assert os.listdir(env["TMPDIR"]) == []


LISTENERS = """\
import json, os, sys

def listening():
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            for row in f.read().splitlines()[1:]:
                fields = row.split()
                if fields[3] == "0A":
                    found.add(fields[1].rpartition(":")[0])
    return found

before = listening()
from irshard.core import interrupts
from irshard.running import raylaunch
ray = raylaunch._import_ray(local=True)
session = raylaunch._init(ray, None, 2, 60, 60)
ray.get(ray.remote(lambda: 1).remote())
during = listening() - before
ray.shutdown()
interrupts.remove(session)
print(json.dumps({"addresses": sorted(during), "session": session}))
"""


def test_a_local_instance_listens_on_the_loopback_interface_only(tmp_path, short_tmp):
    """Every socket the local instance listens on (GCS, raylet, workers,
    agents) is on 127.0.0.1: nothing is reachable from another machine."""
    env = _environment(tmp_path, short_tmp)
    result = subprocess.run([sys.executable, "-c", LISTENERS], env=env,
                            capture_output=True, text=True, cwd=ROOT,
                            timeout=120)
    assert result.returncode == 0, result.stderr
    found = json.loads(result.stdout.splitlines()[-1])
    loopback = {"0100007F",                               # 127.0.0.1
                "0000000000000000FFFF00000100007F",       # ::ffff:127.0.0.1
                "00000000000000000000000001000000"}       # ::1
    assert found["addresses"], "the instance listened on nothing"
    assert set(found["addresses"]) <= loopback, found["addresses"]
    assert found["session"].startswith(short_tmp + "/irshard-ray-")
    assert os.listdir(short_tmp) == []


def test_a_long_temporary_directory_gives_way_to_tmp(monkeypatch, tmp_path):
    """Ray's Unix sockets live in the instance's directory, and a socket's
    path has at most 107 bytes."""
    from irshard.core import interrupts
    from irshard.running import raylaunch
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path / ("d" * 60)))
    session = raylaunch._session_dir()
    try:
        assert os.path.dirname(session) == "/tmp"
    finally:
        interrupts.remove(session)
    monkeypatch.setattr("tempfile.tempdir", "/tmp")
    session = raylaunch._session_dir()
    interrupts.remove(session)
    assert os.path.dirname(session) == "/tmp"


def test_joining_an_existing_cluster_leaves_it_running(tmp_path, short_tmp):
    """`--ray-address` runs the tasks on a cluster started by `ray start`
    and leaves it as it was."""
    import secrets
    ray_bin = os.path.join(os.path.dirname(sys.executable), "ray")
    env = _environment(tmp_path, short_tmp, **LOCAL, RAY_AUTH_MODE="token",
                       RAY_AUTH_TOKEN=secrets.token_hex(32))
    cluster = Path(short_tmp) / "cluster"
    cluster.mkdir()
    before = _ray_processes()
    start = subprocess.run(
        [ray_bin, "start", "--head", "--port", str(distributed.free_port()),
         "--node-ip-address", "127.0.0.1", "--include-dashboard", "false",
         "--num-cpus", "2", "--temp-dir", str(cluster), "--disable-usage-stats"],
        env=env, capture_output=True, text=True, timeout=120)
    try:
        assert start.returncode == 0, start.stderr
        address = (cluster / "ray_current_cluster").read_text().strip()
        heat = os.path.join(EXAMPLES, "heat1d.py")
        result = _irshard("run", heat, "--fn", "simulate_roll", "--mesh", "x=4",
                          "--processes", "2", "--launcher", "ray",
                          "--ray-address", address, "--check", env=env)
        assert result.returncode == 0, result.stderr
        assert "run: seed 0, 2 processes" in result.stdout
        # The cluster is still there, and takes another job.
        again = subprocess.run(
            [sys.executable, "-c", "import ray; ray.init(address=%r, "
             "log_to_driver=False); print(ray.get(ray.remote(lambda: 7)"
             ".remote()))" % address], env=env, capture_output=True,
            text=True, timeout=120)
        assert again.stdout.strip().endswith("7"), again.stderr
    finally:
        # This cluster's processes only (`ray stop --force` would stop every
        # Ray cluster on the machine): its GCS and raylet name its
        # directory; its agents and workers are their children.
        for pid in _with_descendants({int(p.split(":")[0])
                                      for p in _survivors(str(cluster))}):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    assert _left_behind(before) == []


def test_an_address_that_refuses_is_said_at_once(tmp_path, short_tmp):
    port = distributed.free_port()          # nothing listens there
    start = time.monotonic()
    result = _irshard("run", os.path.join(EXAMPLES, "heat1d.py"), "--fn",
                      "simulate_roll", "--mesh", "x=4", "--processes", "2",
                      "--launcher", "ray", "--ray-address", f"127.0.0.1:{port}",
                      env=_environment(tmp_path, short_tmp))
    assert time.monotonic() - start < 30
    assert result.returncode == 2
    assert result.stderr == (
        f"irshard: error: cannot reach the Ray cluster at 127.0.0.1:{port}: "
        f"Connection refused; check --ray-address (the head node's GCS "
        f"address, as `ray start --head` prints it)\n")


def test_an_address_that_is_not_a_gcs_is_said_within_the_timeout(tmp_path, short_tmp):
    """An HTTP server, or a port that accepts and says nothing: `ray.init`
    would wait for it in native code for a minute or more."""
    import socket
    import threading
    http = socket.socket()
    http.bind(("127.0.0.1", 0))
    http.listen(4)
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(4)

    def serve():
        while True:
            try:
                connection, _ = http.accept()
            except OSError:
                return
            with connection:
                connection.recv(1024)
                connection.sendall(b"HTTP/1.1 400 Bad Request\r\n\r\n")
    threading.Thread(target=serve, daemon=True).start()
    try:
        for server, message in [(http, "is not a Ray cluster's GCS (an HTTP/1 server)"),
                                (silent, "does not answer as a Ray cluster's GCS")]:
            address = "127.0.0.1:%d" % server.getsockname()[1]
            start = time.monotonic()
            result = _irshard("run", os.path.join(EXAMPLES, "heat1d.py"), "--fn",
                              "simulate_roll", "--mesh", "x=4", "--processes", "2",
                              "--launcher", "ray", "--ray-address", address,
                              "--timeout", "0.5", env=_environment(tmp_path, short_tmp))
            assert time.monotonic() - start < 15
            assert result.returncode == 2, result.stderr
            assert result.stderr.startswith(f"irshard: error: the server at {address} ")
            assert message in result.stderr and result.stderr.count("\n") == 1
    finally:
        http.close()
        silent.close()


@pytest.mark.parametrize("after", [1.0, 2.0, 3.0, 5.0])
def test_a_signal_during_start_up_stops_everything(after, tmp_path, short_tmp):
    """SIGTERM while Ray starts (its own handlers would end the process at
    once, leaving its processes and directory): exit 130 with the line,
    nothing of Ray's left running, no directory left."""
    before = _ray_processes()
    process = subprocess.Popen(
        [sys.executable, "-m", "irshard", "run", os.path.join(EXAMPLES, "heat1d.py"),
         "--fn", "simulate_roll", "--mesh", "x=4", "--processes", "2",
         "--launcher", "ray"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, env=_environment(tmp_path, short_tmp))
    time.sleep(after)
    process.send_signal(signal.SIGTERM)
    out, err = process.communicate(timeout=60)
    if "run: seed 0, 2 processes" in out:
        # The run had finished: the signal came as it exited (0), or while
        # the interpreter shut down, when Python no longer handles signals.
        assert process.returncode in (0, -signal.SIGTERM), err
    else:
        assert process.returncode == 130, err
        assert err.splitlines()[-1] == "irshard: interrupted; stopped every process"
    assert _left_behind(before) == []
    assert not [p for p in os.listdir(short_tmp) if p.startswith("irshard-ray-")]


ORPHANING = """
import os, subprocess, sys, time
from irshard.running import raysignals
if sys.argv[1] == "adopt":
    raysignals.adopt_orphans()
# A child that starts a grandchild and exits: the grandchild's parent dies
# first, as a raylet ended while it starts its agents.
subprocess.run([sys.executable, "-c", "import subprocess, sys; subprocess.Popen("
                "[sys.executable, '-c', 'import time; time.sleep(60)', sys.argv[1]], "
                "stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)",
                sys.argv[2]], check=True)
time.sleep(0.5)
print(sum(raysignals._alive(p) for p in raysignals._descendants()))
raysignals.end_descendants(grace=1.0)
print(sum(raysignals._alive(p) for p in raysignals._descendants()))
"""


@pytest.mark.parametrize("adopt", [True, False])
def test_an_orphaned_grandchild_is_ended_with_the_launcher(adopt, tmp_path):
    """A process whose parent exits before it stays below the launcher
    (`adopt_orphans`), where ending its descendants ends it; without, it
    passes out of the launcher's reach (which is how a signal during Ray's
    start-up left Ray's agents running)."""
    marker = f"irshard-orphan-{os.getpid()}-{adopt}"
    done = subprocess.run([sys.executable, "-c", ORPHANING,
                           "adopt" if adopt else "keep", marker],
                          capture_output=True, text=True, cwd=ROOT, timeout=60)
    try:
        assert done.returncode == 0, done.stderr
        assert done.stdout.split() == (["1", "0"] if adopt else ["0", "0"])
        assert bool(_survivors(marker)) is not adopt
    finally:
        for line in _survivors(marker):
            os.kill(int(line.split(":")[0]), signal.SIGKILL)


@pytest.mark.skipif(os.path.exists("/dev/nvidia0"), reason="this machine has GPUs")
def test_tasks_no_node_can_hold_are_named(tmp_path, short_tmp):
    """`--platform gpu` asks each task for its share of the mesh's GPUs; a
    cluster without them is said to lack them, at once."""
    before = _ray_processes()
    start = time.monotonic()
    result = _irshard("run", os.path.join(EXAMPLES, "heat1d.py"), "--fn",
                      "simulate_roll", "--mesh", "x=4", "--processes", "2",
                      "--launcher", "ray", "--platform", "gpu", "--timeout", "60",
                      env=_environment(tmp_path, short_tmp))
    assert time.monotonic() - start < 40
    assert result.returncode == 3
    assert result.stderr == (
        "irshard: error: Ray cannot start processes 0, 1 of 2: no node of the "
        "cluster has {CPU: 1, GPU: 2} (`ray status` lists the cluster's "
        "resources)\n")
    assert _left_behind(before) == []


def test_without_ray_installed(tmp_path):
    """An environment without the extra: one line saying what to install."""
    shadow = tmp_path / "shadow" / "ray"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ImportError('No module named ray')\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(tmp_path / "shadow"), ROOT]))
    result = _irshard("run", os.path.join(EXAMPLES, "heat1d.py"), "--fn",
                      "simulate_roll", "--mesh", "x=4", "--processes", "2",
                      "--launcher", "ray", env=env)
    assert result.returncode == 2
    assert result.stderr == (
        "irshard: error: --launcher ray needs Ray, which is not installed; "
        "pip install 'irshard[ray]' (or use --launcher local)\n")


@pytest.mark.parametrize("argv, message", [
    (["--launcher", "ray"], "--launcher ray starts the processes of "
                            "--processes N; give --processes too"),
    (["--processes", "2", "--ray-address", "127.0.0.1:1"],
     "--ray-address is for --launcher ray; give both"),
    (["--processes", "2", "--launcher", "mpi"], "argument --launcher: invalid "
                                                "choice: 'mpi'"),
])
def test_launcher_option_errors(argv, message):
    result = _irshard("run", os.path.join(EXAMPLES, "heat1d.py"), "--fn",
                      "simulate_roll", "--mesh", "x=4", *argv)
    assert result.returncode == 2
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and message in lines[0], lines


# ---------------------------------------------------------------------------
# search --ray: the decision engine's compiles as Ray tasks


FACTORY = os.path.join(ROOT, "tests", "programs", "factory.py")
SEARCH = ["search", FACTORY, "--factory", "make", "--knob", "remat=none,full",
          "--devices", "2", "--axes", "data,fsdp", "--no-cache", "--format", "json"]


def test_a_search_on_a_local_ray_cluster_gives_the_local_table(tmp_path, short_tmp):
    """Each candidate compiled by a Ray task (the program's files shipped
    to it) gives the report a local compile gives, so the whole search's
    JSON is the same, byte for byte; nothing of Ray's is left."""
    before = _ray_processes()
    env = _environment(tmp_path, short_tmp)
    ray = _irshard(*SEARCH, "--ray", "local", env=env, cwd=ROOT)
    assert ray.returncode == 0, ray.stderr
    local = _irshard(*SEARCH, "--jobs", "1", env=env, cwd=ROOT)
    assert local.returncode == 0, local.stderr
    assert ray.stdout == local.stdout
    assert json.loads(ray.stdout)["counts"]["ok"] >= 6
    assert _left_behind(before) == []


def test_ctrl_c_during_a_ray_search_cancels_its_tasks(tmp_path, short_tmp):
    before = _ray_processes()
    process = subprocess.Popen(interruptible(*SEARCH, "--ray", "local"),
                               stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, cwd=ROOT,
                               env=_environment(tmp_path, short_tmp))
    deadline = time.monotonic() + 120
    while not any("ray::_compile_task" in p for p in _ray_processes()):
        assert process.poll() is None and time.monotonic() < deadline, \
            process.communicate()[1]
        time.sleep(0.1)
    process.send_signal(signal.SIGINT)
    out, err = process.communicate(timeout=60)
    assert process.returncode == 130, err
    assert out == "" and err.splitlines()[-1] == "irshard: interrupted"
    assert _left_behind(before) == []
