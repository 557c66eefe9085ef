"""Every user mistake ends in one `irshard: error:` line, exit code 2, no
traceback, and no output file."""

import os
import textwrap

import pytest

from irshard import cli
from tests.conftest import EXAMPLES, run_irshard

HEAT = os.path.join(EXAMPLES, "heat1d.py")
MATMUL = os.path.join(EXAMPLES, "matmul.py")


NEGATE = """
func.func {visibility}@main(%arg0: tensor<8xf32>{attrs}) -> tensor<8xf32> {{
  %0 = stablehlo.negate %arg0 : tensor<8xf32>
  return %0 : tensor<8xf32>
}}
"""


@pytest.fixture
def files(write, tmp_path):
    fifo = str(tmp_path / "fifo.npy")
    os.mkfifo(fifo)
    return {
        "fifo": fifo,
        "private": write("private.mlir", 'sdy.mesh @mesh = <["x"=2]>\n'
                         + NEGATE.format(visibility="private ", attrs="")),
        "meshes": write("meshes.mlir", 'sdy.mesh @mesh = <["x"=2]>\n'
                        'sdy.mesh @other = <["y"=4]>\n' + NEGATE.format(
                            visibility="", attrs=' {sdy.sharding = '
                            '#sdy.sharding<@other, [{"y"}]>}')),
        "empty": write("empty.mlir", ""),
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
     "sharding 'x' for input 'a' (rule --shard a=x) has 1 entry but the "
     "tensor has shape [8,8]"),
    (["compile", "{matmul}", "--mesh", "x=2,y=2", "--shard", "a=z,_"],
     "unknown mesh axis 'z'; the mesh has axes x, y"),
    (["compile", "{matmul}", "--mesh", "x=2,y=2", "--shard", "a=x,x"],
     "mesh axis 'x' is used twice"),
    (["compile", "{matmul}", "--mesh", "x=3,y=2"],
     "sharding 'x,y' for input 'a': dimension 0 has size 8, which is not "
     "divisible by 3 (x=3)"),
    (["compile", "{matmul}", "--mesh", "x=2,y=2", "--arg", "c=f32[2]"],
     "--arg c: 'matmul' has no argument 'c'; its arguments are a, b"),
    (["compile", "{matmul}", "--mesh", "x=2,y=2", "--shard", "c=x"],
     "--shard c=x: 'c' matches no input; the inputs are a, b"),
    (["compile", "{matmul}", "--mesh", "x=2,y=2", "--emit", "lowered"],
     "unknown stage 'lowered'; stages are stablehlo, propagated, partitioned, "
     "optimized"),
    (["compile", "{matmul}", "--mesh", "x=2,y=2", "--stage", "hlo"],
     "unknown stage 'hlo'"),
    (["compile", "{matmul}", "--mesh", "x=2,y=2", "-o", "{tmp}/no/such/dir/r.txt"],
     "directory '{tmp}/no/such/dir' does not exist"),
    (["run", "{matmul}", "--mesh", "x=2,y=2", "--trace", "{tmp}/no/such/dir/t.json"],
     "--trace {tmp}/no/such/dir/t.json: directory '{tmp}/no/such/dir' does not exist"),
    (["run", "{matmul}", "--mesh", "x=2,y=2", "--trace", "{tmp}"],
     "--trace {tmp}: is a directory; give a file path"),
    (["compile", "{matmul}", "--mesh", "x=2,y=2", "--budget", "step@x<=1ms"],
     "budget 'step@x<=1ms': 'step' is not per mesh axis"),
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
    # From a bad-input audit: each of these crashed, hung or exited 3.
    (["compile", "{private}"], "@main is private; irshard compiles the public "
                               "entry function @main"),
    (["compile", "{meshes}", "--mesh", "x=2"],
     "the module's meshes @mesh (x=2: 2 devices) and @other (y=4: 4 devices) "
     "differ in size"),
    (["opt", "{empty}", "-p", "sdy-propagation-pipeline"],
     "pass 'sdy-propagation-pipeline' needs a public entry function, and the "
     "module has no functions"),
    (["opt", "{private}", "-p", "sdy-propagation-pipeline"],
     "the module has only private functions (@main)"),
    (["collectives", "{fifo}"], "file '{fifo}' is not a regular file"),
    (["compile", "{fifo}", "--mesh", "x=2"], "file '{fifo}' is not a regular file"),
    (["run", "{matmul}", "--mesh", "x=2,y=2", "--input", "a={fifo}"],
     "--input a: file '{fifo}' is not a regular file"),
    (["compile", "{matmul}", "--mesh", "x=2147483648"],
     "the mesh needs 2147483648 devices in this process; XLA simulates at "
     "most 2048 CPU devices in one process"),
    (["compile", "{matmul}", "--mesh", "x=3000"], "the mesh needs 3000 devices"),
    (["compile", "{matmul}", "--mesh", "x=20000"], "the mesh needs 20000 devices"),
    (["compile", "{matmul}", "--mesh", "x=2,y=2", "--arg",
      "a=f32[288230376151711744]"], "the tensor is 1152921504606846976 bytes"),
    (["compile", "{matmul}", "--mesh", "x=2,y=2", "--arg",
      "a=f32[1152921504606846976,2]"], "sizes are non-negative integers (at "
                                       "most 18 digits)"),
    (["compile", "{matmul}", "--mesh", "x=" + "9" * 5000],
     "sizes must be positive integers (at most 18 digits)"),
    (["compile", "{matmul}", "--mesh", "x=2,y=2", "--out-shard", "\u00b2=x"],
     "output index '\u00b2' is not a non-negative integer"),
    (["compile", "{matmul}", "--mesh", "x=2\ny=2"],
     "argument 'x=2\\ny=2' contains a control character"),
    (["compile", "{matmul}", "--mesh", "x=2,y=2", "--shard", "a=x,_",
      "--shard", "a=_,y"], "--shard a is given twice"),
    (["compile", "{matmul}", "--mesh", "x=2,y=2", "--arg", "a=f32[8,8]",
      "--arg", "a=f32[8,8]"], "--arg a is given twice"),
    (["run", "{matmul}", "--mesh", "x=2,y=2", "--processes", "2", "--timeout",
      "nan"], "argument --timeout: 'nan' is not a positive number of seconds"),
    (["compile", "{matmul}", "--mesh", "x=2,y=2", "--jobs", "2"],
     "--jobs: runs --verify's recompiles at once; it needs --verify"),
    (["compile", "{matmul}", "--mesh", "x=2,y=2", "--verify", "--jobs", "0"],
     "argument --jobs: '0' is not a positive number or auto"),
]


