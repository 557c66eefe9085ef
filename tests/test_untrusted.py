"""What irshard is handed or reads back is not trusted: reports and HLO files
read for a page, the search cache, profiles, and the pytest plugin's
report names. Each case once leaked a file, followed a planted link,
believed a tampered entry, or crashed; each now works or ends in one
`irshard: error:` line with exit 2."""

import json
import os
import re

import pytest

from irshard import cli
from tests.conftest import EXAMPLES, ROOT

HEAT = os.path.join(EXAMPLES, "heat1d.py")
SECRET = "irshard-test-secret-0451"


def _page_data(path) -> dict:
    text = open(path, encoding="utf-8").read()
    m = re.search(r'<script type="application/json" id="irshard-data">(.*?)</script>',
                  text, re.S)
    return json.loads(m.group(1))


def test_a_page_embeds_only_the_sources_its_compile_ran(tmp_path, capsys):
    """A report or an HLO file may name any file of this machine as a
    collective's source; a page built from it shows none of them. A page of
    a compile shows the program's own file."""
    secret = tmp_path / "secret.txt"
    secret.write_text(f"TOKEN={SECRET}\n" * 30)
    good = str(tmp_path / "good.json")
    assert cli.main(["compile", HEAT, "--fn", "simulate_set", "--mesh", "x=4",
                     "--format", "json", "-o", good]) == 0, capsys.readouterr().err
    report = json.load(open(good))
    assert len(report["collectives"]) >= 2
    report["collectives"][0]["source"]["file"] = str(secret)
    report["collectives"][1]["source"]["file"] = "/proc/self/environ"
    evil = str(tmp_path / "evil.json")
    with open(evil, "w") as f:
        json.dump(report, f)
    page = str(tmp_path / "diff.html")
    assert cli.main(["diff", good, evil, "--format", "html", "-o", page]) == 0, \
        capsys.readouterr().err
    text = open(page, encoding="utf-8").read()
    assert SECRET not in text and "PATH=" not in text
    assert str(secret) in text            # the name is shown, not the file
    assert _page_data(page)["sources"] == {}
    # An HLO file whose metadata names the file.
    hlo = tmp_path / "evil.hlo"
    original = open(os.path.join(ROOT, "tests", "data", "async_collectives.hlo")).read()
    assert "/home/user/model/train.py" in original
    hlo.write_text(original.replace("/home/user/model/train.py", str(secret)))
    page = str(tmp_path / "hlo.html")
    assert cli.main(["collectives", str(hlo), "--format", "html", "-o", page]) == 0, \
        capsys.readouterr().err
    text = open(page, encoding="utf-8").read()
    assert SECRET not in text and str(secret) in text
    # The compile's own program is shown.
    page = str(tmp_path / "heat.html")
    assert cli.main(["compile", HEAT, "--fn", "simulate_set", "--mesh", "x=4",
                     "--format", "html", "-o", page]) == 0, capsys.readouterr().err
    lines = _page_data(page)["sources"]["heat1d.py"]
    assert any(line.startswith("def simulate_set") for line in lines)


# ---------------------------------------------------------------------------
# The search cache


def _report(step=0.01):
    from irshard.reporting.report import CollectiveReport
    return CollectiveReport.from_json(
        {"schema": 1, "collectives": [], "inputs": [],
         "totals": {"count": 0, "bytes_per_run": 0, "wire_bytes_per_run": 0},
         "step": {"step_s": step, "compute_s": step, "exposed_comm_s": 0.0},
         "memory": {"argument_bytes": 64, "output_bytes": 0, "temp_bytes": 0,
                    "alias_bytes": 0}})


