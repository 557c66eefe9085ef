"""The JSON files irshard reads back — reports (`irshard diff`,
`irshard.compare`) and saved profiles (`--profile`) — are checked against
their schema: a file that does not fit is one error line naming the place,
never a traceback, a division by zero or a negative time. Property tests
throw generated garbage at each reader."""

import copy
import json
import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from irshard import cli
from irshard.collectives import dumps
from irshard.core import schema
from irshard.core.errors import InputError, IrshardError
from irshard.reporting import diff
from irshard.timemodel import profiles

REPORT = {
    "schema": 1, "source": "m.py", "function": "f",
    "mesh": {"axes": [{"name": "x", "size": 2}], "devices": 2},
    "collectives": [
        {"name": "all-gather.1", "kind": "all-gather", "bytes": 64,
         "wire_bytes": 32, "executions": 4, "time_s": 1e-6,
         "source": {"file": "m.py", "line": 3, "function": "f"}},
        {"name": "all-reduce.2", "kind": "all-reduce", "bytes": 8,
         "executions": None, "source": None},
    ],
    "totals": {"count": 2, "by_kind": {"all-gather": 1, "all-reduce": 1},
               "bytes_per_run": 264, "wire_bytes_per_run": 128, "time_s": 4e-6},
    "memory": {"argument_bytes": 8, "output_bytes": 8, "alias_bytes": 0,
               "temp_bytes": 0},
}

PROFILE = {"links": {"host": {"latency": {"value": 1e-6, "source": "m"},
                              "bandwidth": {"value": 1e9, "source": "m"},
                              "kinds": {"all-reduce": {"latency": 2e-6,
                                                       "bandwidth": 5e8}}}},
           "error": 0.1}


def _with(base, path, value):
    """`base` with the value at `path` (keys and indices) replaced; `...`
    deletes it."""
    result = copy.deepcopy(base)
    *parents, last = path
    node = result
    for key in parents:
        node = node[key]
    if value is ...:
        del node[last]
    else:
        node[last] = value
    return result


def _nested(depth):
    value = []
    for _ in range(depth):
        value = [value]
    return value


BAD_REPORTS = [
    (_with(REPORT, ["collectives", 0, "bytes"], "64"),
     "collectives[0].bytes: expected a non-negative integer, got \"64\""),
    (_with(REPORT, ["collectives", 0, "bytes"], -64),
     "collectives[0].bytes: expected a non-negative integer, got -64"),
    (_with(REPORT, ["collectives", 1, "kind"], "all-sum"),
     "collectives[1].kind: expected one of all-reduce, all-gather"),
    (_with(REPORT, ["collectives", 0, "time_s"], float("nan")),
     "collectives[0].time_s: expected a non-negative number or null, got NaN"),
    (_with(REPORT, ["collectives", 0, "executions"], 0),
     "collectives[0].executions: expected a positive integer or null, got 0"),
    (_with(REPORT, ["collectives", 0, "source", "line"], "3"),
     "collectives[0].source.line"),
    (_with(REPORT, ["totals"], ...), "has no 'totals' (an object)"),
    (_with(REPORT, ["totals", "count"], 5),
     "totals.count: is 5, but the report lists 2 collectives"),
    (_with(REPORT, ["totals", "bytes_per_run"], float("inf")),
     "totals.bytes_per_run: expected a non-negative integer, got Infinity"),
    (_with(REPORT, ["memory", "temp_bytes"], 1.5), "memory.temp_bytes"),
    (_with(REPORT, ["mesh", "devices"], "two"), "mesh.devices"),
    (_with(REPORT, ["collectives", 0], "all-gather"),
     "collectives[0]: expected an object, got \"all-gather\""),
    (_with(REPORT, ["collectives", 0, "name"], ...),
     "collectives[0]: has no 'name' (a string)"),
]


