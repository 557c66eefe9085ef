"""Output goes to what the user named, whole or not at all; failures to
write are usage errors; an interrupt ends the command promptly and leaves no
temporary files."""

import json
import os
import signal
import stat
import subprocess
import sys
import time

import numpy as np
import pytest

from irshard import cli
from irshard.core import files
from irshard.core.errors import OutputError
from tests.conftest import EXAMPLES, interruptible, run_irshard

MATMUL = os.path.join(EXAMPLES, "matmul.py")
COMPILE = ["compile", MATMUL, "--mesh", "x=2,y=2"]


def test_an_existing_file_keeps_its_mode(tmp_path):
    path = tmp_path / "report.txt"
    path.write_text("old")
    os.chmod(path, 0o640)
    assert cli.main([*COMPILE, "-o", str(path)]) == 0
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o640
    assert path.read_text().startswith(MATMUL)


def test_a_new_file_gets_the_usual_mode(tmp_path):
    old = os.umask(0o027)
    try:
        assert cli.main([*COMPILE, "-o", str(tmp_path / "new.txt")]) == 0
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(tmp_path / "new.txt").st_mode) == 0o640


def test_a_symlink_is_followed(tmp_path):
    target = tmp_path / "target.txt"
    target.write_text("old")
    link = tmp_path / "link.txt"
    link.symlink_to(target)
    assert cli.main([*COMPILE, "-o", str(link)]) == 0
    assert link.is_symlink()
    assert target.read_text().startswith(MATMUL)


def test_a_fifo_is_written_through(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    reader = subprocess.Popen(["cat", str(fifo)], stdout=subprocess.PIPE)
    assert cli.main([*COMPILE, "-o", str(fifo)]) == 0
    out = reader.communicate(timeout=30)[0].decode()
    assert out.startswith(MATMUL)
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)


def test_dev_null_stays_a_device():
    """The suite runs as root: a replacing writer would make /dev/null a file."""
    assert cli.main([*COMPILE, "-o", os.devnull]) == 0
    assert stat.S_ISCHR(os.stat(os.devnull).st_mode)


def test_hard_links_are_kept(tmp_path):
    path = tmp_path / "a.txt"
    path.write_text("x" * 10000)
    os.link(path, tmp_path / "b.txt")
    assert cli.main([*COMPILE, "-o", str(path)]) == 0
    assert (tmp_path / "b.txt").read_text() == path.read_text()
    assert path.read_text().startswith(MATMUL)


@pytest.mark.parametrize("target, message", [
    ("", "-o '': give a file path"),
    ("/dev/full", "-o /dev/full: cannot write: No space left on device"),
    ("{tmp}", "-o {tmp}: is a directory; give a file path"),
])
def test_unwritable_outputs(tmp_path, capsys, target, message):
    assert cli.main([*COMPILE, "-o", target.format(tmp=tmp_path)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err == [f"irshard: error: {message.format(tmp=tmp_path)}"]


def test_a_failed_write_leaves_the_old_file(tmp_path, monkeypatch, capsys):
    """A read-only or full file system fails the rename: exit 2, the old file
    as it was, no temporary file beside it."""
    path = tmp_path / "report.txt"
    path.write_text("old")

    def refuse(src, dst):
        raise OSError(30, "Read-only file system")

    monkeypatch.setattr(files.os, "replace", refuse)
    assert cli.main([*COMPILE, "-o", str(path)]) == 2
    assert capsys.readouterr().err.strip() == (
        f"irshard: error: -o {path}: cannot write: Read-only file system")
    assert path.read_text() == "old"
    assert os.listdir(tmp_path) == ["report.txt"]


@pytest.mark.parametrize("stdout, message", [
    ("closed", "cannot write the output: standard output is closed; give -o "
               "PATH"),
    ("full", "cannot write the output to standard output: No space left on "
             "device; give -o PATH"),
])
def test_stdout_that_cannot_be_written(stdout, message):
    target = subprocess.DEVNULL
    if stdout == "full":
        target = open("/dev/full", "w")
    cmd = [sys.executable, "-m", "irshard", *COMPILE]
    if stdout == "closed":
        cmd = ["sh", "-c", '"$0" "$@" >&-', *cmd]
    result = subprocess.run(cmd, stdout=target, stderr=subprocess.PIPE,
                            text=True)
    assert result.returncode == 2
    assert result.stderr.strip() == f"irshard: error: {message}"


def test_check_writable_rejects_a_missing_directory(tmp_path):
    with pytest.raises(OutputError, match="directory .* does not exist"):
        files.check_writable(str(tmp_path / "no" / "r.txt"))


SLOW = """\
import jax.numpy as jnp


def f(x: "f32[256@x,256]"):
    for i in range(300):
        x = jnp.tanh(x @ x.T + i)
    return x
"""


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM],
                         ids=["SIGINT", "SIGTERM"])
