"""Test set-up: JAX on 8 simulated CPU devices, configured before any test
imports it."""

import os
import shutil
import subprocess
import sys

import pytest

pytest_plugins = ("pytester",)

from irshard import backend

backend.configure(8, "cpu")

# Caches (irshard search's compiled candidates) go to a directory of the
# test session's own, never to the home directory of the user running it.
# The process that made it removes it (pytest-xdist's workers share it).
_OWN_CACHE = None
if "IRSHARD_TEST_CACHE" not in os.environ:
    import tempfile
    _OWN_CACHE = os.environ["IRSHARD_TEST_CACHE"] = os.environ["XDG_CACHE_HOME"] = \
        tempfile.mkdtemp(prefix="irshard-test-cache-")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLES = os.path.join(ROOT, "examples")


@pytest.fixture(autouse=True)
def _x64_as_it_was():
    """A command run in this process (`cli.main`) that turns on JAX's 64-bit
    mode for its program's 64-bit inputs, as its own process would, leaves
    it off again for the next test."""
    was = _x64()
    yield
    if _x64() != was:
        import jax
        jax.config.update("jax_enable_x64", was)


def _x64() -> bool:
    jax = sys.modules.get("jax")
    if jax is None:     # JAX's default, until something imports it
        return os.environ.get("JAX_ENABLE_X64", "").lower() in ("1", "true")
    return bool(jax.config.jax_enable_x64)


def pytest_sessionfinish(session, exitstatus):
    """No test may replace a system file: the suite runs as root in CI, where
    a writer that replaced its target once turned /dev/null into a file."""
    import stat
    if _OWN_CACHE is not None:
        shutil.rmtree(_OWN_CACHE, ignore_errors=True)
    if os.path.exists("/dev/null") and not stat.S_ISCHR(os.stat("/dev/null").st_mode):
        print("\nerror: /dev/null is no longer a character device: a test "
              "replaced it", file=sys.stderr)
        session.exitstatus = 1


def require(module: str, what: str) -> None:
    """Skips the calling test when `module` is not installed, or fails it
    where every test must run (IRSHARD_REQUIRE_ALL, set by CI on every JAX
    version it tests)."""
    import importlib.util
    if importlib.util.find_spec(module) is not None:
        return
    if os.environ.get("IRSHARD_REQUIRE_ALL"):
        pytest.fail(f"{module} is not installed: {what} cannot be tested")
    pytest.skip(f"{module} is not installed ({what}; make test installs it)")


def run_irshard(*args: str, cwd: str | None = None) -> subprocess.CompletedProcess:
    """`irshard ARGS` as a separate process."""
    return subprocess.run([sys.executable, "-m", "irshard", *args],
                          capture_output=True, text=True, cwd=cwd)


def interruptible(*args: str) -> list[str]:
    """The command line of `irshard ARGS` as started from a terminal, for a
    test that interrupts it: a suite started in the background of a shell
    without job control (as CI may start it) passes SIGINT on ignored, and
    Python keeps it ignored, as a nohup'd program should. The launcher puts
    it back to the default, then becomes `python -m irshard ARGS`."""
    launcher = ("import os, signal, sys; signal.signal(signal.SIGINT, "
                "signal.SIG_DFL); os.execv(sys.executable, [sys.executable, "
                "'-m', 'irshard', *sys.argv[1:]])")
    return [sys.executable, "-c", launcher, *args]


def gone(pid: int) -> bool:
    """Whether process `pid` has ended (a zombie not yet reaped counts)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


@pytest.fixture
def write(tmp_path):
    """Writes a file under tmp_path and returns its path."""
    def write(name: str, text: str) -> str:
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        return str(path)
    return write


def chromium() -> str | None:
    for name in (os.environ.get("IRSHARD_CHROMIUM"), "chromium", "chromium-browser",
                 "google-chrome"):
        if name and shutil.which(name):
            return shutil.which(name)
    return None


@pytest.fixture(scope="module")
def browser():
    executable = chromium()
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        sync_playwright = None
    if executable is None or sync_playwright is None:
        what = "chromium" if executable is None else "playwright"
        if os.environ.get("IRSHARD_REQUIRE_BROWSER"):
            pytest.fail(f"no {what}: the HTML report cannot be tested")
        pytest.skip(f"no {what} (make test installs Debian's chromium)")
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=executable, args=["--no-sandbox"])
        yield b
        b.close()
