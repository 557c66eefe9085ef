"""`irshard search`: rule sets from a program's leaves, candidates, pruning,
ranking, the cache and the budget, and real searches whose winner's command
reproduces its numbers."""

import dataclasses
import json
import os
import sys

import pytest

from tests.conftest import EXAMPLES, ROOT, run_irshard
from irshard.core import tree
from irshard.core.errors import UsageError
from irshard.strategy import candidates as C
from irshard.reporting.report import CollectiveReport
from irshard.strategy import compilers
from irshard.strategy.change import Change
from irshard.strategy.engine import Engine
from irshard.strategy import rules as R
from irshard.strategy import search as S

F32 = "f32"


def gpt_leaves(layers=2, d=128, ff=512, vocab=512, batch=16, seq=64):
    params = [("embed", (vocab, d)), ("position", (seq, d)), ("norm", (d,))]
    for i in range(layers):
        params += [(f"layers/{i}/attn/{w}", (d, d)) for w in ("wq", "wk", "wv", "wo")]
        params += [(f"layers/{i}/mlp/w_in", (d, ff)), (f"layers/{i}/mlp/w_out", (ff, d)),
                   (f"layers/{i}/norm1", (d,)), (f"layers/{i}/norm2", (d,))]
    leaves = [R.LeafShape(f"params/{p}", s, F32) for p, s in params]
    for moment in ("mu", "nu"):
        leaves += [R.LeafShape(f"opt_state/{moment}/{p}", s, F32) for p, s in params]
    leaves.append(R.LeafShape("opt_state/count", (), "i32"))
    leaves += [R.LeafShape("batch/targets", (batch, seq), "i32"),
               R.LeafShape("batch/tokens", (batch, seq), "i32")]
    return leaves


def llama_leaves(L=4, d=64, heads=8, kv=2, head=8, ff=256, vocab=1024, batch=8, seq=32):
    params = [("embed", (vocab, d)), ("norm", (d,)), ("unembed", (d, vocab)),
              ("layers/attn_norm", (L, d)), ("layers/wq", (L, d, heads, head)),
              ("layers/wk", (L, d, kv, head)), ("layers/wv", (L, d, kv, head)),
              ("layers/wo", (L, heads, head, d)), ("layers/mlp_norm", (L, d)),
              ("layers/w_gate", (L, d, ff)), ("layers/w_up", (L, d, ff)),
              ("layers/w_down", (L, ff, d))]
    leaves = [R.LeafShape(f"params/{p}", s, F32) for p, s in params]
    leaves += [R.LeafShape(f"opt_state/mu/{p}", s, F32) for p, s in params]
    leaves += [R.LeafShape("batch/tokens", (batch, seq), "i32")]
    return leaves


def specs(structure, plan):
    return R.specs_of(structure, R.build_rules(structure, plan))


# ---------------------------------------------------------------------------
# Roles and rules


def test_roles_of_a_gpt_step():
    s = R.Structure(gpt_leaves())
    assert s.params_arg == "params" and s.model_dim == 128 and s.batch_size == 16
    assert not s.stacked
    assert s.roles["opt_state/mu/layers/1/mlp/w_in"].key == "layers/1/mlp/w_in"
    assert s.roles["batch/tokens"].kind == "batch"
    assert s.roles["params/norm"].kind == "vector"
    assert s.roles["opt_state/count"].kind == "scalar"
    assert s.roles["params/layers/0/attn/wo"].row
    assert not s.roles["params/layers/0/attn/wq"].row


