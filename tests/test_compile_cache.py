"""JAX's persistent compilation cache, where the user turned it on: a
second identical compile loads the executable JAX's cache holds (the
report says so) and reports the same; with the cache off nothing is
written."""

import json
import os
import subprocess
import sys

import pytest

from tests.conftest import EXAMPLES

pytestmark = pytest.mark.slow


def _compile(cache, *extra):
    env = dict(os.environ, JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0")
    env.pop("JAX_COMPILATION_CACHE_DIR", None)
    if cache is not None:
        env["JAX_COMPILATION_CACHE_DIR"] = str(cache)
    done = subprocess.run(
        [sys.executable, "-m", "irshard", "compile",
         os.path.join(EXAMPLES, "heat1d.py"), "--fn", "simulate_set",
         "--mesh", "x=4", "--format", "json", *extra],
        capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def _without_notes(report):
    return {k: v for k, v in report.items() if k != "notes"}


def test_a_second_compile_reads_jaxs_cache_and_reports_the_same(tmp_path):
    cache = tmp_path / "jax-cache"
    first = _compile(cache)
    assert any("written to JAX's persistent compilation cache" in n
               for n in first.get("notes", []))
    kept = sorted(os.listdir(cache))
    assert any(name.startswith("irshard-") for name in kept)
    assert any(name.endswith("-cache") for name in kept)
    second = _compile(cache)
    assert any("read from JAX's persistent compilation cache" in n
               for n in second.get("notes", []))
    assert _without_notes(second) == _without_notes(first)
    # XLA's buffer assignment is kept beside the executable: the peak too.
    assert second["memory"]["peak"]["buffers"]
    # The report's partitioned stage is no hit where only the executable
    # was kept: it compiles again, and keeps the partitioned HLO too.
    partitioned = _compile(cache, "--stage", "partitioned")
    assert not any("read from" in n for n in partitioned.get("notes", []))
    again = _compile(cache, "--stage", "partitioned")
    assert any("read from" in n for n in again.get("notes", []))
    assert _without_notes(again) == _without_notes(partitioned)


def test_no_cache_unless_the_user_turned_it_on(tmp_path):
    report = _compile(None)
    assert not any("compilation cache" in n for n in report.get("notes", []))


def test_a_corrupt_entry_beside_the_executable_is_no_hit(tmp_path):
    cache = tmp_path / "jax-cache"
    first = _compile(cache)
    (beside,) = [p for p in cache.iterdir() if p.name.startswith("irshard-")]
    beside.write_text("[]")
    second = _compile(cache)
    assert not any("read from" in n for n in second.get("notes", []))
    assert _without_notes(second) == _without_notes(first)
