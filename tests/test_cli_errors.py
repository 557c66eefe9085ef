"""Every user mistake ends in one `irshard: error:` line, exit code 2, no
traceback, and no output file."""

import os
import textwrap

import pytest

from irshard import cli
from tests.conftest import EXAMPLES, run_irshard

HEAT = os.path.join(EXAMPLES, "heat1d.py")
MATMUL = os.path.join(EXAMPLES, "matmul.py")


@pytest.fixture
def files(write):
    return {
        "heat": HEAT,
        "matmul": MATMUL,
        "syntax": write("syntax.py", "def f(a: 'f32[4]'):\n    return (a\n"),
        "untyped": write("untyped.py", "def f(a, b: 'f32[4]'):\n    return b\n"),
        "raises": write("raises.py", textwrap.dedent("""\
            import jax.numpy as jnp

            def f(a: "f32[8]"):
                b = a.reshape(2, 4)
                return b @ b
            """)),
    }


CASES = [
    # (argv, the message's essential part)
    (["compile", "{tmp}/nope.py", "--mesh", "x=4"], "file '{tmp}/nope.py' does not exist"),
    (["compile", "{syntax}", "--mesh", "x=4"], "syntax.py:2:"),
    (["compile", "{heat}", "--mesh", "x=4", "--fn", "simulate"],
     "no function 'simulate' in", ),
    (["compile", "{heat}", "--mesh", "x=4", "--fn", "simulate"],
     "candidates: simulate_roll, simulate_set, step_roll, step_set"),
    (["compile", "{heat}", "--mesh", "x=4"], "defines 4 public functions"),
    (["compile", "{untyped}", "--mesh", "x=4"],
     "argument 'a' of 'f' has no type; pass --arg a=TYPE"),
    (["compile", "{matmul}", "--mesh", "x=0"], "mesh axis 'x' has size '0'"),
    (["compile", "{matmul}", "--mesh", "x=a"], "mesh axis 'x' has size 'a'"),
    (["compile", "{matmul}", "--mesh", "x"], "mesh axis 'x' has no size"),
    (["compile", "{matmul}", "--mesh", "x=2,x=2"], "mesh axis 'x' appears twice"),
    (["compile", "{matmul}", "--mesh", "x=2,y=2", "--arg", "a=f33[4]"],
     "type 'f33[4]': unknown dtype 'f33'"),
    (["compile", "{matmul}", "--mesh", "x=2,y=2", "--arg", "a=f32[4,]"],
     "type 'f32[4,]': dimension 2 is empty"),
    (["compile", "{matmul}", "--mesh", "x=2,y=2", "--arg", "a=f32[-1]"],
     "type 'f32[-1]': dimension 1 has size '-1'"),
    (["compile", "{matmul}", "--mesh", "x=2,y=2", "--shard", "a=x"],
     "sharding 'x' for argument 'a' has 1 entry but the tensor has shape [8,8]"),
    (["compile", "{matmul}", "--mesh", "x=2,y=2", "--shard", "a=z,_"],
     "unknown mesh axis 'z'; the mesh has axes x, y"),
    (["compile", "{matmul}", "--mesh", "x=2,y=2", "--shard", "a=x,x"],
     "mesh axis 'x' is used twice"),
    (["compile", "{matmul}", "--mesh", "x=3,y=2"],
     "sharding 'x,y' for argument 'a': dimension 0 has size 8, which is not "
     "divisible by 3 (x=3)"),
    (["compile", "{matmul}", "--mesh", "x=2,y=2", "--arg", "c=f32[2]"],
     "--arg c: 'matmul' has no argument 'c'; its arguments are a, b"),
    (["compile", "{matmul}", "--mesh", "x=2,y=2", "--shard", "c=x"],
     "--shard c: 'matmul' has no argument 'c'"),
    (["compile", "{matmul}", "--mesh", "x=2,y=2", "--emit", "lowered"],
     "unknown stage 'lowered'; stages are stablehlo, propagated, partitioned, "
     "optimized"),
    (["compile", "{matmul}", "--mesh", "x=2,y=2", "--stage", "hlo"],
     "unknown stage 'hlo'"),
    (["compile", "{matmul}", "--mesh", "x=2,y=2", "-o", "{tmp}/no/such/dir/r.txt"],
     "directory '{tmp}/no/such/dir' does not exist"),
    (["compile", "{matmul}", "--mesh", "x=2,y=2", "--out-shard", "3=x,_"],
     "result 3 does not exist"),
    (["compile", "{matmul}", "--mesh", "x=2,y=2", "--out-shard", "a=x,_"],
     "output index 'a' is not a non-negative integer"),
    (["compile", "{matmul}"], "--mesh is required"),
    (["compile", "{matmul}", "--mesh", "x=2,y=2", "--format", "xml"],
     "argument --format: invalid choice: 'xml'"),
    (["compile", "{raises}", "--mesh", "x=2"],
     "raises.py:5: in f: TypeError: dot_general requires contracting dimensions"),
    (["frobnicate"], "invalid choice: 'frobnicate'"),
]


@pytest.mark.parametrize("argv, message", CASES)
def test_error_line(argv, message, files, tmp_path, capsys):
    values = dict(files, tmp=str(tmp_path))
    output = str(tmp_path / "report.txt")
    argv = [a.format(**values) for a in argv]
    if "-o" not in argv and argv[0] == "compile":
        argv += ["-o", output]
    assert cli.main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.splitlines()
    assert len(lines) == 1, captured.err
    assert lines[0].startswith("irshard: error: ")
    assert message.format(**values) in lines[0]
    assert not os.path.exists(output)


def test_no_traceback_from_a_separate_process(files):
    result = run_irshard("compile", files["raises"], "--mesh", "x=2")
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr.startswith("irshard: error: ")
    assert "Traceback" not in result.stderr
    assert len(result.stderr.splitlines()) == 1


def test_grad_of_a_non_scalar_function(write, capsys):
    path = write("vec.py", "def f(a: 'f32[8]'):\n    return a * 2\n")
    assert cli.main(["compile", path, "--mesh", "x=2", "--grad"]) == 2
    err = capsys.readouterr().err
    assert "--grad needs 'f' to return a scalar" in err


def test_help_does_not_import_jax():
    code = ("import sys\nfrom irshard import cli\ntry:\n    cli.main(['--help'])\n"
            "except SystemExit:\n    pass\nassert 'jax' not in sys.modules, 'jax'\n"
            "cli.build_parser()\nfor cmd in ('compile',):\n    try:\n"
            "        cli.main([cmd, '--help'])\n    except SystemExit:\n        pass\n"
            "assert 'jax' not in sys.modules and 'jaxlib' not in sys.modules\n")
    import subprocess
    import sys
    result = subprocess.run([sys.executable, "-c", code], capture_output=True,
                            text=True)
    assert result.returncode == 0, result.stderr
