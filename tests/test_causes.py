"""Each collective's cause (`--explain`), confirmed by a recompile without
it (`--verify`), on small programs written the way real models meet
unexpected collectives (`tests/programs/puzzles/`). Each case also holds
the program without its cause, and both are checked against plain JAX:
`jax.jit` of the program makes the collective, of the counterfactual
does not."""

import importlib
import math
import re

import jax
import jax.numpy as jnp
import pytest
from jax.sharding import NamedSharding, PartitionSpec as P

import irshard
from irshard.core.errors import UsageError
from irshard.reporting import grouping

irshard.configure(8)

_COLLECTIVE = re.compile(
    r"\b(all-gather|all-reduce|all-to-all|reduce-scatter|collective-permute)"
    r"(?:-start)?\(")


def puzzle(name):
    return importlib.import_module(f"tests.programs.puzzles.{name}")


def mesh(shape=(4,), names=("x",)):
    return jax.make_mesh(shape, names, axis_types=(jax.sharding.AxisType.Auto,) * len(names),
                         devices=jax.devices()[:math.prod(shape)])


def plain(fn, args, specs, out=None, shape=(4,), names=("x",), **jit):
    """The collective kinds plain `jax.jit` compiles `fn` to, its inputs
    sharded by `specs` (and its output by `out`) over the mesh (`x=4`)."""
    m = mesh(shape, names)
    shardings = tuple(NamedSharding(m, s) for s in specs)
    if out is not None:
        jit["out_shardings"] = NamedSharding(m, out)
    fresh = lambda *a: fn(*a)      # noqa: E731  (jit caches by function)
    with jax.set_mesh(m):
        text = jax.jit(fresh, in_shardings=shardings, **jit).lower(*args).compile().as_text()
    return sorted(set(_COLLECTIVE.findall(text)))


def verified(name, *rules, mesh="x=4", **options):
    """The puzzle `name` and its report compiled with `--verify` on `mesh`,
    its inputs sharded by `rules` ("path=spec")."""
    p = puzzle(name)
    report = irshard.compile(p.step, *p.args(), mesh=mesh,
                             rules=[tuple(r.split("=")) for r in rules],
                             verify=True, **options)
    return p, report


def causes(report):
    return [(c.kind, c.why.cause) for c in report.collectives if c.why.made_by is None]


def test_a_constraint_against_its_producer_is_the_cause_not_the_matmul(monkeypatch):
    p, report = verified("constraint", "x=x,_")
    [(kind, cause)] = causes(report)
    assert kind == "all-gather"
    assert (cause.decision.kind, cause.decision.source.line) == ("constraint", 16)
    assert (cause.side, cause.verdict) == ("needed", "confirmed")
    assert "dot_general" in report.collectives[0].why.text
    assert "needs" not in report.collectives[0].why.full_text()
    assert plain(p.step, p.args(), [P("x", None), P()]) == ["all-gather"]
    monkeypatch.setattr(p, "CONSTRAINED", False)
    assert plain(p.step, p.args(), [P("x", None), P()]) == []


def test_a_constraint_made_through_a_helper_is_named_at_its_call(monkeypatch):
    """Both constraints go through one helper (`shard`, line 16): each is
    its own decision, named at the line that called the helper, and each
    recompile drops that call's constraint alone. Without the second, the
    all-to-all between them goes (jax 0.12's XLA) or becomes a gather
    (0.10's); then the first, whose recompile removes it, is named."""
    p, report = verified("constraint_helper", "x=x,_")
    found = {c.kind: c.why for c in report.collectives}
    assert set(found) == {"all-gather", "all-to-all"}
    gather, moved = found["all-gather"].cause, found["all-to-all"].cause
    assert (gather.decision.kind, gather.decision.source.line) == ("constraint", 21)
    tried = [(x.decision.source.line, x.verdict) for x in found["all-to-all"].causes]
    assert tried in ([(22, "confirmed"), (21, None)], [(22, "changed"), (21, "confirmed")])
    assert moved.decision.kind == "constraint"
    assert moved.decision.source.line == (22 if tried[0][1] == "confirmed" else 21)
    # One recompile per call, each without that call's constraint alone.
    assert report.notes[-1].startswith("--verify: 2 recompiles")
    assert gather.verdict == moved.verdict == "confirmed"
    assert "all-gather" in plain(p.step, p.args(), [P("x", None), P(), P()])
    monkeypatch.setattr(p, "COLUMNS", False)
    assert "all-gather" not in plain(p.step, p.args(), [P("x", None), P(), P()])


def test_the_dimensions_one_decision_shards_are_followed_through_loops_and_calls():
    """Which decisions shard the batch's dimension, read from Shardy's
    sharding rules: a constraint inside a scanned layer (a while loop's
    carried value, in a function the loop calls) and one on the batch
    flattened with the features (a reshape's merged dimension, its major
    factor the batch) shard it; one on the transposed result's first
    dimension, the features, does not."""
    from irshard.apiprogram import PROGRAM_ARGUMENTS, lowering
    from irshard.collectives.classes import Decisions
    from irshard.core.frames import UserCode

    def step(x, ws):
        def layer(h, w):
            h = jax.lax.with_sharding_constraint(jnp.tanh(h @ w), P("x", None))
            return h, None
        h, _ = jax.lax.scan(layer, x, ws)
        flat = jax.lax.with_sharding_constraint(h.reshape(-1), P("x"))
        return flat, jax.lax.with_sharding_constraint(h.T, P("x", None))

    lowered = lowering(step, (jnp.ones((32, 64)), jnp.ones((3, 64, 64))), "x=4",
                       dict(PROGRAM_ARGUMENTS, rules=[("x", "x,_")]))
    decisions = Decisions(lowered, UserCode(lowered.info.user_dir))
    source = open(__file__).read().splitlines()
    line = lambda text: next(i for i, s in enumerate(source, 1) if text in s)  # noqa: E731
    by_key = {o.key(): o for o, _, _ in decisions.entries}
    assert len(by_key) == 4
    [rule] = [o for o in by_key.values() if o.kind == "input"]
    lines = sorted(o.source.line for o in decisions.sharing([rule], ["x"]))
    assert lines == [line("jnp.tanh(h @ w), P("), line("h.reshape(-1), P(")]
    assert decisions.sharing([rule], ["y"]) == ()


