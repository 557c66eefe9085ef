"""Every example output in the docs and the README is what its commands
print today (`tools/docs_examples.py`, which wrote them from real runs):
an example cannot drift from the code. Measured wall-clock numbers aside;
run on the oldest JAX the project supports, which the examples are made
with (a newer XLA drops some collectives' source lines). One test per
file, so that the test workers share them."""

import importlib.util
import os
import re
import subprocess
import sys
from importlib import metadata

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _tool():
    spec = importlib.util.spec_from_file_location(
        "docs_examples", os.path.join(ROOT, "tools", "docs_examples.py"))
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(spec.name, module)      # its dataclasses look it up
    spec.loader.exec_module(sys.modules[spec.name])
    return sys.modules[spec.name]


def _runnable() -> dict[str, int]:
    """Each file with examples that are run (not marked `not run`), by
    its path from the root: how many."""
    tool = _tool()
    paths = [os.path.join(ROOT, "README.md")]
    for folder, _, names in os.walk(os.path.join(ROOT, "docs")):
        if "_build" in os.path.relpath(folder, ROOT).split(os.sep):
            continue
        paths += [os.path.join(folder, n) for n in sorted(names) if n.endswith(".md")]
    found = {}
    for path in sorted(paths):
        run = sum(e.skip is None for e in tool.examples_of(path))
        if run:
            found[os.path.relpath(path, ROOT)] = run
    return found


RUNNABLE = _runnable()


def _oldest_jax() -> str:
    with open(os.path.join(ROOT, "pyproject.toml"), encoding="utf-8") as f:
        return re.search(r'"jax>=([0-9.]+),', f.read()).group(1)


def test_the_docs_show_real_runs():
    """The examples are many and spread over the guides: a file whose
    blocks stopped being read as examples would drop out of the run."""
    assert sum(RUNNABLE.values()) >= 25, RUNNABLE
    assert {"README.md", "docs/guides/explain.md", "docs/guides/models.md"} <= set(RUNNABLE)


@pytest.mark.slow
@pytest.mark.parametrize("path", sorted(RUNNABLE))
def test_every_docs_example_is_what_its_commands_print_today(path):
    if metadata.version("jax") != _oldest_jax():
        pytest.skip(f"the docs' examples are made with jax {_oldest_jax()}")
    done = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "docs_examples.py"),
                           "--only", os.path.join(ROOT, path)],
                          capture_output=True, text=True, cwd=ROOT, timeout=900)
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]
    assert re.search(r"^0 example\(s\) differ$", done.stdout, re.M)
    assert done.stdout.count("as documented") == RUNNABLE[path], done.stdout
