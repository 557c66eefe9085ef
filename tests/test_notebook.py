"""Reports and diffs in notebooks: their HTML, Markdown and text forms, and
the example notebook executed by a real kernel (nbclient), rendered by
nbconvert and opened in Chromium beside the same notebook without them."""

import html
import json
import os
import re

import jax
import jax.numpy as jnp
import pytest

import irshard
from irshard.reporting import notebook
from irshard.reporting.cells import human_time
from irshard.core.errors import UsageError
from tests.conftest import EXAMPLES, require

NOTEBOOK = os.path.join(EXAMPLES, "gpt_strategies.ipynb")

X = jax.ShapeDtypeStruct((16, 64), jnp.float32)
W = jax.ShapeDtypeStruct((64, 32), jnp.float32)
RULES = [("w", "fsdp,_"), ("x", "fsdp,_")]


def layer(w, x):
    h = jnp.tanh(x @ w)
    return h.sum(axis=0)


GATHER_LINE = layer.__code__.co_firstlineno + 1      # the weight is gathered


@pytest.fixture(scope="module")
def reports():
    return (irshard.compile(layer, W, X, mesh="fsdp=4", rules=RULES),
            irshard.compile(layer, W, X, mesh="fsdp=2,tp=2", rules=RULES))


def _srcdoc(fragment: str) -> str:
    found = re.findall(r' srcdoc="([^"]*)"', fragment)
    assert len(found) == 1
    return found[0]


def _check_scoped(fragment: str, kind: str) -> str:
    """The fragment's own HTML (the frame's page left out), checked: one
    root, no script, no id, every style rule under `.irshard-nb`."""
    assert fragment.startswith(f'<div class="irshard-nb" data-irshard="{kind}">')
    assert fragment.endswith("</div></details></div>")
    outside = fragment.replace(_srcdoc(fragment), "")
    assert "<script" not in outside and " id=" not in outside
    # The page runs in a frame of its own origin: scripts, nothing else.
    assert re.findall(r"<iframe [^>]*sandbox=\"([^\"]*)\"", outside) == ["allow-scripts"]
    styles = re.findall(r"<style>(.*?)</style>", outside, re.S)
    assert len(styles) == 1
    selectors = [s.strip() for rule in re.findall(r"([^{}]+)\{", styles[0])
                 for s in rule.split(",")]
    assert len(selectors) > 10
    assert all(s.startswith(".irshard-nb") for s in selectors), selectors
    return outside


def test_report_shows_a_scoped_summary_and_its_page(reports):
    a, _ = reports
    fragment = a._repr_html_()
    assert fragment == a._repr_html_()
    # The frame holds the same bytes as --format html.
    assert html.unescape(_srcdoc(fragment)) == a.to_html()
    outside = _check_scoped(fragment, "report")
    assert "irshard: test_notebook.py:layer <span>mesh fsdp=4 (4 cpu devices)  " \
        "stage optimized</span>" in outside
    facts = dict(re.findall(r'<span class="irshard-k">([^<]*)</span>'
                            r'<span class="irshard-v">([^<]*)</span>', outside))
    assert facts["collectives"] == "2 (1 all-gather, 1 all-reduce)"
    assert facts["bytes per run, per device"] == "8.1 KiB"
    # The heaviest collective first, at its source line.
    rows = re.findall(r"<tr><td>([^<]*)</td><td>([^<]*)</td>.*?<td>([^<]*)</td></tr>",
                      outside)
    assert rows == [
        ("all-gather", "f32[64,32]", f"test_notebook.py:{GATHER_LINE} (layer)"),
        ("all-reduce", "f32[32]", f"test_notebook.py:{GATHER_LINE + 1} (layer)")]
    assert "<details" in outside and "<details open" not in outside


def test_report_summary_lists_the_heaviest_and_says_how_many_more():
    def many(x):
        for _ in range(notebook.ROWS + 2):
            x = jnp.roll(x, 1, axis=0) * 2
        return x
    report = irshard.compile(many, jax.ShapeDtypeStruct((64,), jnp.float32),
                             mesh="x=4", rules=[("x", "x")])
    n = len(report.collectives)
    assert n > notebook.ROWS
    outside = _check_scoped(report._repr_html_(), "report")
    assert outside.count("<tr><td>") == notebook.ROWS
    assert f"and {n - notebook.ROWS} more collectives in the full report" in outside
    assert len(report._repr_markdown_().splitlines()) == 4 + 4 + notebook.ROWS + 2


def test_console_forms_are_short(reports):
    a, _ = reports
    text = repr(a)
    # The time is the profile's (re-measured with each calibration).
    took = human_time(a.to_json()["totals"]["time_s"])
    assert text.splitlines() == [
        "<irshard report test_notebook.py:layer  mesh fsdp=4 (4 cpu devices)  "
        "stage optimized",
        "  collectives 2 (1 all-gather, 1 all-reduce); bytes per run, per device "
        f"8.1 KiB; on the wire 6.2 KiB; time per run (cpu-host) {took}; memory per "
        "device 11.6 KiB>"]
    markdown = a._repr_markdown_()
    assert markdown.startswith("**irshard** `test_notebook.py:layer` mesh fsdp=4 "
                               "(4 cpu devices)  stage optimized\n")
    assert "| all-gather | f32\\[64,32\\] | fsdp | 1 | 8.0 KiB | " \
        f"test\\_notebook.py:{GATHER_LINE} (layer) |" in markdown
    assert len(markdown.splitlines()) <= 8 + notebook.ROWS


