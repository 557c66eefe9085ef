"""The pytest plugin (entry point `pytest11`): `collective_budget` markers,
`--irshard-report DIR` and the `irshard_reports` fixture, run by pytest
itself in a fresh process (pytester), as a model's test suite would."""

import json
import os
from importlib.metadata import entry_points

import pytest

from irshard.pytest_plugin import report_name

# A model's test file: one layer whose weight is gathered (line 14) and
# whose output is summed over the batch (line 15).
MODEL_TESTS = '''
import jax
import jax.numpy as jnp
import pytest

import irshard

irshard.configure(devices=4)

X = jax.ShapeDtypeStruct((16, 64), jnp.float32)
W = jax.ShapeDtypeStruct((64, 32), jnp.float32)
RULES = [("w", "fsdp,_"), ("x", "fsdp,_")]

def layer(w, x):
    h = jnp.tanh(x @ w)
    return h.sum(axis=0)

def compile_layer(mesh="fsdp=4", rules=RULES):
    return irshard.compile(layer, W, X, mesh=mesh, rules=rules)

@pytest.mark.collective_budget("all-gather<=1", "bytes<=1MiB")
def test_returned_within():
    return compile_layer()

@pytest.mark.collective_budget("all-gather<=0", "bytes<=16", "all-reduce<=8")
def test_returned_over():
    return compile_layer()

@pytest.mark.collective_budget("collectives<=0")
def test_compiled_and_not_returned():
    compile_layer(rules=[])              # replicated: no collective
    compile_layer(mesh="fsdp=2,tp=2")    # three collectives

@pytest.mark.collective_budget("collectives<=0")
def test_returns_the_replicated_one():
    compile_layer()
    return compile_layer(rules=[])

@pytest.mark.collective_budget("all-gather@tp<=0")
def test_axis_not_in_mesh():
    return compile_layer()

@pytest.mark.collective_budget("all-gathers<=1")
def test_bad_budget():
    return compile_layer()

@pytest.mark.collective_budget("all-gather<=1")
def test_gives_no_report():
    pass

@pytest.mark.collective_budget(limit=3)
def test_budget_as_keyword():
    return compile_layer()

@pytest.mark.collective_budget("bytes<=1MiB")
class TestMarkersAddUp:
    @pytest.mark.collective_budget("all-reduce<=0")
    def test_class_and_function_budgets(self):
        return compile_layer()

def test_fixture_holds_given_reports(irshard_reports):
    compile_layer()
    compile_layer(rules=[])
    assert [len(r.collectives) for r in irshard_reports] == [2, 0]

def test_unmarked_test_is_untouched():
    compile_layer()
'''


def test_entry_point_is_registered():
    assert "irshard.pytest_plugin" in {e.value for e in entry_points(group="pytest11")}


