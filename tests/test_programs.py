"""Programs as real code is written: unused and keyword-only parameters,
64-bit and 16-bit types, host callbacks, prints, exits, exported modules,
and collectives listed in the order they run."""

import json
import os
import re
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from irshard import cli
from tests.conftest import run_irshard
from tests.test_run import run_program

PROGRAM = textwrap.dedent('''\
    import sys

    import jax
    import jax.numpy as jnp
    import numpy as np


    def unused(a: "f32[8@x]", rng: "u32[2]", b: "f32[8]"):
        return a * 2 + b


    def keywords(a: "f32[8@x]", /, b: "f32[8]", *, c: "f32[8]", scale=3.0):
        return a * scale + b - c


    def wide(a: "i64[8@x]", w: "f64[8]"):
        return a + 1, w * 2


    def half(x: "bf16[64@x,64]", v: "bf16[64@x,64]"):
        return jnp.roll(v, 1, axis=0), jnp.cumsum(x, axis=0)


    def order(x: "f32[64@x,64]", w: "f32[64@x,64]", v: "f32[64@x,64]"):
        y = x @ w
        z = jnp.roll(v, 1, axis=0)
        c = jnp.cumsum(v, axis=0)
        return y, z, c


    def callbacks(a: "f32[8@x]"):
        jax.debug.print("debug sum {s}", s=a.sum())
        b = jax.pure_callback(lambda v: np.asarray(v) * 2,
                              jax.ShapeDtypeStruct(a.shape, a.dtype), a)
        return b + 1


    def text(a: "f32[4]"):
        return {"label": "hello"}


    def exits(a: "f32[4]"):
        sys.exit(0)


    def noisy(a: "f32[8@x]"):
        print("tracing noisy")
        return a * 2


    def hint(a: "f32[4]"):
        raise ValueError("the first line\\nhint: the second line")
    ''')


@pytest.fixture
def program(write):
    return write("program.py", PROGRAM)


def line_of(text: str) -> int:
    return next(i for i, line in enumerate(PROGRAM.splitlines(), 1)
                if text in line)


