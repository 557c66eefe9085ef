"""Odd inputs from an audit of the newer surfaces: each once crashed, hung,
exited 3 or was accepted without a word. Each now ends in one
`irshard: error:` line with exit 2 naming what is accepted, or works."""

import os
import textwrap

import pytest

from irshard import cli
from irshard.core.errors import SpecError
from irshard.reporting.budget import parse_budget
from tests.conftest import EXAMPLES, run_irshard

MATMUL = os.path.join(EXAMPLES, "matmul.py")

ARGS = textwrap.dedent("""\
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import NamedSharding, PartitionSpec as P

    def f(x):
        return x * 2

    def g(p):
        return jax.tree_util.tree_reduce(lambda a, b: a + b.sum(), p, 0.0)

    def h(a, b):
        return (a.astype(jnp.float32) * b).sum()

    def huge():
        return (jax.ShapeDtypeStruct((2 ** 63,), jnp.float32),)

    def overflowing():
        return (jax.ShapeDtypeStruct((2 ** 40, 2 ** 30), jnp.float32),)

    def bare():
        return (jax.ShapeDtypeStruct((8,), jnp.float32, sharding=P("x")),)

    # jax.ShapeDtypeStruct takes any shape: a factory's knob given as text
    # ends up in one.
    def text_dim():
        return (jax.ShapeDtypeStruct(("64", 8), jnp.float32),)

    def negative_dim():
        return (jax.ShapeDtypeStruct((8, -2), jnp.float32),)

    def float_dim():
        return (jax.ShapeDtypeStruct((2.5,), jnp.float32),)

    def bare_unknown():
        return (jax.ShapeDtypeStruct((8,), jnp.float32, sharding=P("z")),)

    def other_mesh():
        mesh = jax.sharding.Mesh(np.array(jax.devices()[:1]), ("x",))
        return (jax.ShapeDtypeStruct((8,), jnp.float32,
                                     sharding=NamedSharding(mesh, P("x"))),)

    def itself():
        d = {}
        d["a"] = d
        return (d,)

    def mixed_keys():
        return ({0: jnp.ones(4), "0": jnp.ones(4)},)

    def slashed():
        return ({"a/b": jnp.ones(4), "a": {"b": jnp.ones(4)}},)

    def complex_args():
        return (jnp.ones(4, jnp.complex64),)

    def int_and_float():
        return (jnp.ones(4, jnp.int32), jnp.ones(4))
    """)


@pytest.fixture
def args_file(write):
    return write("args.py", ARGS)


CASES = [
    # (argv after FILE, the message's essential part)
    (["--fn", "f", "--args", "huge", "--mesh", "x=2"],
     "input 'x': the tensor is 36893488147419103232 bytes (2^65 or more); "
     "irshard handles tensors below 2^60 bytes"),
    (["--fn", "f", "--args", "text_dim", "--mesh", "x=2"],
     "input 'x': dimension 0 of its shape is '64' (str); dimensions are "
     "non-negative integers"),
    (["--fn", "f", "--args", "negative_dim", "--mesh", "x=2"],
     "input 'x': dimension 1 of its shape is '-2' (int)"),
    (["--fn", "f", "--args", "float_dim", "--mesh", "x=2"],
     "input 'x': dimension 0 of its shape is '2.5' (float)"),
    (["--fn", "f", "--args", "bare_unknown", "--mesh", "x=2"],
     "unknown mesh axis 'z'; the mesh has axes x"),
    (["--fn", "f", "--args", "other_mesh", "--mesh", "x=2"],
     "input 'x': its sharding's mesh has x=1, but --mesh has x=2"),
    (["--fn", "g", "--args", "itself", "--mesh", "x=2"],
     "argument 'p' contains itself (or nests too deeply to flatten)"),
    (["--fn", "g", "--args", "mixed_keys", "--mesh", "x=2"],
     "argument 'p' is not a pytree JAX can flatten"),
    (["--fn", "g", "--args", "slashed", "--mesh", "x=2"],
     "argument 'p': two leaves have the path 'p/a/b'"),
    (["--fn", "g", "--args", "complex_args", "--mesh", "x=2", "--grad"],
     "--grad needs 'g' to return a real floating-point scalar"),
    (["--fn", "h", "--args", "int_and_float", "--mesh", "x=2", "--grad", "a"],
     "--grad: 'h' has no floating-point leaf in a"),
    (["--fn", "h", "--args", "int_and_float", "--mesh", "x=2", "--grad", "b,b"],
     "--grad 'b,b': b is named twice; name each argument once"),
    (["--fn", "h", "--args", "int_and_float", "--mesh", "x=2", "--static", "a,a"],
     "--static 'a,a': a is named twice"),
]


