"""irshard run: the partitioned program computes what one device computes."""

import itertools
import os
import textwrap

import numpy as np
import pytest

from irshard import cli
from irshard.core.specs import parse_mesh, parse_type
from irshard.loading import data
from irshard.loading.fromfile import load_program
from irshard.reporting import layout
from irshard.running import execution, inputs, timing
from irshard.stages import staged
from tests.conftest import EXAMPLES, run_irshard

PROGRAMS = os.path.join(os.path.dirname(__file__), "programs")


def run_program(path, mesh, fn=None, shards=(), grad=False, **options):
    program = load_program(path, mesh=parse_mesh(mesh), fn_name=fn,
                           shards=list(shards), grad=grad)
    lowered = staged.trace(program)
    compiled = lowered.compile()
    return execution.run(lowered, compiled, execution.RunOptions(**options))


CHECKED = [
    # (program, function, shardings per mesh)
    ("elementwise.py", None, {"x=4": ["a=x,_", "b=x,_"],
                              "x=2,y=2": ["a=x,y", "b=y,x"]}),
    ("reductions.py", None, {"x=4": ["a=x,_"], "x=2,y=4": ["a=x,y"],
                             "x=8": ["a=_,x"]}),
    ("loops.py", "fori", {"x=4": ["d=x"], "x=8": ["d=x"]}),
    ("loops.py", "scan", {"x=2": ["w=_,_,x", "x=x,_"],
                          "x=2,y=2": ["w=_,x,y", "x=_,x"]}),
    ("integers.py", None, {"x=4": ["tokens=x,_", "mask=x,_"],
                           "x=2,y=2": ["tokens=x,y", "table=y,_"]}),
    (os.path.join(EXAMPLES, "heat1d.py"), "simulate_set", {"x=4": [], "x=8": []}),
    (os.path.join(EXAMPLES, "heat1d.py"), "simulate_roll", {"x=2": [], "x=4": []}),
    (os.path.join(EXAMPLES, "matmul.py"), None, {"x=2,y=2": [], "x=4,y=2": []}),
    ("softmax.py", None, {"x=4": ["logits=x,_"], "x=2,y=2": ["logits=x,y"]}),
    ("cumsum.py", None, {"x=4": ["a=x,_"], "x=2,y=2": ["a=x,y"]}),
    ("attention.py", None, {"x=2": ["q=x,_,_,_", "k=x,_,_,_", "v=x,_,_,_"],
                            "x=2,y=2": ["q=x,_,y,_", "k=x,_,y,_", "v=x,_,y,_"]}),
]


@pytest.mark.parametrize("program, fn, meshes", CHECKED,
                         ids=[f"{os.path.basename(p)}:{f or ''}" for p, f, _ in CHECKED])
def test_check_passes_on_every_mesh(program, fn, meshes):
    path = program if os.path.isabs(program) else os.path.join(PROGRAMS, program)
    checksums = set()
    for mesh, shards in meshes.items():
        result = run_program(path, mesh, fn, shards, check=True)
        assert result.passed, (mesh, [c.describe() for c in result.checks])
        assert len(result.checks) == len(result.outputs)
        checksums.add(tuple(t.checksum for t in result.inputs))
    # Inputs depend on the global index only: the same on every mesh.
    assert len(checksums) == 1


def test_mlp_gradient_checks_on_two_meshes():
    path = os.path.join(EXAMPLES, "mlp.py")
    for mesh in ("dp=2,tp=2", "dp=4,tp=2"):
        result = run_program(path, mesh, grad=True, check=True)
        assert result.passed
        assert [t.name for t in result.outputs] == [
            "grad(w1)", "grad(w2)", "grad(x)", "grad(y)"]


SPECS = ["_,_", "x,_", "_,y", "x,y", "y,x"]


def test_matmul_with_every_operand_sharding():
    path = os.path.join(PROGRAMS, "matmul.py")
    for a, b in itertools.product(SPECS, SPECS):
        result = run_program(path, "x=2,y=2", shards=[f"a={a}", f"b={b}"],
                             check=True)
        assert result.passed, (a, b)
        assert [t.info.sharding for t in result.inputs] == [
            tuple(a.split(",")), tuple(b.split(","))]


def test_check_can_fail(capsys):
    """Each shard adds its position along x; one device always adds 0."""
    path = os.path.join(PROGRAMS, "axis_index.py")
    assert cli.main(["run", path, "--mesh", "x=4", "--check"]) == 1
    out, err = capsys.readouterr()
    assert "check against one device: FAILED" in out
    assert "MISMATCH" in out
    lines = err.splitlines()
    assert len(lines) == 1
    # Shard 3 holds elements 6 and 7 and adds 3: the largest error.
    import re
    assert re.match(
        r"irshard: error: check failed: output 0 \(result\) differs from the "
        r"float64 result: error 3 at \[[67]\] \(", lines[0]), lines[0]
    assert "allowed" in lines[0]


