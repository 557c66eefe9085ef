"""`irshard suggest`: changes found from the explanations and findings,
each one's numbers checked against the command it says to run."""

import dataclasses
import json
import os
import re

import pytest

from irshard.reporting.report import CollectiveReport
from irshard.strategy import compilers, suggest
from irshard.strategy.engine import Engine
from irshard.core.specs import parse_mesh
from tests.conftest import EXAMPLES, run_irshard
from tests.test_explain import REMAT

HEAT = os.path.join(EXAMPLES, "heat1d.py")


def suggest_json(*args):
    done = run_irshard("suggest", *args, "--format", "json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def compile_json(*args):
    done = run_irshard("compile", *args, "--format", "json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def assert_verified(result, entry):
    """The suggestion's numbers are those of its command, run again."""
    again = compile_json(*result["command"], *entry["change"])
    assert again["totals"]["bytes_per_run"] == entry["bytes_per_run"]
    assert again["totals"]["time_s"] == pytest.approx(entry["time_s"], rel=1e-9)
    assert len(again["findings"]) == entry["findings"]
    assert len(again["collectives"]) == entry["collectives"]
    return again


def test_remat_is_removed_by_sharding_the_inputs_as_the_op_wants(write):
    path = write("remat.py", REMAT)
    result = suggest_json(path, "--mesh", "x=4,y=2")
    assert result["baseline"]["findings"] == 1
    best = result["suggestions"][0]
    assert best["change"] == ["--shard", "a=_,x+y,_", "--shard", "b=_,x+y,_"]
    assert best["findings"] == 0 and best["bytes_per_run"] == 0
    assert best["delta_bytes_per_run"] == -result["baseline"]["bytes_per_run"]
    assert {(r["kind"], r["source"]["line"], r["count"]) for r in best["removes"]} \
        == {("all-gather", 4, 2)}
    assert best["delta_step_s"] < 0
    # The constraint that moves the add ties on the step and halves the
    # memory: the verdict's tie-break, as search's, keeps it; it turns one
    # gather into an all-to-all, and says so rather than "removes".
    (moved,) = [e for e in result["suggestions"] if e["change"][0] == "--constrain"]
    assert moved["delta_memory_bytes"] < 0 and not moved["removes"]
    assert any("becomes an all-to-all" in e for e in moved["effects"])
    for entry in result["suggestions"]:
        assert_verified(result, entry)


def test_a_rule_of_the_command_is_overridden_not_repeated(write):
    path = write("remat.py", REMAT)
    result = suggest_json(path, "--mesh", "x=4,y=2", "--shard", "*=y,_,x")
    best = result["suggestions"][0]
    assert best["change"] == ["--override-shard", "a=_,x+y,_",
                              "--override-shard", "b=_,x+y,_"]
    again = assert_verified(result, best)
    assert [t["sharding"] for t in again["inputs"]] == [["_", "x+y", "_"]] * 2


@pytest.mark.multiprocess
def test_processes_find_what_this_process_finds(write):
    path = write("remat.py", REMAT)
    here = suggest_json(path, "--mesh", "x=4,y=2", "--jobs", "1")
    there = suggest_json(path, "--mesh", "x=4,y=2", "--jobs", "2")
    assert here["suggestions"] == there["suggestions"]
    assert here["tried"] == there["tried"] > 1


def test_heat_set_gathers_go_with_a_replicated_rod():
    result = suggest_json(HEAT, "--fn", "simulate_set", "--mesh", "x=4")
    (entry,) = [e for e in result["suggestions"] if e["change"] == ["--shard", "d=_"]]
    assert {(r["kind"], r["count"]) for r in entry["removes"]} >= {("all-gather", 2)}
    # Replicated, every device holds the whole rod.
    assert entry["delta_memory_bytes"] > 0
    assert_verified(result, entry)


def test_text_lists_each_change_and_the_command():
    done = run_irshard("suggest", HEAT, "--fn", "simulate_set", "--mesh", "x=4")
    assert done.returncode == 0, done.stderr
    assert "1. --shard d=_\n" in done.stdout
    assert "removes 2 all-gather at heat1d.py:25" in done.stdout
    assert done.stdout.rstrip().endswith(
        f"each change is appended to: irshard compile {HEAT} --fn simulate_set "
        f"--mesh x=4")


@pytest.mark.parametrize("option, value", [("--top", "0"), ("--jobs", "many"),
                                           ("--max-candidates", "-1")])
def test_bad_counts_are_usage_errors(option, value):
    done = run_irshard("suggest", HEAT, "--mesh", "x=4", option, value)
    assert done.returncode == 2
    assert done.stderr.startswith("irshard: error: ") and option in done.stderr


# ---------------------------------------------------------------------------
# Candidates from a report, without compiling


def _report(**why):
    return CollectiveReport.from_json({
        "inputs": [{"name": "w", "shape": [8, 16], "sharding": ["x", "_"]},
                   {"name": "b", "shape": [16], "sharding": ["_"]}],
        "outputs": [{"index": 0, "name": "result", "shape": [8, 16]}],
        "collectives": [{"name": "all-gather", "kind": "all-gather", "bytes": 512,
                         "executions": 1, "time_s": 1e-4, "mesh_axes": ["x"],
                         "source": {"file": "m.py", "line": 3}, "why": why}],
        "findings": [],
    })


def test_candidates_for_a_gathered_input():
    report = _report(operand={"value": "input w", "sharding": ["x", "_"]},
                     needed={"op": "dot_general", "sharding": ["_", "_"],
                             "source": {"file": "m.py", "line": 3}})
    found = suggest.candidates(report, parse_mesh("x=2"), suggest.Options())
    flags = [tuple(c.flags()) for c in found]
    assert ("--shard", "w=_,_") in flags              # as the reader needs it
    assert ("--shard", "w=_,x") in flags              # x on the other dimension
    assert found[0].inputs == ((0, "_,_"),)


def test_candidates_for_an_op_and_an_output():
    report = _report(operand={"value": "add", "sharding": ["x", "_"],
                              "source": {"file": "m.py", "line": 2}},
                     needed={"op": "output result", "sharding": ["_", "_"]})
    found = suggest.candidates(report, parse_mesh("x=2"), suggest.Options())
    flags = {tuple(c.flags()) for c in found}
    assert ("--constrain", "add@m.py:2=_,_") in flags
    assert ("--out-shard", "0=x,_") in flags
    # An output the command already shards is not given twice.
    given = suggest.candidates(report, parse_mesh("x=2"),
                               suggest.Options(out_shards=("0=_,_",)))
    assert ("--out-shard", "0=x,_") not in {tuple(c.flags()) for c in given}


# ---------------------------------------------------------------------------
# --constrain: what suggestions of constraints append


def test_constrain_steers_an_op_at_a_line(write):
    path = write("remat.py", REMAT)
    plain = compile_json(path, "--mesh", "x=4,y=2")
    done = run_irshard("compile", path, "--mesh", "x=4,y=2", "--format", "json",
                       "--constrain", "tanh@remat.py:5=y,_,x")
    assert done.returncode == 0 and done.stderr == ""
    steered = json.loads(done.stdout)
    # tanh's result over y,_,x: its operand, over x+y in dimension 1, is
    # gathered whole first. (jaxlib 0.10 names the tanh's line, 0.11 on the
    # operand's.)
    added = [c for c in steered["collectives"] if c not in plain["collectives"]]
    assert [(c["kind"], c["mesh_axes"]) for c in added] == [("all-gather", ["x", "y"])]
    assert added[0]["source"]["line"] in (4, 5)
    assert len(steered["collectives"]) == len(plain["collectives"]) + 1


@pytest.mark.parametrize("value, message", [
    ("add@remat.py:9=_,x+y,_", "--constrain 'add@remat.py:9=_,x+y,_': no operation "
                               "matches 'add@remat.py:9'"),
    ("add@remat.py:4", "--constrain 'add@remat.py:4': give MATCH=SPEC"),
    ("add@remat.py:4=_,x+y", "but none has a result of rank 2"),
    ("add@remat.py:4#0=_,_,_", "'#0' is not an index from 1"),
    ("add@remat.py:4=_,z,_", "unknown mesh axis 'z'"),
])
def test_constrain_mistakes_are_one_line_errors(write, value, message):
    path = write("remat.py", REMAT)
    done = run_irshard("compile", path, "--mesh", "x=4,y=2", "--constrain", value)
    assert done.returncode == 2
    assert done.stderr.startswith("irshard: error: ") and message in done.stderr
    assert done.stderr.count("\n") == 1


# ---------------------------------------------------------------------------
# A program that does not fit


def _unfit(inputs, axes="fsdp=4,tp=2"):
    mesh = parse_mesh(axes)
    return mesh, CollectiveReport.from_json({
        "inputs": [{"name": n, "dtype": "f32", "shape": list(shape),
                    "sharding": list(spec), "local_shape": list(shape)}
                   for n, shape, spec in inputs],
        "outputs": [], "collectives": [], "findings": [],
        "mesh": {"axes": [{"name": a, "size": s} for a, s in
                          zip(mesh.names, [4, 2])]},
        "memory": {"argument_bytes": 2, "output_bytes": 0, "alias_bytes": 0,
                   "temp_bytes": 0, "capacity_bytes": 1, "fits": False,
                   "over_bytes": 1},
    })


def test_memory_candidates_shard_what_the_peak_holds_over_unused_axes():
    mesh, report = _unfit([("params/w", (64, 32), ("fsdp", "_")),
                           ("opt_state/mu/w", (64, 32), ("_", "_")),
                           ("opt_state/count", (), ()),
                           ("batch/x", (8, 32), ("fsdp", "_"))])
    found = suggest.candidates(report, mesh, suggest.Options())
    described = [(c.description, c.inputs) for c in found if c.memory]
    # The optimizer state first, over both axes (the largest dimension),
    # then over each alone; a scalar takes none.
    assert described[0] == ("shard the optimizer state over fsdp and tp where "
                            "they do not use it yet (1 input)", ((1, "fsdp+tp,_"),))
    assert described[1][1] == ((1, "fsdp,_"),) and described[2][1] == ((1, "tp,_"),)
    # Then the parameters with it: tp added beside fsdp where it divides.
    assert ((0, "fsdp+tp,_"), (1, "fsdp+tp,_")) in [d[1] for d in described]
    # And the batch: a smaller batch per device.
    assert any(d[1] == ((3, "fsdp+tp,_"),) and "smaller batch" in d[0]
               for d in described)
    # Memory changes come before any other, and only for what does not fit.
    assert found[0].memory
    fitting = dataclasses.replace(report, memory=dataclasses.replace(
        report.memory, capacity_bytes=1 << 30))
    assert not any(c.memory for c in suggest.candidates(fitting, mesh, suggest.Options()))


def test_changes_are_combined_until_one_fits():
    mesh, report = _unfit([("params/w", (64, 32), ("_", "_")),
                           ("batch/x", (8, 32), ("_", "_"))], axes="x=4,y=2")
    compiled = []

    def compile_one(candidate):
        # Fits only with both the parameters and the batch sharded.
        compiled.append(candidate)
        specs = dict(candidate.inputs)
        after = report.to_json()
        for i, spec in specs.items():
            after["inputs"][i]["sharding"] = spec.split(",")
        both = specs.get(0, "_,_") != "_,_" and specs.get(1, "_,_") != "_,_"
        after["memory"] = {"argument_bytes": 8 if both else 10 - len(specs),
                           "output_bytes": 0, "alias_bytes": 0, "temp_bytes": 0,
                           "capacity_bytes": 8}
        return CollectiveReport.from_json(after)

    found = suggest.candidates(report, mesh, suggest.Options())
    engine = Engine(compilers.Calls(compile_one))
    result = suggest.suggest(engine, report, found, ["f.py"], 3, mesh,
                             suggest.Options())
    helpful = result.to_json()["suggestions"]
    assert helpful and all(e["fits"] for e in helpful)
    best = helpful[0]
    assert "; " in best["description"]           # one change on top of another
    assert "--shard" in best["change"] and "params/w=x+y,_" in best["change"]
    assert any(f.startswith("batch/x=") for f in best["change"])
    # What did not fit is said so, with its memory.
    assert {r["reason"] for r in result.to_json()["rejected"]} == {"does not fit"}


LLAMA = os.path.join(EXAMPLES, "llama.py")
# The 8B model's parameters sharded over both axes of a v5e 4x4 slice, its
# optimizer state left replicated: 68 GiB a chip of 16.
LLAMA_8B = [LLAMA, "--fn", "train_step", "--args", "example_args",
            "--target", "tpu-v5e:4x4", "--mesh", "fsdp=4,tp=4",
            "--shard", "params/layers/w_[gu]*=_,_,fsdp+tp",
            "--shard", "params/layers/w_down=_,fsdp+tp,_",
            "--shard", "params/layers/w[qkvo]=_,fsdp+tp,_,_",
            "--shard", "params/embed=fsdp+tp,_", "--shard", "params/unembed=_,fsdp+tp",
            "--shard", "batch/*=fsdp+tp,_", "--donate", "params", "--donate", "opt_state"]


@pytest.mark.tpu
@pytest.mark.slow
@pytest.mark.once
def test_llama_8b_that_does_not_fit_is_explained_and_made_to_fit():
    from tests.conftest import require
    require("libtpu", "compiling for a TPU slice")
    # libtpu refuses the executable; the report is read from what it dumped.
    done = run_irshard("compile", *LLAMA_8B)
    assert done.returncode == 0, done.stderr
    text = done.stdout
    assert re.search(r"does not fit in 16.0 GiB HBM: [\d.]+ GiB, [\d.]+ GiB over", text)
    assert "XLA did not build the executable: RESOURCE_EXHAUSTED" in text
    peak = text[text.index("memory peak per device"):]
    rows = peak.splitlines()[2:5]
    assert all("optimizer-state" in r and "opt_state/" in r for r in rows[:2]), rows
    assert "llama.py:" in peak
    # The suggestion that fits. (That a suggestion's numbers are its
    # command's, compiled again, is checked on smaller programs above: here
    # a second compile that fits would take another minute.)
    result = suggest_json(*LLAMA_8B, "--max-candidates", "1", "--jobs", "1")
    assert result["baseline"]["fits"] is False
    assert result["baseline"]["memory_bytes"] > 16 * 2 ** 30
    best = result["suggestions"][0]
    assert best["fits"] is True
    assert best["description"].startswith("shard the optimizer state over fsdp and tp")
    assert best["change"] and best["memory_bytes"] < 16 * 2 ** 30
