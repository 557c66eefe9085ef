"""The HTML report (`--format html`), rendered in a real headless browser.

Pages are opened from file:// in Chromium (Debian's package; `make test`
installs it) through Playwright. Every page is checked for console errors,
script errors and any request other than the page itself. Without a
browser these tests are skipped, unless IRSHARD_REQUIRE_BROWSER is set (CI
sets it), where that is a failure.
"""

import json
import os
import re
from pathlib import Path

import pytest

from tests.conftest import EXAMPLES, ROOT, run_irshard

pytestmark = pytest.mark.browser

GPT = os.path.join(EXAMPLES, "gpt.py")
GPT_TP = ["--fn", "train_step", "--args", "example_args", "--mesh", "fsdp=4,tp=2",
          "--shard", "**/embed=fsdp,tp", "--shard", "**/attn/w[qkv]=fsdp,tp",
          "--shard", "**/attn/wo=tp,fsdp", "--shard", "**/mlp/w_in=fsdp,tp",
          "--shard", "**/mlp/w_out=tp,fsdp", "--shard", "batch/*=fsdp,_"]
CUBE = os.path.join(ROOT, "tests", "programs", "cube.py")
REMAT = os.path.join(EXAMPLES, "remat.py")
HEAT = os.path.join(EXAMPLES, "heat1d.py")


class Page:
    """A report opened from file://, recording what the page did."""

    def __init__(self, browser, path: str):
        self.url = "file://" + os.path.abspath(path)
        self.page = browser.new_page(viewport={"width": 1400, "height": 1000})
        self.errors, self.requests = [], []
        self.page.on("console", lambda m: m.type in ("error", "warning")
                     and self.errors.append(f"{m.type}: {m.text}"))
        self.page.on("pageerror", lambda e: self.errors.append(f"pageerror: {e}"))
        self.page.on("request", lambda r: self.requests.append(r.url))
        self.page.set_default_timeout(5000)
        self.page.goto(self.url)
        self.page.wait_for_selector("html[data-ready]")

    def check_clean(self) -> None:
        assert self.errors == []
        assert self.requests == [self.url]

    def texts(self, selector: str) -> list[str]:
        return self.page.locator(selector).all_inner_texts()

    def close(self) -> None:
        self.check_clean()
        self.page.close()


@pytest.fixture
def open_page(browser):
    pages = []

    def open_page(path):
        pages.append(Page(browser, path))
        return pages[-1]

    yield open_page
    for p in pages:
        p.close()


def _compile(*args, out):
    result = run_irshard("compile", *args, "-o", out)
    assert result.returncode == 0, result.stderr
    return out


@pytest.fixture(scope="module")
def gpt(tmp_path_factory):
    """The transformer step with tensor parallelism: its HTML page and the
    JSON report of the same command."""
    d = tmp_path_factory.mktemp("gpt")
    html = _compile(GPT, *GPT_TP, "--format", "html", out=str(d / "gpt.html"))
    js = _compile(GPT, *GPT_TP, "--explain", "--format", "json", out=str(d / "gpt.json"))
    with open(js) as f:
        return html, json.load(f)


def _rows(page) -> list[str]:
    return page.page.locator("#collective-table tbody tr[data-name]").evaluate_all(
        "rows => rows.map(r => r.dataset.name)")


def _column(page, key) -> list[str]:
    return page.texts(f"#collective-table tbody tr[data-name] td[data-key={key}]")


def test_every_collective_of_the_transformer_appears(gpt, open_page):
    html, report = gpt
    page = open_page(html)
    names = [c["name"] for c in report["collectives"]]
    assert len(names) > 40
    assert _rows(page) == names              # program order, none missing
    assert page.page.inner_text("#c-count").startswith(
        f"Showing {len(names)} of {len(names)} collectives")
    assert page.page.inner_text("#s-count") .endswith(str(len(names)))
    # Every source line of the report is in the line filter.
    lines = {f"{c['source']['file']}:{c['source']['line']}" for c in report["collectives"]}
    options = page.page.locator("#f-line option").all_inner_texts()
    assert set(options) == lines | {"all"}