def test_an_interrupt_during_a_compile(write, tmp_path, sig):
    """Ctrl-C or SIGTERM while XLA compiles (and dumps the partitioned
    module) ends the command within a second, with status 130 and no
    temporary files left."""
    path = write("slow.py", SLOW)
    temp = tmp_path / "tmp"
    temp.mkdir()
    stage = tmp_path / "stage"
    env = dict(os.environ, TMPDIR=str(temp), IRSHARD_STAGE_FILE=str(stage))
    proc = subprocess.Popen(
        interruptible("run", path, "--mesh", "x=2", "--emit", "partitioned"),
        env=env, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if stage.exists() and stage.read_text() == "compiling" and os.listdir(temp):
            break
        time.sleep(0.05)
    else:
        proc.kill()
        pytest.fail("the compile never started")
    time.sleep(0.5)
    assert proc.poll() is None, "the compile finished before the interrupt"
    start = time.monotonic()
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=60)
    assert time.monotonic() - start < 2
    assert proc.returncode == 130
    assert err.strip().endswith("irshard: interrupted")
    assert os.listdir(temp) == []


SCRIPT = os.path.join(os.path.dirname(sys.executable), "irshard")


@pytest.mark.parametrize("entry", [[sys.executable, "-m", "irshard"], [SCRIPT]],
                         ids=["python -m irshard", "console script"])