def test_compare_gives_a_diff_that_shows_itself(reports, tmp_path):
    a, b = reports
    d = irshard.compare(a, b, labels=("fsdp", "fsdp+tp"))
    assert (d.a.label, d.b.label) == ("fsdp", "fsdp+tp")
    assert d.totals()["a"]["count"] == len(a.collectives)
    assert d.totals()["b"]["count"] == len(b.collectives)
    # A report, its JSON form and its file compare the same.
    path = tmp_path / "a.json"
    path.write_text(a.to_json_text())
    for other in (a.to_json(), str(path)):
        assert irshard.compare(other, b).to_json()["changes"] == d.to_json()["changes"]
    assert irshard.compare(a, b).a.label == "test_notebook.py (layer) mesh fsdp=4"
    fragment = d._repr_html_()
    assert html.unescape(_srcdoc(fragment)) == d.to_html()
    outside = _check_scoped(fragment, "diff")
    # B moves fewer bytes but its collectives are estimated slower, and its
    # parameters, sharded over fsdp=2 only, take more memory.
    assert [r.split(":")[0] for r in d.regressions()] == [
        "B takes longer per run than A",
        "B needs more memory per device at its peak than A"]
    assert f'<p class="irshard-bad">regression: {html.escape(d.regressions()[0])}</p>' \
        in outside
    assert repr(d).startswith("<irshard diff A fsdp  B fsdp+tp\n  collectives 2 -> ")
    assert d._repr_markdown_().startswith("**irshard diff** A fsdp, B fsdp+tp\n")
    with pytest.raises(UsageError, match="expected a report"):
        irshard.compare(a, 3)
    with pytest.raises(UsageError, match="labels: expected two"):
        irshard.compare(a, b, labels=("one",))
    with pytest.raises(UsageError, match="does not exist"):
        irshard.compare(a, str(tmp_path / "missing.json"))


# ---------------------------------------------------------------------------
# The example notebook, run by a kernel


@pytest.fixture(scope="module")
def executed(tmp_path_factory):
    """The example notebook after a real kernel ran it: the kernel is this
    interpreter, found through a kernel spec of its own, and Jupyter's
    files stay in a temporary directory."""
    for module in ("nbclient", "nbformat", "ipykernel"):
        require(module, "the example notebook")
    import sys

    import nbclient
    import nbformat
    home = tmp_path_factory.mktemp("jupyter")
    spec = home / "kernels" / "irshard-test"
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "irshard test", "language": "python"}))
    saved = {k: os.environ.get(k) for k in ("JUPYTER_PATH", "JUPYTER_RUNTIME_DIR",
                                           "JUPYTER_CONFIG_DIR", "IPYTHONDIR")}
    os.environ.update(JUPYTER_PATH=str(home), JUPYTER_RUNTIME_DIR=str(home / "runtime"),
                      JUPYTER_CONFIG_DIR=str(home / "config"),
                      IPYTHONDIR=str(home / "ipython"))
    try:
        nb = nbformat.read(NOTEBOOK, as_version=4)
        nbclient.NotebookClient(nb, kernel_name="irshard-test", timeout=600,
                                resources={"metadata": {"path": EXAMPLES}}).execute()
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return nb


def _results(nb) -> list[dict]:
    return [o for cell in nb.cells if cell.cell_type == "code"
            for o in cell.outputs if o.output_type == "execute_result"]


@pytest.mark.slow
def test_example_notebook_runs(executed):
    errors = [o for cell in executed.cells if cell.cell_type == "code"
              for o in cell.outputs if o.output_type == "error"]
    assert errors == []
    shown = _results(executed)
    assert len(shown) == 3                  # two reports and their diff
    for result, kind in zip(shown, ("report", "report", "diff")):
        data = result["data"]
        assert set(data) == {"text/plain", "text/html", "text/markdown"}
        assert data["text/html"].startswith(
            f'<div class="irshard-nb" data-irshard="{kind}">')
        assert len(data["text/plain"].splitlines()) == 2
    assert "mesh fsdp=8 (8 cpu devices)" in shown[0]["data"]["text/plain"]
    assert "mesh fsdp=4,tp=2 (8 cpu devices)" in shown[1]["data"]["text/plain"]
    assert shown[2]["data"]["text/plain"].startswith(
        "<irshard diff A fsdp=8  B fsdp=4,tp=2\n")
    printed = "".join(o.get("text", "") for cell in executed.cells
                      if cell.cell_type == "code" for o in cell.outputs
                      if o.output_type == "stream")
    assert re.search(r"all-gather@fsdp<=16: \d+ all-gathers over fsdp", printed)