def test_the_timeline_draws_the_simulated_step(gpt, open_page):
    """One bar per event of the step's trace (the same events as
    `--format trace`), collectives coloured and named by kind, bytes and
    line, the step and its parts in the summary."""
    html, report = gpt
    page = open_page(html)
    timeline = _data(Path(html).read_text())["timeline"]
    events = timeline["events"]
    assert timeline["step"] == report["step"]
    assert page.page.locator("#timeline-svg rect.tl").count() == len(events)
    gathers = [e for e in events if e["args"].get("kind") == "all-gather"]
    assert gathers
    titles = page.page.locator("#timeline-svg rect.tl-collectives title").all_text_contents()
    assert len(titles) == sum(e["track"] == "collectives" for e in events)
    first = gathers[0]["args"]
    assert any(t.startswith(gathers[0]["name"] + ";") and "all-gather" in t
               and first["source"] in t for t in titles)
    # Compute bars name the user's line their instruction came from.
    compute = page.page.locator("#timeline-svg rect.tl-compute title").all_text_contents()
    assert sum("gpt.py:" in t for t in compute) > len(compute) // 2
    assert page.page.inner_text("#s-step").endswith(page.page.evaluate(
        "document.querySelector('#step-verdict').textContent.split(' ')[1] + ' '"
        " + document.querySelector('#step-verdict').textContent.split(' ')[2]"))
    assert "exposed communication" in page.page.inner_text("#step-verdict")
    # What the step is made of, as the text report says it: the heaviest
    # kind of compute and each mesh axis's communication.
    made_of = page.page.inner_text("#step-made-of")
    heaviest = next(iter(report["step"]["compute"]["by_kind"]))
    assert made_of.startswith("Compute: ") and f"by kind: {heaviest} " in made_of
    for axes in report["step"].get("comm_by_axes", {}):
        assert f"{axes} " in made_of.split("Communication by mesh axes: ")[1]


def _sizes(texts: list[str]) -> list[float]:
    units = {"B": 1, "KiB": 1024, "MiB": 1 << 20, "GiB": 1 << 30}
    return [float(t.split()[0]) * units[t.split()[1]] for t in texts]


def test_sorting_by_a_column_and_back(gpt, open_page):
    html, report = gpt
    page = open_page(html)
    header = page.page.locator("#collective-table th[data-key=total]")
    header.locator("button").click()
    assert header.get_attribute("aria-sort") == "descending"
    totals = _sizes(_column(page, "total"))
    assert totals == sorted(totals, reverse=True) and totals[0] > totals[-1]
    header.locator("button").click()
    assert header.get_attribute("aria-sort") == "ascending"
    assert _sizes(_column(page, "total")) == sorted(totals)
    # By the keyboard: the kind column, focused and sorted with Enter.
    kind = page.page.locator("#collective-table th[data-key=kind] button")
    kind.focus()
    page.page.keyboard.press("Enter")
    kinds = _column(page, "kind")
    assert kinds == sorted(kinds) and len(set(kinds)) == 2
    assert header.get_attribute("aria-sort") == "none"
    # Sorting keeps every row.
    assert sorted(_rows(page)) == sorted(c["name"] for c in report["collectives"])


def test_filtering_by_kind_axis_line_and_text(gpt, open_page):
    html, report = gpt
    cs = report["collectives"]
    page = open_page(html)
    p = page.page
    p.get_by_label("kind", exact=True).select_option("all-reduce")
    expected = [c["name"] for c in cs if c["kind"] == "all-reduce"]
    assert _rows(page) == expected and 0 < len(expected) < len(cs)
    assert p.inner_text("#c-count").startswith(f"Showing {len(expected)} of {len(cs)}")
    p.get_by_label("mesh axis", exact=True).select_option("tp")
    expected = [c["name"] for c in cs if c["kind"] == "all-reduce"
                and "tp" in c["mesh_axes"]]
    assert _rows(page) == expected
    p.click("#f-clear")
    assert len(_rows(page)) == len(cs)
    line = "gpt.py:56"
    p.get_by_label("source line", exact=True).select_option(line)
    expected = [c["name"] for c in cs
                if f"{c['source']['file']}:{c['source']['line']}" == line]
    assert _rows(page) == expected and expected
    p.click("#f-clear")
    p.get_by_label("search (name, op, shape)", exact=True).fill("all-gather.1")
    assert all("all-gather.1" in n for n in _rows(page)) and _rows(page)


