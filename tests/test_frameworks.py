"""The step as its framework compiles it: a step jitted by Flax NNX
(`nnx.jit`, updating the model and optimizer in place), Equinox
(`eqx.filter_jit(donate="all")`) or as Penzai's trainer jits it (named
donation, static configuration) gives, through the API and the command
line, the collectives, bytes, aliased inputs and outputs of plain JAX's
compile of the framework's own jitted object."""

import json
import os
import re

import pytest

from tests.conftest import require, run_irshard

PROGRAMS = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                        "programs", "frameworks")

# (module, step, mesh, what the framework needs installed)
STEPS = [
    ("flax_nnx", "train_step", "data=2,model=2", ("flax", "optax")),
    ("equinox_step", "make_step", "batch=4", ("equinox", "optax")),
    ("penzai_style", "step_fn", "data=4", ("optax",)),
    ("penzai_trainer", "step_fn", "data=4", ("penzai", "optax")),
]


def _program(name, needs):
    import importlib
    for module in needs:
        require(module, f"the {name} step")
    return importlib.import_module(f"tests.programs.frameworks.{name}")


def aliased(hlo_text):
    """How many inputs the executable lets XLA reuse for its outputs."""
    header = next(line for line in hlo_text.splitlines()
                  if line.startswith("HloModule"))
    return len(re.findall(r"\{[\d,\s]*\}: \(\d+", header)) + \
        len(re.findall(r"\(\d+, \{[\d,\s]*\}\)", header.split("buffer_donor=")[-1])
            if "buffer_donor=" in header else [])


def plain_jax(step, args, tmp_path):
    """Plain JAX's compile of the framework's own jitted object: its
    collectives read back from its HLO by irshard's reader."""
    import jax
    from irshard.collectives import dumps
    lowered = step.lower(*args)
    # A framework's Compiled wraps JAX's (equinox's has no as_text).
    compiled = lowered.compile()
    compiled = getattr(compiled, "compiled", compiled)
    text = compiled.as_text()
    path = tmp_path / "plain.hlo"
    path.write_text(text)
    (report,), _ = dumps.reports(str(path), "optimized", None)
    inner = getattr(lowered, "lowered", lowered)
    outputs = len(jax.tree_util.tree_leaves(inner.out_info))
    return report.totals(), aliased(text), outputs


def summary(totals):
    return totals["count"], totals["by_kind"], totals["bytes_per_run"], \
        totals["wire_bytes_per_run"]


@pytest.mark.parametrize("name,fn,mesh,needs", STEPS, ids=[s[0] for s in STEPS])
def test_the_api_compiles_the_frameworks_own_jitted_step(name, fn, mesh, needs,
                                                          tmp_path):
    import irshard
    module = _program(name, needs)
    step = getattr(module, fn)
    expected, aliases, outputs = plain_jax(step, module.args(), tmp_path)
    report = irshard.compile(step, *module.args(), mesh=mesh)
    assert summary(report.totals()) == summary(expected)
    assert aliased(report.stage("optimized")) == aliases
    assert sum(i.donated for i in report.inputs) == aliases
    assert len(report.outputs) == outputs
    assert expected["count"] > 0


