"""Every example output in the docs and the README is what its commands
print today (`tools/docs_examples.py`, which wrote them from real runs):
an example cannot drift from the code. Measured wall-clock numbers aside;
run on the oldest JAX the project supports, which the examples are made
with (a newer XLA drops some collectives' source lines)."""

import os
import re
import subprocess
import sys
from importlib import metadata

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _oldest_jax() -> str:
    with open(os.path.join(ROOT, "pyproject.toml"), encoding="utf-8") as f:
        return re.search(r'"jax>=([0-9.]+),', f.read()).group(1)


@pytest.mark.slow
def test_every_docs_example_is_what_its_commands_print_today():
    if metadata.version("jax") != _oldest_jax():
        pytest.skip(f"the docs' examples are made with jax {_oldest_jax()}")
    done = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "docs_examples.py")],
                          capture_output=True, text=True, cwd=ROOT, timeout=900)
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]
    assert re.search(r"^0 example\(s\) differ$", done.stdout, re.M)
    assert done.stdout.count("as documented") >= 25, done.stdout
