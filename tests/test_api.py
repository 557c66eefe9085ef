"""The Python API, in-process: pytrees named by path, sharding rules and
prefixes, static arguments, typed keys, gradients by name, budgets."""

import dataclasses
import os
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P

import irshard
from irshard.testing import assert_budget

F32 = jnp.float32


class Batch(NamedTuple):
    x: jax.ShapeDtypeStruct
    y: jax.ShapeDtypeStruct


@dataclasses.dataclass(frozen=True)
class Opt:
    lr: float


def loss(params, batch):
    hidden = jax.nn.relu(batch.x @ params["w1"])
    return jnp.mean((hidden @ params["w2"] - batch.y) ** 2)


def params_and_batch():
    params = {"w1": jax.ShapeDtypeStruct((64, 256), F32),
              "w2": jax.ShapeDtypeStruct((256, 64), F32)}
    batch = Batch(jax.ShapeDtypeStruct((32, 64), F32),
                  jax.ShapeDtypeStruct((32, 64), F32))
    return params, batch


MEGATRON = [("params/w1", "_,tp"), ("params/w2", "tp,_"), ("batch/*", "dp,_")]


def test_leaves_are_named_by_path():
    params, batch = params_and_batch()
    report = irshard.compile(loss, params, batch, mesh="dp=2,tp=2", rules=MEGATRON,
                             grad="params")
    assert [(t.name, t.sharding) for t in report.inputs] == [
        ("params/w1", ("_", "tp")), ("params/w2", ("tp", "_")),
        ("batch/x", ("dp", "_")), ("batch/y", ("dp", "_"))]
    # --grad params: only the parameters' gradients, named after them.
    assert [t.name for t in report.outputs] == ["grad(params)/w1", "grad(params)/w2"]
    kinds = sorted(c.kind for c in report.collectives)
    assert kinds and set(kinds) == {"all-reduce"}
    assert all(c.source.file.endswith("test_api.py") for c in report.collectives)
    assert report.to_json()["inputs"][0]["name"] == "params/w1"
    assert "params/w1" in report.to_text()


def test_first_rule_wins_and_rules_override_a_leafs_own_sharding():
    mesh = jax.make_mesh((2, 2), ("dp", "tp"), axis_types=(AxisType.Auto,) * 2)
    own = jax.ShapeDtypeStruct((64, 256), F32, sharding=NamedSharding(mesh, P("dp", None)))
    params = {"w1": own, "w2": jax.ShapeDtypeStruct((256, 64), F32)}
    _, batch = params_and_batch()
    report = irshard.compile(loss, params, batch, mesh="dp=2,tp=2",
                             rules=[("params/w2", "tp,_"), ("params/*", "_,_")])
    shardings = {t.name: t.sharding for t in report.inputs}
    assert shardings["params/w2"] == ("tp", "_")          # the first match
    assert shardings["params/w1"] == ("_", "_")           # a rule beats its own
    report = irshard.compile(loss, params, batch, mesh="dp=2,tp=2")
    assert {t.name: t.sharding for t in report.inputs}["params/w1"] == ("dp", "_")


def test_shardings_as_a_pytree_prefix():
    params, batch = params_and_batch()
    report = irshard.compile(loss, params, batch, mesh=jax.make_mesh(
        (2, 2), ("dp", "tp"), axis_types=(AxisType.Auto,) * 2),
        shardings=({"w1": P(None, "tp"), "w2": "tp,_"}, P("dp")))
    assert [t.sharding for t in report.inputs] == [
        ("_", "tp"), ("tp", "_"), ("dp", "_"), ("dp", "_")]


@pytest.mark.parametrize("rules, message", [
    ([("params/w3", "_,tp")], "rules params/w3=_,tp: 'params/w3' matches no "
                              "input; the inputs are params/w1, params/w2, "
                              "batch/x, batch/y"),
    ([("params/*", "tp")], "sharding 'tp' for input 'params/w1' (rule rules "
                           "params/*=tp) has 1 entry but the tensor has shape "
                           "[64,256]"),
    ([("batch/*", "_,zz")], "input 'batch/x' (rule rules batch/*=_,zz): "
                            "unknown mesh axis 'zz'"),
    ([("params/**/", "_,tp")], "path pattern 'params/**/' has an empty segment"),
])
def test_rule_errors_name_the_leaf_and_the_rule(rules, message):
    params, batch = params_and_batch()
    with pytest.raises(irshard.UsageError) as e:
        irshard.compile(loss, params, batch, mesh="dp=2,tp=2", rules=rules)
    assert message in str(e.value)