def _styles_of_the_notebook(page) -> dict:
    """Computed styles of the notebook's own elements (not irshard's)."""
    return page.evaluate("""() => {
      const props = ["font-family", "font-size", "color", "background-color",
                     "margin-top", "margin-bottom", "line-height", "width"];
      const out = {};
      const pick = ["body", ".jp-Notebook", ".jp-MarkdownCell h1", ".jp-MarkdownCell h2",
                    ".jp-MarkdownCell p", ".jp-InputArea-editor", ".jp-InputPrompt",
                    ".jp-MarkdownCell code", ".jp-OutputArea-output pre"];
      for (const sel of pick) {
        document.querySelectorAll(sel).forEach((node, i) => {
          if (node.closest(".irshard-nb")) return;
          const s = getComputedStyle(node);
          out[sel + "#" + i] = props.map(p => s.getPropertyValue(p)).join("|");
        });
      }
      return out;
    }""")


@pytest.mark.slow
@pytest.mark.browser
def test_notebook_page_in_chromium(executed, browser, tmp_path):
    require("nbconvert", "the example notebook's page")
    import copy

    from nbconvert import HTMLExporter
    exporter = HTMLExporter(template_name="lab")
    with_reports, _ = exporter.from_notebook_node(executed)
    without = copy.deepcopy(executed)
    for cell in without.cells:
        if cell.cell_type == "code":
            cell.outputs = [o for o in cell.outputs if o.output_type != "execute_result"]
    plain, _ = exporter.from_notebook_node(without)
    pages = {}
    for name, text in (("with", with_reports), ("without", plain)):
        (tmp_path / f"{name}.html").write_text(text)

    def open_page(name):
        page = browser.new_page(viewport={"width": 1200, "height": 1000})
        record = {"errors": [], "blocked": []}
        # The exporter's page links its scripts from a CDN; nothing leaves here.
        page.route("**/*", lambda r: r.continue_()
                   if r.request.url.startswith(("file:", "data:", "about:"))
                   else (record["blocked"].append(r.request.url), r.abort()))
        page.on("pageerror", lambda e: record["errors"].append(str(e)))
        page.on("console", lambda m: m.type == "error"
                and "Failed to load resource" not in m.text
                and record["errors"].append(m.text))
        page.goto(f"file://{tmp_path}/{name}.html")
        pages[name] = (page, record)
        return page, record

    page, record = open_page("with")
    plain_page, _ = open_page("without")
    # The notebook's own styles are the same with the reports on the page.
    assert _styles_of_the_notebook(page) == _styles_of_the_notebook(plain_page)

    views = page.locator(".irshard-nb")
    assert views.count() == 3
    # Closed at first; each opens its full page, drawn in its own frame.
    assert page.locator("details.irshard-full[open]").count() == 0
    for i in range(3):                # from the keyboard, as a reader may
        views.nth(i).locator("details.irshard-full > summary").press("Enter")
    assert page.locator("details.irshard-full[open]").count() == 3
    assert all(views.nth(i).locator("iframe").bounding_box()["height"] > 600
               for i in range(3))
    assert len(page.frames) == 4
    frames = [views.nth(i).locator("iframe").element_handle().content_frame()
              for i in range(3)]
    counts = []
    for frame in frames:
        frame.wait_for_selector("html[data-ready]", state="attached", timeout=10000)
        counts.append(frame.evaluate(
            "() => JSON.parse(document.getElementById('irshard-data').textContent)"))
    reports = [c["report"]["totals"]["count"] for c in counts[:2]]
    summaries = [views.nth(i).locator(".irshard-fact .irshard-v").first.inner_text()
                 for i in range(2)]
    assert [s.split()[0] for s in summaries] == [str(n) for n in reports]
    assert reports[0] != reports[1]
    assert counts[2]["kind"] == "diff"
    assert frames[0].locator("#collectives tbody tr").count() == reports[0]
    # The pages' scripts stay in their frames.
    assert page.evaluate("() => typeof window.irshardFilterLine") == "undefined"
    assert frames[0].evaluate("() => typeof window.irshardFilterLine") == "function"
    assert frames[0].evaluate("() => { try { return window.parent.document.title; }"
                              " catch (e) { return 'blocked'; } }") == "blocked"
    # Every style rule irshard put on the notebook's page names its own class.
    loose = page.evaluate("""() => [...document.styleSheets]
      .filter(s => s.ownerNode && s.ownerNode.closest(".irshard-nb"))
      .flatMap(s => [...s.cssRules].map(r => r.selectorText || ""))
      .filter(sel => sel.split(",").some(p => !p.trim().startsWith(".irshard-nb")))""")
    assert loose == []
    assert record["errors"] == []
    assert all(not url.startswith("about:srcdoc") for url in record["blocked"])
    assert all("cdn" in url for url in record["blocked"])
    if os.environ.get("IRSHARD_SCREENSHOT"):
        views.first.scroll_into_view_if_needed()
        page.evaluate("window.scrollBy(0, -260)")
        page.wait_for_timeout(500)
        page.screenshot(path=os.environ["IRSHARD_SCREENSHOT"])
    for p, _ in pages.values():
        p.close()
