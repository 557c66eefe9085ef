"""Explicit mesh axes: programs written with shardings in their types
(`reshard`, `auto_axes`, sharding-in-types rules, `jax.shard_map`) compile
and run as under plain `jax.jit` with `jax.set_mesh` on the same mesh."""

import json
import math
import os
import re
import textwrap

import jax
import jax.numpy as jnp
import pytest
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P

import irshard
from irshard.loading.loader import load_module
from tests.conftest import EXAMPLES, run_irshard

EXAMPLE = os.path.join(EXAMPLES, "explicit.py")
EXPLICIT = ("--mesh", "dp=2,tp=4", "--axis-types", "explicit")

STEP = textwrap.dedent("""\
    import jax
    import jax.numpy as jnp
    from jax.sharding import PartitionSpec as P, reshard


    def step(x: "f32[64@dp,512]", w: "f32[512,256@tp]"):
        h = reshard(jnp.tanh(x @ w), P("dp", None))
        return jnp.sum(h * h, axis=1)


    def ambiguous(x: "f32[64@dp,512@tp]", w: "f32[512@tp,256]"):
        return jnp.tanh(x @ w)
    """)

_COLLECTIVE = re.compile(
    r"= (\S+) (all-gather|all-reduce|reduce-scatter|all-to-all|"
    r"collective-permute)(?:-start)?\(")


def collectives_of(hlo_text: str) -> list[tuple[str, str]]:
    """(kind, result type) of each collective in an HLO module's text."""
    return [(kind, re.sub(r"\{[0-9,]*\}", "", shape))
            for shape, kind in _COLLECTIVE.findall(hlo_text)]


def explicit_mesh(shape=(2, 4), names=("dp", "tp")):
    return jax.make_mesh(shape, names, axis_types=(AxisType.Explicit,) * len(names),
                         devices=jax.devices()[:math.prod(shape)])


def plain_jit(fn, specs, shapes, mesh):
    """The collectives of `fn` compiled by plain `jax.jit` under
    `jax.set_mesh(mesh)`, its inputs sharded by `specs`."""
    avals = [jax.ShapeDtypeStruct(s, jnp.float32, sharding=NamedSharding(mesh, p))
             for s, p in zip(shapes, specs)]
    with jax.set_mesh(mesh):
        compiled = jax.jit(fn).lower(*avals).compile()
    return collectives_of(compiled.as_text())


def report_collectives(report) -> list[tuple[str, str]]:
    return [(c.kind, f"{c.dtype}[{','.join(map(str, c.shape))}]")
            for c in report.collectives]


def test_reshard_needs_explicit_axes(write):
    path = write("step.py", STEP)
    result = run_irshard("compile", path, "--fn", "step", "--mesh", "dp=2,tp=4")
    assert result.returncode == 2
    first, hint = result.stderr.splitlines()
    assert first.startswith(f"irshard: error: {path}:7: in step: ")
    assert "of type Auto" in first
    assert hint == ("  hint: the program shards in its types (reshard, auto_axes, "
                    "sharded types), which needs explicit mesh axes: give "
                    "--axis-types explicit (or per axis, e.g. --axis-types "
                    "dp=explicit)")


def test_explicit_axes_compile_as_plain_jit(write):
    path = write("step.py", STEP)
    result = run_irshard("compile", path, "--fn", "step", *EXPLICIT,
                         "--format", "json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["mesh"]["axes"] == [
        {"name": "dp", "size": 2, "type": "explicit"},
        {"name": "tp", "size": 4, "type": "explicit"}]
    assert [t["sharding"] for t in report["inputs"]] == [["dp", "_"], ["_", "tp"]]
    assert report["outputs"][0]["sharding"] == ["dp"]
    # reshard(P("dp", None)) of a [dp, tp] value: the tp shards are gathered,
    # at the reshard's line.
    assert [(c["kind"], c["mesh_axes"], c["source"]["line"])
            for c in report["collectives"]] == [("all-gather", ["tp"], 7)]

    def step(x, w):
        h = jax.sharding.reshard(jnp.tanh(x @ w), P("dp", None))
        return jnp.sum(h * h, axis=1)

    assert plain_jit(step, [P("dp", None), P(None, "tp")],
                     [(64, 512), (512, 256)], explicit_mesh()) == [
        (c["kind"], f"{c['dtype']}[{','.join(map(str, c['shape']))}]")
        for c in report["collectives"]]