def test_check_tolerances_can_be_loosened(capsys):
    path = os.path.join(PROGRAMS, "axis_index.py")
    assert cli.main(["run", path, "--mesh", "x=4", "--check", "--atol", "3"]) == 0
    assert "check against one device: passed" in capsys.readouterr().out


def test_random_inputs_do_not_depend_on_the_layout():
    full = data.random_block(3, 1, parse_type("f32[6,4]").dtype, (6, 4),
                             (slice(0, 6), slice(0, 4)))
    block = data.random_block(3, 1, parse_type("f32[6,4]").dtype, (6, 4),
                              (slice(2, 4), slice(1, 3)))
    np.testing.assert_array_equal(full[2:4, 1:3], block)
    assert full.min() >= -1 and full.max() < 1 and full.std() > 0.3
    ints = data.random_block(0, 0, parse_type("i32[64]").dtype, (64,),
                             (slice(0, 64),))
    assert ints.dtype == np.int32 and ints.min() >= 0 and ints.max() < 16
    other_seed = data.random_block(4, 1, parse_type("f32[6,4]").dtype, (6, 4),
                                   (slice(0, 6), slice(0, 4)))
    assert not np.array_equal(full, other_seed)


def test_checksum_is_the_sum_of_its_blocks():
    array = np.arange(24, dtype=np.float32).reshape(6, 4)
    whole = data.block_checksum(array, (slice(0, 6), slice(0, 4)), (6, 4))
    parts = [data.block_checksum(array[r:r + 2, c:c + 2],
                                 (slice(r, r + 2), slice(c, c + 2)), (6, 4))
             for r in (0, 2, 4) for c in (0, 2)]
    assert data.combine(parts) == whole
    changed = array.copy()
    changed[5, 3] = np.nextafter(changed[5, 3], np.float32(100))
    assert data.block_checksum(changed, (slice(0, 6), slice(0, 4)), (6, 4)) != whole
    transposed = data.block_checksum(array.T.copy(), (slice(0, 4), slice(0, 6)), (4, 6))
    assert transposed != whole


def test_npy_inputs_are_what_the_program_sees(tmp_path, write):
    path = write("ident.py", "def f(a: 'f32[8,6]', b: 'i32[8]'):\n"
                             "    return a * 2, b + 1\n")
    a = np.random.default_rng(0).standard_normal((8, 6)).astype(np.float32)
    np.save(tmp_path / "a.npy", a)
    saved = str(tmp_path / "out.npz")
    argv = ["run", path, "--mesh", "x=2,y=2", "--shard", "a=x,y", "--shard", "b=y",
            "--input", f"a={tmp_path / 'a.npy'}", "--save", saved, "--format", "json",
            "-o", str(tmp_path / "report.json")]
    assert cli.main(argv) == 0
    import json
    report = json.loads((tmp_path / "report.json").read_text())
    expected = data.format_checksum(
        data.block_checksum(a, (slice(0, 8), slice(0, 6)), (8, 6)))
    assert report["run"]["inputs"][0]["checksum"] == expected
    assert report["run"]["inputs"][0]["source"].endswith("a.npy")
    assert report["run"]["inputs"][1]["source"] == "random"
    outputs = np.load(saved)
    np.testing.assert_array_equal(outputs["result/0"], a * 2)
    b = data.random_block(0, 1, parse_type("i32[8]").dtype, (8,), (slice(0, 8),))
    np.testing.assert_array_equal(outputs["result/1"], b + 1)
    assert report["run"]["outputs"][0]["checksum"] == data.format_checksum(
        data.block_checksum(a * 2, (slice(0, 8), slice(0, 6)), (8, 6)))


def test_each_device_reads_only_its_slice(tmp_path, write, monkeypatch):
    """The .npy is memory-mapped; each device's callback asks for its block."""
    path = write("ident.py", "def f(a: 'f32[8]'):\n    return a\n")
    np.save(tmp_path / "a.npy", np.arange(8, dtype=np.float32))
    asked = []
    original = inputs.input_source

    def spy(index, decl, options, *given):
        source, origin = original(index, decl, options, *given)
        return (lambda idx: asked.append(idx) or source(idx)), origin

    monkeypatch.setattr(inputs, "input_source", spy)
    result = run_program(path, "x=4", shards=["a=x"],
                         inputs=(("a", str(tmp_path / "a.npy")),))
    assert sorted(i[0].start for i in asked) == [0, 2, 4, 6]
    assert all(i[0].stop - i[0].start == 2 for i in asked)
    assert result.outputs[0].checksum == result.inputs[0].checksum


