"""Why each collective exists (`--explain`), and what XLA warned about
(findings): on the heat equation, a forced reshard XLA can only do by
replicating, a tensor-parallel MLP's gradient and the GPT training step."""

import json
import os

import jax
import jax.numpy as jnp
import pytest

import irshard
from irshard.collectives import explain
from irshard.collectives import values
from irshard.core.specs import parse_mesh
from tests.conftest import EXAMPLES, run_irshard

HEAT = os.path.join(EXAMPLES, "heat1d.py")

# `a + b` is sharded like its operands (y,_,x); the constraint wants
# (_,x+y,_): no all-to-all gets there, and XLA's partitioner replicates.
REMAT = '''\
import jax, jax.numpy as jnp
from jax.sharding import PartitionSpec as P
def f(a: "f32[8@y,16,8@x]", b: "f32[8@y,16,8@x]"):
    c = jax.lax.with_sharding_constraint(a + b, P(None, ("x", "y"), None))
    return jnp.tanh(c) * 2
'''


def report_json(*args):
    done = run_irshard("compile", *args, "--format", "json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_heat_set_gathers_are_explained_back_to_d_and_the_scatter():
    report = report_json(HEAT, "--fn", "simulate_set", "--mesh", "x=4", "--explain")
    gathers = [c for c in report["collectives"] if c["kind"] == "all-gather"]
    assert len(gathers) == 2
    for c in gathers:
        why = c["why"]
        # What is read: d itself, or the interior update computed from it,
        # sharded over x because d is.
        assert why["operand"]["value"] in ("input d", "add")
        assert why["operand"]["sharding"] == ["x"]
        assert why["origins"] == {"x": {"kind": "input", "name": "d"}}
        # What needs it whole: the scatter `.at[1:-1].set` makes, line 25.
        assert why["needed"]["op"] == "scatter"
        assert why["needed"]["sharding"] == ["_"]
        assert why["needed"]["source"]["line"] == 25
        assert "scatter" in why["note"]
    assert {c["why"]["operand"]["value"] for c in gathers} == {"input d", "add"}
    # The neighbour exchanges are halos of the shifted slices d[2:], d[:-2].
    for c in report["collectives"]:
        if c["kind"] == "collective-permute":
            assert c["why"]["operand"]["value"] == "slice"
            assert "halo" in c["why"]["note"]


def test_heat_roll_permutes_are_halos_of_the_roll():
    report = report_json(HEAT, "--fn", "simulate_roll", "--mesh", "x=4", "--explain")
    assert {c["kind"] for c in report["collectives"]} == {"collective-permute"}
    for c in report["collectives"]:
        assert c["why"]["operand"]["source"]["line"] == 29
        assert c["why"]["origins"]["x"] == {"kind": "input", "name": "d"}


def test_text_explains_each_collective_once_and_only_with_explain():
    plain = run_irshard("compile", HEAT, "--fn", "simulate_set", "--mesh", "x=4")
    explained = run_irshard("compile", HEAT, "--fn", "simulate_set", "--mesh", "x=4",
                            "--explain")
    assert "\nwhy\n" not in plain.stdout
    assert '"why"' not in report_json(HEAT, "--fn", "simulate_set", "--mesh", "x=4")
    text = explained.stdout.split("\nwhy\n", 1)[1].split("\ntotals:", 1)[0]
    assert text.count("heat1d.py:25 (step_set)\n") == 4
    assert "reads input d sharded x; scatter at heat1d.py:25 (step_set) gets it " \
           "replicated" in text


def test_involuntary_remat_is_a_finding_at_its_line(write):
    path = write("remat.py", REMAT)
    report = report_json(path, "--mesh", "x=4,y=2")
    findings = report["findings"]
    assert len(findings) == 1
    found = findings[0]
    assert found["kind"] == "involuntary-remat"
    assert (found["from"], found["to"]) == ("y,_,x", "_,x+y,_")
    assert found["op"] == "add"
    assert (found["source"]["file"], found["source"]["line"]) == ("remat.py", 4)
    text = run_irshard("compile", path, "--mesh", "x=4,y=2").stdout
    assert "findings: 1\n  involuntary-remat  add at remat.py:4 (f): from y,_,x " \
           "to _,x+y,_" in text


def test_remat_budget_fails_on_a_finding_and_passes_without(write):
    path = write("remat.py", REMAT)
    breach = run_irshard("compile", path, "--mesh", "x=4,y=2", "--budget", "remat==0")
    assert breach.returncode == 1
    assert "remat==0" in breach.stderr
    # Inputs sharded as the constraint wants: nothing to rematerialize.
    fine = run_irshard("compile", path, "--mesh", "x=4,y=2", "--budget", "remat==0",
                       "--shard", "a=_,x+y,_", "--shard", "b=_,x+y,_")
    assert fine.returncode == 0, fine.stderr
    assert "findings:" not in fine.stdout


def test_remat_gathers_are_explained_with_the_finding(write):
    path = write("remat.py", REMAT)
    report = report_json(path, "--mesh", "x=4,y=2", "--explain")
    first, second = report["collectives"]
    assert first["why"]["operand"] == {
        "value": "add", "sharding": ["y", "_", "x"],
        "source": first["why"]["operand"]["source"],
        "origins": {"x": {"kind": "input", "name": "a"}}}
    assert first["why"]["needed"]["sharding"] == ["y", "_", "_"]
    # The second gathers the first's result the rest of the way.
    assert second["why"]["operand"]["value"] == f"the result of {first['name']}"
    assert second["why"]["operand"]["sharding"] == ["y", "_", "_"]
    assert second["why"]["needed"]["sharding"] == ["_", "_", "_"]
    assert second["why"]["origins"] == {"y": {"kind": "input", "name": "a"}}
    assert all("involuntary full rematerialization" in c["why"]["note"]
               for c in report["collectives"])


def test_gradient_all_reduces_read_partial_sums():
    def loss(w1, w2, x):
        return jnp.mean((jax.nn.relu(x @ w1) @ w2) ** 2)

    f32 = jnp.float32
    args = (jax.ShapeDtypeStruct((64, 256), f32), jax.ShapeDtypeStruct((256, 64), f32),
            jax.ShapeDtypeStruct((16, 64), f32))
    report = irshard.compile(loss, *args, mesh="dp=2,tp=2",
                             shardings=("_,tp", "tp,_", "dp,_"), grad="w1,w2",
                             explain=True)
    assert report.collectives
    for c in report.collectives:
        assert c.kind == "all-reduce"
        why = c.why
        read = [why.operand, *why.combined[1:]]
        assert len(read) == c.operands
        for value in read:
            # A partial sum: the dot that made it reads a value sharded over
            # the reduced axes.
            over = value.sums
            assert over and all(set(c.mesh_axes) & set("+".join(v.sharding).split("+"))
                                for v in over)
    by_axes = {tuple(c.mesh_axes): c for c in report.collectives}
    # The weight gradients are summed over the batch, sharded over dp.
    assert by_axes[("dp",)].why.to_json()["origins"] == {
        "dp": {"kind": "input", "name": "x", "rule": "shardings['x']"}}


def test_gpt_weight_gathers_read_the_weights():
    import sys
    sys.path.insert(0, EXAMPLES)
    try:
        import gpt
    finally:
        sys.path.remove(EXAMPLES)
    report = irshard.compile(
        gpt.train_step, *gpt.example_args(), mesh="fsdp=8",
        rules=[("**/embed", "fsdp,_"), ("**/w*", "fsdp,_"), ("batch/*", "fsdp,_")],
        explain=True)
    gathers = [c for c in report.collectives if c.kind == "all-gather"]
    weights = {t.name for t in report.inputs if t.name.startswith("params/")}
    read = [c.why.operand.what for c in gathers]
    assert all(name.startswith("input params/") for name in read)
    assert {name[len("input "):] for name in read} <= weights
    for c in gathers:
        assert c.why.operand.sharding == ("fsdp", "_")
        assert c.why.needed.sharding == ("_", "_")
    # The gradients: one combined all-reduce of partial sums over the
    # batch, which is sharded over fsdp (as XLA partitions it).
    (reduce,) = [c for c in report.collectives if c.kind == "all-reduce"]
    combined = reduce.why.combined
    assert len(combined) == reduce.operands > 1
    sharded = [v.sharding for value in combined for v in value.sums]
    assert sharded and all(s[0] == "fsdp" for s in sharded)


def test_explain_is_deterministic():
    args = (HEAT, "--fn", "simulate_set", "--mesh", "x=4", "--explain", "--format",
            "json")
    assert run_irshard("compile", *args).stdout == run_irshard("compile", *args).stdout


# ---------------------------------------------------------------------------
# Pieces


@pytest.mark.parametrize("spec, shape, local, expected", [
    # Fits: kept.
    (("x", "_"), (8, 4), (2, 4), ("x", "_")),
    # Propagation said one thing, XLA's shapes say another.
    (("_", "x+y", "_"), (8, 16, 8), (4, 16, 2), ("y", "_", "x")),
    (None, (8, 8), (2, 8), ("x", "_")),
    # Rank or divisibility does not match: nothing to say.
    (("x",), (8,), (3,), ("x",)),
    (("x", "_"), (8, 8), (64,), ("x", "_")),
])
def test_fit_reads_the_sharding_from_the_shapes(spec, shape, local, expected):
    mesh = parse_mesh("x=4,y=2")
    assert explain.fit(spec, shape, local, mesh) == expected


def test_needed_removes_gathered_and_moves_split_axes():
    mesh = parse_mesh("x=4,y=2")

    class Inst:
        attrs = {"dimensions": "{1}"}

    assert explain._needed("all-gather", ("x+y", "_"), frozenset({"y"}), Inst, mesh) \
        == ("x", "_")
    assert explain._needed("all-reduce", ("x", "_"), frozenset({"y"}), Inst, mesh) \
        == ("x", "_")
    assert explain._needed("all-to-all", ("x", "_"), frozenset({"x"}), Inst, mesh) \
        == ("_", "x")
    assert explain._needed("all-gather", None, frozenset({"x"}), Inst, mesh) is None


@pytest.mark.parametrize("op_name, primitive", [
    ("jit(f)/while/body/closed_call/slice", "slice"),
    ("jit(train_step)/transpose(jvp())/dot_general", "dot_general"),
    ("jit(f)/jvp(bqhd,bkhd->bhqk)/dot_general", "dot_general"),
    ("jit(f)/scatter-add", "scatter-add"),
    ("", None),
    (None, None),
])
def test_primitive_of_an_op_name(op_name, primitive):
    assert values._primitive(op_name) == primitive


# ---------------------------------------------------------------------------
# Findings from XLA's log, in each form it prints shardings

_PREFIX = "W1122 04:14:40.734557   32182 spmd_partitioner.cc:652] "


def _remat_line(source: str, target: str, op: str = "%add.0 = f32[4,16,2]{2,1,0} "
                "add(%param, %param)") -> str:
    return (f"{_PREFIX}Involuntary full rematerialization. The compiler cannot go "
            f"from sharding {source} to {target} efficiently for HLO operation "
            f"{op}, sharding={source}, metadata={{op_name=\"jit(f)/add\" "
            f"stack_frame_id=12}}. As the last resort, SPMD partitioner "
            f"materializes the full tensor.")


@pytest.mark.parametrize("mesh, source, target, shape, expected", [
    # Iota tile assignments, transposed.
    ("x=4,y=2", "{devices=[2,1,4]<=[4,2]T(1,0)}", "{devices=[1,8,1]<=[8]}",
     "f32[4,16,2]", ("y,_,x", "_,x+y,_")),
    # An explicit device list.
    ("x=2", "{devices=[2,1]0,1}", "{devices=[1,2]0,1}", "f32[4,16]", ("x,_", "_,x")),
    # Replicated, and a partly replicated tiling.
    ("x=2,y=2", "{devices=[2,1,2]<=[4] last_tile_dim_replicate}", "{replicated}",
     "f32[4,16]", ("x,_", "replicated")),
])
def test_remat_findings_in_mesh_axes(mesh, source, target, shape, expected):
    from irshard.collectives import findings
    line = _remat_line(source, target, f"%add.0 = {shape}{{1,0}} add(%p, %q)")
    seen = []

    def locate(name, frame_id):
        seen.append((name, frame_id))
        return None

    found = findings.parse("other chatter\n" + line + "\n" + line + "\n",
                           parse_mesh(mesh), locate)
    assert len(found) == 1          # the same warning twice is one finding
    (f,) = found
    assert (f.from_sharding, f.to_sharding) == expected
    assert (f.op, f.shape, f.op_name) == ("add", shape, "jit(f)/add")
    assert seen[0] == ("jit(f)/add", 12)
    assert f.message.startswith("Involuntary full rematerialization.")
    assert "As the last resort" not in f.message


def test_a_sharding_that_is_no_mesh_tiling_is_kept_as_xla_prints_it():
    from irshard.collectives import findings
    line = _remat_line("{devices=[3,1]0,1,2}", "{replicated}",
                       "%add.0 = f32[3,16]{1,0} add(%p, %q)")
    (f,) = findings.parse(line, parse_mesh("x=4"), lambda name, frame: None)
    assert f.from_sharding == "{devices=[3,1]0,1,2}"


def test_a_crash_recording_origins_leaves_a_report_without_them(monkeypatch):
    """Shardy's debug option that records origins can crash natively on IR
    it does not expect; the pass runs in a child process, so the report is
    made all the same, without origins, and says so."""
    import signal

    from irshard.backend import passrunner
    run = passrunner.run_pipeline

    def crashing(operation, pipeline):
        if "debug-sharding-origins" in pipeline:
            os.kill(os.getpid(), signal.SIGSEGV)
        run(operation, pipeline)

    monkeypatch.setattr(passrunner, "run_pipeline", crashing)

    def loss(w, x):
        return jnp.sum(x @ w)

    f32 = jnp.float32
    args = (jax.ShapeDtypeStruct((64, 32), f32), jax.ShapeDtypeStruct((16, 64), f32))
    report = irshard.compile(loss, *args, mesh="dp=4", shardings=("_,_", "dp,_"),
                             explain=True)
    assert [c.kind for c in report.collectives] == ["all-reduce"]
    assert report.collectives[0].why.origins == {}
    assert report.notes[-1] == ("Shardy crashed (SIGSEGV) recording where each "
                                "sharding came from; shardings are shown "
                                "without their origins")
    # Without the crash, the same program's origins are there.
    monkeypatch.setattr(passrunner, "run_pipeline", run)
    report = irshard.compile(loss, *args, mesh="dp=4", shardings=("_,_", "dp,_"),
                             explain=True)
    assert report.collectives[0].why.to_json()["origins"] == \
        {"dp": {"kind": "input", "name": "x", "rule": "shardings['x']"}}
    assert not any("crashed" in note for note in report.notes)


def test_a_child_that_fails_without_a_signal_hands_over_to_this_process(monkeypatch):
    """A child that fails by an exception (an MLIR diagnostic) is no crash:
    the passes run again here, and fail or succeed as they do here."""
    from jaxlib.mlir import ir

    from irshard import backend
    from irshard.backend import passrunner

    def failing(operation, pipeline):
        raise RuntimeError("a diagnostic")

    monkeypatch.setattr(passrunner, "run_pipeline", failing)
    with backend.ir_context():
        module = ir.Module.parse("func.func private @unused() { return }\n"
                                 "func.func @main() { return }")
        done, crash = backend.run_registered_passes_isolated(
            module, "builtin.module(symbol-dce)")
        assert crash is None
        assert "@unused" not in str(done) and "@main" in str(done)


PERMUTES = '''\
import jax
from jax.sharding import PartitionSpec as P

def reorder(a: "f32[16@x+y,8]"):
    return jax.lax.with_sharding_constraint(a * 2, P(("y", "x"), None))

def ring(a: "f32[16@x,8]"):
    def body(block):
        n = jax.lax.axis_size("x")
        return jax.lax.ppermute(block, "x", [(j, (j + 1) % n) for j in range(n)])
    return jax.shard_map(body, in_specs=P("x"), out_specs=P("x"))(a)
'''


@pytest.mark.parametrize("fn, mesh, note", [
    ("reorder", "x=2,y=2", "whole shards move to other devices: the value keeps its "
                "shape per device, laid over the devices along x,y in another order"),
    ("ring", "x=4", "the program's own ppermute: each device sends its block to the "
             "device the permutation names, along x"),
])
def test_collective_permutes_say_what_they_are_for(write, fn, mesh, note):
    """A device-order change and an explicit ppermute are no halo exchange
    (the heat equation's roll is: test_heat_roll_permutes_are_halos)."""
    report = report_json(write("permutes.py", PERMUTES), "--fn", fn,
                         "--mesh", mesh, "--explain")
    [permute] = report["collectives"]
    assert permute["kind"] == "collective-permute"
    assert permute["why"]["note"].startswith(note)
    assert "halo" not in permute["why"]["text"]
    assert "the the" not in permute["why"]["text"]


def test_a_collective_is_matched_to_its_partitioned_one_by_its_whole_stack():
    """Collectives alike in kind, axes, shape, op and innermost line (a
    helper's matmul that every projection calls) are told apart by the
    stack that called the helper: each report collective takes the
    partitioned collective made along its own stack, whatever their order."""
    from types import SimpleNamespace
    from irshard.collectives.explain import _match
    from irshard.core.frames import SourceLocation

    def at(caller):
        inner = SourceLocation("model.py", 3, "dense")
        return SourceLocation("model.py", 3, "dense",
                              (inner, SourceLocation("model.py", caller, "step")))

    def collective(name, caller):
        return SimpleNamespace(name=name, kind="all-gather", mesh_axes=("x",),
                               shape=(64, 128), op_name="jit(step)/dot_general",
                               source=at(caller), is_async=False, operands=1)

    partitioned = [collective("all-gather.1", 10), collective("all-gather.2", 11)]
    report = [collective("all-gather.7", 11), collective("all-gather.8", 10)]
    found = _match(report, partitioned, SimpleNamespace(instructions={}))
    assert [p.name for p in found["all-gather.7"]] == ["all-gather.2"]
    assert [p.name for p in found["all-gather.8"]] == ["all-gather.1"]


def _gpt():
    import sys
    sys.path.insert(0, EXAMPLES)
    try:
        import gpt
    finally:
        sys.path.remove(EXAMPLES)
    return gpt


def test_explain_reads_the_shardings_xlas_own_propagation_chose(tmp_path):
    """XLA propagates a jitted module after converting it to HLO, whose
    reshapes and broadcasts are not JAX's `broadcast_in_dim`. `--explain`
    propagates the module in those forms: every sharding its propagation
    gives a value is one XLA's own Shardy gave (read from XLA's dump of it).
    Propagated as JAX traced it, the GPT step's backward activations were
    sharded over `fsdp` on the model dimension, which XLA never did."""
    import re
    from irshard.apiprogram import PROGRAM_ARGUMENTS, lowering
    from irshard.backend import compiling, shardy
    from jax._src.lib import xla_client as xc
    gpt = _gpt()
    rules = [("**/embed", "fsdp,tp"), ("**/attn/w[qkv]", "fsdp,tp"),
             ("**/attn/wo", "tp,fsdp"), ("**/mlp/w_in", "fsdp,tp"),
             ("**/mlp/w_out", "tp,fsdp"), ("batch/*", "fsdp,_")]
    lowered = lowering(gpt.train_step, gpt.example_args(), "fsdp=4,tp=2",
                       dict(PROGRAM_ARGUMENTS, rules=rules))
    module = lowered.module
    to_parameters, to_outputs = shardy.propagation_freedom(module)
    options = compiling._compile_options(
        module, 8, [d.id for d in lowered.devices],
        {"xla_dump_to": str(tmp_path), "xla_dump_hlo_pass_re": "shardy-xla"},
        to_parameters, to_outputs)
    lowered.devices[0].client.compile_and_load(
        module, xc.DeviceList(tuple(lowered.devices)), options)
    (theirs,) = [p for p in tmp_path.rglob("*after_propagation.mlir")
                 if "train_step" in str(p)]
    value = re.compile(r"sdy\.sharding = #sdy\.sharding_per_value<\[<@mesh, \[[^]]*\]>\]>")
    xla = set(value.findall(theirs.read_text()))
    ours = set(value.findall(str(lowered.propagate().operation)))
    assert xla and len(ours) > 10
    assert ours <= xla, sorted(ours - xla)


def test_a_broadcast_is_propagated_in_hlos_forms():
    """`broadcast_in_dim` that stretches a size-1 dimension becomes HLO's
    reshape (dropping it) and broadcast; one that only adds size-1
    dimensions, a reshape; any other broadcast stays as it is."""
    from jax._src.interpreters import mlir as jax_mlir
    from jaxlib.mlir import ir
    from irshard.backend import hloforms
    text = """
    func.func public @main(%a: tensor<4x1xf32>, %b: tensor<4xf32>, %c: tensor<4xf32>)
        -> (tensor<4x8xf32>, tensor<4x1xf32>, tensor<4x8xf32>) {
      %0 = stablehlo.broadcast_in_dim %a, dims = [0, 1] : (tensor<4x1xf32>) -> tensor<4x8xf32>
      %1 = stablehlo.broadcast_in_dim %b, dims = [0] : (tensor<4xf32>) -> tensor<4x1xf32>
      %2 = stablehlo.broadcast_in_dim %c, dims = [0] : (tensor<4xf32>) -> tensor<4x8xf32>
      return %0, %1, %2 : tensor<4x8xf32>, tensor<4x1xf32>, tensor<4x8xf32>
    }"""
    with jax_mlir.make_ir_context():
        module = ir.Module.parse(text)
        assert hloforms.as_hlo(module) == 2
        body = module.body.operations[0].regions[0].blocks[0].operations
        ops = [(op.name, str(op.results[0].type),
                str(op.attributes["broadcast_dimensions"])
                if "broadcast_dimensions" in op.attributes else "")
               for op in body if len(op.results)]
    assert ops == [
        ("stablehlo.reshape", "tensor<4xf32>", ""),
        ("stablehlo.broadcast_in_dim", "tensor<4x8xf32>", "array<i64: 0>"),
        ("stablehlo.reshape", "tensor<4x1xf32>", ""),
        ("stablehlo.broadcast_in_dim", "tensor<4x8xf32>", "array<i64: 0>")]


def test_a_forward_collective_is_explained_by_the_forward_op_of_its_line():
    """`out @ wo` makes a forward dot and backward dots at one line, of one
    shape; the forward's partial-sum all-reduce is explained by the
    forward's dot (JAX names it `jvp()/dot_general`), which reads the
    attention's output, not the backward's, which reads a gradient. No
    value any collective reads is left without its sharding: JAX's `mul`,
    `sub` and `add_any` are found as the StableHLO ops they lower to."""
    gpt = _gpt()
    rules = [("**/embed", "fsdp,tp"), ("**/attn/w[qkv]", "fsdp,tp"),
             ("**/attn/wo", "tp,fsdp"), ("**/mlp/w_in", "fsdp,tp"),
             ("**/mlp/w_out", "tp,fsdp"), ("batch/*", "fsdp,_")]
    report = irshard.compile(gpt.train_step, *gpt.example_args(), mesh="fsdp=4,tp=2",
                             rules=rules, explain=True)
    line = next(i for i, text in enumerate(open(gpt.__file__), 1)
                if 'return out @ p["wo"]' in text)
    forward = [c for c in report.collectives if c.kind == "all-reduce"
               and c.source.line == line and "transpose" not in c.op_name]
    assert forward
    for c in forward:
        (value,) = [v for v in c.why.operand.sums if v.source is not None]
        assert (value.what, value.source.line) == ("reshape", line - 1)
        assert value.origins["tp"].rule == "rules **/attn/w[qkv]=fsdp,tp"
    unknown = [c.why.text for c in report.collectives if "not recorded" in c.why.text]
    assert not unknown, unknown[0]
