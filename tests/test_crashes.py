"""A crash in native code (a Shardy pass given a debug option) does not take
irshard down: the pass runs in a child process, and its crash is one error
line naming the pass."""

import os
import signal

from irshard import cli
from tests.conftest import EXAMPLES

HEAT = os.path.join(EXAMPLES, "heat1d.py")
DEBUG = "sdy-import-pipeline,sdy-user-priority-propagate{debug-sharding-origins=true}"


def _module(tmp_path, capsys) -> str:
    assert cli.main(["compile", HEAT, "--fn", "simulate_set", "--mesh", "x=4",
                     "--emit", "stablehlo"]) == 0
    path = tmp_path / "heat.mlir"
    path.write_text(capsys.readouterr().out)
    return str(path)


def test_a_shardy_debug_option_runs_apart_and_keeps_the_module(tmp_path, capsys):
    """The child's module comes back whole: its functions, and the module's
    own attributes (copying them back once failed with an AttributeError,
    exit 3, on this jaxlib)."""
    path = _module(tmp_path, capsys)
    assert cli.main(["opt", path, "-p", DEBUG]) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    assert "mhlo.num_partitions = 4" in out
    assert 'sdy.sharding_origins = {x = "self"}' in out
    assert out.count("func.func") == open(path).read().count("func.func")


def test_a_pass_that_crashes_is_an_error_line(tmp_path, capsys, monkeypatch):
    """As Shardy once did with debug-sharding-origins on a MoE module:
    SIGSEGV took `irshard opt` down with it."""
    path = _module(tmp_path, capsys)
    from irshard.backend import passrunner

    def crash(operation, pipeline):
        os.kill(os.getpid(), signal.SIGSEGV)
    monkeypatch.setattr(passrunner, "run_pipeline", crash)
    out = tmp_path / "out.mlir"
    assert cli.main(["opt", path, "-p", DEBUG, "-o", str(out)]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and not out.exists()
    assert captured.err.splitlines() == [
        "irshard: error: pass 'sdy-import-pipeline,sdy-user-priority-propagate' "
        "crashed (SIGSEGV) with Shardy's debug-sharding-origins=true; run it "
        "without, or report the module to Shardy"]