def test_repeat_reports_timings():
    result = run_program(os.path.join(PROGRAMS, "matmul.py"), "x=2", repeat=3)
    assert len(result.timings) == 3 and min(result.timings) > 0
    text = "\n".join(result.render_text_lines())
    assert "timing: 3 runs after a warm-up: median" in text


# Donating both of two same-shaped inputs where one output can reuse only
# one: JAX warns about the other, which is what the test asks for.
@pytest.mark.filterwarnings("ignore:Some donated buffers were not usable")
def test_xla_s_input_output_aliasing_is_read_from_its_module():
    import jax
    import jax.numpy as jnp
    from irshard.backend.compiling import _aliases

    def aliases(f, donate, *args):
        compiled = jax.jit(f, donate_argnums=donate).lower(*args).compile()
        module = compiled.runtime_executable().hlo_modules()[0]
        return _aliases(module.as_serialized_hlo_module_proto())

    x = jnp.ones((8, 4))
    assert aliases(lambda a: a + 1, 0, x) == {0: 0}
    # An output reuses a donated input of its shape: JAX pairs them in
    # order, so with both donated b * 2 is written over a.
    assert aliases(lambda a, b: (a.sum(), b * 2), (1,), x, x) == {1: 1}
    assert aliases(lambda a, b: (a.sum(), b * 2), (0, 1), x, x) == {1: 0}
    assert aliases(lambda a, b: (a.sum(), b * 2), (), x, x) == {}


def test_repeat_runs_a_donated_step_as_a_training_loop(write):
    """Each timed run is given the run before's outputs for the inputs XLA
    writes them over (as a training loop passes its state on): the state
    moves on, run after run."""
    path = write("state.py", textwrap.dedent("""
        import jax.numpy as jnp

        def step(state: "f32[8,4]", lr: "f32[]"):
            return state + lr, state.sum()
    """))
    program = load_program(path, mesh=parse_mesh("x=2"), fn_name="step",
                           shards=["state=x,_"], donate=("state",))
    lowered = staged.trace(program)
    compiled = lowered.compile()
    seen = []
    original = execution.backend.execute

    def execute(exe, arguments, timed=False):
        seen.append(np.asarray(arguments[0]).copy())
        return original(exe, arguments, timed)

    execution.backend.execute, saved = execute, original
    try:
        result = execution.run(lowered, compiled, execution.RunOptions(
            repeat=3, inputs=()))
    finally:
        execution.backend.execute = saved
    assert len(result.timings) == 3
    # The warm-up and the first timed run start from the same state; every
    # timed run after starts from the state the run before returned.
    timed = seen[1:]
    step = timed[1] - timed[0]
    assert np.allclose(timed[2] - timed[1], step) and not np.allclose(step, 0)


def test_layout_of_a_2d_and_a_3d_array():
    result = run_program(os.path.join(PROGRAMS, "loops.py"), "x=2,y=2", "scan",
                         ["w=_,x,y", "x=_,x"])
    lines = layout.layout_lines(result.inputs)
    text = "\n".join(lines)
    # w is 3-D: a table of index ranges per device.
    assert "device  process  index" in text
    assert "0       0        [0:6, 0:4, 0:4]" in text
    assert "3       0        [0:6, 4:8, 4:8]" in text
    # x is 2-D, its columns sharded over mesh axis x (devices 0,1 have x=0),
    # replicated over y.
    assert "         0:4  4:8" in text
    assert "    0:4  0-1  2-3" in text


@pytest.mark.parametrize("argv, message", [
    (["--input", "z={tmp}/a.npy"], "--input z: there is no input 'z'; the "
                                   "inputs are a, b"),
    (["--input", "a={tmp}/missing.npy"], "--input a: file '{tmp}/missing.npy' "
                                         "does not exist"),
    (["--input", "a={tmp}/garbage.npy"], "--input a: cannot read "),
    (["--input", "a={tmp}/shape.npy"], "holds float32[4, 4] but argument 'a' "
                                       "is f32[8,4]"),
    (["--input", "a={tmp}/dtype.npy"], "holds float64[8, 4] but argument 'a' "
                                       "is f32[8,4]"),
    (["--input", "a={tmp}/a.txt"], "--input a={tmp}/a.txt: expected a .npy file"),
    (["--repeat", "0"], "--repeat 0: give a positive number of timed runs"),
    (["--rtol", "-1"], "--rtol -1.0: tolerances are non-negative numbers"),
    (["--save", "{tmp}/out.txt"], "--save {tmp}/out.txt: expected a path ending in .npz"),
    (["--save", "{tmp}/nodir/out.npz"], "directory '{tmp}/nodir' does not exist"),
    (["--mesh", "x=16"], "the mesh needs 16 devices but cpu has 8"),
    (["--platform", "gpu"], "platform 'gpu' is not available here"),
])
def test_run_errors(argv, message, tmp_path, write, capsys):
    path = write("two.py", "def f(a: 'f32[8,4]', b: 'f32[4]'):\n    return a + b\n")
    np.save(tmp_path / "a.npy", np.zeros((8, 4), np.float32))
    np.save(tmp_path / "shape.npy", np.zeros((4, 4), np.float32))
    np.save(tmp_path / "dtype.npy", np.zeros((8, 4), np.float64))
    (tmp_path / "garbage.npy").write_bytes(b"not an array")
    (tmp_path / "a.txt").write_text("0")
    values = {"tmp": str(tmp_path)}
    full = ["run", path] + (["--mesh", "x=2"] if "--mesh" not in argv else []) + \
        [a.format(**values) for a in argv]
    assert cli.main(full) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("irshard: error: ")
    assert message.format(**values) in err[0]