def test_stacked_layers_keep_their_layer_dimension():
    s = R.Structure(llama_leaves())
    assert s.stacked == {"layers"} and s.model_dim == 64
    got = specs(s, R.Plan((("fsdp", 2), ("tensor", 4))))
    # The layer dimension (first) is never sharded.
    for path, spec in got.items():
        if "/layers/" in path:
            assert spec.split(",")[0] == "_", (path, spec)
    # Megatron: tensor on the heads (column wq, row wo) and the MLP's hidden
    # dimension; fsdp on the model dimension.
    assert got["params/layers/wq"] == "_,fsdp,tensor,_"
    assert got["params/layers/wo"] == "_,tensor,_,fsdp"
    assert got["params/layers/w_gate"] == "_,fsdp,tensor"
    assert got["params/layers/w_down"] == "_,tensor,fsdp"
    assert got["params/embed"] == "tensor,fsdp"
    # Two kv heads do not divide over four: replicated over tensor.
    assert got["params/layers/wk"] == "_,fsdp,_,_"
    assert got["params/layers/attn_norm"] == "_,_"
    assert got["batch/tokens"] == "fsdp,_"


def test_mirrors_take_their_parameters_spec():
    s = R.Structure(gpt_leaves())
    for plan in (R.Plan((("fsdp", 8),)), R.Plan((("fsdp", 2), ("tensor", 4))),
                 R.Plan((("data", 2), ("fsdp", 4)), fsdp_hidden=True)):
        got = specs(s, plan)
        for path, spec in got.items():
            if path.startswith("opt_state/mu/"):
                assert spec == got["params/" + path[len("opt_state/mu/"):]], path


def test_square_weights_take_the_column_and_row_patterns():
    got = specs(R.Structure(gpt_leaves()), R.Plan((("tensor", 4),)))
    assert got["params/layers/0/attn/wq"] == "_,tensor"
    assert got["params/layers/0/attn/wo"] == "tensor,_"
    assert got["params/layers/0/mlp/w_in"] == "_,tensor"
    assert got["params/layers/0/mlp/w_out"] == "tensor,_"
    assert got["params/embed"] == "tensor,_"          # vocabulary-parallel
    assert got["batch/tokens"] == "_,_"               # tensor is not a batch axis


def test_fsdp_on_hidden_dims_is_the_other_dimension():
    s = R.Structure(gpt_leaves())
    model = specs(s, R.Plan((("fsdp", 8),)))
    hidden = specs(s, R.Plan((("fsdp", 8),), fsdp_hidden=True))
    assert model["params/layers/0/mlp/w_in"] == "fsdp,_"
    assert hidden["params/layers/0/mlp/w_in"] == "_,fsdp"
    assert model["params/layers/0/mlp/w_out"] == "_,fsdp"
    assert hidden["params/layers/0/mlp/w_out"] == "fsdp,_"


def test_batch_axes_and_sequence():
    s = R.Structure(gpt_leaves(batch=16, seq=64))
    got = specs(s, R.Plan((("data", 2), ("fsdp", 2), ("sequence", 4))))
    assert got["batch/tokens"] == "data+fsdp,sequence"
    # A batch the axes do not divide keeps the axes that do.
    got = specs(R.Structure(gpt_leaves(batch=6)), R.Plan((("data", 2), ("fsdp", 4))))
    assert got["batch/tokens"] == "data,_"


@pytest.mark.parametrize("leaves", [gpt_leaves(), llama_leaves()])
@pytest.mark.parametrize("axes", [(("fsdp", 8),), (("data", 2), ("tensor", 4)),
                                  (("data", 2), ("fsdp", 2), ("tensor", 2))])
def test_rules_pick_exactly_the_leaves_meant(leaves, axes):
    s = R.Structure(leaves)
    plan = R.Plan(axes)
    rules = R.build_rules(s, plan)
    for leaf in leaves:
        found = next((spec for pattern, spec in rules
                      if tree.matches(pattern, leaf.path)), None)
        want = ",".join(R.leaf_spec(s, leaf, plan))
        if all(e in ("_", "") for e in want.split(",")):
            assert found is None or all(e in ("_", "") for e in found.split(","))
        else:
            assert found == want, leaf.path
    # Globs, not one rule per leaf: mirrors and layers share a rule.
    assert len(rules) < len([l for l in leaves if l.shape]) / 2