@pytest.mark.parametrize("bad, message", BAD_REPORTS)
def test_a_report_that_does_not_fit_is_one_line(bad, message, tmp_path, capsys):
    good, path = tmp_path / "a.json", tmp_path / "b.json"
    good.write_text(json.dumps(REPORT))
    path.write_text(json.dumps(bad))
    assert cli.main(["diff", str(good), str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"irshard: error: report {path}: ")
    assert message in err
    # The same check guards a report given to irshard.compare as a value.
    with pytest.raises(InputError, match="diff: the report"):
        dumps.diff_side(bad)


def test_the_minimal_reports_compare(tmp_path, capsys):
    good = tmp_path / "a.json"
    good.write_text(json.dumps(REPORT))
    assert cli.main(["diff", str(good), str(good), "--format", "json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["totals"]["a"] == result["totals"]["b"]


def test_a_report_nested_too_deep(tmp_path, capsys):
    good, deep = tmp_path / "a.json", tmp_path / "deep.json"
    good.write_text(json.dumps(REPORT))
    deep.write_text(json.dumps(_with(REPORT, ["source"], _nested(100))))
    assert cli.main(["diff", str(good), str(deep)]) == 2
    assert "nested more than 64 deep" in capsys.readouterr().err
    # Deeper than Python's own JSON reader goes.
    deep.write_text("[" * 200000 + "]" * 200000)
    assert cli.main(["diff", str(good), str(deep)]) == 2
    assert "nested more than 64 deep" in capsys.readouterr().err


BAD_PROFILES = [
    ('"hello"', "expected an object, got \"hello\""),
    ('{"links": {"host": {"latency": 1e-6}}}',
     "links.host: has no 'bandwidth' (a number from 1 to 1e+16 (bytes/s))"),
    ('{"links": {"host": {"latency": 1e-6, "bandwidth": 0}}}',
     "links.host.bandwidth: expected a number from 1 to 1e+16 (bytes/s), got 0"),
    ('{"links": {"host": {"latency": -1e-6, "bandwidth": 1e9}}}',
     "links.host.latency: expected a number from 0 to 10 (seconds), got -1e-06"),
    ('{"links": {"host": {"latency": NaN, "bandwidth": 1e9}}}',
     "links.host.latency: expected a number from 0 to 10 (seconds), got NaN"),
    ('{"links": {"host": {"latency": 1e-6, "bandwidth": Infinity}}}',
     "links.host.bandwidth: expected a number from 1 to 1e+16 (bytes/s), got Infinity"),
    ('{"links": {"host": {"latency": 1e-6, "bandwidth": "fast"}}}',
     "links.host.bandwidth: expected a number from 1 to 1e+16 (bytes/s), got \"fast\""),
    ('{"links": {"host": {"latency": {"value": -1}, "bandwidth": 1e9}}}',
     "links.host.latency.value: expected a number from 0 to 10 (seconds), got -1"),
    ('{"links": {"warp": {"latency": 1e-6, "bandwidth": 1e9}}}',
     "links.warp: unknown link kind; links are dcn, host, ici, infiniband, nvlink"),
    ('{"links": {"host": {"latency": 1e-6, "bandwidth": 1e9, "kinds": '
     '{"all-sum": {"latency": 1, "bandwidth": 2e9}}}}}',
     "links.host.kinds: unknown collective kind 'all-sum'"),
    ('{"links": {"host": {"latency": 1e-6, "bandwidth": 1e9, "kinds": '
     '{"all-reduce": {"latency": 1, "bandwidth": 0}}}}}',
     "links.host.kinds.all-reduce.bandwidth: expected a number from 1 to 1e+16 (bytes/s)"),
    ('{"links": {"host": {"latency": 1e-6, "bandwidth": 1e9, "rendezvous": '
     '{"1": 1e-6}}}}',
     "links.host.rendezvous.1: a rendezvous is keyed by its group's size, a "
     "whole number of at least 2"),
    ('{"links": {"host": {"latency": 1e-6, "bandwidth": 1e9, "rendezvous": '
     '{"\u00b2": 1e-6}}}}', "a rendezvous is keyed by its group's size"),
    ('{"links": {"host": {"latency": 1e-6, "bandwidth": 1e9, "rendezvous": '
     '{"4": -1}}}}',
     "links.host.rendezvous.4: expected a number from 0 to 10 (seconds), got -1"),
    ('{"links": {"host": {"latency": 1e-6, "bandwidth": 1e9, "rendezvous": [2]}}}',
     "links.host.rendezvous: expected an object"),
    ("[" * 100000 + "]" * 100000, "nested more than 64 deep"),
    ("{", "is not JSON"),
]


@pytest.mark.parametrize("content, message", BAD_PROFILES)
def test_a_profile_that_does_not_fit_is_one_line(content, message, tmp_path):
    path = tmp_path / "p.json"
    path.write_text(content)
    with pytest.raises(InputError) as e:
        profiles.load_saved(str(path))
    assert str(e.value).startswith(f"--profile {path}")
    assert message in str(e.value) and "\n" not in str(e.value)


def test_a_bad_profile_fails_before_anything_compiles(tmp_path, capsys, monkeypatch):
    from irshard import backend
    path = tmp_path / "p.json"
    path.write_text('{"links": {"host": {"latency": 1e-6, "bandwidth": 0}}}')

    def refuse(*args, **kwargs):
        raise AssertionError("traced before the profile was checked")
    monkeypatch.setattr(backend, "lower", refuse)
    from tests.conftest import EXAMPLES
    assert cli.main(["compile", f"{EXAMPLES}/matmul.py", "--mesh", "x=2,y=2",
                     "--profile", str(path)]) == 2
    assert "links.host.bandwidth: expected a number from 1 to 1e+16 (bytes/s), got 0" in \
        capsys.readouterr().err


def test_link_kinds_are_those_of_the_shipped_profiles():
    shipped = profiles._profiles(profiles.PROFILES_PATH)
    assert set(schema.LINK_KINDS) == {link for p in shipped.values()
                                      for link in p.get("links", {})}
    # And every shipped link fits the schema a saved one is held to.
    for p in shipped.values():
        schema.check({"links": p["links"]}, schema.PROFILE, "profiles.json")


def test_a_good_profile_gives_finite_positive_times(tmp_path):
    path = tmp_path / "p.json"
    path.write_text(json.dumps(PROFILE))
    profile = profiles.profile("cpu-host", str(path))
    link = profile.links["host"]
    assert link.bandwidth == 1e9 and link.for_kind("all-reduce") == (2e-6, 5e8)


# ---------------------------------------------------------------------------
# Garbage


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-2 ** 70, 2 ** 70)
    | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4)
    | st.dictionaries(st.sampled_from(["collectives", "totals", "kind", "bytes",
                                       "name", "links", "host", "latency",
                                       "bandwidth", "value", "count", "kinds",
                                       "executions", "source", "line", "x"]),
                      inner, max_size=5),
    max_leaves=20)