def test_constraints_through_one_helper_are_removed_together():
    """Two calls of the model's constraint helper removed at once: the line
    that made each is read from the program as it was. Once read again
    after the first was dropped, the helper was reached along one path
    only, the second constraint was named by the helper's own line, and
    the recompile had nothing to remove."""
    from irshard.apiprogram import PROGRAM_ARGUMENTS, lowering
    from irshard.collectives.counterfactual import counterfactual
    from irshard.core.frames import SourceLocation, UserCode
    from irshard.reporting.why import Origin
    p = puzzle("constraint_helper")
    lowered = lowering(p.step, p.args(), "x=4", dict(PROGRAM_ARGUMENTS, rules=[("x", "x,_")]))
    file = "constraint_helper.py"
    lines = (21, 22)
    both = Origin("together", "", parts=tuple(
        Origin("constraint", "", SourceLocation(file, line, "step")) for line in lines))
    made = counterfactual(lowered, both, UserCode(lowered.info.user_dir))
    assert made is not None
    stage, removed = made
    assert [part.source.line for part in removed.parts] == list(lines)
    assert "sdy.sharding_constraint" in str(lowered.module)
    assert "sdy.sharding_constraint" not in str(stage.module)


def test_a_sharded_state_s_input_is_opened_with_the_output_it_comes_back_as():
    """A weight jitted with the same sharding in and out, donated (a
    training step's state): opening its input alone, propagation took the
    sharding back from `out_shardings` and the partial sum stayed, so the
    decision was refuted; the recompile opens the output it is donated
    into too, and the cause is confirmed."""
    p = puzzle("fsdp_state")
    m = mesh()
    report = irshard.compile(p.step(m, batch=P()), *p.args(), verify=True)
    [(kind, cause)] = causes(report)
    assert kind == "all-reduce"
    assert (cause.decision.kind, cause.decision.name) == ("input", "w")
    assert cause.verdict == "confirmed", cause.seen
    fresh = lambda *a: p.update(*a)      # noqa: E731
    jitted = lambda weight: jax.jit(fresh, in_shardings=(
        NamedSharding(m, weight), NamedSharding(m, P())),
        out_shardings=NamedSharding(m, weight))
    text = jitted(P("x", None)).lower(*p.args()).compile().as_text()
    assert "all-reduce" in _COLLECTIVE.findall(text)
    assert _COLLECTIVE.findall(jitted(P()).lower(*p.args()).compile().as_text()) == []


def test_a_batch_one_prefix_sharded_is_one_decision():
    """`in_shardings=(w, data)` shards the whole batch with one entry: the
    inputs and the targets are one decision, opened together. Opened
    alone, the targets' sharding kept the loss's partial sum over the
    batch, and every candidate was refuted."""
    p = puzzle("batch_prefix")
    m = mesh()
    report = irshard.compile(p.step(m), *p.args(), verify=True)
    decls = {t.name: t for t in report.inputs}
    assert decls["batch/inputs"].sharding == decls["batch/targets"].sharding
    [(kind, cause)] = causes(report)
    assert kind == "all-reduce"
    assert (cause.decision.kind, cause.decision.name) == ("input", "batch/inputs")
    assert cause.verdict == "confirmed", cause.seen
    # A second `jax.jit` of the step: JAX serves the lowering it cached for
    # the first, its sharding objects the first's. The same decision.
    assert causes(irshard.compile(p.step(m), *p.args(), verify=True)) == [(kind, cause)]
    # Plain JAX: the all-reduce with the batch sharded, none with it whole,
    # and still one with the targets alone left sharded.
    found = lambda data: _COLLECTIVE.findall(      # noqa: E731
        p.step(m, data).lower(*p.args()).compile().as_text())
    assert "all-reduce" in found(P("x"))
    assert found(P()) == []
    half = jax.jit(p.loss, in_shardings=(NamedSharding(m, P()), {
        "inputs": NamedSharding(m, P()), "targets": NamedSharding(m, P("x"))}))
    assert "all-reduce" in _COLLECTIVE.findall(half.lower(*p.args()).compile().as_text())


def test_a_batch_and_the_constraint_that_repeats_it_are_found_together(monkeypatch):
    """The batch sharded by `in_shardings` and again by an activation
    constraint: Shardy names the constraint alone, and dropping it leaves
    the loss's partial sum (the batch still shards the activations). The
    batch (one `in_shardings` entry) shards the dimension the constraint
    does (tied by Shardy's sharding rules): the two removed together
    confirm the cause, in two recompiles. Told nothing of the dimensions,
    the program without the constraint is explained and names the batch:
    the same cause, one compile and explanation more. Before, the
    collective had none."""
    from irshard.collectives import classes
    p = puzzle("batch_constrained")
    m = mesh()

    def cause(report):
        [c] = report.collectives
        assert c.kind == "all-reduce"
        first, last = c.why.causes[0], c.why.causes[-1]
        assert (first.decision.kind, first.decision.source.line) == ("constraint", 19)
        assert first.verdict == "not confirmed"
        assert last.decision.kind == "together"
        assert sorted((d.kind, d.source.line if d.source else d.name)
                      for d in last.decision.parts) == [("constraint", 19),
                                                        ("input", "batch/inputs")]
        assert last.verdict == "confirmed", last.seen
        assert c.why.cause == last
        return report.notes[-1]

    note = cause(irshard.compile(p.step(m), *p.args(), verify=True))
    assert note.startswith("--verify: 2 recompiles,") and "explained again" not in note
    monkeypatch.setattr(classes.Decisions, "sharing", lambda self, named, axes: ())
    note = cause(irshard.compile(p.step(m), *p.args(), verify=True))
    assert note.startswith("--verify: 3 recompiles,") and "1 of them explained again" in note
    monkeypatch.undo()
    # Plain JAX: the all-reduce with either decision left, none without both.
    def found(data):
        args = p.args()
        with jax.set_mesh(m):
            return _COLLECTIVE.findall(
                p.step(m, data).lower(*args).compile().as_text())
    assert "all-reduce" in found(P("x"))
    assert "all-reduce" in found(P())
    monkeypatch.setattr(p, "CONSTRAINED", False)
    assert "all-reduce" in found(P("x"))
    assert found(P()) == []


