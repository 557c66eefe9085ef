"""The documentation's pictures of the HTML report, taken in headless Chromium.

    python tools/screenshots.py [--chromium PATH] [--out docs]

Compiles the GPT step (tensor parallel) and the 3-D test program to HTML,
opens each page from file://, and saves:

- `html-report.png`: the top of the GPT page (summary, charts) and the
  collective table, one row expanded to its why and IR;
- `html-layout.png`: the layout viewer on a 3-D array over a 3-D mesh;
- `html-timeline.png`: the GPT step's simulated timeline, one collective's
  bar named.

`notebook.png` is taken by the example notebook's browser test:
`IRSHARD_SCREENSHOT=docs/notebook.png pytest tests/test_notebook.py -k chromium`.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GPT = ["examples/gpt.py", "--fn", "train_step", "--args", "example_args",
       "--mesh", "fsdp=4,tp=2", "--shard", "**/embed=fsdp,tp",
       "--shard", "**/attn/w[qkv]=fsdp,tp", "--shard", "**/attn/wo=tp,fsdp",
       "--shard", "**/mlp/w_in=fsdp,tp", "--shard", "**/mlp/w_out=tp,fsdp",
       "--shard", "batch/*=fsdp,_"]
CUBE = ["tests/programs/cube.py", "--mesh", "x=2,y=2,z=2", "--shard", "a=x,z,y"]


def compile_html(args: list[str], out: str) -> None:
    subprocess.run([sys.executable, "-m", "irshard", "compile", *args,
                    "--format", "html", "-o", out], cwd=ROOT, check=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--chromium", default=shutil.which("chromium"))
    parser.add_argument("--out", default=os.path.join(ROOT, "docs"))
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright
    with tempfile.TemporaryDirectory() as tmp, sync_playwright() as p:
        gpt, cube = os.path.join(tmp, "gpt.html"), os.path.join(tmp, "cube.html")
        compile_html(GPT, gpt)
        compile_html(CUBE, cube)
        browser = p.chromium.launch(executable_path=args.chromium,
                                    args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1180, "height": 760})
        page.goto("file://" + gpt)
        page.wait_for_selector("html[data-ready]")
        timeline = page.locator("#timeline")
        timeline.screenshot(path=os.path.join(args.out, "html-timeline.png"))
        # Summary and charts, then the table with its hottest row open.
        page.locator("#collective-table th[data-key=time] button").click()
        page.locator("#collective-table button.expand").first.click()
        page.add_style_tag(content="#timeline, #findings, #layout, #memory, #source "
                           "{ display: none; } .tablewrap { max-height: none; }")
        page.screenshot(path=os.path.join(args.out, "html-report.png"),
                        clip={"x": 0, "y": 0, "width": 1180, "height": 1120},
                        full_page=True)
        page.goto("file://" + cube)
        page.wait_for_selector("html[data-ready]")
        page.get_by_label("dim 2 index (0-3)", exact=True).fill("3")
        page.locator("#layout-blocks .cell").first.focus()
        page.locator("#layout").screenshot(
            path=os.path.join(args.out, "html-layout.png"))
        browser.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