@pytest.mark.parametrize("argv, message", CASES)
def test_args_functions(argv, message, args_file, tmp_path, capsys):
    output = str(tmp_path / "r.txt")
    assert cli.main(["compile", args_file, *argv, "-o", output]) == 2
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("irshard: error: "), captured.err
    assert message in lines[0]
    assert not os.path.exists(output)


def test_an_overflowing_shape_never_reaches_xla(args_file):
    # XLA aborts on it, its message lost in the redirected native stderr.
    done = run_irshard("compile", args_file, "--fn", "f", "--args",
                       "overflowing", "--mesh", "x=2")
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert "the tensor is 4722366482869645213696 bytes" in done.stderr


def test_a_bare_partition_spec_means_the_mesh_given(args_file, capsys):
    assert cli.main(["compile", args_file, "--fn", "f", "--args", "bare",
                     "--mesh", "x=2", "--format", "json"]) == 0
    import json
    report = json.loads(capsys.readouterr().out)
    assert report["inputs"][0]["sharding"] == ["x"]
    assert report["inputs"][0]["local_shape"] == [4]


OTHER_CASES = [
    (["compile", MATMUL, "--mesh", "x=2,y=2", "--constrain", "dot_general=x,_",
      "--constrain", "dot_general=_,y"],
     "--constrain dot_general is given twice"),
    (["compile", MATMUL, "--mesh", "x=2,y=2", "--target", "tpu-v5e:2x2",
      "--platform", "gpu"],
     "--target tpu-v5e:2x2 --platform gpu: a TPU target is compiled by libtpu "
     "on this host; leave --platform out"),
    (["compile", MATMUL, "--mesh", "x=2,y=2", "--budget", "all-gather@x+x<=2"],
     "mesh axis 'x' is named twice"),
    (["compile", MATMUL, "--mesh", "x=2,y=2", "--budget", "all-gather<=2.5"],
     "'all-gather' is a count; give a whole number, e.g. 'all-gather<=2'"),
    (["compile", MATMUL, "--mesh", "x=2,y=2", "--budget", "bytes<=1e400"],
     "1e400 is beyond any report's values"),
    (["calibrate", "--mesh", "x=2", "--repeats", "99999999999999999999"],
     "--repeats 99999999999999999999: give a number of runs from 1 to 1000"),
    (["calibrate", "--mesh", "x=2", "--repeats", "0"], "from 1 to 1000"),
    (["calibrate", "--mesh", "x=2", "--sizes", "4KiB"],
     "--sizes: 1 different size; give at least 4"),
    (["calibrate", "--mesh", "x=2", "--sizes", "4KiB,4KiB,8KiB"],
     "--sizes: 2 different sizes; give at least 4"),
    (["calibrate", "--mesh", "x=2", "--sizes", "4KiB,8KiB,16KiB,1000GiB"],
     "--sizes: 1000.0 GiB per device does not fit this host's memory over 2 "
     "devices; give sizes up to"),
    (["calibrate", "--mesh", "x=1", "--platform", "gpu"],
     "platform 'gpu' is not available here; use --platform cpu"),
]


@pytest.mark.parametrize("argv, message", OTHER_CASES)
def test_other_options(argv, message, capsys):
    assert cli.main(argv) == 2
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    assert captured.out == ""
    assert len(lines) == 1 and lines[0].startswith("irshard: error: "), captured.err
    assert message in lines[0]


def test_budget_limits_that_are_counts_and_finite():
    assert parse_budget("collectives<=2.0").limit == 2
    assert parse_budget("bytes<=1.5KiB").limit == 1536
    assert parse_budget("time<=1e-3").limit == 1e-3
    assert parse_budget("all-gather@x+y<=2").axes == ("x", "y")
    for text in ("remat==0.5", "bytes<=1e400", "wire_bytes<=inf",
                 "all-reduce@y+x+y<=1"):
        with pytest.raises(SpecError):
            parse_budget(text)


def test_a_long_calibration_says_how_long(monkeypatch, capsys):
    from irshard.measuring import calibrate
    seen = {}

    def fake(mesh, sizes, repeats, platform):
        seen.update(sizes=sizes, repeats=repeats, platform=platform)
        return {"mesh": str(mesh), "links": {"host": {
            "bandwidth": {"value": 1e9}, "latency": {"value": 1e-6}}},
            "error": 0.1, "held_out": 0, "measurements": []}
    monkeypatch.setattr(calibrate, "calibrate", fake)
    assert cli.main(["calibrate", "--mesh", "x=2", "--repeats", "1000"]) == 0
    err = capsys.readouterr().err
    assert err.startswith("irshard: calibrate: 55 measurements x 1000 runs, about ")
    assert err.rstrip().endswith(" min")
    assert seen == {"sizes": sorted(calibrate.DEFAULT_SIZES), "repeats": 1000,
                    "platform": "cpu"}


