"""`irshard diff`: reports and dump directories compared by source line and
kind, regressions, and every mistake a one-line error."""

import json
import os
import subprocess
import sys

import pytest

from tests.conftest import EXAMPLES, run_irshard

HEAT = os.path.join(EXAMPLES, "heat1d.py")

STEP = '''\
import os
os.environ["XLA_FLAGS"] += " --xla_force_host_platform_device_count=4"
import jax, jax.numpy as jnp
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P
mesh = jax.make_mesh((4,), ("x",), axis_types=(AxisType.Auto,))

def step(a):
    return (a @ a.T).sum(axis=0)

spec = P({spec})
a = jax.device_put(jnp.ones((16, 16)), NamedSharding(mesh, spec))
jax.jit(step)(a).block_until_ready()
'''


@pytest.fixture(scope="module")
def heat_reports(tmp_path_factory):
    root = tmp_path_factory.mktemp("heat")
    paths = {}
    for fn in ("simulate_set", "simulate_roll"):
        path = str(root / f"{fn}.json")
        done = run_irshard("compile", HEAT, "--fn", fn, "--mesh", "x=4",
                           "--format", "json", "-o", path)
        assert done.returncode == 0, done.stderr
        paths[fn] = path
    return paths


def diff_json(a, b, *extra):
    done = run_irshard("diff", a, b, "--format", "json", *extra)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_heat_formulations_by_line_and_kind(heat_reports):
    result = diff_json(heat_reports["simulate_set"], heat_reports["simulate_roll"])
    by_key = {(c["source"]["line"], c["kind"]): c for c in result["changes"]}
    assert set(by_key) == {(25, "all-gather"), (25, "collective-permute"),
                           (29, "collective-permute")}
    gathers = by_key[(25, "all-gather")]
    assert gathers["status"] == "removed"
    assert (gathers["a"]["count"], gathers["b"]["count"]) == (2, 0)
    # 2 gathers of 4 KiB, 100 steps.
    assert gathers["a"]["bytes_per_run"] == 2 * 4096 * 100
    assert by_key[(29, "collective-permute")]["status"] == "added"
    totals = result["totals"]
    set_report = json.load(open(heat_reports["simulate_set"]))
    assert totals["a"]["bytes_per_run"] == set_report["totals"]["bytes_per_run"]
    assert totals["delta"]["bytes_per_run"] == \
        totals["b"]["bytes_per_run"] - totals["a"]["bytes_per_run"] < 0
    assert totals["delta"]["time_s"] < 0 and "memory_bytes" in totals["a"]
    assert result["regressions"] == []


def test_fail_on_regression_exits_1_only_when_b_is_worse(heat_reports):
    better = run_irshard("diff", heat_reports["simulate_set"],
                         heat_reports["simulate_roll"], "--fail-on-regression")
    assert better.returncode == 0, better.stderr
    worse = run_irshard("diff", heat_reports["simulate_roll"],
                        heat_reports["simulate_set"], "--fail-on-regression")
    assert worse.returncode == 1
    assert worse.stderr.startswith("irshard: error: regression: B moves more bytes")
    assert "regression: B moves more bytes per run" in worse.stdout
    # Without the flag a regression is reported, not failed.
    assert run_irshard("diff", heat_reports["simulate_roll"],
                       heat_reports["simulate_set"]).returncode == 0


def test_a_report_against_itself_changes_nothing(heat_reports):
    path = heat_reports["simulate_set"]
    result = diff_json(path, path)
    assert result["changes"] == [] and result["unchanged"] == 2
    assert set(result["totals"]["delta"].values()) == {0}


def test_dump_directories(tmp_path, write):
    dumps = {}
    # The same program in two directories, sharded by rows, then columns.
    for name, spec in (("rows", '"x", None'), ("cols", 'None, "x"')):
        script = write(f"{name}/step.py", STEP.format(spec=spec))
        dump = str(tmp_path / f"{name}.dump")
        env = dict(os.environ, XLA_FLAGS=f"--xla_dump_to={dump}", JAX_PLATFORMS="cpu")
        done = subprocess.run([sys.executable, script], env=env, capture_output=True,
                              text=True)
        assert done.returncode == 0, done.stderr
        dumps[name] = dump
    result = diff_json(dumps["rows"], dumps["cols"])
    a = json.loads(run_irshard("collectives", dumps["rows"], "--format", "json").stdout)
    (module,) = [m for m in a["modules"] if m["collectives"]]
    assert result["totals"]["a"]["bytes_per_run"] == module["totals"]["bytes_per_run"]
    assert result["a"]["path"] == dumps["rows"]
    by_kind = {c["kind"]: c for c in result["changes"]}
    # By rows: the product gathers a, then the column sums are reduced; by
    # columns, only a bigger reduction (matched to the same line).
    assert by_kind["all-gather"]["status"] == "removed"
    assert by_kind["all-reduce"]["status"] == "changed"
    assert {c["source"]["line"] for c in result["changes"]} == {8}


@pytest.mark.parametrize("content, message", [
    ("{not json", "is not JSON"),
    ('{"schema": 1, "source": "x"}', "is not an irshard report"),
    ('{"schema": 7, "collectives": []}', 'has "schema": 7; this irshard reads '
                                         'reports of schema 1'),
    ('{"schema": "1", "collectives": []}', 'has "schema": "1"'),
])
def test_bad_reports_are_one_line_errors(write, heat_reports, content, message):
    bad = write("bad.json", content)
    done = run_irshard("diff", bad, heat_reports["simulate_set"])
    assert done.returncode == 2
    assert done.stderr.startswith("irshard: error: ") and message in done.stderr
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr


def test_a_missing_side_names_what_is_accepted(heat_reports, tmp_path):
    done = run_irshard("diff", str(tmp_path / "nope.json"), heat_reports["simulate_set"])
    assert done.returncode == 2
    assert "does not exist; give a JSON report" in done.stderr


def test_several_modules_need_module(write, heat_reports, tmp_path):
    report = json.load(open(heat_reports["simulate_set"]))
    other = dict(report, module="module_0002.jit_other")
    several = write("several.json", json.dumps(
        {"schema": 1, "modules": [dict(report, module="module_0001.jit_step"), other]}))
    done = run_irshard("diff", several, heat_reports["simulate_set"])
    assert done.returncode == 2
    assert "holds 2 modules; name one with --module" in done.stderr
    picked = diff_json(several, heat_reports["simulate_set"], "--module", "jit_step")
    assert picked["changes"] == []