def test_every_layers_constraint_and_the_batch_are_one_cause_of_combined_sums(monkeypatch):
    """Three layers, the batch sharded by `in_shardings` and each layer's
    activation constrained to it again: the weights' gradients are sums
    over the batch's axis, combined by XLA into one all-reduce. Shardy
    names the constraint; without it the batch keeps them sharded. The
    batch and the constraints shard one dimension: removed together, the
    sums go. Before, the combined sum had no cause (it was not peeled)."""
    p = puzzle("batch_layers")
    m = mesh()
    report = irshard.compile(p.step(m), *p.args(), verify=True)
    [c] = report.collectives
    assert (c.kind, c.operands) == ("all-reduce", 3)
    first = c.why.causes[0]
    assert (first.decision.kind, first.decision.source.line, first.verdict) \
        == ("constraint", 20, "not confirmed")
    cause = c.why.cause
    assert cause.decision.kind == "together" and cause.verdict == "confirmed", cause
    assert sorted((d.kind, d.source.line if d.source else d.name)
                  for d in cause.decision.parts) == [("constraint", 20),
                                                     ("input", "batch/inputs")]
    assert report.notes[-1].startswith("--verify: 2 recompiles,")

    # Plain JAX: the combined sum with either decision left, none without both.
    def found(data):
        args = p.args()
        with jax.set_mesh(m):
            return _COLLECTIVE.findall(
                p.step(m, data).lower(*args).compile().as_text())
    assert found(P("x")) == ["all-reduce"]
    assert "all-reduce" in found(P())
    monkeypatch.setattr(p, "CONSTRAINED", False)
    assert found(P("x")) == ["all-reduce"]
    assert found(P()) == []


def test_an_update_that_writes_the_collectives_result_is_not_its_cause():
    """The all-reduce's total is what a `dynamic_update_slice` writes:
    once, the update was named for its kind and "confirmed", because the
    program without it had no product left to sum (MaxText's scanned
    gradients, 4% of its step's communication). The inputs are the
    cause."""
    p, report = verified("update_written", "x=_,x", "w=x,_")
    [c] = report.collectives
    assert c.kind == "all-reduce"
    assert [x.decision.kind for x in c.why.causes if x.decision.kind == "op"] == []
    cause = c.why.cause
    assert cause.decision.kind == "together" and cause.verdict == "confirmed"
    assert sorted(d.name for d in cause.decision.parts) == ["w", "x"]
    args = p.args()
    assert plain(p.step, args, [P(None, "x"), P("x", None), P(), P()]) == ["all-reduce"]
    assert plain(p.step, args, [P(), P("x", None), P(), P()]) == ["all-reduce"]
    assert plain(p.step, args, [P(), P(), P(), P()]) == []


def test_a_parameter_s_decision_opens_its_whole_optimizer_state():
    """A training step's state as optax keeps it: `mu/layer/w` and
    `nu/layer/w` each mirror `params/layer/w` (their paths end alike) but
    not each other. Whichever of them Shardy names, the recompile opens
    all three and the outputs that hand them back; once `nu` stayed
    sharded when `mu` was named, and pinned the parameter's gradient."""
    from irshard.backend import edits
    from irshard.collectives import counterfactual as counterfactuals
    from irshard.core.frames import UserCode
    from irshard.reporting.why import Origin
    m = mesh()
    w = NamedSharding(m, P("x", None))
    state = {"params": {"layer": {"w": w}},
             "opt": {"mu": {"layer": {"w": w}}, "nu": {"layer": {"w": w}}}}

    def update(state, x):
        g = jax.grad(lambda w: jnp.sum(jnp.tanh(x @ w) ** 2))(state["params"]["layer"]["w"])
        mu = 0.9 * state["opt"]["mu"]["layer"]["w"] + g
        nu = 0.9 * state["opt"]["nu"]["layer"]["w"] + g * g
        return {"params": {"layer": {"w": state["params"]["layer"]["w"] - mu / (nu + 1)}},
                "opt": {"mu": {"layer": {"w": mu}}, "nu": {"layer": {"w": nu}}}}

    jitted = jax.jit(update, in_shardings=(state, NamedSharding(m, P())),
                     out_shardings=state, donate_argnums=0)
    ones = jnp.ones((128, 128))
    value = {"params": {"layer": {"w": ones}},
             "opt": {"mu": {"layer": {"w": ones}}, "nu": {"layer": {"w": ones}}}}
    report = irshard.compile(jitted, value, jnp.ones((64, 128)), explain=True)
    # Named by the parameter, whichever of the three Shardy recorded.
    named = {x.decision.name for c in report.collectives for x in c.why.causes
             if x.decision.kind == "input"}
    assert named == {"state/params/layer/w"}, named
    lowered = report.stages.lowered
    names = [t.name for t in lowered.info.inputs]
    assert "state/opt/mu/layer/w" in names and "state/opt/nu/layer/w" in names
    for named in ("state/opt/mu/layer/w", "state/opt/nu/layer/w", "state/params/layer/w"):
        stage, _ = counterfactuals.counterfactual(lowered, Origin("input", named),
                                               UserCode(lowered.info.user_dir))
        opened = [name for i, name in enumerate(names)
                  if (edits.boundary_sharding(stage.module, "input", i) or "")
                  .endswith('[{?}, {?}]>')]
        assert sorted(opened) == sorted(n for n in names if n.endswith("layer/w")), named
        assert [edits.boundary_sharding(stage.module, "output", i)
                for i in range(len(lowered.info.outputs))] == [None] * 3


def test_an_output_sharding_that_replicates_is_the_cause():
    p, report = verified("output_replicated", "x=x,_", out_shardings={0: "_,_"})
    [(kind, cause)] = causes(report)
    assert kind == "all-gather"
    assert (cause.decision.kind, cause.decision.name) == ("output", "result")
    assert cause.verdict == "confirmed"
    assert plain(p.step, p.args(), [P("x", None), P()], out=P()) == ["all-gather"]
    assert plain(p.step, p.args(), [P("x", None), P()]) == []


def test_a_partial_sum_is_both_inputs_rules_together_not_the_multiply():
    p, report = verified("partial_sum", "x=_,x", "w=x,_")
    [(kind, cause)] = causes(report)
    assert kind == "all-reduce"
    assert cause.decision.kind == "together"
    assert [p.name for p in cause.decision.parts] == ["x", "w"]
    assert cause.verdict == "confirmed"
    # Each alone is refuted: the other still splits the contraction.
    refuted = [c for c in report.collectives[0].why.causes if c.verdict == "not confirmed"]
    assert sorted(c.decision.name for c in refuted) == ["w", "x"]
    assert plain(p.step, p.args(), [P(None, "x"), P("x", None)]) == ["all-reduce"]
    assert plain(p.step, p.args(), [P("x", None), P()]) == []