NOT_UTF8 = b"mat\xffmul"


def test_a_path_that_is_not_utf8(tmp_path, capsys):
    """Legal on Linux: the file is read and written, and every report
    shows the name as Python prints it (\\xff)."""
    import json
    import shutil
    raw = os.fsencode(str(tmp_path)) + b"/" + NOT_UTF8
    source = os.fsdecode(raw + b".py")
    shutil.copy(MATMUL, source)
    for fmt in ("text", "json", "html"):
        out = os.fsdecode(raw + b"." + fmt.encode())
        assert cli.main(["compile", source, "--mesh", "x=2,y=2", "--format", fmt,
                         "-o", out]) == 0, capsys.readouterr().err
    report = json.loads(open(os.fsdecode(raw + b".json"), encoding="utf-8").read())
    assert report["source"].endswith("mat\\xffmul.py")
    assert {c["source"]["file"] for c in report["collectives"]} == {"mat\\xffmul.py"}
    with open(os.fsdecode(raw + b".text"), "rb") as f:
        assert f.readline().startswith(
            os.fsencode(str(tmp_path)) + b"/mat\\xffmul.py:matmul")
    # The page's source view finds the file behind the shown name.
    from irshard.reporting import htmlreport
    assert "def matmul" in "\n".join(htmlreport.read_sources(
        report, readable=htmlreport.loaded_files())["mat\\xffmul.py"])
    # A module at such a path, and HLO.
    mlir = os.fsdecode(raw + b".mlir")
    assert cli.main(["compile", source, "--mesh", "x=2,y=2", "--emit", "stablehlo",
                     "-o", mlir]) == 0
    assert cli.main(["compile", mlir, "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["source"].endswith("mat\\xffmul.mlir")
    hlo = os.fsdecode(raw + b".hlo")
    shutil.copy(os.path.join(os.path.dirname(__file__), "data",
                             "known_trip_count.hlo"), hlo)
    assert cli.main(["collectives", hlo, "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["source"].endswith("mat\\xffmul.hlo")


SOURCE = (
    "# -*- coding: latin-1 -*-\n"
    "# caf\xe9\n"
    "# a form feed: \x0c and a line separator: \u2028 mid-line\n"
    "def f(a: 'f32[8,8]'):\n"
    "    return a @ a.T\n")


def _compiled_json(path, capsys):
    import json
    assert cli.main(["compile", str(path), "--mesh", "x=2", "--shard", "a=x,_",
                     "--format", "json"]) == 0, capsys.readouterr().err
    return json.loads(capsys.readouterr().out)


def test_a_latin1_source_and_python_s_line_numbers(tmp_path, capsys):
    """A coding declaration is honoured (in the import and the source view),
    and lines are numbered as Python numbers them: a form feed or U+2028
    does not end a line."""
    from irshard.reporting import htmlreport
    path = tmp_path / "lat.py"
    path.write_bytes(SOURCE.replace("\u2028", "").encode("latin-1"))
    report = _compiled_json(path, capsys)
    (line,) = {c["source"]["line"] for c in report["collectives"]}
    assert line == 5
    lines = htmlreport.read_sources(
        report, readable=htmlreport.loaded_files())["lat.py"]
    assert lines[1] == "# caf\xe9" and lines[line - 1] == "    return a @ a.T"
    assert cli.main(["compile", str(path), "--mesh", "x=2", "--shard", "a=x,_",
                     "--format", "html", "-o", str(tmp_path / "lat.html")]) == 0
    # UTF-8, with a real U+2028 inside a comment.
    utf8 = tmp_path / "sep.py"
    utf8.write_text(SOURCE.replace("latin-1", "utf-8"), encoding="utf-8")
    report = _compiled_json(utf8, capsys)
    (line,) = {c["source"]["line"] for c in report["collectives"]}
    lines = htmlreport.read_sources(
        report, readable=htmlreport.loaded_files())["sep.py"]
    assert line == 5 and lines[line - 1] == "    return a @ a.T" and len(lines) == 5
    assert htmlreport.source_lines("a\r\nb\rc\x0cd\u2028e\n") == \
        ["a", "b", "c\x0cd\u2028e"]


API_CASES = [
    (dict(rules="**=x"), "rules='**=x': expected a list of (pattern, spec) pairs"),
    (dict(static_argnums="0"), "static_argnums='0': expected an argument number"),
    (dict(static_argnums=[True]), "static_argnums=[True]"),
    (dict(grad=5), "grad=5: expected True, an argument name, or a list of names"),
    (dict(target=5), "target=5: expected a string (as --target)"),
    (dict(profile=["p.json"]), "profile=['p.json']: expected a string"),
    (dict(out_shardings=[1]), "out_shardings: not a pytree prefix of the outputs"),
    (dict(constraints="dot_general=x"), "constraints='dot_general=x': expected a list"),
    (dict(platform="xpu"), "platform='xpu': expected 'cpu' or 'gpu' or 'tpu'"),
    (dict(axis_types=3), "axis_types=3: expected a string"),
    (dict(explain="yes"), "explain='yes': expected True or False"),
    (dict(stage="hlo"), "stage 'hlo': the report reads optimized or partitioned"),
]


def _matmul(a, b):
    return (a @ b).sum()


@pytest.mark.parametrize("kwargs, message", API_CASES)
def test_api_arguments_of_the_wrong_type(kwargs, message):
    import jax
    import jax.numpy as jnp

    import irshard
    x = jax.ShapeDtypeStruct((8, 8), jnp.float32)
    with pytest.raises(irshard.UsageError) as e:
        irshard.compile(_matmul, x, x, mesh="x=2", **kwargs)
    assert message in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize("kwargs, message", [
    (dict(seed="a"), "seed='a': expected an integer"),
    (dict(rtol=-1), "rtol=-1: expected a non-negative number"),
    (dict(atol=float("nan")), "atol=nan"),
    (dict(repeat=0), "repeat=0: expected a positive integer"),
    (dict(ranges=[("a", (0, 1))]), "ranges="),
    (dict(check=1), "check=1: expected True or False"),
])
def test_run_arguments_of_the_wrong_type(kwargs, message):
    import jax.numpy as jnp

    import irshard
    with pytest.raises(irshard.UsageError) as e:
        irshard.run(_matmul, jnp.ones((8, 8)), jnp.ones((8, 8)), mesh="x=2", **kwargs)
    assert message in str(e.value)


@pytest.mark.parametrize("devices", [2.5, 0, -1, True, "4", 100000])
def test_configure_refuses_what_would_break_jax(devices):
    import irshard
    with pytest.raises(irshard.UsageError, match="expected a whole number of "
                                                 "devices from 1 to 2048"):
        irshard.configure(devices=devices)


def test_an_abstract_mesh_and_an_int_static_argnum():
    import jax
    import jax.numpy as jnp
    from jax.sharding import AbstractMesh

    import irshard
    x = jax.ShapeDtypeStruct((8, 8), jnp.float32)
    try:
        abstract = AbstractMesh((2,), ("x",))
    except TypeError:
        abstract = AbstractMesh((("x", 2),))
    with pytest.raises(irshard.UsageError, match="a jax.sharding.Mesh .with "
                                                 "devices., not AbstractMesh"):
        irshard.compile(_matmul, x, x, mesh=abstract)
    # An int, as jax.jit takes it: the first argument is static.
    with pytest.raises(irshard.UsageError, match="'a' matches no input; the "
                                                 "inputs are b"):
        irshard.compile(_matmul, x, x, mesh="x=2", static_argnums=0,
                        rules=[("a", "x,_")])


def test_another_platform_s_plugin_stays_quiet():
    # libtpu (installed for TPU targets) printed its start-up failures
    # before the error line.
    done = run_irshard("compile", MATMUL, "--mesh", "x=2,y=2", "--platform", "gpu")
    assert done.returncode == 2
    assert done.stderr.startswith("irshard: error: platform 'gpu' is not available")
    assert done.stderr.count("\n") == 1, done.stderr


@pytest.mark.parametrize("argv, message", [
    (["--override-shard", "a=x"], "(rule --override-shard a=x) has 1 entry"),
    (["--override-shard", "c=x"], "--override-shard c=x: 'c' matches no input"),
    (["--shard", "a=x,_", "--override-shard", "a=z,_"],
     "(rule --override-shard a=z,_): unknown mesh axis 'z'"),
])
def test_messages_name_the_option_given(argv, message, capsys):
    assert cli.main(["compile", MATMUL, "--mesh", "x=2,y=2", *argv]) == 2
    assert message in capsys.readouterr().err


def test_an_override_given_again_says_it_replaces_the_earlier(capsys):
    # The last given wins (a suggestion's, appended to a command, takes
    # over), and the report says so.
    import json
    assert cli.main(["compile", MATMUL, "--mesh", "x=2,y=2", "--override-shard",
                     "a=x,_", "--override-shard", "a=_,y", "--format", "json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["inputs"][0]["sharding"] == ["_", "y"]
    assert report["notes"] == ["--override-shard a=_,y replaces the earlier "
                               "--override-shard a=x,_"]
    assert cli.main(["compile", MATMUL, "--mesh", "x=2,y=2", "--override-shard",
                     "a=x,_", "--override-shard", "a=x,_", "--format", "json"]) == 0
    assert "notes" not in json.loads(capsys.readouterr().out)