def test_unused_parameters_keep_their_place(program, capsys):
    assert cli.main(["compile", program, "--fn", "unused", "--mesh", "x=2",
                     "--shard", "b=x", "--format", "json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert [(t["name"], t["sharding"]) for t in report["inputs"]] == [
        ("a", ["x"]), ("rng", ["_"]), ("b", ["x"])]
    result = run_program(program, "x=2", fn="unused", shards=["b=x"], check=True)
    assert result.passed


def test_positional_and_keyword_only_parameters(program):
    result = run_program(program, "x=4", fn="keywords", check=True)
    assert [t.name for t in result.inputs] == ["a", "b", "c"]
    assert result.passed


def test_64_bit_types_stay_64_bit(program, tmp_path, capsys):
    big = np.full(8, 2 ** 53 + 1, dtype=np.int64)
    np.save(tmp_path / "a.npy", big)
    saved = tmp_path / "out.npz"
    assert cli.main(["run", program, "--fn", "wide", "--mesh", "x=2",
                     "--input", f"a={tmp_path / 'a.npy'}", "--save", str(saved),
                     "--check", "--format", "json"]) == 0
    report = json.loads(capsys.readouterr().out)
    out = np.load(saved)
    assert out["result/0"].dtype == np.int64
    assert (out["result/0"] == 2 ** 53 + 2).all()
    assert out["result/1"].dtype == np.float64
    assert [t["dtype"] for t in report["outputs"]] == ["i64", "f64"]
    # 8 i64 over 2 devices, 8 f64 replicated: 4 x 8 + 8 x 8 bytes.
    assert report["memory"]["argument_bytes"] == 96
    assert "64-bit types are on (jax_enable_x64) for a (i64), w (f64)" \
        in report["notes"][0]


def test_bf16_collectives_report_the_programs_bytes(program, capsys):
    assert cli.main(["compile", program, "--fn", "half", "--mesh", "x=4",
                     "--format", "json"]) == 0
    report = json.loads(capsys.readouterr().out)
    moved = {c["kind"]: c for c in report["collectives"]}
    gather = moved["all-gather"]
    assert (gather["dtype"], gather["bytes"], gather["backend_dtype"]) == \
        ("bf16", 64 * 64 * 2, "f32")
    permute = moved["collective-permute"]
    assert (permute["dtype"], permute["bytes"]) == ("bf16", 64 * 2)
    assert any("runs 2 bf16 collectives in f32" in n for n in report["notes"])
    assert cli.main(["compile", program, "--fn", "half", "--mesh", "x=4",
                     "--stage", "partitioned", "--format", "json"]) == 0
    partitioned = json.loads(capsys.readouterr().out)
    assert sorted(c["bytes"] for c in partitioned["collectives"]) == \
        sorted(c["bytes"] for c in report["collectives"])


def test_collectives_in_the_order_the_executable_runs_them(program, tmp_path):
    hlo = tmp_path / "optimized.hlo"
    assert run_irshard("compile", program, "--fn", "order", "--mesh", "x=4",
                       "--emit", "optimized", "-o", str(hlo)).returncode == 0
    scheduled = [m for m in re.findall(r"^\s+%?(\S+) = \S+ (all-gather|"
                                       r"collective-permute)\(",
                                       hlo.read_text(), re.M)]
    compiled = run_irshard("compile", program, "--fn", "order", "--mesh",
                           "x=4", "--format", "json")
    dumped = run_irshard("collectives", str(hlo), "--format", "json")
    names = [c["name"] for c in json.loads(compiled.stdout)["collectives"]]
    assert names == [c["name"] for c in json.loads(dumped.stdout)["collectives"]]
    assert names == [name for name, _ in scheduled]
    # The schedule puts both gathers before the permute, unlike XLA's
    # instruction list (the order these were reported in before).
    assert [n.split(".")[0] for n in names] == [
        "all-gather", "all-gather", "collective-permute"]


def test_host_callbacks_run(program):
    result = run_irshard("run", program, "--fn", "callbacks", "--mesh", "x=2",
                         "--check")
    assert result.returncode == 0, result.stderr
    assert "check against one device: passed" in result.stdout
    assert "debug sum" in result.stderr and "debug sum" not in result.stdout


def test_what_user_code_prints_stays_off_the_report(program):
    result = run_irshard("run", program, "--fn", "noisy", "--mesh", "x=2",
                         "--format", "json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["function"] == "noisy"
    assert "tracing noisy" in result.stderr


@pytest.mark.parametrize("fn, message", [
    ("text", "cannot compile 'text': it returns a str (output "
             "result/label) and no array; irshard compiles functions that "
             "return arrays (or pytrees of arrays)"),
    ("exits", "{program}:{line}: in exits: the program called sys.exit(0)"),
])
def test_user_code_that_is_not_a_program(program, fn, message):
    result = run_irshard("compile", program, "--fn", fn, "--mesh", "x=2")
    assert (result.returncode, result.stdout) == (2, "")
    expected = message.format(program=program, line=line_of("sys.exit(0)"))
    assert result.stderr.splitlines() == [f"irshard: error: {expected}"]


def test_exit_while_importing(write):
    path = write("quits.py", "import sys\nprint('hi')\nsys.exit(3)\n"
                             "def f(a: 'f32[4]'):\n    return a\n")
    result = run_irshard("compile", path, "--mesh", "x=2")
    assert (result.returncode, result.stdout) == (2, "")
    # What the module printed went to stderr, then the one error line.
    assert result.stderr.splitlines() == [
        "hi", f"irshard: error: {path}:3: in <module>: the program called "
              f"sys.exit(3)"]


def test_multi_line_errors_are_shown_whole(program):
    result = run_irshard("compile", program, "--fn", "hint", "--mesh", "x=2")
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        f"irshard: error: {program}:{line_of('raise ValueError')}: in hint: "
        f"ValueError: the first line",
        "  hint: the second line"]


EXPORT = textwrap.dedent("""\
    import os, sys
    os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=4"
    import jax, jax.numpy as jnp
    from jax.sharding import AxisType, NamedSharding, PartitionSpec as P
    mesh = jax.make_mesh((2, 2), ("x", "y"), axis_types=(AxisType.Auto,) * 2)
    f = jax.jit(lambda a, b: jnp.tanh(a @ b),
                in_shardings=(NamedSharding(mesh, P("x", "y")),
                              NamedSharding(mesh, P("y", None))))
    exported = jax.export.export(f)(jax.ShapeDtypeStruct((8, 16), jnp.float32),
                                    jax.ShapeDtypeStruct((16, 8), jnp.float32))
    open(sys.argv[1], "wb").write(exported.mlir_module_serialized)
    """)


def test_jax_export_artifacts(tmp_path):
    artifact = tmp_path / "exported.mlirbc"
    subprocess.run([sys.executable, "-c", EXPORT, str(artifact)], check=True)
    result = run_irshard("run", str(artifact), "--check", "--format", "json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert [t["sharding"] for t in report["inputs"]] == [["x", "y"], ["y", "_"]]
    assert [c["kind"] for c in report["collectives"]] == ["all-reduce"]
    assert report["run"]["check"]["passed"]


def test_partitioned_stage_of_one_device(capsys):
    from tests.conftest import EXAMPLES
    path = os.path.join(EXAMPLES, "heat1d.py")
    assert cli.main(["compile", path, "--fn", "simulate_roll", "--mesh", "x=1",
                     "--emit", "partitioned"]) == 0
    assert capsys.readouterr().out.startswith("HloModule jit_simulate_roll")


FUNCTION_OBJECTS = textwrap.dedent("""\
    import functools
    import jax
    import jax.numpy as jnp
    from jax.sharding import PartitionSpec as P


    def loss(w: "f32[32,16]", x: "f32[64@x,32]"):
        return jnp.sum(jnp.tanh(x @ w))


    gradfun = jax.jit(jax.grad(loss))
    plain_grad = jax.grad(loss)


    @jax.jit
    @functools.partial(jax.shard_map, in_specs=(P(), P("x")), out_specs=P())
    def sharded_loss(w: "f32[32,16]", x: "f32[64@x,32]"):
        return jax.lax.psum(jnp.sum(jnp.tanh(x @ w)), "x")
    """)


@pytest.mark.parametrize("fn, check", [("gradfun", True), ("plain_grad", True),
                                       ("sharded_loss", False)])
def test_function_objects_get_their_arguments_by_position(write, fn, check):
    """`jax.jit(jax.grad(loss))` (the JAX docs' idiom), `jax.grad(loss)` and
    `@jax.jit @jax.shard_map` count their arguments by position."""
    path = write("objects.py", FUNCTION_OBJECTS)
    result = run_irshard("run", path, "--fn", fn, "--mesh", "x=4",
                         *(["--check"] if check else []), "--format", "json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    # The gradient of w sums the batch's shards; shard_map's psum likewise.
    assert [(c["kind"], c["mesh_axes"]) for c in report["collectives"]] == [
        ("all-reduce", ["x"])]
    assert [t["name"] for t in report["inputs"]] == ["w", "x"]
    if check:
        assert report["run"]["check"]["passed"]