def test_a_glob_that_would_pick_another_leaf_gets_exact_rules():
    leaves = [R.LeafShape("params/a/w", (8, 8), F32),
              R.LeafShape("params/b/w", (8, 8), F32),
              R.LeafShape("params/a/v", (8, 4), F32),
              R.LeafShape("state/w", (8, 8), F32),     # no parameter's mirror by path
              R.LeafShape("batch/x", (16, 8), F32)]
    s = R.Structure(leaves)
    rules = R.build_rules(s, R.Plan((("fsdp", 2), ("tensor", 2))))
    for leaf in leaves:
        found = next((spec for p, spec in rules if tree.matches(p, leaf.path)), None)
        want = ",".join(R.leaf_spec(s, leaf, R.Plan((("fsdp", 2), ("tensor", 2)))))
        assert (found or ",".join("_" * len(leaf.shape))) == want, leaf.path


# ---------------------------------------------------------------------------
# Candidates


def test_factorizations_and_plans():
    assert sorted(C.factorizations(8, 2)) == [(1, 8), (2, 4), (4, 2), (8, 1)]
    assert len(C.factorizations(16, 3)) == 15
    found = C.plans(16, ("data", "fsdp", "tensor"))
    meshes = [p.axes for p, _ in found if not p.fsdp_hidden]
    assert len(meshes) == len(set(meshes)) == 15
    # The canonical strategies first, single axes before the squarest FSDP+TP.
    origins = [o for _, o in found]
    assert origins[:4] == ["canonical"] * 4
    assert [p.axes for p, _ in found[:4]] == [
        (("data", 16),), (("fsdp", 16),), (("tensor", 16),),
        (("fsdp", 4), ("tensor", 4))]
    assert origins.index("combined") > max(i for i, o in enumerate(origins)
                                           if o == "canonical")