def test_a_row_expands_to_its_why_op_and_ir(gpt, open_page):
    html, report = gpt
    page = open_page(html)
    p = page.page
    first = report["collectives"][0]
    button = p.locator(f"#collective-table tr[data-name='{first['name']}'] button.expand")
    assert button.get_attribute("aria-expanded") == "false"
    button.focus()
    p.keyboard.press("Enter")
    assert button.get_attribute("aria-expanded") == "true"
    detail = p.locator("#detail-0")
    text = detail.inner_text()
    operand = first["why"]["operand"]
    assert operand["value"] in text              # input params/embed
    assert first["why"]["needed"]["op"] in text
    assert first["op_name"] in text
    # The IR excerpt: the collective's own line of the optimized HLO, marked.
    marked = detail.locator("pre .at").inner_text()
    assert re.search(rf"%?{re.escape(first['name'])} = ", marked)
    assert "optimized stage" in text
    p.keyboard.press("Enter")
    assert p.locator("#detail-0").count() == 0


def test_the_source_view_marks_each_line_and_the_hottest(gpt, open_page):
    html, report = gpt
    page = open_page(html)
    p = page.page
    per_line = {}
    for c in report["collectives"]:
        key = c["source"]["line"]
        per_line[key] = per_line.get(key, 0) + (c["time_s"] * c["executions"])
    hottest = max(per_line, key=per_line.get)
    with open(GPT) as f:
        source = f.read().splitlines()
    rows = p.locator("#source table.source tbody tr[data-line]")
    assert rows.count() == len(source)
    shown = set(rows.evaluate_all(
        "rows => rows.filter(r => !r.hidden).map(r => +r.dataset.line)"))
    assert set(per_line) <= shown and len(shown) < len(source)
    fold = p.locator("#source tr.fold button").first
    fold.click()          # unfolds the first run of lines without collectives
    assert 1 in set(rows.evaluate_all(
        "rows => rows.filter(r => !r.hidden).map(r => +r.dataset.line)"))
    marked = p.locator("#source tr.has").evaluate_all(
        "rows => rows.map(r => +r.dataset.line)")
    assert set(marked) == set(per_line)
    row = p.locator(f"#source tr[data-line='{hottest}']")
    assert "hot" in row.get_attribute("class")
    assert row.locator("td.code").inner_text() == source[hottest - 1]
    # A collective's source line in the table leads to its line here.
    name = next(c["name"] for c in report["collectives"]
                if c["source"]["line"] == hottest)
    p.locator(f"#collective-table tr[data-name='{name}'] td[data-key=line] a").click()
    assert p.evaluate("document.activeElement.dataset.line") == str(hottest)
    count = sum(c["source"]["line"] == hottest for c in report["collectives"])
    row.locator("button").click()       # the count filters the table
    assert len(_rows(page)) == count
    assert p.locator("#f-line").input_value() == f"gpt.py:{hottest}"


# A constraint nine lines from either collective it causes: its line is
# folded away in the source view.
FAR_CONSTRAINT = """\
import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P


def step(x, w):
    h = jnp.tanh(x @ w)
""" + "    #\n" * 8 + """\
    h = jax.lax.with_sharding_constraint(h, P(None, "x"))
""" + "    #\n" * 8 + """\
    return jnp.sin(h) @ w.T


def args():
    return jnp.ones((64, 128)), jnp.ones((128, 256))
"""


def test_a_cause_s_line_leads_to_the_source_view(tmp_path, open_page):
    """The chain from a collective to the decision that made it: the
    cause's line is a link to the source view, which unfolds the line where
    it was folded away."""
    program = tmp_path / "far.py"
    program.write_text(FAR_CONSTRAINT)
    html = _compile(str(program), "--fn", "step", "--args", "args", "--mesh", "x=4",
                    "--shard", "x=x,_", "--format", "html",
                    out=str(tmp_path / "far.html"))
    page = open_page(html)
    p = page.page
    row = p.locator("#source tr[data-line='16']")
    assert "with_sharding_constraint" in row.inner_text()
    assert row.evaluate("r => r.hidden")
    p.locator("#collective-table tr[data-name='all-gather'] button.expand").click()
    link = p.locator("#collective-table tr.detail dd.cause a.source-ref")
    assert link.inner_text() == "far.py:16 (step)"
    link.click()
    assert not row.evaluate("r => r.hidden")
    assert p.evaluate("document.activeElement.dataset.line") == "16"