def test_a_sort_along_a_sharded_dimension_is_the_ops_kind():
    p, report = verified("sort", "x=x,_")
    found = causes(report)
    assert found and all(cause.decision.kind == "op" for _, cause in found)
    assert found[0][1].decision.name.startswith("sort ")
    # Confirmed by the program without the sort (its result taken as its
    # operand); the input's rule, what the user can change, is listed after.
    assert found[0][1].verdict == "confirmed", found[0][1].seen
    also = [c for c in report.collectives[0].why.causes if c.decision.kind == "input"]
    assert [(c.decision.name, c.verdict) for c in also] == [("x", None)]
    assert plain(p.step, p.args(), [P("x", None)]) != []
    along_rows = lambda x: jnp.sort(x, axis=1) * 2.0      # noqa: E731
    assert plain(along_rows, p.args(), [P("x", None)]) == []


def test_a_grouped_convolution_is_the_cause_and_is_recompiled_ungrouped():
    """ResNeXt's grouped convolution over a batch sharded along its first
    dimension: XLA gathers the images whole for it. The cause names the
    convolution's groups; the recompile makes it ungrouped (a
    block-diagonal kernel, the same result), and the gather goes."""
    p, report = verified("grouped_conv", "images=x,_,_,_")
    [(kind, cause)] = causes(report)
    assert kind == "all-gather"
    assert (cause.decision.kind, cause.decision.source.line) == ("op", 15)
    assert cause.decision.name.startswith(
        "conv_general_dilated with feature_group_count=4: XLA does not partition "
        "a grouped convolution along the dimension sharded over x")
    assert cause.verdict == "confirmed", cause.seen
    # Plain JAX: the gather for the grouped convolution; none for the same
    # convolution ungrouped, nor for a depthwise one.
    images, kernel = p.args()
    batch = [P("x", None, None, None), P()]
    assert plain(p.step, (images, kernel), batch) == ["all-gather"]
    ungrouped = lambda x, k: jnp.tanh(p.conv(x, k, groups=1))    # noqa: E731
    full = jnp.ones((3, 3, p.CHANNELS, p.CHANNELS))
    assert plain(ungrouped, (images, full), batch) == []
    depthwise = lambda x, k: jnp.tanh(p.conv(x, k, groups=p.CHANNELS))  # noqa: E731
    assert plain(depthwise, (images, jnp.ones((3, 3, 1, p.CHANNELS))), batch) == []


@pytest.mark.parametrize("numbers,kernel_shape", [
    (("NHWC", "HWIO", "NHWC"), (3, 3, 4, 16)),
    (("NCHW", "OIHW", "NCHW"), (16, 4, 3, 3)),
])
def test_a_grouped_convolution_made_ungrouped_computes_the_same(numbers, kernel_shape):
    """The counterfactual's rewrite: the kernel laid along the input
    features once per group and zeroed off the block diagonal, the
    convolution ungrouped; run, it gives the grouped one's values, for
    either place of the kernel's feature dimensions."""
    import numpy as np
    from irshard.backend import edits
    images = jax.random.normal(jax.random.key(0), (2, 8, 8, 16) if numbers[0] == "NHWC"
                               else (2, 16, 8, 8))
    kernel = jax.random.normal(jax.random.key(1), kernel_shape)

    def step(x, k):
        return jax.lax.conv_general_dilated(x, k, (1, 1), "SAME",
                                            dimension_numbers=numbers,
                                            feature_group_count=4)

    module = jax.jit(step).lower(images, kernel).compiler_ir("stablehlo")
    [(name, _)] = edits.ungroup_convolutions(module, lambda op: True)
    assert name == "stablehlo.convolution"
    module.operation.verify()
    assert "feature_group_count = 1" in str(module)
    device = jax.devices()[0]
    executable = device.client.compile_and_load(str(module), jax.devices()[:1])
    [[got]] = executable.execute_sharded(
        [jax.device_put(a, device) for a in (images, kernel)]
    ).disassemble_into_single_device_arrays()
    want = np.asarray(step(images, kernel))
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-5)
    assert np.abs(want).max() > 1       # a result the zeros could not fake


def test_an_embedding_table_sharded_over_its_vocabulary_is_the_cause():
    p, report = verified("embedding", "table=x,_")
    [(kind, cause)] = causes(report)
    assert (cause.decision.kind, cause.decision.name, cause.verdict) == (
        "input", "table", "confirmed")
    assert plain(p.step, p.args(), [P("x", None), P()]) != []
    assert plain(p.step, p.args(), [P(None, "x"), P()]) == []


def test_a_shard_map_boundary_is_the_cause_and_is_recompiled_without_it():
    """A shard_map whose in_specs want the input whole: named at its line
    and by its spec, and confirmed by the program with its body inlined
    (its specs shard nothing and its body talks to no other device: the
    same computation on the whole arrays)."""
    p, report = verified("shard_map_boundary", "x=x,_")
    [(kind, cause)] = causes(report)
    assert kind == "all-gather"
    assert (cause.decision.kind, cause.decision.source.line) == ("shard_map", 15)
    assert cause.decision.text() == \
        "the shard_map at shard_map_boundary.py:15 (its in_specs[0])"
    assert cause.verdict == "confirmed", cause.seen
    assert plain(p.step, p.args(), [P("x", None)]) == ["all-gather"]
    assert plain(lambda x: x * 2.0, p.args(), [P("x", None)]) == []


