"""`irshard suggest`: changes found from the explanations and findings,
each one's numbers checked against the command it says to run."""

import json
import os

import pytest

from irshard.strategy import suggest
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
    for entry in result["suggestions"]:
        assert entry["delta_time_s"] < 0
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
    return {
        "inputs": [{"name": "w", "shape": [8, 16], "sharding": ["x", "_"]},
                   {"name": "b", "shape": [16], "sharding": ["_"]}],
        "outputs": [{"index": 0, "name": "result", "shape": [8, 16]}],
        "collectives": [{"name": "all-gather", "kind": "all-gather", "bytes": 512,
                         "executions": 1, "time_s": 1e-4, "mesh_axes": ["x"],
                         "source": {"file": "m.py", "line": 3}, "why": why}],
        "findings": [],
    }


def test_candidates_for_a_gathered_input():
    report = _report(operand={"value": "input w", "sharding": ["x", "_"]},
                     needed={"op": "dot_general", "sharding": ["_", "_"],
                             "source": {"file": "m.py", "line": 3}})
    found = suggest.candidates(report, parse_mesh("x=2"), suggest.Options())
    flags = [c.flags for c in found]
    assert ("--shard", "w=_,_") in flags              # as the reader needs it
    assert ("--shard", "w=_,x") in flags              # x on the other dimension
    assert found[0].inputs == ((0, "_,_"),)


def test_candidates_for_an_op_and_an_output():
    report = _report(operand={"value": "add", "sharding": ["x", "_"],
                              "source": {"file": "m.py", "line": 2}},
                     needed={"op": "output result", "sharding": ["_", "_"]})
    found = suggest.candidates(report, parse_mesh("x=2"), suggest.Options())
    flags = {c.flags for c in found}
    assert ("--constrain", "add@m.py:2=_,_") in flags
    assert ("--out-shard", "0=x,_") in flags
    # An output the command already shards is not given twice.
    given = suggest.candidates(report, parse_mesh("x=2"),
                               suggest.Options(out_shards=("0=_,_",)))
    assert ("--out-shard", "0=x,_") not in {c.flags for c in given}


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