def _placements(args) -> dict:
    result = run_irshard("show", *args, "--format", "json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def _holders(tensor, index) -> str:
    """The devices holding element `index` of `tensor` (show's JSON)."""
    ids = [p["device"] for p in tensor["layout"]
           if all(a <= i < b for i, (a, b) in zip(index, p["index"]))]
    return ",".join(map(str, sorted(ids)))


def test_the_layout_viewer_draws_a_3d_input_on_a_3d_mesh(tmp_path, open_page):
    args = [CUBE, "--mesh", "x=2,y=2,z=2", "--shard", "a=x,z,y"]
    html = _compile(*args, "--format", "html", out=str(tmp_path / "cube.html"))
    shown = _placements(args)["inputs"][0]
    page = open_page(html)
    p = page.page
    p.get_by_label("array", exact=True).select_option(label="input a  f32[8,6,4]")
    cells = p.locator("#layout-blocks .cell")
    assert cells.count() == 4                       # dims 0 x 1 at dim 2 = 0
    labels = cells.evaluate_all("cs => cs.map(c => c.dataset.devices)")
    assert labels == [_holders(shown, (i, j, 0)) for i in (0, 4) for j in (0, 3)]
    assert p.locator("#layout-mesh-svg .dev").count() == 8
    assert p.locator("#layout-mesh-svg .dev.out").count() == 4
    # Another slice of dim 2: the other half of the devices.
    p.get_by_label("dim 2 index (0-3)", exact=True).fill("3")
    labels = cells.evaluate_all("cs => cs.map(c => c.dataset.devices)")
    assert labels == [_holders(shown, (i, j, 3)) for i in (0, 4) for j in (0, 3)]
    # Draw dims 2 (rows) x 0 (columns), sliced at dim 1 = 5.
    p.get_by_label("rows", exact=True).select_option(label="dim 2 (4)")
    p.get_by_label("columns", exact=True).select_option(label="dim 0 (8)")
    p.get_by_label("dim 1 index (0-5)", exact=True).fill("5")
    labels = cells.evaluate_all("cs => cs.map(c => c.dataset.devices)")
    assert labels == [_holders(shown, (j, 5, i)) for i in (0, 2) for j in (0, 4)]
    # Focusing a block rings the devices that hold it.
    cells.first.focus()
    held = p.locator("#layout-mesh-svg .dev.hl").evaluate_all(
        "ds => ds.map(d => d.dataset.device).join(',')")
    assert held == _holders(shown, (0, 5, 0))
    # The output (reduced over dim 0, so replicated over x) in the table view.
    p.get_by_label("array", exact=True).select_option(index=1)
    out = _placements(args)["outputs"][0]
    assert cells.count() == 4
    p.locator("#layout details summary").click()
    table = p.locator("#layout-table tbody tr td:nth-child(2)").all_inner_texts()
    assert table == \
        [_holders(out, (i, j)) for i in (0, 3) for j in (0, 2)]


def test_findings_memory_and_a_3d_input(tmp_path, open_page):
    args = [REMAT, "--mesh", "x=4,y=2"]
    html = _compile(*args, "--format", "html", out=str(tmp_path / "remat.html"))
    page = open_page(html)
    p = page.page
    finding = p.locator("#findings .finding")
    assert finding.count() == 1
    assert "remat.py:19" in finding.inner_text()
    assert "from y,_,x to _,x+y,_" in finding.inner_text()
    assert "finding-line" in p.locator("#source tr[data-line='19']").get_attribute("class")
    finding.locator("a").click()                 # to its line in the source
    assert p.evaluate("document.activeElement.dataset.line") == "19"
    assert p.locator("#collective-table .badge").count() == 2   # both at line 19
    assert "no capacity is known" in p.inner_text("#memory-verdict")
    assert p.locator("#memory-bar span").count() == 3
    # a: f32[8@y,16,8@x] on the 4x2 mesh, drawn dims 0 x 1 at dim 2 = 0.
    p.get_by_label("array", exact=True).select_option(index=0)
    shown = _placements(args)["inputs"][0]
    cells = p.locator("#layout-blocks .cell")
    assert cells.evaluate_all("cs => cs.map(c => c.dataset.devices)") == \
        [_holders(shown, (0, 0, 0)), _holders(shown, (4, 0, 0))]
    assert p.locator("#layout-mesh-svg .dev").count() == 8
    assert p.locator("#layout-mesh-svg .dev.out").count() == 6    # x = 1..3


def test_memory_against_capacity_on_a_tpu_target(tmp_path, open_page):
    html = _compile(REMAT, "--mesh", "x=4,y=2", "--target", "tpu-v5e:2x4",
                    "--format", "html", out=str(tmp_path / "tpu.html"))
    page = open_page(html)
    p = page.page
    verdict = p.inner_text("#memory-verdict")
    assert "of 16.0 GiB" in verdict and "fits" in verdict
    assert "tpu-v5e:2x4" in p.inner_text("#s-target")
    # One time story: the simulated step's, no roofline verdict beside it.
    assert p.locator("#roofline-verdict").count() == 0
    assert "bound." in p.inner_text("#step-verdict")
    assert p.locator("#chart-roofline svg g").count() == 3
    assert p.locator("#layout-mesh-svg .dev").count() == 8


def test_the_memory_peak_by_kind_over_the_schedule(tmp_path, open_page):
    html = _compile(GPT, "--fn", "train_step",
                    "--args", "example_args", "--mesh", "fsdp=4",
                    "--shard", "**/w*=fsdp,_", "--shard", "batch/*=fsdp,_",
                    "--format", "html", out=str(tmp_path / "gpt.html"))
    page = open_page(html)
    p = page.page
    data = p.evaluate("JSON.parse(document.getElementById('irshard-data').textContent)")
    peak = data["report"]["memory"]["peak"]
    segments = p.locator("#peak-bar .peak-kind")
    assert segments.evaluate_all("ss => ss.map(s => s.dataset.kind)") == list(peak["by_kind"])
    # Each segment names its largest buffers' lines.
    title = p.locator("#peak-bar .peak-kind[data-kind='activation']").get_attribute("title")
    assert title.startswith("activation: ") and "gpt.py:" in title
    assert p.locator("#peak-curve path").count() == 1
    assert p.locator("#peak-curve #peak-marker").count() == 1
    assert peak["instruction"] in p.locator("#peak-curve").text_content()
    rows = p.locator("#peak-table tbody tr")
    assert rows.count() == min(200, len(peak["buffers"]))
    assert "of 16.0 GiB" not in p.inner_text("#memory-verdict")


def test_run_page_shows_the_check_and_timing(tmp_path, open_page):
    out = str(tmp_path / "run.html")
    result = run_irshard("run", HEAT, "--fn", "simulate_roll", "--mesh", "x=4",
                         "--check", "--repeat", "2", "--format", "html", "-o", out)
    assert result.returncode == 0, result.stderr
    page = open_page(out)
    p = page.page
    assert "passed" in p.inner_text("#run-check")
    assert "median" in p.inner_text("#run-timing")
    assert p.locator("#run-tensors tbody tr").count() == 2     # d, and the result
    assert p.locator("#layout-blocks .cell").count() == 4


def test_a_run_of_two_processes_names_each_device_s_process(tmp_path, open_page):
    out = str(tmp_path / "two.html")
    result = run_irshard("run", HEAT, "--fn", "simulate_roll", "--mesh", "x=4",
                         "--processes", "2", "--format", "html", "-o", out)
    assert result.returncode == 0, result.stderr
    page = open_page(out)
    labels = page.page.locator("#layout-mesh-svg .dev").evaluate_all(
        "ds => ds.map(d => d.getAttribute('aria-label'))")
    assert [label.split(" at ")[1] for label in labels] == \
        [f"x={i}, process {i // 2}" for i in range(4)]
    assert "2 processes" in page.page.inner_text("#run")


def test_diff_shows_both_reports_side_by_side(tmp_path, open_page):
    a = _compile(HEAT, "--fn", "simulate_set", "--mesh", "x=4", "--format", "json",
                 out=str(tmp_path / "set.json"))
    b = _compile(HEAT, "--fn", "simulate_roll", "--mesh", "x=4", "--format", "json",
                 out=str(tmp_path / "roll.json"))
    out = str(tmp_path / "diff.html")
    result = run_irshard("diff", a, b, "--format", "html", "-o", out)
    assert result.returncode == 0, result.stderr
    changes = json.loads(run_irshard("diff", a, b, "--format", "json").stdout)["changes"]
    page = open_page(out)
    p = page.page
    statuses = p.locator("#change-table tbody tr").evaluate_all(
        "rows => rows.map(r => r.className)")
    assert sorted(statuses) == sorted(f"st-{c['status']}" for c in changes)
    assert "st-removed" in statuses and "st-added" in statuses
    for side, path in (("A", a), ("B", b)):
        with open(path) as f:
            count = len(json.load(f)["collectives"])
        assert p.locator(f"#side-{side} tbody tr").count() == count
    assert p.locator("#side-A tbody tr.st-removed").count() > 0
    assert p.locator("#side-B tbody tr.st-added").count() > 0
    assert "No regression" in p.inner_text("#diff-verdict")
    # Every total went down: each row is marked better, none worse.
    assert p.locator("#diff-totals tbody tr.better").count() == 5
    assert p.locator("#diff-totals tbody tr.worse").count() == 0
    # Source lines of both, marked where they differ.
    assert p.locator("#source tr.st-removed, #source tr.st-changed").count() > 0


def test_the_page_is_self_contained_and_deterministic(tmp_path, write, open_page):
    # A source line that would end a <script> element if copied raw.
    src = write("tricky.py", "import jax.numpy as jnp\n\n\ndef f(a: 'f32[16@x]'):\n"
                "    return jnp.roll(a, 1)  # </script><script>document.title='x'\n")
    one = _compile(src, "--mesh", "x=4", "--format", "html", out=str(tmp_path / "1.html"))
    two = _compile(src, "--mesh", "x=4", "--format", "html", out=str(tmp_path / "2.html"))
    with open(one, "rb") as f1, open(two, "rb") as f2:
        first = f1.read()
        assert first == f2.read()
    text = first.decode()
    assert "Content-Security-Policy" in text
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:|//)""", text)
    page = open_page(one)
    assert page.page.title().startswith("irshard: tricky.py")
    code = page.page.locator("#source tr[data-line='5'] td.code").inner_text()
    assert code.endswith("# </script><script>document.title='x'")
    assert page.page.locator("#collective-table tbody tr[data-name]").count() > 0


def test_html_with_emit_on_run_is_a_usage_error(tmp_path):
    result = run_irshard("run", HEAT, "--fn", "simulate_roll", "--mesh", "x=4",
                         "--emit", "stablehlo", "--format", "html",
                         "-o", str(tmp_path / "r.html"))
    assert result.returncode == 2
    assert result.stderr.startswith("irshard: error: --emit")
    assert len(result.stderr.splitlines()) == 1
    assert not os.path.exists(tmp_path / "r.html")


def _data(html: str) -> dict:
    m = re.search(r'<script type="application/json" id="irshard-data">(.*?)</script>',
                  html, re.S)
    return json.loads(m.group(1))


def test_the_python_api_writes_the_same_page():
    import jax
    import jax.numpy as jnp

    import irshard

    def f(a, b):
        return jnp.tanh(a @ b)

    args = (jax.ShapeDtypeStruct((16, 8), jnp.float32),
            jax.ShapeDtypeStruct((8, 4), jnp.float32))
    report = irshard.compile(f, *args, mesh="x=2,y=2",
                             shardings=("x,y", "y,_"), explain=True)
    data = _data(report.to_html())
    assert data["kind"] == "report"
    assert data["report"] == json.loads(json.dumps(report.to_json()))
    names = [c.name for c in report.collectives]
    assert names and sorted(data["ir"]) == sorted(names)
    # Where a: f32[16,8] sharded x,y lives, and the 2x2 mesh's devices.
    assert data["layout"]["devices"] == [[0, 1], [2, 3]]
    blocks = data["layout"]["inputs"][0]
    assert sorted(map(tuple, (tuple(map(tuple, r)) for _, r in blocks))) == sorted(
        ((i * 8, i * 8 + 8), (j * 4, j * 4 + 4)) for i in (0, 1) for j in (0, 1))


def test_a_long_table_is_drawn_a_page_at_a_time(gpt, tmp_path, open_page):
    from irshard.reporting import htmlreport
    html, report = gpt
    with open(html) as f:
        data = _data(f.read())
    kind = data.pop("kind")
    one = data["report"]["collectives"]
    many = [dict(c, name=f"{c['name']}.copy{i}", bytes=c["bytes"] + i)
            for i, c in enumerate(one * (1200 // len(one) + 1))][:1200]
    data["report"]["collectives"] = many
    path = tmp_path / "long.html"
    path.write_text(htmlreport.page(kind, data, "long"))
    page = open_page(str(path))
    p = page.page
    assert _rows(page) == [c["name"] for c in many[:500]]
    p.click("#collective-table-more")
    assert _rows(page) == [c["name"] for c in many[:1000]]
    # Sorting starts again from the first page, over every row.
    p.locator("#collective-table th[data-key=bytes] button").click()
    rows = _rows(page)
    assert len(rows) == 500
    assert rows[0] == max(many, key=lambda c: c["bytes"])["name"]
    p.get_by_label("kind", exact=True).select_option("all-reduce")
    reduces = [c for c in many if c["kind"] == "all-reduce"]
    assert len(_rows(page)) == min(500, len(reduces))
    assert p.inner_text("#c-count").startswith(f"Showing {len(reduces)} of 1200")


def test_keyboard_and_screen_reader_basics(tmp_path, open_page):
    args = [CUBE, "--mesh", "x=2,y=2,z=2", "--shard", "a=x,z,y"]
    html = _compile(*args, "--format", "html", out=str(tmp_path / "cube.html"))
    page = open_page(html)
    p = page.page
    # The first Tab reaches the skip link, which moves focus to the report.
    p.keyboard.press("Tab")
    assert p.evaluate("document.activeElement.textContent") == "Skip to the report"
    p.keyboard.press("Enter")
    assert p.evaluate("document.activeElement.id") == "main"
    # What a screen reader is given: named regions, controls, table, drawings.
    tree = p.locator("#collectives").aria_snapshot()
    for line in ('region "Collectives"', 'search "Filter collectives"',
                 'combobox "kind"', 'combobox "mesh axis"', 'combobox "source line"',
                 'table "Collectives"', 'button "kind: sort"', 'button "why all-reduce'):
        assert line in tree, line
    tree = p.locator("#layout").aria_snapshot()
    assert 'img "[0:4, 0:3, 0] on device 0"' in tree
    assert 'img "device 2 at x=0,y=1,z=0, holds none of the drawn slice"' in tree
    assert "dim 1 \u2192" not in tree          # ticks are hidden from it
    # Blocks are reached with Tab, and focus rings their devices.
    p.locator("#layout-tensor").focus()
    for _ in range(12):
        p.keyboard.press("Tab")
        if p.evaluate("document.activeElement.classList.contains('cell')"):
            break
    assert p.evaluate("document.activeElement.dataset.devices") == "0"
    assert p.locator("#layout-mesh-svg .dev.hl").count() == 1


DUMPED = """\
import sys
import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding, PartitionSpec as P

jax.config.update("jax_num_cpu_devices", 4)
mesh = jax.make_mesh((4,), ("x",), axis_types=(jax.sharding.AxisType.Auto,))
a = jax.device_put(jnp.ones((8, 8)), NamedSharding(mesh, P("x", None)))


def step(a):
    return (a @ a.T).sum(0)


def other(a):
    return jnp.roll(a, 1, axis=0)


jax.jit(step)(a).block_until_ready()
if len(sys.argv) > 1:
    jax.jit(other)(a).block_until_ready()
"""


def _dump(tmp_path, write, name, *argv):
    import subprocess
    import sys
    script = write(f"{name}/dumped.py", DUMPED)
    dump = str(tmp_path / f"{name}.dump")
    env = dict(os.environ, XLA_FLAGS=f"--xla_dump_to={dump}", JAX_PLATFORMS="cpu")
    done = subprocess.run([sys.executable, script, *argv], env=env,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return dump, script


def test_collectives_of_an_hlo_file_and_a_dump(tmp_path, write, open_page):
    hlo = os.path.join(ROOT, "tests", "data", "async_collectives.hlo")
    out = str(tmp_path / "hlo.html")
    assert run_irshard("collectives", hlo, "--format", "html", "-o", out).returncode == 0
    report = json.loads(run_irshard("collectives", hlo, "--format", "json").stdout)
    page = open_page(out)
    p = page.page
    assert _rows(page) == [c["name"] for c in report["collectives"]]
    p.locator("#collective-table button.expand").first.click()
    assert re.search(r"ag-start = ", p.locator("#detail-0 pre .at").inner_text())
    # The files it names are the file's word: their lines are listed, no
    # file is read.
    assert "is not shown" in p.inner_text("#source")
    assert "only for a compiled executable" in p.inner_text("#layout")
    # A dump directory: its one sharded module, with excerpts of its file.
    dump, script = _dump(tmp_path, write, "one")
    out = str(tmp_path / "dump.html")
    result = run_irshard("collectives", dump, "--format", "html", "-o", out)
    assert result.returncode == 0, result.stderr
    page = open_page(out)
    data = _data(Path(out).read_text())
    names = [c["name"] for c in data["report"]["collectives"]]
    assert "jit_step" in data["report"]["module"] and names
    assert sorted(data["ir"]) == sorted(names)
    # The script the dump names exists here, and is still not read.
    assert data["sources"] == {} and os.path.exists(script)
    assert page.page.locator("#source li").count() > 0


def test_collectives_html_of_a_dump_with_several_sharded_modules(tmp_path, write):
    dump, _ = _dump(tmp_path, write, "two", "both")
    out = tmp_path / "r.html"
    result = run_irshard("collectives", dump, "--format", "html", "-o", str(out))
    assert result.returncode == 2
    line, = result.stderr.splitlines()
    assert line.startswith("irshard: error: --format html shows one module;")
    assert "jit_step" in line and "jit_other" in line
    assert not out.exists()


def test_non_finite_numbers_reach_the_page_as_strings():
    from irshard.reporting import htmlreport
    html = htmlreport.page("report", {"report": {"x": [1.0, float("inf"), float("nan")],
                                                 "s": "</script><!--"}}, "t")
    data = _data(html)
    assert data["report"] == {"x": [1.0, "inf", "nan"], "s": "</script><!--"}
    assert "</script><!--" not in html


@pytest.mark.slow
def test_search_page_ranks_the_candidates(tmp_path, open_page):
    import shlex
    common = [os.path.join(EXAMPLES, "llama.py"), "--fn", "train_step", "--args",
              "small_args", "--devices", "2", "--axes", "data,fsdp",
              "--max-candidates", "3", "--cache-dir", str(tmp_path / "cache")]
    js, out = str(tmp_path / "search.json"), str(tmp_path / "search.html")
    for fmt, path in (("json", js), ("html", out)):
        result = run_irshard("search", *common, "--format", fmt, "-o", path)
        assert result.returncode == 0, result.stderr
    with open(js) as f:
        data = json.load(f)
    page = open_page(out)
    p = page.page
    assert p.locator("#candidate-table tbody tr").count() == len(data["candidates"])
    winner = data["winner"]
    assert winner["strategy"] in p.inner_text("#card-winner")
    assert p.inner_text("#reproduce") == "irshard compile " + " ".join(
        shlex.quote(a) for a in winner["args"])
    assert json.loads(p.inner_text("#rules")) == winner["rules"]
    ranked = [c for c in data["candidates"] if c["rank"] is not None]
    assert p.locator("#chart-steps svg g").count() == len(ranked)
    # Those the budget left are rows too, with no rank.
    assert len(ranked) == 3 < len(data["candidates"])
    if data["why"] is not None:
        assert p.locator("#why-table tbody tr").count() == len(data["why"]["changes"])


HOSTILE = "<img src=x onerror=\"document.title='pwned'\">"


def test_hostile_names_run_no_script(tmp_path, open_page):
    """A directory, a file and pytree keys named as markup, in a compile's
    page and in a diff page of two of its reports: shown as text, no
    script runs and nothing is fetched."""
    folder = tmp_path / HOSTILE
    folder.mkdir()
    src = folder / f"{HOSTILE}.py"
    src.write_text(
        "import jax\nimport jax.numpy as jnp\n\n\n"
        "def f(params, x):\n"
        "    return (x @ params['" + HOSTILE.replace("'", "\\'") + "']).sum()\n\n\n"
        "def args():\n"
        "    return ({'" + HOSTILE.replace("'", "\\'") + "': "
        "jax.ShapeDtypeStruct((64, 64), jnp.float32)},\n"
        "            jax.ShapeDtypeStruct((16, 64), jnp.float32))\n")
    html = _compile(str(src), "--fn", "f", "--args", "args", "--mesh", "x=4",
                    "--shard", "x=x,_", "--format", "html",
                    out=str(tmp_path / "page.html"))
    reports = []
    for i, rule in enumerate(("x=x,_", "x=_,x")):
        reports.append(_compile(str(src), "--fn", "f", "--args", "args",
                                "--mesh", "x=4", "--shard", rule,
                                "--format", "json",
                                out=str(tmp_path / f"{HOSTILE}{i}.json")))
    done = run_irshard("diff", *reports, "--format", "html",
                       "-o", str(tmp_path / "diff.html"))
    assert done.returncode in (0, 1), done.stderr
    for path in (html, str(tmp_path / "diff.html")):
        page = open_page(path)
        assert page.page.title() != "pwned"
        assert page.page.locator("img").count() == 0
        assert HOSTILE in page.page.inner_text("body")