def test_a_shard_map_that_shards_the_batch_is_named_as_what_holds_its_sum():
    """A weight's gradient summed over a batch that its inputs and a
    shard_map's in_specs both shard: without the inputs' sharding the
    shard_map still splits the batch, and the sum stays. The shard_map
    shards the dimension the inputs do; its body runs on shards, so no
    recompile can take it out: it is named, untested, as the cause."""
    m = mesh()

    def loss(w, x, mapped=True):
        h = x @ w
        if mapped:
            h = jax.shard_map(jnp.tanh, mesh=m, in_specs=P("x"), out_specs=P("x"))(h)
        else:
            h = jnp.tanh(h)
        return jnp.mean(h ** 2)

    def step(batch, mapped=True):
        return jax.jit(jax.grad(lambda w, x: loss(w, x, mapped)),
                       in_shardings=(NamedSharding(m, P()), NamedSharding(m, batch)))

    args = (jnp.ones((64, 64)), jnp.ones((32, 64)))
    report = irshard.compile(step(P("x")), *args, verify=True)
    [c] = report.collectives
    assert c.kind == "all-reduce"
    first, *_ = c.why.causes
    assert (first.decision.kind, first.decision.name, first.verdict) == (
        "input", "x", "not confirmed")
    cause = c.why.cause
    assert (cause.decision.kind, cause.verdict) == ("shard_map", None)
    assert cause.decision.text().endswith("(its in_specs[0])")
    assert report.notes[-1].startswith("--verify: 1 recompile,")
    # Plain JAX: the sum with either left, none without both (the inputs
    # opened, propagation takes the shard_map's split: the recompile's
    # "stays" above).
    found = lambda jitted: _COLLECTIVE.findall(      # noqa: E731
        jitted.lower(*args).compile().as_text())
    assert found(step(P("x"))) == ["all-reduce"]
    assert found(step(P("x"), mapped=False)) == ["all-reduce"]
    assert found(step(P(), mapped=False)) == []


def test_a_shard_map_that_talks_to_other_devices_is_not_inlined():
    """A body with a collective of its own (a `psum`) is not the same
    computation on the whole arrays: that shard_map is not inlined, and
    one whose specs shard an axis neither."""
    from irshard.backend import edits
    m = mesh()

    def summed(x):
        return jax.shard_map(lambda b: jax.lax.psum(b, "x"), mesh=m,
                             in_specs=P(), out_specs=P())(x)

    def split(x):
        return jax.shard_map(lambda b: b * 2.0, mesh=m, in_specs=P("x"),
                             out_specs=P("x"))(x)

    def doubled(x):
        return jax.shard_map(lambda b: b * 2.0, mesh=m, in_specs=P(),
                             out_specs=P())(x)

    x = jnp.ones((64, 128))
    for fn, inlined in ((summed, 0), (split, 0), (doubled, 1)):
        module = jax.jit(fn).lower(x).compiler_ir("stablehlo")
        assert len(edits.inline_manual_computations(module, lambda op: True)) == inlined
        module.operation.verify()
        assert ("sdy.manual_computation" in str(module)) == (not inlined)


def test_costs_are_summed_by_cause_and_need_an_explained_report():
    p = puzzle("partial_sum")
    args = p.args()
    report = irshard.compile(p.step, *args, mesh="x=4",
                             rules=[("x", "_,x"), ("w", "x,_")], explain=True)
    [total] = report.explain()
    assert isinstance(total, grouping.CauseTotal)
    assert total.cause.verdict is None               # not verified
    assert total.bytes_per_run == sum(c.bytes * c.executions for c in report.collectives)
    assert total.share == pytest.approx(1.0)
    plain_report = irshard.compile(p.step, *args, mesh="x=4",
                                   rules=[("x", "_,x"), ("w", "x,_")])
    with pytest.raises(UsageError, match="explain=True"):
        plain_report.explain()
    with pytest.raises(UsageError, match="verify"):
        irshard.compile(p.step, *args, mesh="x=4", verify="yes")
    with pytest.raises(UsageError, match="jobs: counts verify's recompiles"):
        irshard.compile(p.step, *args, mesh="x=4", jobs=2)
    with pytest.raises(UsageError, match="jobs: expected a positive whole number"):
        irshard.compile(p.step, *args, mesh="x=4", verify=True, jobs=0)


def test_a_constraint_under_checkpoint_is_named_in_the_backward_pass_too(monkeypatch):
    """Rematerialized layers: the constraint runs in the forward pass and
    again in the backward pass's recomputation; every gather it makes, and
    the gradient's all-reduce it reshapes, is traced to it."""
    p, report = verified("remat_constraint", "x=x,_")
    found = causes(report)
    assert len([k for k, _ in found if k == "all-gather"]) == 4
    for _, cause in found:
        assert (cause.decision.kind, cause.decision.source.line) == ("constraint", 17)
        assert cause.verdict in ("confirmed", "changed")
    specs = [P("x", None), P(), P()]
    assert "all-gather" in plain(p.step, p.args(), specs)
    monkeypatch.setattr(p, "CONSTRAINED", False)
    jax.clear_caches()          # jax.checkpoint keeps the traced layer
    assert plain(p.step, p.args(), specs) == ["all-reduce"]     # the batch's sum


def test_a_reshape_merging_a_sharded_dimension_is_the_ops_kind():
    p, report = verified("reshape_merge", "x=_,x")
    [(kind, cause)] = causes(report)
    assert kind == "all-gather"
    # What forces the gather, the reshape's kind, is named first; no
    # recompile can take it out. The decision a recompile confirms is the
    # input's sharding, and it is the cause.
    op, *_ = report.collectives[0].why.causes
    assert op.decision.kind == "op" and op.decision.name.startswith("reshape merges")
    assert op.verdict is None
    assert (cause.decision.kind, cause.decision.name, cause.verdict) == (
        "input", "x", "confirmed")
    assert plain(p.step, p.args(), [P(None, "x")]) == ["all-gather"]
    assert plain(p.step, p.args(), [P("x", None)]) == []


def test_a_host_callback_has_no_sharding_rule():
    p, report = verified("callback", "x=x,_")
    gather = next(c for c in report.collectives if c.kind == "all-gather")
    assert gather.why.cause.decision.kind == "op"
    assert gather.why.cause.decision.name.startswith("pure_callback ")
    assert gather.why.cause.verdict == "confirmed", gather.why.cause.seen
    assert "all-gather" in plain(p.step, p.args(), [P("x", None)])
    without = lambda x: jnp.sin(x) * 2.0 + 1.0      # noqa: E731
    assert plain(without, p.args(), [P("x", None)]) == []