def step(params, opt: Opt, batch, *, clip=1.0):
    grads = jax.grad(loss)(params, batch)
    grads = jax.tree_util.tree_map(lambda g: jnp.clip(g, -clip, clip), grads)
    return jax.tree_util.tree_map(lambda p, g: p - opt.lr * g, params, grads)


def test_static_arguments_and_concrete_values():
    """A config object is static; concrete arrays are run on as given."""
    rng = np.random.default_rng(0)
    params = {"w1": rng.normal(size=(64, 256)).astype(np.float32),
              "w2": rng.normal(size=(256, 64)).astype(np.float32)}
    batch = Batch(rng.normal(size=(32, 64)).astype(np.float32),
                  rng.normal(size=(32, 64)).astype(np.float32))
    report = irshard.run(step, params, Opt(lr=0.5), batch, mesh="dp=2,tp=2",
                         rules=MEGATRON, static_argnums=(1,), check=True)
    assert [t.name for t in report.inputs] == [
        "params/w1", "params/w2", "batch/x", "batch/y"]
    expected = jax.jit(step, static_argnums=1)(params, Opt(lr=0.5), batch)
    np.testing.assert_allclose(report.results["w1"], expected["w1"], rtol=1e-5,
                               atol=1e-6)
    assert report.run.passed
    assert [t.origin for t in report.run.inputs] == ["given"] * 4


def test_typed_keys_and_scalars():
    def sample(key, scale, x):
        noise = jax.random.normal(key, x.shape, x.dtype)
        return x + scale * noise, jax.random.split(key)[0]

    x = jax.ShapeDtypeStruct((64, 8), jnp.bfloat16)
    report = irshard.run(sample, jax.random.key(3), 0.5, x, mesh="x=4",
                         rules=[("x", "x,_")], check=True)
    assert [(t.name, t.dtype) for t in report.inputs] == [
        ("key", "key<fry>"), ("scale", "f32"), ("x", "bf16")]
    # A Python float is weakly typed, as in jax.jit: bf16 + 0.5 * bf16 stays bf16.
    assert [(t.name, t.dtype) for t in report.outputs] == [
        ("result/0", "bf16"), ("result/1", "key<fry>")]
    assert report.run.passed


def test_grad_errors():
    params, batch = params_and_batch()
    with pytest.raises(irshard.SpecError, match="--grad opt: 'opt' is not an "
                                                "argument of 'loss'"):
        irshard.compile(loss, params, batch, mesh="dp=2,tp=2", grad="opt")


def test_budgets(capsys):
    params, batch = params_and_batch()
    report = irshard.compile(loss, params, batch, mesh="dp=2,tp=2", rules=MEGATRON,
                             grad="params")
    total = report.totals()["bytes_per_run"]
    outcomes = report.check_budget("all-reduce<=3", f"bytes<={total}",
                                   "all-gather==0", "memory<=1MiB")
    assert all(o.passed for o in outcomes)
    assert_budget(report, "all-reduce@dp<=2")
    with pytest.raises(irshard.BudgetExceeded) as e:
        report.check_budget(f"bytes<{total}", "all-reduce@tp==0", "collectives<=9")
    assert str(e.value).splitlines()[0] == "2 of 3 budgets exceeded"
    assert f"bytes<{total}: {total} bytes per run" in str(e.value)
    with pytest.raises(AssertionError, match=r"1 of 1 collective budgets exceeded"):
        assert_budget(report, "all-reduce@dp<1")
    with pytest.raises(irshard.UsageError, match="the mesh has no axis 'fsdp'"):
        report.check_budget("bytes@fsdp<=1KiB")
    with pytest.raises(irshard.SpecError, match="unknown quantity 'gathers'"):
        report.check_budget("gathers<=1")


def test_stages_of_a_report():
    params, batch = params_and_batch()
    report = irshard.compile(loss, params, batch, mesh="dp=2,tp=2", rules=MEGATRON)
    assert report.stage("stablehlo").startswith("module @jit_loss")
    assert "sdy.sharding_origins" in report.stage("propagated")
    assert "HloModule" in report.stage("partitioned")
    assert "HloModule" in report.stage("optimized")
    with pytest.raises(irshard.UsageError, match="unknown stage 'lowered'"):
        report.stage("lowered")


def test_configure_is_a_no_op_with_enough_devices_and_says_when_not():
    jax.devices()                  # JAX started, as any test before this one may
    irshard.configure(devices=4)
    with pytest.raises(irshard.UsageError, match="JAX has already started with 8 "
                                                 "cpu devices"):
        irshard.configure(devices=64)