def test_run_check_from_a_separate_process():
    result = run_irshard("run", os.path.join(EXAMPLES, "heat1d.py"), "--fn",
                         "simulate_set", "--mesh", "x=4", "--check")
    assert result.returncode == 0, result.stderr
    assert "check against one device: passed" in result.stdout


def test_devices(capsys):
    assert cli.main(["devices"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("platform: cpu, 8 devices, 1 process")
    assert "process 0: devices 0-7" in out


def test_the_partitioned_dump_leaves_nothing_behind(tmp_path, write):
    """The dump XLA writes for the partitioned stage lives in a temporary
    directory that is removed, whether or not compilation succeeds."""
    path = write("p.py", "def f(a: 'f32[8@x]'):\n    return a * 2\n")
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    env = dict(os.environ, TMPDIR=str(scratch))
    import subprocess
    import sys
    result = subprocess.run(
        [sys.executable, "-m", "irshard", "compile", path, "--mesh", "x=2",
         "--emit", "partitioned"], capture_output=True, text=True, env=env)
    assert result.returncode == 0, result.stderr
    assert "HloModule" in result.stdout
    assert list(scratch.iterdir()) == []


def test_progress_bar_only_on_a_terminal(monkeypatch, capsys):
    """A long timed run shows a progress bar on a terminal, none when piped."""
    import itertools
    clock = itertools.count()               # every reading one second later
    monkeypatch.setattr(timing.time, "perf_counter", lambda: next(clock))
    path = os.path.join(PROGRAMS, "matmul.py")
    run_program(path, "x=2", repeat=3, progress=True)
    assert capsys.readouterr().err == ""
    from irshard.core import files
    monkeypatch.setattr(files.STDOUT, "isatty", lambda: True)
    monkeypatch.setattr(timing.sys.stderr, "isatty", lambda: True)
    result = run_program(path, "x=2", repeat=3, progress=True)
    assert result.timings == (1, 1, 1)
    assert "3/3" in capsys.readouterr().err


GIVEN = """\
import jax
import jax.numpy as jnp
import numpy as np


def step(w, b, x):
    return jnp.tanh(x @ w + b)


def args():
    w = jnp.asarray(np.arange(32, dtype=np.float32).reshape(8, 4) / 32)
    return w, jax.ShapeDtypeStruct((4,), jnp.float32), jnp.full((16, 8), 0.5)
"""


def test_run_uses_the_values_the_args_function_returns(write, capsys):
    """Concrete leaves run as given (source `given`), abstract ones are
    drawn (`random`); --random draws them all."""
    import json
    path = write("given.py", GIVEN)
    argv = ["run", path, "--fn", "step", "--args", "args", "--mesh", "x=2",
            "--shard", "x=x,_", "--check", "--format", "json"]
    assert cli.main(argv) == 0
    run = json.loads(capsys.readouterr().out)["run"]
    sources = {t["name"]: t["source"] for t in run["inputs"]}
    assert sources == {"w": "given", "b": "random", "x": "given"}
    w = np.arange(32, dtype=np.float32).reshape(8, 4) / 32
    expected = data.format_checksum(data.block_checksum(
        w, (slice(0, 8), slice(0, 4)), (8, 4)))
    checksums = {t["name"]: t["checksum"] for t in run["inputs"]}
    assert checksums["w"] == expected
    assert run["check"]["passed"]
    assert cli.main(argv + ["--random"]) == 0
    drawn = json.loads(capsys.readouterr().out)["run"]
    assert {t["name"]: t["source"] for t in drawn["inputs"]} == \
        {"w": "random", "b": "random", "x": "random"}
    assert {t["name"]: t["checksum"] for t in drawn["inputs"]}["w"] != expected
    # A range that could only apply to given values says so.
    assert cli.main(argv[:-2] + ["--range", "w=0,1"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and "matches only inputs given concrete values" \
        in err[0], err
    assert cli.main(argv[:-2] + ["--range", "w=0,1", "--random"]) == 0
