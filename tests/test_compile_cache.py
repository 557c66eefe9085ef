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


def _side_file(cache):
    (beside,) = [p for p in cache.iterdir() if p.name.startswith("irshard-")]
    return beside


def _not_believed(report):
    return any("was not believed" in n and "compiled again" in n
               for n in report.get("notes", []))


@pytest.mark.parametrize("change", ["buffer size", "garbage dumps", "huge size",
                                    "partitioned HLO", "log"])
def test_a_side_file_changed_by_anyone_else_is_not_believed(tmp_path, change):
    """A buffer size changed in the side file's dumps once turned a
    `--budget 'peak<=...'` gate green (exit 1 to 0); garbage dumps gave a
    peak of 0 B, a huge size 86736 EiB; an all-gather renamed all-reduce in
    its partitioned HLO was reported. Now a side file that does not carry
    this user's signature over what it says, or no longer describes the
    executable, is ignored; the program is compiled again, with a note, and
    reports as the first compile did."""
    import re
    cache = tmp_path / "jax-cache"
    first = _compile(cache, "--stage", "partitioned")
    beside = _side_file(cache)
    kept = json.loads(beside.read_text())
    if change == "buffer size":
        kept["buffers"][0] = re.sub(r"size (\d+)", "size 4", kept["buffers"][0], count=1)
    elif change == "garbage dumps":
        kept["buffers"] = ["garbage", "garbage"]
    elif change == "huge size":
        kept["buffers"][0] = re.sub(r"size (\d+)", "size 99999999999999999999",
                                    kept["buffers"][0], count=1)
    elif change == "partitioned HLO":
        assert "all-gather" in kept["partitioned"]
        kept["partitioned"] = kept["partitioned"].replace("all-gather", "all-reduce")
    else:
        kept["log"] = "W partitioner: involuntary full rematerialization"
    beside.write_text(json.dumps(kept))
    second = _compile(cache, "--stage", "partitioned")
    assert _not_believed(second), second.get("notes")
    assert _without_notes(second) == _without_notes(first)
    # Written again, by this user: believed from then on.
    third = _compile(cache, "--stage", "partitioned")
    assert any("read from" in n for n in third["notes"]) and not _not_believed(third)


def test_a_side_file_cannot_hang_or_flood_a_compile(tmp_path):
    """A FIFO in the side file's place hung every later compile of the
    program in open(); a link to /dev/zero never returned while memory
    grew. Now only a regular file is read, whole and bounded; anything
    else is not believed, at once."""
    import time
    cache = tmp_path / "jax-cache"
    first = _compile(cache)
    beside = _side_file(cache)
    for make in (lambda: os.mkfifo(beside), lambda: beside.symlink_to("/dev/zero")):
        beside.unlink()
        make()
        started = time.monotonic()
        again = _compile(cache)
        assert time.monotonic() - started < 60
        assert _not_believed(again), again.get("notes")
        assert _without_notes(again) == _without_notes(first)