def test_the_search_cache_never_writes_through_a_planted_link(tmp_path, monkeypatch):
    from irshard.strategy import compilers as compiling
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me\n")
    cache_dir = tmp_path / "cache"
    cache = compiling.Cache(str(cache_dir), "salt")
    path, _ = cache._where(["--mesh", "x=2"])
    cache_dir.mkdir()
    # The name a writer takes for its temporary file, planted beforehand.
    monkeypatch.setattr(compiling.secrets, "token_hex", lambda n: "f" * (2 * n))
    planted = f"{path}.{os.getpid()}.{'f' * 16}.tmp"
    os.symlink(victim, planted)
    cache.put(["--mesh", "x=2"], _report())
    assert victim.read_text() == "keep me\n" and os.path.islink(planted)
    assert cache.get(["--mesh", "x=2"]) is None      # not kept, not half-written
    # A link at the entry's own name is replaced, its target let be.
    monkeypatch.undo()
    os.symlink(victim, path)
    cache.put(["--mesh", "x=2"], _report())
    assert victim.read_text() == "keep me\n" and not os.path.islink(path)
    assert cache.get(["--mesh", "x=2"]) == _report()
    assert sorted(os.listdir(cache_dir)) == sorted(
        [os.path.basename(path), os.path.basename(planted)])


def test_the_search_cache_key_holds_the_profile_s_contents(tmp_path):
    from irshard.strategy import compilers as compiling
    program, profile = tmp_path / "p.py", tmp_path / "profile.json"
    program.write_text("def f(a: 'f32[8]'):\n    return a\n")
    profile.write_text('{"links": {}}')
    first = compiling.versions_salt(str(program), str(profile))
    assert compiling.versions_salt(str(program), str(profile)) == first
    profile.write_text('{"links": {} }')
    assert compiling.versions_salt(str(program), str(profile)) != first
    assert compiling.versions_salt(str(program)) != first


def test_a_failure_is_not_cached(tmp_path):
    from tests.test_search import engine
    from irshard.strategy import compilers as compiling
    from irshard.core.errors import IrshardError
    cache = compiling.Cache(str(tmp_path), "salt")
    first, second = [], []
    # Every candidate failing is the search's error; none of it is kept.
    with pytest.raises(IrshardError, match="every candidate failed"):
        engine(lambda c: "XLA failed: something broke", cache=cache, calls=first)
    assert first and os.listdir(tmp_path) == []
    with pytest.raises(IrshardError, match="every candidate failed"):
        engine(lambda c: "XLA failed: something broke", cache=cache, calls=second)
    assert second == first


TAMPERED = [
    json.dumps({"report": _report(-1.0).to_json()}),
    "[]", "null", '{"report": {}}', '{"key": "k", "report": {}}',
    "[" * 100000 + "]" * 100000,
    '{"a":' * 70 + "1" + "}" * 70,
    '{"error": "was cached once"}',
    '{"report": {"collectives": [], "totals": {"count": 0}, '
    '"step": {"step_s": NaN}}}',
    "\xff\xfe not text",
]


def test_a_tampered_or_odd_cache_entry_is_recompiled(tmp_path):
    import threading
    from irshard.strategy import compilers as compiling
    cache = compiling.Cache(str(tmp_path), "salt")
    argv = ["--mesh", "x=2"]
    cache.put(argv, _report())
    assert cache.get(argv) == _report()
    path, key = cache._where(argv)
    whole = json.load(open(path))
    assert whole["key"] == key
    for text in TAMPERED:
        with open(path, "w", encoding="utf-8", errors="surrogateescape") as f:
            f.write(text)
        assert cache.get(argv) is None, text[:40]
    # A valid entry of another key (copied over) is not believed either.
    whole["key"] = "0" * 64
    with open(path, "w") as f:
        json.dump(whole, f)
    assert cache.get(argv) is None
    # A hand-edited entry with step -1 does not win: the search compiles.
    from tests.test_search import engine
    calls = []
    result = engine(lambda c: _report(0.5), cache=cache, calls=calls)
    key_of = compiling.Cache(str(tmp_path), "salt")._where
    compiled = [o for o in result.outcomes if o.status == "ok"]
    first = ["gpt.py", *compiled[0].change.flags()]
    with open(key_of(first)[0], "w") as f:
        json.dump({"key": key_of(first)[1], "report": _report(-1.0).to_json()}, f)
    again = []
    result = engine(lambda c: _report(0.5), cache=cache, calls=again)
    assert again == calls[:1]
    assert result.winner.figures.step_s == 0.5
    assert all(o.figures.step_s == 0.5 for o in result.outcomes if o.figures)
    # A FIFO, a directory or a link where an entry would be: missing, at once.
    os.unlink(path)
    os.mkfifo(path)
    found = []
    reader = threading.Thread(target=lambda: found.append(cache.get(argv)), daemon=True)
    reader.start()
    reader.join(10)
    assert found == [None]
    os.unlink(path)
    os.mkdir(path)
    assert cache.get(argv) is None
    cache.put(argv, _report())          # cannot replace a directory: not kept
    assert os.path.isdir(path)