@pytest.mark.parametrize("name,fn,mesh,needs", STEPS, ids=[s[0] for s in STEPS])
def test_the_command_line_compiles_the_same_step(name, fn, mesh, needs, tmp_path):
    module = _program(name, needs)
    expected, aliases, outputs = plain_jax(getattr(module, fn), module.args(),
                                           tmp_path)
    done = run_irshard("compile", os.path.join(PROGRAMS, f"{name}.py"),
                       "--fn", fn, "--args", "args", "--mesh", mesh,
                       "--format", "json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert summary(report["totals"]) == summary(expected)
    assert sum(bool(i.get("donated")) for i in report["inputs"]) == aliases
    assert len(report["outputs"]) == outputs


def test_nnx_in_place_updates_are_outputs_named_after_their_inputs():
    """The step returns only the loss; `nnx.jit` adds the model's and the
    optimizer's new state, which irshard keeps (XLA would otherwise prune
    the backward pass and the update) and names after the inputs."""
    import irshard
    module = _program("flax_nnx", ("flax", "optax"))
    report = irshard.compile(module.train_step, *module.args(),
                             mesh="data=2,model=2")
    names = [o.name for o in report.outputs]
    assert names[-1] == "result"
    assert "updated(model)/up/kernel/value" in names
    assert any(n.startswith("updated(optimizer)/opt_state/") for n in names)
    inputs = {i.name: i for i in report.inputs}
    # The kernels keep the sharding the model was created with.
    assert inputs["model/up/kernel/value"].sharding_label == "_,model"
    assert inputs["x"].sharding_label == "data,_"


def test_rules_override_the_jitted_steps_own_input_shardings():
    import irshard
    module = _program("penzai_style", ("optax",))
    plain = irshard.compile(module.step_fn, *module.args(), mesh="data=4")
    ruled = irshard.compile(module.step_fn, *module.args(), mesh="data=4",
                            rules=[("batch/**", "_,_")])
    assert plain.totals()["by_kind"].get("all-reduce")
    assert ruled.totals()["count"] == 0
    inputs = {i.name: i for i in ruled.inputs}
    assert inputs["batch/x"].sharding_label == "_,_"
    assert {i.name: i for i in plain.inputs}["batch/x"].sharding_label == "data,_"
    # Donated by name, as the step's own jit says; the empty state_vars
    # donates nothing and is no error.
    assert inputs["state/0/w1"].donated and not inputs["batch/x"].donated


def test_rules_leave_the_jitted_objects_own_lowering_alone():
    """JAX caches the jitted object's lowering for the same arguments: the
    rules of one compile do not stay on it for the next, nor on a
    `Lowered` the user gave to `irshard.report`."""
    import irshard
    module = _program("penzai_style", ("optax",))
    plain = irshard.compile(module.step_fn, *module.args(), mesh="data=4")
    irshard.compile(module.step_fn, *module.args(), mesh="data=4",
                    rules=[("batch/**", "_,_")])
    again = irshard.compile(module.step_fn, *module.args(), mesh="data=4")
    assert again.totals() == plain.totals() and again.totals()["count"] > 0
    assert [i.sharding_label for i in again.inputs] == \
        [i.sharding_label for i in plain.inputs]
    lowered = module.step_fn.lower(*module.args())
    before = lowered.as_text()
    irshard.report(lowered)
    assert lowered.as_text() == before


def test_jit_arguments_as_jax_jit_takes_them():
    import irshard
    import jax
    import jax.numpy as jnp
    from jax.sharding import PartitionSpec as P

    def f(a, b, scale):
        return {"y": scale * a @ b, "z": a.sum()}

    a = jnp.ones((64, 64))
    report = irshard.compile(f, a, a, 2.0, mesh="x=4",
                             in_shardings=(P("x"), None), static_argnames="scale",
                             out_shardings={"y": P(None, "x"), "z": None},
                             donate_argnums=1)
    outputs = {o.name: o for o in report.outputs}
    assert outputs["result/y"].sharding_label == "_,x"
    inputs = {i.name: i for i in report.inputs}
    assert inputs["b"].donated and not inputs["a"].donated
    assert inputs["a"].sharding_label == "x,_"
    # The same through the function's own jax.jit.
    jitted = jax.jit(f, static_argnames="scale", donate_argnums=1,
                     in_shardings=None)
    again = irshard.compile(jitted, a, a, 2.0, mesh="x=4",
                            in_shardings=(P("x"), None),
                            out_shardings={"y": P(None, "x"), "z": None})
    assert again.totals() == report.totals()


@pytest.mark.parametrize("kwargs,message", [
    (dict(out_shardings={0: object()}), "out_shardings[0]: <object"),
    (dict(out_shardings=(None, None, None)), "out_shardings: not a pytree prefix"),
    (dict(donate_argnums="a"), "donate_argnums='a': expected"),
    (dict(static_argnames=3), "static_argnames=3: expected"),
    (dict(donate_argnames=("nope",)), "donate_argnames nope: 'nope' matches no input"),
    (dict(context=3), "context=3: expected a context manager"),
    (dict(shardings=(None, None), in_shardings=(None, None)),
     "shardings and in_shardings are the same argument"),
])
def test_jit_argument_mistakes_are_one_short_line(kwargs, message):
    import irshard
    import jax.numpy as jnp
    kwargs = {"mesh": "x=4", **kwargs}

    def f(a, b):
        return a @ b

    a = jnp.ones((64, 64))
    with pytest.raises(irshard.UsageError) as raised:
        irshard.compile(f, a, a, **kwargs)
    text = str(raised.value)
    assert "\n" not in text and len(text) <= 240
    if message is not None:
        assert message in text


def test_report_of_a_lowering_the_user_already_has(tmp_path):
    """`irshard.report` takes the `Lowered` the user made (nothing traced
    again): the same collectives and aliasing as plain JAX's compile."""
    import irshard
    module = _program("flax_nnx", ("flax", "optax"))
    lowered = module.train_step.lower(*module.args())
    expected, aliases, outputs = plain_jax(module.train_step, module.args(),
                                           tmp_path)
    report = irshard.report(lowered)
    assert summary(report.totals()) == summary(expected)
    assert aliased(report.stage("optimized")) == aliases
    assert len(report.outputs) == outputs
    assert report.mesh.names == ("data", "model")
    with pytest.raises(irshard.UsageError, match="expected a jax.stages.Lowered"):
        irshard.report(object())


def test_context_is_entered_around_tracing(tmp_path):
    """Logical axis names mean mesh axes only in the step's context: with
    `--context` (`context=`) irshard compiles the program plain JAX does
    in that context, without it another one."""
    import irshard
    import jax
    module = _program("logical_rules", ("flax",))
    # A new jit each time: JAX keeps a jitted function's trace for the same
    # arguments and mesh, and the rules are not part of that key.
    with module.context():
        lowered = jax.jit(module.layer).lower(*module.args())
    expected = irshard.report(lowered).totals()
    given = irshard.compile(jax.jit(module.layer), *module.args(),
                            mesh="data=2,model=2", context=module.context)
    assert summary(given.totals()) == summary(expected)
    assert module.ENTERED, "the context was never entered"
    path = os.path.join(PROGRAMS, "logical_rules.py")
    done = run_irshard("compile", path, "--fn", "forward", "--args", "args",
                       "--context", "context", "--mesh", "data=2,model=2",
                       "--format", "json")
    assert done.returncode == 0, done.stderr
    assert summary(json.loads(done.stdout)["totals"]) == summary(expected)
    done = run_irshard("compile", path, "--fn", "forward", "--args", "args",
                       "--context", "nothing", "--mesh", "data=2,model=2")
    assert done.returncode == 2
    assert done.stderr.startswith("irshard: error: --context nothing: no function")


def test_penzai_style_named_donation_from_the_command_line():
    """An argument the step's own jit donates by name that has no array
    (Penzai's empty `state_vars`) donates nothing and is no error."""
    _program("penzai_style", ("optax",))
    done = run_irshard("compile", os.path.join(PROGRAMS, "penzai_style.py"),
                       "--fn", "step_fn", "--args", "args", "--mesh", "data=4",
                       "--donate", "state_vars", "--format", "json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    donated = [i["name"] for i in report["inputs"] if i.get("donated")]
    assert donated and all(n.startswith("state/") for n in donated)


def _keras():
    os.environ.setdefault("KERAS_BACKEND", "jax")
    return _program("keras_fit", ("keras",))


@pytest.mark.parametrize("name,fn,mesh,needs", STEPS, ids=[s[0] for s in STEPS])
def test_rows_name_the_models_lines_not_the_caller(name, fn, mesh, needs):
    """Each row's line is the step's own program (the frameworks'
    transforms and trainers are plumbing), its stack holds each frame once,
    and nothing of it is this test's line that called irshard."""
    import irshard
    module = _program(name, needs)
    report = irshard.compile(getattr(module, fn), *module.args(), mesh=mesh)
    program = f"{name}.py"
    here = os.path.basename(__file__)
    assert report.collectives
    for c in report.collectives:
        assert c.source is not None and c.source.file.endswith(program), c.source
        where = [(s.file, s.line) for s in c.source.stack]
        assert len(where) == len(set(where))
        assert not any(f.endswith(here) for f, _ in where)


def test_keras_rows_name_their_layers_by_scope():
    """Keras' layers and trainer are plumbing: the step has no line of the
    model's own, and each row's scope names its layer or optimizer."""
    import irshard
    module = _keras()
    report = irshard.compile(module.model, *module.batch(), keras_fit=True,
                             mesh="batch=2,model=2")
    assert all(c.source is None for c in report.collectives)
    scopes = {c.scope for c in report.collectives}
    assert "adam" in scopes and any("down" in (s or "") for s in scopes)
    text = report.to_text(group_by="scope")
    assert "\nby scope (" in text and "\n  adam  " in text


def test_keras_fit_compiles_the_step_fit_runs(tmp_path):
    """`--keras-fit`: the train step Keras' `fit` jits for a
    `ModelParallel` model, with its own layouts, against plain JAX's
    compile of that jitted object; inputs and outputs by Keras' names."""
    import irshard
    from irshard.loading import kerasfit
    module = _keras()
    step, (state, data), _ = kerasfit.train_step(module.model, "model",
                                                 module.batch())
    expected, aliases, outputs = plain_jax(step, (state, data), tmp_path)
    report = irshard.compile(module.model, *module.batch(), keras_fit=True,
                             mesh="batch=2,model=2")
    assert summary(report.totals()) == summary(expected)
    assert expected["by_kind"].get("all-gather")
    assert aliased(report.stage("optimized")) == aliases > 0
    assert len(report.outputs) == outputs
    inputs = {i.name: i for i in report.inputs}
    assert inputs["sequential/up/kernel"].sharding_label == "_,model"
    assert inputs["adam/sequential_up_kernel_momentum"].donated
    assert inputs["x"].sharding_label == "batch,_" and not inputs["x"].donated
    names = [o.name for o in report.outputs]
    assert names[0] == "logs/loss"
    assert "updated(sequential)/up/kernel" in names

    done = run_irshard("compile", os.path.join(PROGRAMS, "keras_fit.py"),
                       "--fn", "model", "--keras-fit", "--args", "batch",
                       "--mesh", "batch=2,model=2", "--shard",
                       "sequential/down/kernel=_,_", "--format", "json")
    assert done.returncode == 0, done.stderr
    ruled = json.loads(done.stdout)
    down = {i["name"]: i for i in ruled["inputs"]}["sequential/down/kernel"]
    # The rule's sharding, on an input the step donates and had pinned to
    # its model-sharded output: still donated, no longer that output's size.
    assert down["sharding"] == ["_", "_"] and down["donated"]


@pytest.mark.parametrize("flags,message", [
    (("--fn", "batch", "--keras-fit", "--args", "batch"),
     "--keras-fit: 'batch' is a function, not a Keras model"),
    (("--fn", "model", "--keras-fit"), "--keras-fit needs one batch"),
])
def test_keras_fit_mistakes_are_one_error_line(flags, message):
    _keras()
    done = run_irshard("compile", os.path.join(PROGRAMS, "keras_fit.py"),
                       *flags, "--mesh", "batch=2,model=2")
    assert done.returncode == 2
    assert done.stderr.startswith(f"irshard: error: {message}"), done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.tpu
def test_a_mesh_of_described_tpu_devices_compiles_for_the_target(tmp_path):
    """Shardings on a mesh of `get_topology_desc` devices (MaxText's
    `train_compile.py`) under `--target`: the step's own devices, the
    collectives of plain JAX's compile for that slice."""
    require("libtpu", "compiling for a TPU slice")
    from irshard.collectives import dumps
    done = run_irshard("compile", os.path.join(PROGRAMS, "topology_mesh.py"),
                       "--fn", "step", "--args", "args", "--mesh",
                       "data=2,model=2", "--target", "tpu-v5e:2x2",
                       "--format", "json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    script = (
        "import sys; sys.path.insert(0, sys.argv[1]);"
        "import topology_mesh as m;"
        "open(sys.argv[2], 'w').write("
        "m.step.lower(*m.args()).compile().as_text())")
    hlo = tmp_path / "plain.hlo"
    import subprocess
    import sys
    plain = subprocess.run([sys.executable, "-c", script, PROGRAMS, str(hlo)],
                           capture_output=True, text=True)
    assert plain.returncode == 0, plain.stderr
    (expected,), _ = dumps.reports(str(hlo), "optimized", None)
    assert summary(report["totals"]) == summary(expected.totals())
    assert report["totals"]["count"] > 0


@pytest.mark.parametrize("fn", ["layer", "forward"])
def test_context_gives_logical_names_their_axes(fn):
    """The rules of `--context` decide the program, for a plain function as
    for a jitted one: with them the output is laid over `data`, without
    them replicated; a context that raises is the user's error line."""
    _program("logical_rules", ("flax",))
    path = os.path.join(PROGRAMS, "logical_rules.py")

    def output_sharding(*extra):
        done = run_irshard("compile", path, "--fn", fn, "--args", "args",
                           "--mesh", "data=2,model=2", "--format", "json",
                           *extra)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)["outputs"][0]["sharding"]

    assert output_sharding("--context", "context") == ["data", "_"]
    assert output_sharding() == ["_", "_"]
    done = run_irshard("compile", path, "--fn", fn, "--args", "args",
                       "--mesh", "data=2,model=2", "--context", "broken_context")
    assert done.returncode == 2
    assert done.stderr.startswith("irshard: error: ") and \
        "RuntimeError: no rules today" in done.stderr.splitlines()[0]


def test_report_of_an_executable_the_user_compiled(tmp_path):
    """`irshard.report` of a `Compiled` reads its own executable: the same
    collectives, aliasing and outputs as plain JAX's, nothing compiled
    again; only its optimized stage can be printed."""
    import irshard
    module = _program("flax_nnx", ("flax", "optax"))
    compiled = module.train_step.lower(*module.args()).compile()
    expected, aliases, outputs = plain_jax(module.train_step, module.args(),
                                           tmp_path)
    report = irshard.report(compiled)
    assert summary(report.totals()) == summary(expected)
    assert sum(i.donated for i in report.inputs) == aliases
    assert len(report.outputs) == outputs
    assert report.mesh.names == ("data", "model")
    # Its own module (XLA prints a backend config's keys in either order).
    own = getattr(compiled, "compiled", compiled).as_text().splitlines()
    printed = report.stage("optimized").splitlines()
    assert printed[0] == own[0] and len(printed) == len(own)
    with pytest.raises(irshard.UsageError, match="keeps only its optimized HLO"):
        report.stage("stablehlo")


@pytest.mark.slow
@pytest.mark.parametrize("name, fn, mesh, needs", STEPS,
                         ids=[s[0] for s in STEPS])
def test_run_check_passes_on_the_steps_own_values(name, fn, mesh, needs,
                                                  capsys):
    """`run --check` and `irshard.run(check=True)` on the values the step's
    `args` returns (not random ones) pass."""
    import irshard
    from irshard import cli
    module = _program(name, needs)
    step = getattr(module, fn)
    result = irshard.run(step, *module.args(), mesh=mesh, check=True)
    assert result.run.passed
    assert {t.origin for t in result.run.inputs} == {"given"}
    path = os.path.join(PROGRAMS, f"{name}.py")
    assert cli.main(["run", path, "--fn", fn, "--args", "args", "--mesh", mesh,
                     "--check", "--format", "json"]) == 0
    run = json.loads(capsys.readouterr().out)["run"]
    assert run["check"]["passed"]
    assert {t["source"] for t in run["inputs"]} == {"given"}


@pytest.mark.slow
def test_run_check_passes_on_keras_fits_own_step(capsys):
    """`fit`'s own step, on the model's weights and the batch given, checked
    against one device from the command line and the API."""
    import irshard
    from irshard import cli
    module = _keras()
    result = irshard.run(module.model, *module.batch(), keras_fit=True,
                         mesh="batch=2,model=2", check=True)
    assert result.run.passed
    assert {t.origin for t in result.run.inputs} == {"given"}
    assert cli.main(["run", os.path.join(PROGRAMS, "keras_fit.py"), "--fn", "model",
                     "--keras-fit", "--args", "batch", "--mesh", "batch=2,model=2",
                     "--check", "--format", "json"]) == 0
    run = json.loads(capsys.readouterr().out)["run"]
    assert run["check"]["passed"] and run["check"]["outputs"]