def test_a_mixed_axis_reshard_finding_names_the_constraint_that_demands_it(monkeypatch):
    """XLA reshards (y,_,x) to (_,x+y,_) by gathering x, then y, and warns
    of an involuntary full rematerialization: both gathers, and the
    finding, are the constraint's (the first gather's reader is the second
    gather, whose demand is the constraint)."""
    p, report = verified("mixed_axes", "a=y,_,x", "b=y,_,x", mesh="x=4,y=2")
    found = causes(report)
    assert [k for k, _ in found] == ["all-gather", "all-gather"]
    for _, cause in found:
        assert (cause.decision.kind, cause.decision.source.line, cause.verdict) == (
            "constraint", 15, "confirmed")
    [finding] = report.findings
    assert finding.kind == "involuntary-remat"
    assert finding.cause.decision.source.line == 15
    assert "demanded by the constraint at mixed_axes.py:15" in finding.describe()
    specs, on = [P("y", None, "x")] * 2, dict(shape=(4, 2), names=("x", "y"))
    assert plain(p.step, p.args(), specs, **on) == ["all-gather"]
    monkeypatch.setattr(p, "CONSTRAINED", False)
    assert plain(p.step, p.args(), specs, **on) == []


def test_a_flax_logical_constraint_is_named_at_the_models_line(monkeypatch):
    """Under Flax's logical rules the constraint is made inside Flax; the
    cause is the model's line that asked for it."""
    pytest.importorskip("flax")
    p, report = verified("logical_rules", "x=x,_")
    [(kind, cause)] = causes(report)
    assert (cause.decision.kind, cause.decision.source.file,
            cause.decision.source.line, cause.verdict) == (
        "constraint", "logical_rules.py", 15, "confirmed")
    specs = [P("x", None), P()]
    assert plain(p.step, p.args(), specs) == ["all-gather"]
    monkeypatch.setattr(p, "RULES", (("batch", "x"), ("mlp", None)))
    assert plain(p.step, p.args(), specs) == []


def test_an_explicit_mode_reshard_is_the_cause_not_the_types_after_it(monkeypatch):
    """Under explicit axes every op's type is a constraint: Shardy names
    the one after the reshard; the recompile drops the chain of the same
    sharding and names its first, the reshard's line."""
    p, report = verified("explicit_reshard", "x=x,_", axis_types="explicit")
    [(kind, cause)] = causes(report)
    assert kind == "all-to-all"
    assert (cause.decision.kind, cause.decision.source.line, cause.verdict) == (
        "constraint", 14, "confirmed")
    m = jax.make_mesh((4,), ("x",), axis_types=(jax.sharding.AxisType.Explicit,),
                      devices=jax.devices()[:4])
    x = jax.ShapeDtypeStruct((64, 128), jnp.float32, sharding=NamedSharding(m, P("x", None)))

    def kinds():
        with jax.set_mesh(m):
            text = jax.jit(lambda a: p.step(a)).lower(x).compile().as_text()
        return sorted(set(_COLLECTIVE.findall(text)))

    assert kinds() == ["all-to-all"]
    monkeypatch.setattr(p, "RESHARD", False)
    assert kinds() == []


def test_where_recording_origins_in_applying_constraints_crashes_propagation_still_records(monkeypatch):
    """Shardy's recording of origins crashes (SIGSEGV) on MaxText's step in
    the pass that applies sharding constraints; propagation runs again
    recording origins everywhere else, and the causes are still found."""
    import os
    import signal

    from irshard.backend import passrunner

    run = passrunner.run_pipeline

    def crashing(operation, pipeline):
        if "sdy-apply-sharding-constraints{debug-propagation-edge-sharding=false " \
                "debug-sharding-origins=true" in pipeline:
            os.kill(os.getpid(), signal.SIGSEGV)
        run(operation, pipeline)

    monkeypatch.setattr(passrunner, "run_pipeline", crashing)
    p = puzzle("partial_sum")
    report = irshard.compile(p.step, *p.args(), mesh="x=4",
                             rules=[("x", "_,x"), ("w", "x,_")], explain=True)
    assert any("as it applied the sharding constraints; origins are recorded "
               "from propagation only" in note for note in report.notes)
    assert report.collectives[0].why.origins["x"].name == "x"
    assert report.collectives[0].why.cause is not None


def test_an_input_and_the_optimizer_state_that_mirrors_it_are_one_decision():
    """A jitted object's own in_shardings give each parameter and its
    optimizer state the same sharding: opening one leaves the other
    pinning it, so they are opened together; a rule's inputs are its own."""
    from irshard.collectives.mirrors import mirrors as _mirrors
    from irshard.core.dtypes import lookup_dtype
    from irshard.core.specs import ShardingSpec
    from irshard.stages.declared import TensorDecl

    f32 = lookup_dtype("f32")
    fsdp = ShardingSpec.of_entries(("fsdp", "_"))

    def decl(name, shape=(512, 64), sharding=fsdp, rule=None):
        return TensorDecl(name, f32, shape, sharding=sharding, rule=rule)

    kernel = decl("state/model/decoder/layers/mlp/wi/kernel/value")
    mu = decl("state/optimizer/opt_state/0/mu/decoder/layers/mlp/wi/kernel/value")
    other = decl("state/model/decoder/layers/mlp/wo/kernel/value")
    assert _mirrors(mu, kernel) and _mirrors(kernel, mu)
    assert not _mirrors(other, kernel)                       # another weight
    assert not _mirrors(decl(mu.name, shape=(64, 512)), kernel)
    assert not _mirrors(decl(mu.name, sharding=ShardingSpec.of_entries(("_", "_"))), kernel)
    ruled = decl(kernel.name, rule="--shard **/wi/**=fsdp,_")
    assert not _mirrors(mu, ruled)                           # the rule says


def _two_constraints(x, y, w):
    h = jax.lax.with_sharding_constraint(jnp.tanh(x @ w), P(None, "x"))
    g = jax.lax.with_sharding_constraint(jnp.tanh(y @ w), P(None, "x"))
    return jnp.where(h > 0, h, 0.1 * h), jnp.where(g > 0, g, 0.1 * g)