def test_an_unusable_cache_dir_is_an_error(tmp_path, capsys):
    program = tmp_path / "p.py"
    program.write_text("def f(a: 'f32[8]'):\n    return a * 2\n")
    a_file = tmp_path / "file"
    a_file.write_text("")
    for cache_dir, message in ((a_file, "is not a directory"),
                               (a_file / "sub", "cannot be made")):
        assert cli.main(["search", str(program), "--devices", "2",
                         "--cache-dir", str(cache_dir)]) == 2
        captured = capsys.readouterr()
        lines = captured.err.splitlines()
        assert captured.out == "" and len(lines) == 1, captured.err
        assert lines[0].startswith(f"irshard: error: --cache-dir '{cache_dir}' {message}")
    assert a_file.read_text() == ""


# ---------------------------------------------------------------------------
# Profiles and durations


def _profile(**compute):
    return {"links": {"host": {"latency": 1e-6, "bandwidth": 1e9}},
            "compute": {"devices": 4, "flops": 1e10, "launch": 1e-5,
                        "op_overhead": 1e-6, "bandwidth": [[1048576, 1e10]],
                        **compute}}


PROFILE_CASES = [
    (dict(launch=1e308), "compute.launch: expected a number from 0 to 10 (seconds), "
     "got 1e+308"),
    (dict(flops=1e-308), "compute.flops: expected a number from 1 to 1e+19 (flop/s), "
     "got 1e-308"),
    (dict(bandwidth=[[1048576]]), "compute.bandwidth[0]: expected a pair"),
    (dict(bandwidth=[[1048576, 1e10, 3]]), "compute.bandwidth[0]: expected a pair"),
    (dict(flops_by_size=[[1e6, 1e-308]]), "compute.flops_by_size[0][1]: expected "
     "a number from 1 to 1e+19"),
    ({"links": {"host": {"latency": 1e308, "bandwidth": 1e9}}},
     "links.host.latency: expected a number from 0 to 10 (seconds), got 1e+308"),
]


def test_extreme_profile_values_are_refused_by_name(tmp_path, capsys):
    import math
    matmul = os.path.join(EXAMPLES, "matmul.py")
    path = tmp_path / "p.json"
    path.write_text(json.dumps(_profile()))
    assert cli.main(["compile", matmul, "--mesh", "x=2,y=2", "--profile", str(path),
                     "--format", "json"]) == 0, capsys.readouterr().err
    step = json.loads(capsys.readouterr().out)["step"]
    assert all(math.isfinite(v) for v in step.values() if isinstance(v, float))
    for change, message in PROFILE_CASES:
        profile = _profile()
        if "links" in change:
            profile.update(change)
        else:
            profile["compute"].update(change)
        path.write_text(json.dumps(profile))
        out = tmp_path / "r.html"
        assert cli.main(["compile", matmul, "--mesh", "x=2,y=2", "--profile",
                         str(path), "--format", "html", "-o", str(out)]) == 2, change
        captured = capsys.readouterr()
        lines = captured.err.splitlines()
        assert len(lines) == 1 and lines[0].startswith(
            f"irshard: error: --profile {path}: "), captured.err
        assert message in lines[0], lines[0]
        assert not out.exists()