@pytest.mark.parametrize("argv, message", CASES)
def test_error_line(argv, message, files, tmp_path, capsys):
    values = dict(files, tmp=str(tmp_path))
    output = str(tmp_path / "report.txt")
    argv = [a.format(**values) if "{" in a else a for a in argv]
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
    assert "--grad needs 'f' to return a real floating-point scalar" in err


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


KEYS = """
import jax.numpy as jnp


def args():
    return ({"\\x1b]0;owned\\x07w": jnp.zeros((8,)), "b": jnp.zeros((8,))},)


def step(params):
    return params["b"] * 2
"""


def test_an_error_line_escapes_control_characters(write, capsys):
    """A pytree key holding a terminal escape sequence once reached the
    terminal raw, listed in an error line."""
    path = write("keys.py", KEYS)
    assert cli.main(["compile", path, "--fn", "step", "--args", "args",
                     "--mesh", "x=2", "--shard", "nosuch=x"]) == 2
    err = capsys.readouterr().err
    assert err == ("irshard: error: --shard nosuch=x: 'nosuch' matches no input; "
                   "the inputs are params/\\x1b]0;owned\\x07w, params/b\n")
    from irshard.core.errors import error_line
    assert error_line("a\x9bb\ttab \udc80 é\nnext\x1b[2J") == \
        "irshard: error: a\\x9bb\ttab \udc80 é\n  next\\x1b[2J"


def test_no_command_names_every_command(capsys):
    """The error line lists every command the parser has, as `--help` does."""
    assert cli.main([]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("irshard: error: give a command: ")
    listed = err.split("give a command: ", 1)[1].split(" (see", 1)[0].split(", ")
    import argparse
    parser = cli.build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    assert listed == list(sub.choices) and len(listed) >= 10


@pytest.mark.parametrize("command, result", [
    ("compile", "irshard.stages.output:ReportOutput"),
    ("run", "irshard.running.execution:RunOutput"),
    ("show", "irshard.library:ProgramLayout"),
    ("devices", "irshard.library:DeviceListing"),
    ("collectives", "irshard.library:ModuleReports"),
    ("calibrate", "irshard.library:Calibration"),
    ("search", "irshard.strategy.searchresult:SearchResult"),
    ("diff", "irshard.reporting.diff:Diff"),
    ("suggest", "irshard.strategy.suggestions:Suggestions")])
def test_format_choices_are_what_the_result_writes(command, result):
    """A command's --format choices are the formats its result renders,
    and each renders (an unknown one is a usage error)."""
    import importlib

    from irshard import cli
    parser = cli.build_parser()
    sub = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    choices = next(a.choices for a in sub.choices[command]._actions
                   if "--format" in a.option_strings)
    module, name = result.split(":")
    kind = getattr(importlib.import_module(module), name)
    assert tuple(choices) == kind.FORMATS
    assert all(callable(getattr(kind, f"render_{fmt}")) for fmt in kind.FORMATS)
    from irshard.core.errors import UsageError
    with pytest.raises(UsageError, match="is written as"):
        kind.render(object.__new__(kind), "yaml")