def test_sharding_type_errors_name_the_line_with_jax_advice_below(write):
    path = write("step.py", STEP)
    result = run_irshard("compile", path, "--fn", "ambiguous", *EXPLICIT)
    assert result.returncode == 2
    lines = result.stderr.splitlines()
    assert lines[0].startswith(f"irshard: error: {path}:12: in ambiguous: "
                               f"ShardingTypeError: Contracting dimensions are "
                               f"sharded")
    assert lines[0].endswith(".")
    assert lines[1].startswith("  Please specify the output sharding")
    assert "Traceback" not in result.stderr


def test_example_matches_plain_jit_and_runs_checked():
    loss = load_module(EXAMPLE).loss
    report = irshard.compile(
        loss, jax.ShapeDtypeStruct((64, 512), jnp.float32),
        jax.ShapeDtypeStruct((512, 1024), jnp.float32),
        jax.ShapeDtypeStruct((1024, 512), jnp.float32),
        mesh=explicit_mesh(),
        shardings=(P("dp", None), P(None, "tp"), P("tp", None)))
    expected = plain_jit(loss, [P("dp", None), P(None, "tp"), P("tp", None)],
                         [(64, 512), (512, 1024), (1024, 512)], explicit_mesh())
    assert report_collectives(report) == expected
    assert sorted(c.kind for c in report.collectives) == ["all-gather", "all-reduce"]
    assert {c.mesh_axes for c in report.collectives} == {("tp",), ("dp",)}

    result = run_irshard("run", EXAMPLE, "--fn", "loss", *EXPLICIT, "--check",
                         "--format", "json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["run"]["check"]["passed"]


def test_mixed_axes_and_the_api_spec_form():
    # dp explicit, tp left to propagation: the type carries dp only, and
    # reshard may name dp alone.
    def f(x, w):
        return jnp.tanh(x @ w)

    args = (jax.ShapeDtypeStruct((16, 32), jnp.float32),
            jax.ShapeDtypeStruct((32, 8), jnp.float32))
    report = irshard.compile(f, *args, mesh="dp=2,tp=4",
                             axis_types="dp=explicit",
                             shardings=("dp,tp", "tp,_"))
    assert [a["type"] for a in report.to_json()["mesh"]["axes"]
            if "type" in a] == ["explicit"]
    mixed = jax.make_mesh((2, 4), ("dp", "tp"),
                          axis_types=(AxisType.Explicit, AxisType.Auto),
                          devices=jax.devices()[:8])
    assert report_collectives(report) == plain_jit(
        f, [P("dp", "tp"), P("tp", None)], [(16, 32), (32, 8)], mixed)
    assert [c.kind for c in report.collectives] == ["all-reduce"]
    assert "mesh dp=2,tp=4 dp=explicit,tp=auto" in report.to_text()


def test_a_jax_mesh_brings_its_axis_types():
    def f(x):
        return jax.sharding.reshard(x * 2, P(None))

    report = irshard.compile(f, jax.ShapeDtypeStruct((64,), jnp.float32),
                             mesh=explicit_mesh((8,), ("x",)), shardings=("x",))
    assert [(c.kind, c.mesh_axes) for c in report.collectives] == [
        ("all-gather", ("x",))]
    with pytest.raises(irshard.UsageError, match="brings its own axis types"):
        irshard.compile(f, jax.ShapeDtypeStruct((64,), jnp.float32),
                        mesh=explicit_mesh((8,), ("x",)), axis_types="auto")


COLLECTIVE_MATMUL = textwrap.dedent("""\
    import functools

    import jax
    import jax.numpy as jnp
    from jax.sharding import PartitionSpec as P

    SIZE = 4


    @functools.partial(jax.shard_map, in_specs=(P(None, "x"), P("x", None)),
                       out_specs=P())
    def matmul_psum(a, b):
        return jax.lax.psum(a @ b, "x")


    def shift_matmul(a: "f32[8,64@x]", b: "f32[64@x,16]"):
        # The shard_map tutorial's collective matmul: each device's block of
        # b travels the ring while the partial products accumulate.
        @functools.partial(jax.shard_map, in_specs=(P(None, "x"), P("x", None)),
                           out_specs=P())
        def body(a, b):
            acc = a @ b
            for _ in range(SIZE - 1):
                b = jax.lax.ppermute(b, "x", [(i, (i + 1) % SIZE) for i in range(SIZE)])
                a = jax.lax.ppermute(a, "x", [(i, (i + 1) % SIZE) for i in range(SIZE)])
                acc = acc + a @ b
            return jax.lax.psum(acc, "x") / SIZE
        return body(a, b)


    def step(a: "f32[8,64@x]", b: "f32[64@x,16]"):
        return matmul_psum(a, b)
    """)


@pytest.mark.slow
@pytest.mark.parametrize("types", [None, "explicit"])
def test_shard_map_under_either_axis_type(write, types):
    path = write("cm.py", COLLECTIVE_MATMUL)
    options = ["--mesh", "x=4"] + (["--axis-types", types] if types else [])
    for fn, kinds in (("step", ["all-reduce"]),
                      ("shift_matmul", ["collective-permute"] * 6 + ["all-reduce"])):
        result = run_irshard("run", path, "--fn", fn, *options, "--format", "json")
        assert result.returncode == 0, result.stderr
        report = json.loads(result.stdout)
        assert sorted(c["kind"] for c in report["collectives"]) == sorted(kinds)
    # A module-level jax.shard_map keeps the first context mesh it was
    # called under, so one device cannot re-run it: one line says what to do.
    result = run_irshard("run", path, "--fn", "step", *options, "--check")
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        "irshard: error: --check: the single-device reference cannot run "
        "'step': its shard_map is bound to the x=4 mesh (one it names, or the "
        "context mesh it was first called under: JAX keeps that one), and one "
        "device cannot stand in for it; name a single-device reference with "
        "--reference NAME"]