GARBAGE = settings(max_examples=300, deadline=None,
                   suppress_health_check=[HealthCheck.too_slow,
                                          HealthCheck.function_scoped_fixture])


def _paths(value, prefix=()):
    yield prefix
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _paths(v, prefix + (k,))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _paths(v, prefix + (i,))


def _garbage_file(tmp_path_factory, data, bases):
    """A JSON file holding one of `bases` with a value replaced or deleted
    somewhere, or a generated value."""
    base = data.draw(st.sampled_from(bases))
    paths = [p for p in _paths(base) if p]
    if paths and data.draw(st.booleans()):
        target = data.draw(st.sampled_from(paths))
        value = _with(base, target, data.draw(json_values | st.just(...)))
    else:
        value = data.draw(json_values)
    path = tmp_path_factory.mktemp("g") / "g.json"
    path.write_text(json.dumps(value))
    return path


def _one_line_or_fine(read):
    try:
        return read()
    except IrshardError as e:
        assert str(e) and "\n" not in str(e), repr(str(e))
        return None


@GARBAGE
@given(st.data())
def test_garbage_reports_never_crash_diff(tmp_path_factory, data):
    path = _garbage_file(tmp_path_factory, data, [REPORT, PROFILE, {}])
    side = _one_line_or_fine(lambda: dumps.load_side(str(path)))
    if side is not None:
        # What the schema let through compares without a fault, in finite
        # non-negative numbers.
        result = diff.compare(side, side).to_json()
        for key in ("bytes_per_run", "wire_bytes_per_run"):
            assert result["totals"]["a"][key] >= 0
        t = result["totals"]["a"].get("time_s")
        assert t is None or (math.isfinite(t) and t >= 0)
        diff.compare(side, side).render_text()


@GARBAGE
@given(st.data())
def test_garbage_profiles_never_crash(tmp_path_factory, data):
    path = _garbage_file(tmp_path_factory, data, [PROFILE, REPORT, {}])
    found = _one_line_or_fine(lambda: profiles.profile("cpu-host", str(path)))
    if found is not None:
        for link in found.links.values():
            for latency, bandwidth in [(link.latency, link.bandwidth),
                                       *link.kinds.values()]:
                assert math.isfinite(latency) and latency >= 0
                assert bandwidth > 0 and not math.isnan(bandwidth)


@GARBAGE
@given(st.data())
def test_garbage_search_cache_entries_are_never_believed(tmp_path_factory, data):
    """A search cache entry is read back only whole and of the key asked
    for; anything else (a changed value anywhere, any JSON) is missing,
    never an error and never a report the search would rank."""
    from irshard.reporting.report import CollectiveReport
    from irshard.strategy import compilers as compiling
    from tests.test_untrusted import _report
    directory = tmp_path_factory.mktemp("cache")
    cache = compiling.Cache(str(directory), "salt")
    argv = ["prog.py", "--mesh", "x=2"]
    cache.put(argv, _report())
    (entry,) = [p for p in directory.iterdir() if p.suffix == ".json"]
    whole = json.loads(entry.read_text())
    assert cache.get(argv) == _report()
    garbage = _garbage_file(tmp_path_factory, data, [whole])
    entry.write_bytes(garbage.read_bytes())
    found = _one_line_or_fine(lambda: cache.get(argv))
    if found is not None:
        stored = json.loads(garbage.read_text())
        assert stored["key"] == whole["key"]
        assert found == CollectiveReport.from_json(stored["report"])
        schema.check(stored, compiling.ENTRY, "entry")