@pytest.mark.slow
def test_collective_budget_marker(pytester):
    pytester.makepyfile(test_model=MODEL_TESTS)
    result = pytester.runpytest_subprocess("--irshard-report", "reports", "-p",
                                           "no:cacheprovider")
    result.assert_outcomes(passed=4, failed=7)
    out = result.stdout.str()

    # A breach: each exceeded budget, then the source lines it comes from.
    result.stdout.fnmatch_lines([
        "*_ test_returned_over _*",
        "collective_budget: test_model.py:layer  mesh fsdp=4 (4 cpu devices)",
        "2 of 3 collective budgets exceeded:",
        "  all-gather<=0: 1 all-gather",
        "    test_model.py:14 (layer): 1 all-gather, 8.0 KiB per run",
        "  bytes<=16: 8320 bytes per run (8.1 KiB)",
        "    test_model.py:14 (layer): 1 all-gather, 8.0 KiB per run",
        "    test_model.py:15 (layer): 1 all-reduce, 128 B per run",
        "*Captured irshard report call*",
        "*all-gather  f32?64,32?*test_model.py:14 (layer)*",
        "*all-gather<=0      1  EXCEEDED",
    ])
    # Every report the test compiled is held; only the one that breaks
    # the budget is named.
    result.stdout.fnmatch_lines([
        "*_ test_compiled_and_not_returned _*",
        "collective_budget: test_model.py:layer  mesh fsdp=2,tp=2 (4 cpu devices)",
        "1 of 1 collective budgets exceeded:",
        "  collectives<=0: 3 collectives",
    ])
    assert "collective_budget: test_model.py:layer  mesh fsdp=4 " \
        "(4 cpu devices)\n1 of 1" not in out
    # The returned report is the one held.
    for name, message in [
            ("test_returns_the_replicated_one", None),
            ("test_axis_not_in_mesh",
             "collective_budget: budget 'all-gather@tp<=0': the mesh has no "
             "axis 'tp'; its axes are fsdp"),
            ("test_bad_budget", "collective_budget: budget 'all-gathers<=1': "
             "unknown quantity 'all-gathers'*"),
            ("test_gives_no_report", "collective_budget: the test gave no report "
             "to hold to its budgets; return the report of irshard.compile(...), "
             "or call irshard.compile or irshard.run in it"),
            ("test_budget_as_keyword", "collective_budget: expected budgets as "
             "strings, such as 'all-gather@fsdp<=14' or 'bytes<=8MiB', not limit="),
            ("test_class_and_function_budgets", "  all-reduce<=0: 1 all-reduce")]:
        if message is None:
            assert f"_ {name} _" not in out
        else:
            result.stdout.fnmatch_lines([f"*_ *{name} _*", message])
    # Budget failures are pytest failures, without a traceback into the plugin.
    assert "pytest_plugin.py" not in out and "Traceback" not in out

    # --irshard-report: every budgeted test's report, with its outcomes.
    reports = pytester.path / "reports"
    names = sorted(os.listdir(reports))
    over_name = report_name("test_model.py::test_returned_over")
    both_name = report_name("test_model.py::TestMarkersAddUp::"
                            "test_class_and_function_budgets")
    assert over_name.startswith("test_model.py-test_returned_over-")
    assert f"{over_name}.json" in names and f"{over_name}.html" in names
    assert report_name("test_model.py::test_compiled_and_not_returned") + "-2.json" \
        in names
    assert f"{both_name}.json" in names
    assert not any("unmarked" in n or "fixture" in n or "no_report" in n for n in names)
    over = json.loads((reports / f"{over_name}.json").read_text())
    assert [(b["budget"], b["value"], b["passed"]) for b in over["budgets"]] == [
        ("all-gather<=0", 1, False), ("bytes<=16", 8320, False),
        ("all-reduce<=8", 1, True)]
    both = json.loads((reports / f"{both_name}.json").read_text())
    assert [b["budget"] for b in both["budgets"]] == ["all-reduce<=0", "bytes<=1MiB"]
    bad = json.loads((reports / (report_name("test_model.py::test_bad_budget")
                                 + ".json")).read_text())
    assert "budgets" not in bad and bad["totals"]["count"] == 2
    page = (reports / f"{over_name}.html").read_text()
    assert page.startswith("<!doctype html>") and '"all-gather\\u003c=0"' in page
    result.stdout.fnmatch_lines(["irshard: * reports written to reports"])


def test_plugin_imports_no_jax_where_no_test_is_marked(pytester):
    pytester.makepyfile(test_plain='''
        import sys
        def test_plain():
            assert "irshard.pytest_plugin" in sys.modules
            assert "jax" not in sys.modules and "irshard.api" not in sys.modules
    ''')
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)


def test_report_names_are_short_and_never_shared():
    ids = ["t.py::test_p[a/b]", "t.py::test_p[a-b]", "t.py::test_p[a b]",
           "t.py::test_p[a\u00e9b]", "t/p.py::test_p", "t-p.py::test_p",
           "t.py::test_p[" + "x" * 300 + "]", "t.py::test_p[" + "\u00e9" * 300 + "]",
           "t.py::test_p[../../etc]", "t.py::test_p[.]"]
    names = [report_name(i) for i in ids]
    assert len(set(names)) == len(ids)
    assert names == [report_name(i) for i in ids]          # the same every run
    for name in names:
        assert len((name + "-12.html").encode()) <= 160
        assert "/" not in name and not name.startswith((".", "-"))
    assert names[0].startswith("t.py-test_p-a-b-")


