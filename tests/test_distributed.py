"""Multi-process runs: the same command across processes, and its faults."""

import json
import os
import sys
import textwrap
import time

import pytest

from irshard.running import distributed, processes
from irshard.core.errors import UsageError
from tests.conftest import EXAMPLES, run_irshard

pytestmark = pytest.mark.multiprocess


def _report(*args):
    result = run_irshard("run", *args, "--check", "--format", "json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def _checksums(report):
    run = report["run"]
    return ([t["checksum"] for t in run["inputs"]],
            [t["checksum"] for t in run["outputs"]],
            [c["passed"] for c in run["check"]["outputs"]],
            [c["max_abs_error"] for c in run["check"]["outputs"]])


@pytest.mark.parametrize("args", [
    [os.path.join(EXAMPLES, "heat1d.py"), "--fn", "simulate_roll", "--mesh", "x=4"],
    [os.path.join(EXAMPLES, "mlp.py"), "--grad", "--mesh", "dp=2,tp=2"],
], ids=["heat", "mlp-grad"])
def test_two_and_four_processes_match_one(args):
    single = _report(*args)
    assert single["run"]["processes"] == 1
    for n in (2, 4):
        multi = _report(*args, "--processes", str(n))
        assert multi["run"]["processes"] == n
        assert _checksums(multi) == _checksums(single)
        assert all(_checksums(multi)[2])
        # The devices are now spread over the processes.
        processes = {p["process"] for t in multi["run"]["inputs"]
                     for p in t["layout"]}
        assert processes == set(range(n))


def test_only_process_zero_reports():
    result = run_irshard("run", os.path.join(EXAMPLES, "heat1d.py"), "--fn",
                         "simulate_set", "--mesh", "x=4", "--processes", "2")
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("run: seed 0, 2 processes") == 1
    assert "[Gloo]" not in result.stdout and "[Gloo]" not in result.stderr


def _survivors(marker: str) -> list[str]:
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmdline = f.read().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if marker in cmdline:
            found.append(f"{pid}: {cmdline}")
    return found


def test_a_process_that_dies_stops_the_run(write):
    path = write("dies.py", textwrap.dedent("""\
        import os
        import signal
        import sys

        import jax


        def f(a: "f32[8@x]"):
            if jax.process_index() == 1:
                print("process 1 stops here", file=sys.stderr, flush=True)
                os.kill(os.getpid(), signal.SIGKILL)
            return a * 2
        """))
    start = time.monotonic()
    result = run_irshard("run", path, "--mesh", "x=4", "--processes", "2",
                         "--timeout", "120")
    elapsed = time.monotonic() - start
    assert result.returncode != 0
    assert elapsed < 120
    lines = result.stderr.splitlines()
    assert lines[0] == ("irshard: error: process 1 of 2 was killed by SIGKILL; "
                        "stopped process 0")
    assert "  | process 1 stops here" in lines
    assert _survivors(path) == []


def test_a_process_that_hangs_is_named(write):
    path = write("hangs.py", textwrap.dedent("""\
        import time

        import jax


        def f(a: "f32[8@x]"):
            if jax.process_index() == 1:
                time.sleep(600)
            return a * 2
        """))
    start = time.monotonic()
    result = run_irshard("run", path, "--mesh", "x=4", "--processes", "2",
                         "--timeout", "8")
    assert time.monotonic() - start < 8 + 1.5   # --timeout bounds the run
    assert result.returncode == 3
    # Process 1 never gets past tracing; process 0 waits further on (how far
    # it got depends on the machine's speed).
    assert result.stderr.startswith(
        "irshard: error: process 1 of 2 did not finish within 8 s (it was "
        "tracing; the others: "), result.stderr
    assert _survivors(path) == []


def test_the_same_user_error_everywhere_is_reported_once(write):
    path = write("bad.py", "def f(a: 'f32[8@x]'):\n    return a @ a.reshape(2, 4)\n")
    result = run_irshard("run", path, "--mesh", "x=4", "--processes", "2")
    assert result.returncode == 2
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and "bad.py:2: in f: TypeError" in lines[0]


PORT_RETRY = """
import socket, sys
from irshard.running import distributed, processes
taken = socket.socket()
taken.bind(("127.0.0.1", 0))
taken.listen()
ports = [taken.getsockname()[1]]
real = distributed.free_port
distributed.free_port = lambda: ports.pop(0) if ports else real()
result = processes.launch(["devices", "--mesh", "x=2"], 2, timeout=60)
assert "jax" not in sys.modules          # the launcher itself stays light
assert ports == [], "the taken port was not tried"
sys.stdout.buffer.write(result.stdout)
sys.exit(result.exit_code)
"""


def test_a_port_in_use_is_retried():
    """The first port offered is taken: process 0 cannot start the
    coordinator there, and the launcher tries another."""
    import subprocess
    result = subprocess.run([sys.executable, "-c", PORT_RETRY],
                            capture_output=True, text=True, timeout=180)
    assert result.returncode == 0, result.stderr
    assert "platform: cpu, 2 devices, 2 processes" in result.stdout


def test_devices_per_process():
    result = run_irshard("devices", "--processes", "2", "--mesh", "x=4")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert out.startswith("platform: cpu, 4 devices, 2 processes")
    assert "process 0: devices 0-1" in out
    assert "process 1: devices" in out


@pytest.mark.parametrize("argv, message", [
    (["--processes", "3"], "the mesh's 4 devices cannot be split evenly over 3 processes"),
    (["--processes", "0"], "--processes 0: give at least 1"),
    (["--processes", "2", "--timeout", "0"], "--timeout: '0' is not a positive number"),
    (["--processes", "2", "--timeout", "nan"], "--timeout: 'nan' is not a positive number"),
    (["--coordinator", "127.0.0.1:1"], "--coordinator, --process-id and "
                                        "--num-processes go together"),
    (["--coordinator", "nohost", "--process-id", "0", "--num-processes", "2"],
     "--coordinator 'nohost': expected HOST:PORT"),
    (["--coordinator", "h:1", "--process-id", "2", "--num-processes", "2"],
     "--process-id 2 is not in 0...1"),
    (["--processes", "2", "--process-id", "0"], "do not combine it with"),
])
def test_process_option_errors(argv, message, capsys):
    from irshard import cli
    path = os.path.join(EXAMPLES, "heat1d.py")
    code = cli.main(["run", path, "--fn", "simulate_roll", "--mesh", "x=4", *argv])
    assert code == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and message in err[0], err


# Environment detection: what each cluster launcher's variables mean.

def test_alone_without_a_cluster():
    assert distributed.detect(None, None, None, {}) is None
    assert distributed.detect(None, None, None, {"SLURM_NTASKS": "1",
                                                 "SLURM_PROCID": "0"}) is None


def test_explicit_options():
    spec = distributed.detect("10.1.2.3:1234", 1, 4, {"SLURM_NTASKS": "8"})
    assert (spec.coordinator, spec.process_id, spec.num_processes, spec.source) == (
        "10.1.2.3:1234", 1, 4, "command line")


def test_slurm():
    env = {"SLURM_NTASKS": "4", "SLURM_PROCID": "2", "SLURM_JOB_ID": "41",
           "SLURM_STEP_NODELIST": "gpu[07-09,12],cpu1"}
    spec = distributed.detect(None, None, None, env)
    assert (spec.coordinator, spec.process_id, spec.num_processes, spec.source) == (
        "gpu07:12041", 2, 4, "Slurm")
    env["SLURM_STEP_NUM_TASKS"] = "2"            # the step's tasks win
    env["IRSHARD_COORDINATOR_PORT"] = "5000"
    spec = distributed.detect(None, None, None, env)
    assert (spec.coordinator, spec.num_processes) == ("gpu07:5000", 2)
    env["IRSHARD_COORDINATOR"] = "head:7000"
    assert distributed.detect(None, None, None, env).coordinator == "head:7000"


def test_slurm_host_lists():
    assert distributed.first_slurm_host("node03") == "node03"
    assert distributed.first_slurm_host("node[3-5]") == "node3"
    assert distributed.first_slurm_host("a1,b2") == "a1"


def test_open_mpi():
    env = {"OMPI_COMM_WORLD_SIZE": "2", "OMPI_COMM_WORLD_RANK": "1",
           "OMPI_MCA_orte_hnp_uri": "3453026304.0;tcp://10.0.0.5,192.168.1.2:41931"}
    spec = distributed.detect(None, None, None, env)
    assert (spec.coordinator.split(":")[0], spec.process_id, spec.num_processes,
            spec.source) == ("10.0.0.5", 1, 2, "Open MPI")
    del env["OMPI_MCA_orte_hnp_uri"]
    with pytest.raises(UsageError, match="Open MPI does not say where rank 0 runs"):
        distributed.detect(None, None, None, env)
    env["IRSHARD_COORDINATOR"] = "rank0host:9000"
    assert distributed.detect(None, None, None, env).coordinator == "rank0host:9000"


def test_mpich():
    env = {"PMI_SIZE": "3", "PMI_RANK": "0", "PMI_PORT": "node5:40123",
           "PMI_ID": "7"}
    spec = distributed.detect(None, None, None, env)
    assert (spec.coordinator, spec.process_id, spec.num_processes, spec.source) == (
        "node5:12007", 0, 3, "MPICH")


def test_runtime_noise_is_not_the_command_s_stderr():
    """Gloo greets once per rank; two greetings at once share a line and
    leave a blank one, which is not something the command said."""
    greeting = ("[Gloo] Rank 0 is connected to 1 peer ranks. Expected number "
                "of connected peer ranks is : 1")
    assert processes.meaningful([greeting + greeting, "", greeting]) == []
    assert processes.meaningful(["", "warning: x", "", "  detail", ""]) == \
        ["warning: x", "", "  detail"]


def test_strip_option():
    argv = ["run", "f.py", "--processes", "2", "--mesh", "x=4", "--timeout=9"]
    assert distributed.strip_option(argv, "--processes", True) == [
        "run", "f.py", "--mesh", "x=4", "--timeout=9"]
    assert distributed.strip_option(argv, "--timeout", True) == argv[:-1]
    argv = ["run", "f.py", "-o", "a.txt", "-ob.txt", "-o=c.txt", "--output=d"]
    assert distributed.strip_option(argv, "-o", True) == [
        "run", "f.py", "--output=d"]


def test_joining_from_the_environment(write):
    """Two processes started by hand with Slurm's variables form one run."""
    import subprocess
    path = os.path.join(EXAMPLES, "heat1d.py")
    port = distributed.free_port()
    procs = []
    for rank in range(2):
        env = dict(os.environ, SLURM_NTASKS="2", SLURM_PROCID=str(rank),
                   SLURM_STEP_NODELIST="127.0.0.1", SLURM_JOB_ID="1",
                   IRSHARD_COORDINATOR_PORT=str(port))
        procs.append(subprocess.Popen(
            [sys.executable, "-m", "irshard", "run", path, "--fn",
             "simulate_roll", "--mesh", "x=4", "--check"],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    assert "run: seed 0, 2 processes" in outs[0][0]
    assert "check against one device: passed" in outs[0][0]
    assert outs[1][0] == ""           # process 1 stays quiet


def _listening(port):
    """Local addresses of the sockets listening on `port` (/proc/net/tcp*)."""
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                rows = f.read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            local, state = row.split()[1], row.split()[3]
            address, _, hexport = local.rpartition(":")
            if state == "0A" and int(hexport, 16) == port:   # LISTEN
                found.append(address)
    return found


def test_a_manual_coordinator_binds_the_address_given():
    """--coordinator 127.0.0.1:PORT listens there, not on every interface;
    a peer that never joins ends the run cleanly within --join-timeout, and
    the error names that option (a loaded machine once ran out of a join
    wait shared with --timeout, and was not told what to raise)."""
    import subprocess
    port = distributed.free_port()
    path = os.path.join(EXAMPLES, "heat1d.py")
    start = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "-m", "irshard", "run", path, "--fn", "simulate_roll",
         "--mesh", "x=2", "--coordinator", f"127.0.0.1:{port}", "--process-id",
         "0", "--num-processes", "2", "--join-timeout", "6"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    addresses = []
    while not addresses and proc.poll() is None and time.monotonic() - start < 6:
        addresses = _listening(port)
        time.sleep(0.1)
    out, err = proc.communicate(timeout=60)
    elapsed = time.monotonic() - start
    # 127.0.0.1, in IPv4 or IPv4-mapped IPv6 form; never 0.0.0.0 or ::.
    assert addresses and all(a in ("0100007F", "0000000000000000FFFF00000100007F")
                             for a in addresses), addresses
    assert proc.returncode == 3
    assert err.splitlines() == [
        f"irshard: error: process 0 waited 6 s for the run's 2 processes to "
        f"join at 127.0.0.1:{port}, and not all of them did; start every "
        f"process (--process-id 0 to 1) with --coordinator 127.0.0.1:{port}, "
        f"or give a longer --join-timeout (on a loaded machine they may take "
        f"minutes to start)"], err
    assert elapsed < 6 + 4