def test_mesh_objects_and_their_devices():
    devices = jax.devices()[:4][::-1]
    mesh = jax.sharding.Mesh(np.array(devices).reshape(2, 2), ("dp", "tp"),
                             axis_types=(AxisType.Auto,) * 2)
    params, batch = params_and_batch()
    report = irshard.compile(loss, params, batch, mesh=mesh, rules=MEGATRON)
    assert str(report.mesh) == "dp=2,tp=2"
    assert report.stages.compiled.compiled.devices == tuple(devices)


def test_64_bit_inputs_leave_the_callers_64_bit_mode_alone():
    """A function declaring 64-bit inputs is traced, compiled and run with
    JAX's 64-bit mode on, and the caller's process (a notebook, a test
    suite) has it as before afterwards."""
    import jax
    import numpy as np

    import irshard

    def wide(a: "i64[8@x]", w: "f64[8]"):
        return a + 1, w * 2

    assert not jax.config.jax_enable_x64
    report = irshard.compile(wide, mesh="x=2")
    assert [t.dtype for t in report.outputs] == ["i64", "f64"]
    assert not jax.config.jax_enable_x64
    done = irshard.run(wide, mesh="x=2")
    assert [np.asarray(r).dtype for r in done.results] == [np.int64, np.float64]
    assert not jax.config.jax_enable_x64


def test_the_public_api_is_listed_and_each_name_resolves():
    """`__all__` names the API (what `compile` and `run` return included),
    each name resolves, and `dir(irshard)` lists them."""
    import irshard
    assert {"compile", "run", "report", "Report", "search", "compare",
            "IrshardError"} <= set(irshard.__all__)
    for name in irshard.__all__:
        assert getattr(irshard, name) is not None, name
    assert set(irshard.__all__) <= set(dir(irshard))
    from irshard.api import Report
    assert irshard.Report is Report