def test_recompiles_at_once_give_the_verdicts_of_one_after_another(monkeypatch):
    """`jobs=3`: the two constraints' recompiles (the walks' first round)
    run at once, on threads; the causes, verdicts and the count of
    recompiles are those of `jobs=1`."""
    from irshard.core import threads
    rounds = []
    each = threads.each
    monkeypatch.setattr(threads, "each", lambda fn, items, jobs: (
        rounds.append((len(items), jobs)), each(fn, items, jobs))[1])
    args = (jnp.ones((64, 128)), jnp.ones((64, 128)), jnp.ones((128, 256)))
    rules = [("x", "x,_"), ("y", "x,_")]
    one = irshard.compile(_two_constraints, *args, mesh="x=4", rules=rules,
                          verify=True, jobs=1)
    three = irshard.compile(_two_constraints, *args, mesh="x=4", rules=rules,
                            verify=True, jobs=3)
    assert [r for r in rounds if r[1] == 3] == [(2, 3)]
    found = [(c.kind, c.source.line, c.why.cause) for c in three.collectives]
    assert found == [(c.kind, c.source.line, c.why.cause) for c in one.collectives]
    assert sorted((kind, cause.decision.kind, cause.verdict) for kind, _, cause in found) \
        == [("all-gather", "constraint", "confirmed")] * 2
    assert len({cause.decision.source.line for _, _, cause in found}) == 2
    assert "--verify: 2 recompiles, each without" in one.notes[-1]
    assert "--verify: 2 recompiles, up to 2 at a time, each without" in three.notes[-1]


def test_a_helper_is_a_frame_reached_along_several_paths():
    """How many ways a constraint's frame is reached: a stack JAX cut short
    (a checkpoint's recomputation) continues another, and is not a second
    caller; two callers are two, however many frames each path has."""
    from irshard.collectives.origins import _callers
    step, layer, other = ("m.py", 22), ("m.py", 26), ("m.py", 30)
    assert _callers({(step, layer), (step,), ()}) == 1
    assert _callers({(step, layer), (other,)}) == 2
    assert _callers({(step,), (step, layer), (step, other)}) == 2
    assert _callers(set()) == 0


def test_an_op_a_recompile_refuted_is_not_the_cause():
    """An op's kind is the cause where no recompile can test it (a gather)
    or where taking it out confirmed it; taken out and refuted, it is a
    refuted candidate like any other, and with every other refuted the
    collective has no cause."""
    from irshard.reporting.why import Cause, Origin, Why
    sort = Origin("op", "sort sorts along a sharded dimension")
    gather = Origin("op", "gather indexes along a sharded dimension")
    weight = Origin("input", "w")
    refuted = lambda d: Cause(d, "needed", "not confirmed", "stays")   # noqa: E731
    assert Why("", causes=(refuted(sort), refuted(weight))).cause is None
    assert Why("", causes=(Cause(gather, "needed"), refuted(weight))).cause.decision == gather
    held = Cause(sort, "needed", "confirmed", "goes")
    assert Why("", causes=(held, Cause(weight, "operand"))).cause == held
    assert Why("", causes=(refuted(sort), Cause(weight, "operand", "changed", "x"))
               ).cause.decision == weight


def _dense(x, w):
    return x @ w.T


def _two_projections(x, a, b):
    ya = jnp.tanh(_dense(x, a))
    yb = jnp.tanh(_dense(x, b))
    return ya + yb


def test_a_helpers_collectives_are_told_apart_by_the_line_that_called_it():
    """Two projections through one helper, their weights of one shape and
    both sharded along the dimension the product sums: each gather is at
    the helper's line, of the same arrays. The line that called the helper
    tells them apart: the recompile without one weight's rule removes that
    weight's gather and leaves the other's (before, one going confirmed
    both)."""
    from irshard.collectives.verdicts import verdict
    from irshard.reporting.why import CONFIRMED, NOT_CONFIRMED
    args = (jnp.ones((64, 128)), jnp.ones((128, 128)), jnp.ones((128, 128)))
    rules = [("x", "x,_"), ("a", "_,x"), ("b", "_,x")]
    report = irshard.compile(_two_projections, *args, mesh="x=4", rules=rules,
                             verify=True)
    gathers = [c for c in report.collectives if c.kind == "all-gather"]
    assert len(gathers) == 2
    assert len({(c.source.line, c.shape) for c in gathers}) == 1
    callers = {c.source.stack[1].line: c for c in gathers}
    source = open(__file__).read().splitlines()
    line = next(i for i, text in enumerate(source, 1)
                if "ya = jnp.tanh(_dense(x, a))" in text)
    assert sorted(callers) == [line, line + 1]
    assert all(c.why.cause.verdict == CONFIRMED for c in gathers)
    of_a, of_b = callers[line], callers[line + 1]
    without_b = irshard.compile(_two_projections, *args, mesh="x=4",
                                rules=[("x", "x,_"), ("a", "_,x")])
    assert verdict(of_a, report, without_b)[0] == NOT_CONFIRMED
    assert verdict(of_b, report, without_b)[0] == CONFIRMED
    # Plain JAX: a gather for each weight so sharded, one with b whole.
    m = mesh()

    def gathers_of(*specs):
        shardings = tuple(NamedSharding(m, s) for s in specs)
        fresh = lambda *a: _two_projections(*a)      # noqa: E731
        text = jax.jit(fresh, in_shardings=shardings).lower(*args).compile().as_text()
        return len(re.findall(r"\ball-gather(?:-start)?\(", text))

    assert gathers_of(P("x", None), P(None, "x"), P(None, "x")) == 2
    assert gathers_of(P("x", None), P(None, "x"), P()) == 1


def test_a_verdict_tells_the_forward_passs_collective_from_the_backwards():
    """One line makes collectives in the forward pass and in the backward
    (JAX's op names `jvp()/...` and `transpose(jvp())/...`): a recompile
    that removes the backward's all-reduce at a line and makes one in the
    forward there has not kept it, and a forward one that stays is not
    taken for the backward's."""
    import types
    from irshard.collectives.verdicts import verdict
    from irshard.core.frames import SourceLocation
    from irshard.reporting.report import Collective
    from irshard.reporting.why import CONFIRMED, NOT_CONFIRMED

    def made(name, scope):
        return Collective(name, "all-reduce", "f32", (4, 8), 128, 128, ("tp",), 2,
                          SourceLocation("gpt.py", 56, "_attention"), "metadata",
                          f"jit(step)/{scope}/dot_general", ())

    backward, forward = made("ar.1", "transpose(jvp())"), made("ar.2", "jvp()")
    baseline = types.SimpleNamespace(collectives=(backward,))
    without = types.SimpleNamespace(collectives=(forward,))
    assert verdict(backward, baseline, without)[0] == CONFIRMED
    both = types.SimpleNamespace(collectives=(backward, forward))
    assert verdict(forward, both, without)[0] == NOT_CONFIRMED
    assert verdict(backward, both, without)[0] == CONFIRMED