SMALL_TESTS = '''
import jax
import jax.numpy as jnp
import pytest

import irshard

irshard.configure(devices=2)

X = jax.ShapeDtypeStruct((8, 8), jnp.float32)

def f(x):
    return (x @ x.T).sum(axis=0)

@pytest.mark.collective_budget("collectives<=8")
@pytest.mark.parametrize("case", ["a/b", "a-b", "a b", pytest.param(1, id="x" * 300)])
def test_layer(case):
    return irshard.compile(f, X, mesh="x=2", rules=[("x", "x,_")])
'''


def test_report_names_of_odd_test_ids(pytester):
    """Ids that read alike each keep their own report; a 300-character id
    does not fail its test."""
    pytester.makepyfile(test_small=SMALL_TESTS)
    result = pytester.runpytest_subprocess("--irshard-report", "out", "-p",
                                           "no:cacheprovider")
    result.assert_outcomes(passed=4)
    names = sorted(os.listdir(pytester.path / "out"))
    assert len(names) == 8 and len({n.rsplit(".", 1)[0] for n in names}) == 4
    for case in ["a/b", "a-b", "a b", "x" * 300]:
        name = report_name(f"test_small.py::test_layer[{case}]")
        assert f"{name}.json" in names and f"{name}.html" in names


def test_an_unusable_report_dir_is_a_usage_error(pytester):
    pytester.makepyfile(test_plain="def test_plain():\n    pass\n")
    (pytester.path / "a_file").write_text("")
    for folder, problem in [("a_file", "is not a directory"),
                            ("a_file/sub", "cannot be made: Not a directory")]:
        result = pytester.runpytest_subprocess("--irshard-report", folder, "-p",
                                               "no:cacheprovider")
        assert result.ret == pytest.ExitCode.USAGE_ERROR
        err = result.stderr.str()
        assert f"ERROR: --irshard-report '{folder}' {problem}; give a writable " \
               f"directory" in err
        assert "Traceback" not in err + result.stdout.str()
    assert (pytester.path / "a_file").read_text() == ""


# The budgeted test of docs/guides/testing.md, written as a model's suite
# writes it: its example arguments made with jax.eval_shape when the module
# is imported.
EVAL_SHAPE_AT_IMPORT = '''
import jax
import jax.numpy as jnp
import pytest

import irshard

def init(key):
    return {"w": jax.random.normal(key, (64, 64)), "b": jnp.zeros((64,))}

PARAMS = jax.eval_shape(init, jax.random.key(0))
X = jax.ShapeDtypeStruct((32, 64), jnp.float32)

def step(params, x):
    return jnp.tanh(x @ params["w"] + params["b"]).sum()

@pytest.mark.collective_budget("all-gather@fsdp<=4", "bytes<=1MiB")
def test_within():
    return irshard.compile(step, PARAMS, X, mesh="fsdp=8",
                           rules=[("params/w", "fsdp,_"), ("x", "fsdp,_")])

@pytest.mark.collective_budget("collectives<=0")
def test_over():
    return irshard.compile(step, PARAMS, X, mesh="fsdp=8",
                           rules=[("params/w", "fsdp,_"), ("x", "fsdp,_")])
'''


@pytest.mark.slow
def test_a_module_that_imports_jax_first_gets_its_devices(pytester, monkeypatch):
    """pytest asks for the devices before the test module touches JAX: the
    budgets decide, not "JAX has already started with 1 cpu devices"."""
    pytester.makepyfile(test_model=EVAL_SHAPE_AT_IMPORT)
    # As a model's suite runs: no device count set by anyone.
    monkeypatch.delenv("XLA_FLAGS", raising=False)
    monkeypatch.delenv("JAX_NUM_CPU_DEVICES", raising=False)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*collectives<=0*"])
    assert "already started" not in result.stdout.str()
    # 0 leaves JAX its own count: the mesh of 8 then cannot be had.
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider",
                                           "--irshard-devices", "0")
    result.assert_outcomes(failed=2)
    assert "JAX has already started with 1 cpu devices" in result.stdout.str()