def _heat():
    import importlib.util
    from tests.conftest import EXAMPLES
    path = os.path.join(EXAMPLES, "heat1d.py")
    spec = importlib.util.spec_from_file_location("heat1d_for_api", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return path, module


def _command(*args, json_format=True):
    import subprocess
    import sys
    done = subprocess.run([sys.executable, "-m", "irshard", *args,
                           *(("--format", "json") if json_format else ())],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_the_command_line_and_the_api_write_the_same_json(tmp_path):
    """`compile`, `run --check` and `diff` give the same JSON, byte for
    byte, from the command line and from Python, for the same program."""
    path, heat = _heat()
    rod = jax.ShapeDtypeStruct((1024,), jnp.float32)
    command = _command

    roll = irshard.compile(heat.simulate_roll, rod, mesh="x=8", rules=[("*", "x")])
    assert roll.to_json_text() == command("compile", path, "--fn", "simulate_roll",
                                          "--mesh", "x=8")
    checked = irshard.run(heat.simulate_roll, rod, mesh="x=8", rules=[("*", "x")],
                          check=True)
    assert checked.to_json_text() == command("run", path, "--fn", "simulate_roll",
                                             "--mesh", "x=8", "--check")
    a, b = tmp_path / "roll.json", tmp_path / "set.json"
    a.write_text(roll.to_json_text())
    b.write_text(irshard.compile(heat.simulate_set, rod, mesh="x=8",
                                 rules=[("*", "x")]).to_json_text())
    assert irshard.compare(str(a), str(b)).render_json() == \
        command("diff", str(a), str(b))


def test_every_other_command_is_one_library_call_from_both(tmp_path):
    """`show`, `collectives`, `suggest` and `opt` give the same output, byte
    for byte, from the command line and from Python (a suggestion's command
    aside: from Python there is no command line to repeat)."""
    import json
    path, heat = _heat()
    rod = jax.ShapeDtypeStruct((1024,), jnp.float32)
    program = ("--fn", "simulate_set", "--mesh", "x=8")
    assert irshard.show(heat.simulate_set, rod, mesh="x=8",
                        rules=[("*", "x")]).render_json() == \
        _command("show", path, *program)
    hlo = tmp_path / "set.hlo"
    _command("compile", path, *program, "--emit", "optimized", "-o", str(hlo),
             json_format=False)
    found = irshard.collectives_of(str(hlo))
    assert found.reports and found.render_json() == _command("collectives", str(hlo))
    assert found.render_text() == _command("collectives", str(hlo), json_format=False)
    ours = json.loads(irshard.suggest(heat.simulate_set, rod, mesh="x=8",
                                      rules=[("*", "x")], max_candidates=3
                                      ).render_json())
    theirs = json.loads(_command("suggest", path, *program, "--max-candidates", "3",
                                 "--jobs", "1"))
    assert ours.pop("command") == [] and theirs.pop("command")[0] == path
    assert ours == theirs and ours["suggestions"]
    module = tmp_path / "matmul.mlir"
    module.write_text(
        "func.func @main(%arg0: tensor<8x16xf32>, %arg1: tensor<16x8xf32>) "
        "-> tensor<8x8xf32> {\n  %0 = stablehlo.dot_general %arg0, %arg1, "
        "contracting_dims = [1] x [0] : (tensor<8x16xf32>, tensor<16x8xf32>) "
        "-> tensor<8x8xf32>\n  return %0 : tensor<8x8xf32>\n}\n")
    pipeline = 'irshard-annotate{mesh="x=2" args="0=x,_"},sdy-propagation-pipeline'
    propagated = irshard.opt(module.read_text(), pipeline)
    assert '#sdy.sharding<@mesh, [{"x"}, {}]>' in propagated
    assert propagated == _command("opt", str(module), "-p", pipeline,
                                  json_format=False)
    with pytest.raises(irshard.UsageError, match="unexpected argument 'rule'"):
        irshard.show(heat.simulate_set, rod, mesh="x=8", rule=[("*", "x")])



@pytest.mark.slow
def test_search_is_one_library_call_from_both():
    """`search` ranks the same candidates with the same numbers from the
    command line and from Python; only the command each candidate repeats
    differs (from Python there is no file to name)."""
    import json
    import sys
    from tests.conftest import EXAMPLES
    sys.path.insert(0, EXAMPLES)
    try:
        import gpt
    finally:
        sys.path.remove(EXAMPLES)

    def plain(value):
        if isinstance(value, dict):
            return {k: plain(v) for k, v in value.items() if k not in ("args", "command")}
        if isinstance(value, list):
            return [plain(v) for v in value]
        return value

    # The first three candidates compiled, the rest listed as not reached
    # by both.
    ours = irshard.search(gpt.train_step, *gpt.example_args(), devices=2,
                          axes=("data", "fsdp"), max_candidates=3).to_json()
    theirs = json.loads(_command("search", os.path.join(EXAMPLES, "gpt.py"), "--fn",
                                 "train_step", "--args", "example_args", "--devices",
                                 "2", "--axes", "data,fsdp", "--max-candidates", "3",
                                 "--no-cache"))
    assert ours["compiled"] == 3 and len(ours["candidates"]) > 3
    assert plain(ours) == plain(theirs)
    assert ours["winner"]["args"][1:] == theirs["winner"]["args"][5:]


@pytest.mark.slow
def test_devices_and_calibrate_are_one_library_call_from_both():
    """`devices` lists the same devices from both; `calibrate` measures the
    same plan and writes the same fields (its numbers are measured, so
    they differ run to run)."""
    import json
    assert irshard.devices().render_json() == _command("devices", "--mesh", "x=8")
    assert irshard.devices().render_text() == _command("devices", "--mesh", "x=8",
                                                       json_format=False)
    plan = ("--sizes", "4KiB,8KiB,16KiB,32KiB", "--repeats", "1")
    theirs = json.loads(_command("calibrate", "--mesh", "x=2", *plan))
    ours = json.loads(irshard.calibrate("x=2", sizes=[4096, 8192, 16384, 32768],
                                        repeats=1).render_json())

    def shape(value):
        if isinstance(value, dict):
            # How many measurements a band holds out depends on which
            # points stood above the noise.
            return {k: "count" if k == "held_out" else shape(v)
                    for k, v in value.items()}
        if isinstance(value, list):
            return [shape(v) for v in value]
        return type(value).__name__ if isinstance(value, float) else value

    # The streaming curve keeps the points measured above the launch's
    # noise, so which smaller sizes it holds differs run to run; its
    # largest is always kept.
    curves = [found["compute"].pop("bandwidth") for found in (ours, theirs)]
    assert curves[0][-1][0] == curves[1][-1][0]
    assert all(isinstance(b, int) and r > 0 for curve in curves for b, r in curve)
    assert shape(ours) == shape(theirs) and len(ours["measurements"]) == 20
    assert all(m["seconds"] > 0 for m in ours["measurements"])
    with pytest.raises(irshard.UsageError, match="sizes"):
        irshard.calibrate("x=2", sizes="4KiB")


def test_show_and_suggest_take_the_program_arguments_compile_takes():
    """`compile` names each program argument in its signature; `show` and
    `suggest` take the same (`PROGRAM_ARGUMENTS`), with the same defaults."""
    import inspect
    from irshard.apiprogram import PROGRAM_ARGUMENTS
    own = {name: p.default for name, p in inspect.signature(irshard.compile).parameters.items()
           if p.kind is p.KEYWORD_ONLY and name not in ("mesh", "explain", "verify", "jobs", "stage")}
    assert own == PROGRAM_ARGUMENTS