def test_the_ir_names_the_users_frames_only(entry):
    """The locations and stack-frame tables of every stage name the user's
    files: not irshard's own wrappers, nor `python -m`'s runpy or the
    console script, so the IR is the same whichever way irshard runs and
    whatever its own code looks like."""
    if not os.path.exists(entry[0]):
        pytest.skip("no console script beside this Python (pip install -e .)")
    done = subprocess.run(
        [*entry, "compile", os.path.join(EXAMPLES, "heat1d.py"),
         "--fn", "simulate_set", "--mesh", "x=4", "--emit", "stablehlo",
         "--emit", "optimized", "--debug-info"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "heat1d.py" in done.stdout and "step_set" in done.stdout
    own = os.path.dirname(os.path.abspath(cli.__file__))
    for unwanted in (own, "<frozen", SCRIPT):
        assert unwanted not in done.stdout


def test_output_through_a_link_loop_or_a_dangling_link(tmp_path):
    """`-o` naming a loop of links is refused, the links left as they are;
    one dangling into a missing directory names that directory."""
    from irshard.core import files
    from irshard.core.errors import OutputError
    (tmp_path / "a").symlink_to("b")
    (tmp_path / "b").symlink_to("a")
    with pytest.raises(OutputError, match="a loop of symbolic links"):
        files.write(str(tmp_path / "a"), "text")
    assert os.readlink(tmp_path / "a") == "b" and os.readlink(tmp_path / "b") == "a"
    missing = tmp_path / "nowhere"
    (tmp_path / "dangling").symlink_to(missing / "x.json")
    with pytest.raises(OutputError) as raised:
        files.write(str(tmp_path / "dangling"), "text")
    assert f"directory '{missing}' does not exist" in str(raised.value)
    assert not missing.exists()


CHDIR = """\
import os
import jax.numpy as jnp
os.chdir({module!r})


def work():
    os.chdir({context!r})
    import contextlib
    return contextlib.nullcontext()


def double(x: "f32[8@x]"):
    return jnp.sum(x * 2)
"""


@pytest.mark.parametrize("how", ["module", "context"])
def test_outputs_land_where_the_user_named_them_whatever_the_program_does(
        tmp_path, how):
    """`-o out.txt` was resolved after the user's code ran: a module-level
    `os.chdir`, or one in a `--context`, sent the output elsewhere (once to
    the file system's root). Every path the user gave is the user's, taken
    from where the command started; so is a relative `--input`."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    start = tmp_path / "start"
    start.mkdir()
    program = start / "prog.py"
    program.write_text(CHDIR.format(
        module=str(elsewhere) if how == "module" else str(start),
        context=str(elsewhere)))
    np.save(start / "x.npy", np.arange(8, dtype=np.float32))
    extra = ["--context", "work"] if how == "context" else []
    done = run_irshard("run", "prog.py", "--fn", "double", "--mesh", "x=2", *extra,
                       "--input", "x=x.npy", "--save", "saved.npz",
                       "-o", "out.txt", cwd=str(start))
    assert done.returncode == 0, done.stderr
    assert (start / "out.txt").exists() and (start / "saved.npz").exists()
    assert os.listdir(elsewhere) == []
    assert np.load(start / "saved.npz")["result"] == 56.0


CLOSES_STDOUT = """
import sys

import jax.numpy as jnp

print("printed at import")


def double(x: "f32[8@x]"):
    print("printed while traced")
    sys.stdout.close()
    return jnp.sum(x * 2)


def fails(x: "f32[8@x]"):
    sys.stdout.close()
    raise ValueError("after closing its stdout")
"""


def test_what_a_program_prints_goes_to_stderr_and_closing_its_stdout_closes_nothing(
        write):
    """The program's prints go to stderr, so the report on stdout stays
    JSON; a program that closes its stdout closed irshard's stderr (the
    same object), so its error line was lost to 'lost sys.stderr'."""
    path = write("prog.py", CLOSES_STDOUT)
    done = run_irshard("compile", path, "--fn", "double", "--mesh", "x=2",
                       "--format", "json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["function"] == "double"
    assert "printed at import\nprinted while traced\n" in done.stderr
    done = run_irshard("compile", path, "--fn", "fails", "--mesh", "x=2")
    assert done.returncode == 2 and done.stdout == ""
    assert [line for line in done.stderr.splitlines() if "irshard:" in line] == [
        f"irshard: error: {path}:17: in fails: ValueError: after closing its "
        f"stdout"], done.stderr


# A program's loose ends, each at import: what the command does with them
# once its report is written.
LOOSE_ENDS = {
    "an exit handler that prints": (
        "import atexit\natexit.register(lambda: print('bye'))\n",
        0, "bye"),
    "an exit handler that raises": (
        "import atexit\n\n\ndef boom():\n    raise RuntimeError('at exit')\n\n\n"
        "atexit.register(boom)\n",
        0, "irshard: note: the program's exit handler boom raised RuntimeError: at exit"),
    "a thread that never ends": (
        "import threading, time\n"
        "threading.Thread(target=time.sleep, args=(3600,), name='sleeper').start()\n",
        0, "irshard: note: the program left 1 thread running (sleeper); the "
           "command is done, so irshard ends without waiting for it"),
    "stderr replaced": (
        "import io, sys\nsys.stderr = io.StringIO()\n",
        2, "irshard: error: "),
}


@pytest.mark.parametrize("case", sorted(LOOSE_ENDS))
def test_a_programs_loose_ends_leave_the_report_whole_and_the_process_ending(
        case, write):
    """Its exit handlers run with their prints on stderr (after the JSON
    on stdout they made it unreadable), one that raises is a note, not a
    traceback; a thread it leaves running does not keep the process (and
    whoever waits for it) waiting forever; an error line reaches the stderr
    the command was given, whatever the program put in its place."""
    prelude, code, said = LOOSE_ENDS[case]
    body = ("    raise ValueError('from f')\n" if code
            else "    return x * 2\n")
    path = write("prog.py", prelude + "\n\ndef f(x: 'f32[8@x]'):\n" + body)
    started = time.monotonic()
    done = subprocess.run(interruptible("compile", path, "--fn", "f", "--mesh", "x=2",
                                        "--format", "json"),
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == code, done.stderr
    assert time.monotonic() - started < 60
    if code == 0:
        assert json.loads(done.stdout)["function"] == "f"
    else:
        assert done.stdout == ""
    assert "Traceback" not in done.stderr, done.stderr
    assert said in done.stderr, done.stderr