def test_a_budget_time_beyond_a_week_is_refused(capsys):
    from irshard.strategy import search
    assert search.parse_duration("168h") == 7 * 24 * 3600
    for text in ("1" * 400, "604801", "9" * 30 + "h"):
        assert cli.main(["search", os.path.join(EXAMPLES, "matmul.py"),
                         "--devices", "2", "--no-cache", "--budget-time", text]) == 2
        captured = capsys.readouterr()
        lines = captured.err.splitlines()
        assert len(lines) == 1 and "give a positive duration up to a week" in lines[0]
        assert len(lines[0]) < 200 and captured.out == ""
    # Given as a number (irshard.search's budget_time): a week at most.
    from tests.test_search import engine, fake_report
    result = engine(lambda c: fake_report(0.01, 10), budget=float("inf"))
    assert json.loads(result.render_json())["budget_s"] == search.MAX_BUDGET_S


# ---------------------------------------------------------------------------
# Names from a program


def test_escape_sequences_in_pytree_keys_are_shown_not_sent(tmp_path):
    import jax
    import jax.numpy as jnp
    import irshard
    key = "w\x1b]0;owned\x07\x1b[2J\u202e"

    def f(p):
        return (p[key] @ p["x"]).sum(axis=0)
    params = {key: jax.ShapeDtypeStruct((8, 8), jnp.float32),
              "x": jax.ShapeDtypeStruct((8, 8), jnp.float32)}
    report = irshard.compile(f, params, mesh="x=2", rules=[("p/x", "x,_")])
    text = report.to_text()
    assert not any(ch in text for ch in "\x1b\x07\u202e")
    assert "w\\x1b]0;owned\\x07\\x1b[2J\\u202e" in text
    # The table stays aligned: every row of inputs as wide as its header's.
    lines = text.splitlines()
    start = lines.index("inputs") + 1
    rows = lines[start:lines.index("", start)]
    assert len(rows) == 3
    sharding = rows[0].index("sharding")
    assert all(row[sharding - 2:sharding] == "  " for row in rows[1:])


def test_markdown_keeps_a_backtick_in_a_name_inside_its_code_span():
    import jax
    import jax.numpy as jnp
    import irshard
    from irshard.reporting import notebook

    def f(x):
        return x @ x.T
    f.__name__ = f.__qualname__ = "evil`**bold**`"
    report = irshard.compile(f, jax.ShapeDtypeStruct((8, 8), jnp.float32),
                             mesh="x=2", rules=[("x", "x,_")])
    first = report._repr_markdown_().splitlines()[0]
    assert "``" in first and "**bold**" in first
    assert notebook._code("a`b") == "``a`b``"
    assert notebook._code("`x") == "`` `x ``"
    try:
        from markdown_it import MarkdownIt
    except ImportError:
        return
    html = MarkdownIt().render(first)
    assert "<strong>bold</strong>" not in html
    code = re.search(r"<code>(.*?)</code>", html).group(1)
    assert "evil`**bold**`" in code


def test_calibrate_sizes_that_measure_alike_are_refused(capsys):
    from irshard.measuring import calibrate
    assert cli.main(["calibrate", "--mesh", "x=2", "--sizes", "3,5,7,11"]) == 2
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    assert len(lines) == 1 and captured.out == ""
    assert lines[0].startswith("irshard: error: --sizes: 3 B, 5 B, 7 B, 11 B are "
                               "measured as 1 different size over axis x (8 B")
    from irshard.core.specs import parse_mesh
    assert calibrate.check_plan(parse_mesh("x=8,y=2"), None, 1) == \
        sorted(calibrate.DEFAULT_SIZES)
    assert calibrate.measured_bytes(4096, 8) == 4096
    assert calibrate.measured_bytes(3, 2) == calibrate.measured_bytes(11, 2) == 8


def test_an_empty_save_path_is_an_error(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert cli.main(["run", os.path.join(EXAMPLES, "matmul.py"), "--mesh", "x=2,y=2",
                     "--save", ""]) == 2
    captured = capsys.readouterr()
    assert captured.err == "irshard: error: --save '': expected a path ending " \
        "in .npz\n"
    assert os.listdir(tmp_path) == []