def test_pruning_by_memory_and_by_useless_axes():
    s = R.Structure(gpt_leaves(batch=4))
    kept, pruned = C.candidates(s, 8, ("data", "fsdp", "tensor"), capacity=None,
                                element_bytes=lambda _: 4)
    reasons = {p.change.mesh_text: p.reason for p in pruned}
    # A batch of 4 cannot use data=8: the axis shards nothing.
    assert "divides no dimension" in reasons["data=8"]
    assert all(c.mesh_text != "data=8" for c in kept)
    total = sum(4 * max(1, __import__("math").prod(l.shape)) for l in s.leaves)
    kept2, pruned2 = C.candidates(s, 8, ("data", "fsdp", "tensor"),
                                  capacity=total // 4, element_bytes=lambda _: 4)
    memory = [p for p in pruned2 if "arguments alone" in p.reason]
    assert memory and all(C.argument_bytes(s, p.change, lambda _: 4) > total // 4
                          for p in memory)
    assert all(C.argument_bytes(s, c, lambda _: 4) <= total // 4 for c in kept2)


# ---------------------------------------------------------------------------
# The engine, with compiles stood in for


def fake_report(step, memory, capacity=100, bytes_per_step=1000):
    return CollectiveReport.from_json({
        "step": {"step_s": step, "compute_s": step / 2, "exposed_comm_s": step / 2},
        "memory": {"argument_bytes": memory, "output_bytes": 0, "temp_bytes": 0,
                   "alias_bytes": 0, "capacity_bytes": capacity},
        "collectives": [{"name": "all-reduce", "kind": "all-reduce",
                         "bytes": bytes_per_step}],
        "totals": {}, "inputs": []})


def engine(results, budget=60.0, cache=None, calls=None, max_candidates=None):
    import time

    from irshard.core.errors import BackendError
    s = R.Structure(gpt_leaves())
    calls = [] if calls is None else calls

    def compile_change(change, explain=False):
        calls.append(change.mesh_text)
        found = results(change)
        if isinstance(found, str):
            raise BackendError(found)
        return found
    space = S.Space((((), s),), 8, ("data", "fsdp", "tensor"), element_bytes=lambda _: 4)
    decider = Engine(compilers.Calls(compile_change), cache=cache,
                     argv=lambda change: ["gpt.py", *change.flags()],
                     deadline=time.monotonic() + budget, same=S.same_program(s),
                     max_candidates=max_candidates)
    return S.search(space, decider, command=("gpt.py",), target="tpu-test",
                    budget_s=budget)


def test_ranking_puts_what_fits_first_and_lists_failures():
    def results(c):
        if c.mesh_text == "data=8":
            return fake_report(0.001, 500)           # does not fit
        if c.mesh_text == "fsdp=8":
            return "something broke"
        return fake_report(0.01 + 0.002 * len(c.rules) + 0.0001 * len(c.mesh), 50)
    result = engine(results)
    ranked = result.ranked()
    assert result.winner is ranked[0] and result.winner.fits
    fitting = [o.figures.step_s for o in ranked if o.fits]
    assert fitting == sorted(fitting)
    assert ranked[-1].change.mesh_text == "data=8"        # does not fit: last
    data = result.to_json()
    assert data["winner"]["rank"] == 1 and data["winner"]["status"] == "ok"
    by_mesh = {(e["mesh"][0]["name"], len(e["mesh"]), e["strategy"]): e
               for e in data["candidates"]}
    assert by_mesh[("data", 1, "DP")]["fits"] is False
    assert by_mesh[("fsdp", 1, "FSDP")]["status"] == "failed"
    assert by_mesh[("fsdp", 1, "FSDP")]["reason"] == "something broke"
    assert by_mesh[("fsdp", 1, "FSDP")]["rank"] is None
    w = data["winner"]
    assert w["args"][:3] == ["gpt.py", "--mesh", ",".join(
        f"{a['name']}={a['size']}" for a in w["mesh"])]
    assert all(["--shard", f"{p}={s}"] == w["args"][3 + 2 * i:5 + 2 * i]
               for i, (p, s) in enumerate(w["rules"]))
    assert data["counts"]["failed"] == 2 and data["counts"]["ok"] >= 8   # FSDP, hidden
    text = result.render_text()
    assert "winner:" in text and "failed (2): something broke" in text


def test_steps_within_the_error_band_tie_and_memory_decides():
    """One verdict: a step shorter by less than the model's error band is
    a tie, broken by the memory peak (suggest judges the same way)."""
    from irshard.strategy import verdict
    fast, small = verdict.Figures.of(fake_report(0.0100, 60)), \
        verdict.Figures.of(fake_report(0.0105, 40))
    assert verdict.better(small, fast) and not verdict.better(fast, small)
    slow = verdict.Figures.of(fake_report(0.0200, 10))
    assert verdict.better(fast, slow)
    unfit = verdict.Figures.of(fake_report(0.001, 500))
    assert verdict.better(slow, unfit)
    order = verdict.rank([fast, small, slow, unfit])
    assert order == [1, 0, 2, 3]
    assert verdict.pareto([fast, small, slow, unfit]) == {0, 1, 2}


def test_the_budget_leaves_candidates_listed():
    result = engine(lambda c: fake_report(0.01, 10), budget=1e-9)
    data = result.to_json()
    assert data["winner"] is None
    assert {e["status"] for e in data["candidates"]} <= {"not reached", "pruned"}
    assert "no candidate compiled and fit" in result.render_text()


def test_the_cache_answers_the_second_search(tmp_path):
    cache = compilers.Cache(str(tmp_path), "salt")
    first, second = [], []
    a = engine(lambda c: fake_report(0.01 * len(c.rules), 10), cache=cache, calls=first)
    b = engine(lambda c: pytest.fail("compiled again"), cache=cache, calls=second)
    assert first and not second
    assert [o.figures for o in a.ranked()] == [o.figures for o in b.ranked()]
    assert all(o.cached for o in b.outcomes if o.status == "ok")
    # Another salt (another file or version) misses.
    assert compilers.Cache(str(tmp_path), "other").get(
        ["gpt.py", *a.outcomes[0].change.flags()]) is None


def test_a_cached_search_with_a_candidate_budget_reaches_the_same_candidates(tmp_path):
    """`--max-candidates N` counts the reports the cache answers: the same
    search again reports the same candidates, not N more."""
    cache = compilers.Cache(str(tmp_path), "salt")
    first, second = [], []
    a = engine(lambda c: fake_report(0.01 * len(c.rules), 10), cache=cache, calls=first,
               max_candidates=3)
    b = engine(lambda c: pytest.fail("compiled again"), cache=cache, calls=second,
               max_candidates=3)
    assert len(first) == 3 and not second
    assert a.to_json()["candidates"] == b.to_json()["candidates"]
    assert [o.status for o in a.outcomes].count("not reached") > 0
    # A larger budget compiles only what the cache does not hold.
    third = []
    c = engine(lambda c: fake_report(0.01 * len(c.rules), 10), cache=cache, calls=third,
               max_candidates=5)
    assert len(third) == 2 and sum(o.cached for o in c.outcomes) == 3


def test_options_are_checked():
    from irshard.core.errors import UsageError
    assert S.parse_duration("10m") == 600 and S.parse_duration("90s") == 90
    assert S.parse_duration("1.5h") == 5400 and S.parse_duration("30") == 30
    for bad in ("", "0", "ten", "5d", "-3m"):
        with pytest.raises(UsageError, match="--budget-time"):
            S.parse_duration(bad)
    assert C.parse_axes("data,fsdp,tensor,sequence") == (
        "data", "fsdp", "tensor", "sequence")
    with pytest.raises(UsageError, match="plays no role"):
        C.parse_axes("data,model")
    with pytest.raises(UsageError, match="once"):
        C.parse_axes("data,data")


# ---------------------------------------------------------------------------
# Real searches


LLAMA = os.path.join(EXAMPLES, "llama.py")


def test_search_cli_errors(tmp_path):
    for args, message in [
            (["--devices", "4", "--target", "tpu-v5e:4x4"], "disagrees with target tpu-v5e:4x4"),
            ([], "give --devices N"),
            (["--devices", "4", "--axes", "data,model"], "plays no role"),
            (["--devices", "4", "--budget-time", "soon"], "--budget-time"),
            (["--devices", "0"], "positive whole number")]:
        done = run_irshard("search", LLAMA, "--fn", "train_step", "--args",
                           "small_args", "--no-cache", *args)
        assert done.returncode == 2, (args, done.stderr)
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("irshard: error: ")
        assert message in lines[0], lines[0]
    module = tmp_path / "m.mlir"
    module.write_text("func.func @main() { return }\n")
    done = run_irshard("search", str(module), "--devices", "2", "--no-cache")
    assert done.returncode == 2 and "give a .py file" in done.stderr


@pytest.mark.slow
@pytest.mark.once
def test_search_llama_small_winner_reproduces(tmp_path):
    out = tmp_path / "search.json"
    # Two devices over the three default axes: every strategy's kind (data,
    # fully sharded data and tensor parallel, with their constraint moves),
    # in 8 compiles rather than 4 devices' 12.
    done = run_irshard("search", LLAMA, "--fn", "train_step", "--args", "small_args",
                       "--devices", "2", "--cache-dir", str(tmp_path / "cache"),
                       "--format", "json", "-o", str(out))
    assert done.returncode == 0, done.stderr
    data = json.loads(out.read_text())
    winner, baseline = data["winner"], data["baseline"]
    assert winner is not None and winner["rank"] == 1 and winner["status"] == "ok"
    assert baseline is not None \
        and winner["step_s"] <= baseline["step_s"] * (1 + data["error_band"])
    ranked = [c for c in data["candidates"] if c["rank"] is not None]
    assert [c["rank"] for c in ranked] == list(range(1, len(ranked) + 1))
    assert data["compiled"] >= 6
    assert {c["strategy"] for c in ranked} >= {"DP", "TP", "FSDP"}
    # The winner's own arguments give the same numbers from irshard compile.
    done = run_irshard("compile", *winner["args"], "--format", "json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["step"]["step_s"] == winner["step_s"]
    assert report["totals"]["bytes_per_run"] == winner["bytes_per_run"]
    memory = report["memory"]
    assert winner["memory_bytes"] == (memory["peak"]["bytes"] if memory.get("peak") else
                                      memory["argument_bytes"] + memory["output_bytes"]
                                      + memory["temp_bytes"] - memory["alias_bytes"])
    assert "--mesh" in winner["args"]
    # Again: every candidate from the cache, the same ranking.
    done = run_irshard("search", LLAMA, "--fn", "train_step", "--args", "small_args",
                       "--devices", "2", "--cache-dir", str(tmp_path / "cache"),
                       "--format", "json")
    # The same report, byte for byte; the note on stderr says where from.
    assert done.stdout == out.read_text()
    assert f"{data['compiled']} from the cache" in done.stderr


@pytest.mark.slow
def test_search_api_and_html():
    sys.path.insert(0, EXAMPLES)
    try:
        import gpt
    finally:
        sys.path.remove(EXAMPLES)
    import irshard
    result = irshard.search(gpt.train_step, *gpt.example_args(), devices=4,
                            axes=("data", "fsdp"))
    winner = result.winner
    assert winner is not None
    report = irshard.compile(gpt.train_step, *gpt.example_args(),
                             mesh=winner.change.mesh_text,
                             rules=list(winner.change.rules))
    assert report.to_json()["step"]["step_s"] == winner.figures.step_s
    page = result.render_html()
    assert '"kind":"search"' in page and "searchPage" in page
    data = result.to_json()
    assert {m["name"] for c in data["candidates"] for m in c["mesh"]} <= {"data", "fsdp"}


def test_search_budget_stops_compiles_under_way(tmp_path):
    """Compiles in other processes still running at the deadline are
    stopped, and their candidates listed as left by the budget."""
    import time
    started = time.monotonic()
    done = run_irshard("search", LLAMA, "--fn", "train_step", "--args", "small_args",
                       "--devices", "4", "--jobs", "2", "--budget-time", "1s",
                       "--no-cache", "--format", "json")
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert data["compiled"] == 0 and data["winner"] is None
    skipped = [c for c in data["candidates"] if c["status"] == "not reached"]
    assert skipped and all(c["reason"] == "the time budget ran out" for c in skipped)
    assert time.monotonic() - started < 60


@pytest.mark.tpu
@pytest.mark.slow
@pytest.mark.once
def test_search_gpt_for_a_tpu_slice_in_processes(tmp_path):
    from tests.conftest import require
    require("libtpu", "TPU targets")
    done = run_irshard("search", os.path.join(EXAMPLES, "gpt.py"), "--fn", "train_step",
                       "--args", "example_args", "--target", "tpu-v5e:2x2",
                       "--axes", "data,fsdp", "--jobs", "2",
                       "--cache-dir", str(tmp_path), "--format", "json")
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    winner = data["winner"]
    assert winner["fits"] is True and data["memory_limit"] is None
    assert winner["step_s"] <= data["baseline"]["step_s"] * (1 + data["error_band"])
    assert "--target" in winner["args"] and "tpu-v5e:2x2" in winner["args"]
    report = json.loads(run_irshard("compile", *winner["args"], "--format",
                                    "json").stdout)
    assert report["step"]["step_s"] == winner["step_s"]
    assert report["memory"]["fits"] is True


def test_progress_line_on_a_terminal(capsys):
    from irshard.strategy.engine import Outcome, Progress
    progress = Progress(total=4, jobs=2, enabled=True)
    progress.update(Outcome(Change("FSDP on fsdp=4"), "ok", seconds=3.0))
    progress.update(Outcome(Change("TP on tensor=4"), "failed", seconds=1.0))
    progress.close()
    err = capsys.readouterr().err
    assert "\rirshard: [############............] 2/4 compiled, 2 running, " \
           "1 failed, about 3 s left" in err
    assert err.endswith("\r\x1b[K")
    quiet = Progress(total=4, enabled=False)
    quiet.update(Outcome(Change("x"), "ok"))
    assert capsys.readouterr().err == ""


def test_the_runner_up_is_another_strategy_not_a_move_of_the_winner():
    from irshard.strategy.engine import Outcome
    from irshard.strategy.verdict import Figures
    base = Change("DP on data=8", mesh=(("data", 8),), rules=(("batch/*", "data,_"),),
                  strategy="DP", origin="canonical")
    move = dataclasses.replace(base, origin="move",
                               constraints=(("scatter@gpt.py:66", "_,_"),))
    other = Change("FSDP on fsdp=8", mesh=(("fsdp", 8),),
                   rules=(("batch/*", "fsdp,_"),), strategy="FSDP")

    def ok(change, step):
        report = fake_report(step, 10)
        return Outcome(change, "ok", report, figures=Figures.of(report))
    outcomes = (ok(base, 0.002), ok(other, 0.003), ok(move, 0.001))
    result = S.SearchResult(("gpt.py",), "cpu", 8, ("data", "fsdp"), outcomes,
                            1.0, 60.0)
    assert result.winner.change is move
    assert result.runner_up().change is other
    assert result.args(move)[-2:] == ["--constrain", "scatter@gpt.py:66=_,_"]
    assert result.to_json()["winner"]["constraints"] == [["scatter@gpt.py:66", "_,_"]]


def test_the_cache_key_follows_the_file_and_its_neighbours(tmp_path):
    main, helper = tmp_path / "step.py", tmp_path / "layers.py"
    main.write_text("import layers\n")
    helper.write_text("W = 1\n")
    first = compilers.versions_salt(str(main))
    assert compilers.versions_salt(str(main)) == first
    helper.write_text("W = 2\n")
    assert compilers.versions_salt(str(main)) != first


def _knob_engine(steps, bounds, work=None):
    """A search over knob `k` alone (the mesh fixed) whose compile of
    `k=v` reports `steps[v]`, and whose bound for it is `bounds[v]`."""
    import time

    from irshard.strategy.engine import Bound
    compiled = []

    def compile_change(change, explain=False):
        value = dict(change.knobs)["k"]
        compiled.append(value)
        return fake_report(steps[value], 10)

    space = S.Space(tuple(((("k", v),), None) for v in steps), 4, ("data",))
    decider = Engine(compilers.Calls(compile_change),
                     deadline=time.monotonic() + 60,
                     bound=lambda c: Bound(bounds[dict(c.knobs)["k"]] * 4 * 1e9, 4, 1e9),
                     work=work)
    result = S.search(space, decider, command=("f.py",), target="cpu", budget_s=60,
                      factory="make", knob_space=[("k", tuple(steps))])
    return result, compiled


def test_a_candidate_whose_bound_cannot_beat_the_best_is_pruned_not_compiled():
    # k=1's least possible step (its products at the peak) is 3 ms: it
    # cannot beat k=2's 1 ms, even within the 10% band; k=3's bound
    # (1.05 ms) can, so it is compiled. Least bound first: k=2, k=3, k=1.
    result, compiled = _knob_engine({1: 0.004, 2: 0.001, 3: 0.002},
                                    {1: 0.003, 2: 0.0008, 3: 0.00105})
    assert compiled == [2, 3]
    data = result.to_json()
    assert data["counts"] == {"ok": 2, "pruned": 1}
    pruned = [e for e in data["candidates"] if e["status"] == "pruned"]
    assert pruned[0]["knobs"] == {"k": 1} and pruned[0]["bound_s"] == pytest.approx(0.003)
    assert "k=2's 1 ms" in pruned[0]["reason"] and "3 ms" in pruned[0]["reason"]
    assert data["winner"]["knobs"] == {"k": 2} and data["notes"] == []
    assert "1 pruned" in result.render_text()


def test_a_step_that_undercuts_its_bound_turns_pruning_off_and_says_so():
    # k=2 compiles first (least bound) but its step (0.5 ms) is below its
    # bound (0.8 ms): the bound is not to be trusted, k=1 is compiled.
    result, compiled = _knob_engine({1: 0.004, 2: 0.0005}, {1: 0.003, 2: 0.0008})
    assert compiled == [2, 1]
    data = result.to_json()
    assert data["counts"] == {"ok": 2}
    assert data["notes"] and "undercuts its bound" in data["notes"][0]
    assert "note: k=2's simulated step" in result.render_text()


def test_per_ranks_by_the_step_per_unit_of_a_knob():
    # Twice the batch in 1.5 times the step: the larger batch wins per
    # example, the smaller per step.
    from irshard.strategy.search import work_of
    result, _ = _knob_engine({32: 0.002, 64: 0.003}, {32: 0.0, 64: 0.0})
    assert result.winner.change.knobs == (("k", 32),)
    result, _ = _knob_engine({32: 0.002, 64: 0.003}, {32: 0.0, 64: 0.0},
                             work=lambda c: float(dict(c.knobs)["k"]))
    assert result.winner.change.knobs == (("k", 64),)
    entry = result.to_json()["winner"]
    assert entry["work"] == 64 and entry["step_per_unit_s"] == pytest.approx(0.003 / 64)
    assert work_of("k")(result.winner.change) == 64.0 and work_of(None)(None) == 1.0
    with pytest.raises(UsageError, match="rank per a knob that is searched"):
        S.check_per("batch", [("k", (1, 2))])
    with pytest.raises(UsageError, match="positive numbers"):
        S.check_per("k", [("k", (1, "full"))])
    # From Python, in Python's terms.
    with pytest.raises(UsageError) as raised:
        S.check_per("batch", [("k", (1, 2))], "per=")
    assert str(raised.value) == ("per='batch': rank per a knob that is searched "
                                 "(knobs={'batch': [...]}); searched: k")


def test_pruning_gives_the_same_outcomes_whatever_order_compiles_finish_in():
    """With several compiles at once the best so far depends on which
    finishes first; the outcomes must not: a candidate compiled while those
    before it ran, that the bound rules out against them all, is pruned as
    it would have been one compile at a time, naming the same best."""
    import time

    from irshard.strategy.engine import Bound

    steps = {1: 0.0010, 2: 0.0009, 3: 0.0030, 4: 0.0012, 5: 0.0040, 6: 0.0011}
    bounds = {1: 0.0001, 2: 0.0002, 3: 0.0020, 4: 0.0003, 5: 0.0025, 6: 0.00095}

    class LastFirst(compilers.Compiler):
        """`jobs` at a time, the last begun finishing first."""
        jobs = 3

        def run(self, work, deadline, done, skip=None):
            pending, running = list(work), []
            while pending or running:
                while pending and len(running) < self.jobs:
                    key, change = pending.pop(0)
                    if skip is None or not skip(key):
                        running.append((key, change))
                if running:
                    key, change = running.pop()
                    done(key, fake_report(steps[dict(change.knobs)["k"]], 10), 0.0)
            return []

    def outcomes(compiler):
        space = S.Space(tuple(((("k", v),), None) for v in steps), 4, ("data",))
        decider = Engine(compiler, deadline=time.monotonic() + 60,
                         bound=lambda c: Bound(bounds[dict(c.knobs)["k"]] * 4e9, 4, 1e9))
        result = S.search(space, decider, command=("f.py",), target="cpu",
                          budget_s=60, factory="make", knob_space=[("k", tuple(steps))])
        return [(e["knobs"]["k"], e["status"], e.get("reason"))
                for e in result.to_json()["candidates"]]

    serial = outcomes(compilers.Calls(
        lambda change: fake_report(steps[dict(change.knobs)["k"]], 10)))
    assert {k for k, status, _ in serial if status == "pruned"} == {3, 5}
    assert outcomes(LastFirst()) == serial


def test_a_search_where_every_candidate_is_pruned_says_so():
    """Three devices split no dimension of the factory's step: the one
    candidate is pruned before any compile, and the table says so."""
    factory = os.path.join(ROOT, "tests", "programs", "factory.py")
    done = run_irshard("search", factory, "--factory", "make", "--knob", "batch=64",
                       "--devices", "3", "--axes", "data", "--no-cache")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("search: 1 candidate: 0 compiled, 1 pruned; cpu, 3 devices")
    assert "no candidate compiled and fit" in done.stdout
    assert "pruned: mesh axis data divides no dimension it would shard" in done.stdout