@pytest.mark.parametrize("types,message", [
    ("explicit,auto,auto", "has 3 entries but --mesh dp=2,tp=4 has 2 axes"),
    ("manual", "'manual' is not an axis type"),
    ("pp=explicit", "names axis 'pp', which --mesh dp=2,tp=4 does not have"),
    ("dp=explicit,auto", "mixes named and unnamed entries"),
])
def test_bad_axis_types_are_one_error_line(write, types, message):
    path = write("step.py", STEP)
    result = run_irshard("compile", path, "--fn", "step", "--mesh", "dp=2,tp=4",
                         "--axis-types", types)
    assert result.returncode == 2
    assert len(result.stderr.splitlines()) == 1
    assert result.stderr.startswith("irshard: error: --axis-types")
    assert message in result.stderr


def test_axis_types_need_a_python_function(tmp_path):
    module = tmp_path / "m.mlir"
    module.write_text('module {\n  sdy.mesh @mesh = <["x"=2]>\n  func.func '
                      '@main(%a: tensor<4xf32>) -> tensor<4xf32> {\n'
                      '    return %a : tensor<4xf32>\n  }\n}\n')
    result = run_irshard("compile", str(module), "--axis-types", "explicit")
    assert result.returncode == 2
    assert "--axis-types does not apply to a .mlir module" in result.stderr