def test_a_combined_collectives_verdict_follows_its_arrays_to_another_line():
    """A combined all-reduce sits at its first part's line. Recompiled, the
    same arrays summed at another of its parts' lines have stayed; arrays
    of the same shapes summed at an unrelated line, or in the forward pass
    at its own, are not its own; some of its arrays gone is a change."""
    import dataclasses
    import types
    from irshard.collectives.verdicts import verdict
    from irshard.core.frames import SourceLocation
    from irshard.reporting.report import Collective
    from irshard.reporting.why import CHANGED, CONFIRMED, NOT_CONFIRMED, Value, Why

    def at(line):
        return SourceLocation("gpt.py", line, "forward")

    def made(line, arrays, scope="transpose(jvp())"):
        shapes = tuple(("f32", s) for s in arrays)
        return Collective(f"ar.{line}", "all-reduce", "f32", arrays[0], 64, 64,
                          ("fsdp",), 8, at(line), "metadata",
                          f"jit(step)/{scope}/dot_general", (),
                          operands=len(arrays), shapes=shapes if len(arrays) > 1 else None)

    sums = made(66, [(512, 128), (128, 128), (128,)])
    parts = tuple(Value("dot_general", ("fsdp", "_"), at(line)) for line in (66, 71, 51))
    sums = dataclasses.replace(sums, why=Why("", combined=parts))
    baseline = types.SimpleNamespace(collectives=(sums,))
    moved = types.SimpleNamespace(collectives=(made(71, [(512, 128), (128, 128), (128,)]),))
    outcome, seen = verdict(sums, baseline, moved)
    assert outcome == NOT_CONFIRMED and seen.endswith("stays, at gpt.py:71 now"), seen
    elsewhere = types.SimpleNamespace(collectives=(
        made(90, [(512, 128), (128, 128), (128,)]),
        made(66, [(512, 128), (128, 128), (128,)], scope="jvp()")))
    assert verdict(sums, baseline, elsewhere)[0] == CONFIRMED
    part = types.SimpleNamespace(collectives=(made(51, [(128,)]),))
    outcome, seen = verdict(sums, baseline, part)
    assert outcome == CHANGED and "2 of the 3 arrays" in seen, seen


def test_two_gathers_at_one_line_are_told_apart_by_what_they_make():
    """A line gathers two weights (each sharded along the dimension its
    product sums): each gather's cause is its own weight's rule, and a
    recompile that removes the other weight's gather does not confirm it
    (it did when a verdict counted a line's gathers together)."""
    from irshard.collectives.verdicts import verdict
    from irshard.reporting.why import CONFIRMED, NOT_CONFIRMED
    p, report = verified("one_line", "x=x,_", "a=_,x", "b=_,x")
    gathers = {c.shape: c for c in report.collectives if c.kind == "all-gather"}
    assert sorted(gathers) == [(128, 256), (128, 512)]
    assert len({(c.source.line, c.op_name) for c in gathers.values()}) == 1
    of_a, of_b = gathers[(128, 256)], gathers[(128, 512)]
    assert (of_a.why.cause.decision.name, of_a.why.cause.verdict) == ("a", CONFIRMED)
    assert (of_b.why.cause.decision.name, of_b.why.cause.verdict) == ("b", CONFIRMED)
    without_b = irshard.compile(p.step, *p.args(), mesh="x=4",
                                rules=[("x", "x,_"), ("a", "_,x")])
    outcome, seen = verdict(of_a, report, without_b)
    assert outcome == NOT_CONFIRMED and "another all-gather there goes" in seen, seen
    assert verdict(of_b, report, without_b)[0] == CONFIRMED
    # Plain JAX: a gather for each weight so sharded, none for one whole.
    m = mesh()

    def gathers_of(*specs):
        shardings = tuple(NamedSharding(m, s) for s in specs)
        fresh = lambda *a: p.step(*a)      # noqa: E731
        text = jax.jit(fresh, in_shardings=shardings).lower(*p.args()).compile().as_text()
        return len(re.findall(r"\ball-gather(?:-start)?\(", text))

    assert gathers_of(P("x", None), P(None, "x"), P(None, "x")) == 2
    assert gathers_of(P("x", None), P(None, "x"), P()) == 1


@pytest.mark.slow
def test_the_gpts_combined_gradient_sum_is_the_batchs_not_the_embeddings():
    """XLA sums the GPT's 21 gradients in one all-reduce, at the line of
    whichever part comes first: the embedding's. Without the embedding's
    sharding it comes first no more, and the same all-reduce of the same
    21 arrays sits at the last layer's line. That once read as the
    embedding's rule confirmed; its arrays are looked for wherever they
    are, and the batch's rule is the cause."""
    from tests.test_gpt import STRATEGIES, _jax_jit_collectives, gpt
    mesh, rules = STRATEGIES["fsdp"]
    report = irshard.compile(gpt.train_step, *gpt.example_args(), mesh=mesh,
                             rules=rules, verify=True)
    [c] = [c for c in report.collectives if c.kind == "all-reduce"]
    assert c.operands == 21
    verdicts = {x.decision.rule: x.verdict for x in c.why.causes if x.verdict}
    assert verdicts == {"rules **/embed=fsdp,_": "not confirmed",
                        "rules batch/*=fsdp,_": "confirmed"}, c.why.causes
    assert c.why.cause.decision.rule == "rules batch/*=fsdp,_"
    assert "goes (all-reduces of 21 other arrays come, the largest f32[16,64,512])" \
        in c.why.cause.seen
    # Plain JAX: the 21 sums without the embedding's rule; without the
    # batch's, none of the gradients' arrays summed (the activations' are).
    def sums(rules):
        return [x.shapes or ((x.dtype, x.shape),) for x in
                _jax_jit_collectives(mesh, rules) if x.kind == "all-reduce"]
    assert sums(rules) == [c.shapes]
    assert sums([r for r in rules if r[0] != "**/embed"]) == [c.shapes]
    summed = {leaf for arrays in sums([r for r in rules if r[0] != "batch/*"])
              for leaf in arrays}
    assert summed and not summed & set(c.shapes)
