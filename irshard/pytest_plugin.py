"""irshard's pytest plugin (entry point `pytest11`): collective budgets on
a model's own tests.

    @pytest.mark.collective_budget("all-gather@fsdp<=14", "bytes<=8MiB")
    def test_train_step_stays_within_budget():
        return irshard.compile(train_step, *example_args(), mesh="fsdp=8",
                               rules=FSDP_RULES)

A marked test returns a report, or calls `irshard.compile` or `irshard.run`:
the report it returns, else every report it was given, is held to the
budgets of all its markers (module, class and function markers add up; the
grammar is `--budget`'s). A breach fails the test with each exceeded budget
and the source lines its value comes from; the report's text follows in the
test's `irshard` section. A marked test that gives no report, or a budget
that does not parse, fails it too.

The session gets 8 simulated CPU devices (`--irshard-devices N`, ini
`irshard_devices`), asked for when pytest starts, before any test module
imports JAX; nothing is asked where `XLA_FLAGS` or `JAX_NUM_CPU_DEVICES`
already says how many.

`--irshard-report DIR` writes the JSON and HTML report of every budgeted
test to `DIR/<name>.json` and `.html` (`report_name`: the test's id made a
file name, and a hash of it), with its budgets' outcomes: the
id made a file name (`report_name`), readable and told apart by a hash of
the id itself.
The `irshard_reports` fixture holds the reports a test has been given.

Loaded into every pytest run where irshard is installed: nothing here
imports JAX, or irshard's pipeline, until a marked test runs.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import inspect
import os
import re
from typing import Any, Iterator

import pytest

MARKER = "collective_budget"
_WRITTEN = pytest.StashKey[list]()


# The simulated CPU devices a test session gets unless told otherwise.
DEFAULT_DEVICES = 8
_DEVICE_FLAG = "--xla_force_host_platform_device_count"


def pytest_addoption(parser) -> None:
    group = parser.getgroup("irshard", "irshard collective budgets")
    group.addoption("--irshard-report", metavar="DIR", default=None,
                    help="write the JSON and HTML report of every test marked "
                         f"{MARKER} to DIR")
    group.addoption("--irshard-devices", metavar="N", default=None,
                    help="simulated CPU devices JAX starts with, asked for "
                         "before any test module imports JAX (default "
                         f"{DEFAULT_DEVICES}; 0 leaves JAX's own; nothing "
                         "is asked where XLA_FLAGS or JAX_NUM_CPU_DEVICES "
                         "already says)")
    parser.addini("irshard_devices", "as --irshard-devices", default=None)


def _ask_for_devices(config) -> None:
    """Asks XLA for the session's simulated CPU devices while JAX has not
    started: a test module that touches JAX at import (`jax.eval_shape`
    for its example arguments) would otherwise fix it at one. Sets only
    the device count, never the platform."""
    import sys
    given = config.getoption("irshard_devices", None)
    if given is None:
        given = config.getini("irshard_devices")
    text = str(given).strip() if given not in (None, "") else str(DEFAULT_DEVICES)
    if not text.isdigit() or int(text) > 8192:
        raise pytest.UsageError(f"--irshard-devices {text!r}: expected a number "
                                f"of devices from 0 to 8192")
    count = int(text)
    flags = os.environ.get("XLA_FLAGS", "")
    if count == 0 or "jax" in sys.modules or _DEVICE_FLAG in flags \
            or os.environ.get("JAX_NUM_CPU_DEVICES"):
        return
    os.environ["XLA_FLAGS"] = f"{flags} {_DEVICE_FLAG}={count}".strip()


def pytest_configure(config) -> None:
    config.addinivalue_line(
        "markers", f"{MARKER}(*budgets): hold the report the test returns, or "
        f"the reports irshard.compile/run give it, to irshard budgets such as "
        f"'all-gather@fsdp<=14' or 'bytes<=8MiB'")
    config.stash[_WRITTEN] = []
    _ask_for_devices(config)
    folder = config.getoption("irshard_report", None)
    if folder is not None:
        from irshard.core import files
        problem = files.unusable_directory(folder)
        if problem:
            raise pytest.UsageError(f"--irshard-report {folder!r} {problem}; "
                                    f"give a writable directory")


# A report's file name: at most this many bytes of the test's id, then a
# hash of the whole id (and `-N.html`), well within a file name's 255.
_NAME_BYTES = 120


def report_name(nodeid: str) -> str:
    """The file name (without extension) of a test's report: its id with
    what a file name cannot hold made `-`, cut to a length every file
    system takes, then a hash of the id, so that ids that read alike
    (`[a/b]`, `[a-b]`, `[a b]`) never share a file."""
    stem = re.sub(r"[^\w.-]+", "-", nodeid).strip("-.")
    stem = stem.encode("utf-8", "surrogatepass")[:_NAME_BYTES].decode(
        "utf-8", "ignore").rstrip("-.")
    digest = hashlib.sha256(nodeid.encode("utf-8", "surrogatepass")).hexdigest()[:10]
    return f"{stem}-{digest}" if stem else digest


def _budgets(item) -> list[str]:
    """The budgets of every marker on the test, the closest first, each
    once."""
    found: list[str] = []
    for mark in item.iter_markers(MARKER):
        wrong = [f"{k}=" for k in sorted(mark.kwargs)] + \
            [repr(a) for a in mark.args if not isinstance(a, str)]
        if wrong or not mark.args:
            pytest.fail(f"{MARKER}: expected budgets as strings, such as "
                        f"'all-gather@fsdp<=14' or 'bytes<=8MiB', not "
                        f"{', '.join(wrong) or 'none'}", pytrace=False)
        for text in mark.args:
            if text not in found:
                found.append(text)
    return found


@contextlib.contextmanager
def _given() -> Iterator[list]:
    """The reports `irshard.compile` and `irshard.run` give while open."""
    from irshard import apireport
    given: list = []
    with apireport.observing(given.append):
        yield given


@pytest.fixture
def irshard_reports():
    """The reports `irshard.compile` and `irshard.run` have given the test."""
    with _given() as given:
        yield given


def _is_report(value: Any) -> bool:
    from irshard.reporting.report import CollectiveReport
    return isinstance(value, CollectiveReport)


@pytest.hookimpl(wrapper=True)
def pytest_pyfunc_call(pyfuncitem):
    budgets = _budgets(pyfuncitem)
    if not budgets:
        return (yield)
    original = pyfuncitem.obj
    returned: list[Any] = []
    if not inspect.iscoroutinefunction(original):
        @functools.wraps(original)
        def keeping_result(*args: Any, **kwargs: Any) -> None:
            returned.append(original(*args, **kwargs))
        pyfuncitem.obj = keeping_result
    try:
        with _given() as given:
            outcome = yield
    finally:
        pyfuncitem.obj = original
    _hold(pyfuncitem, budgets, returned[0] if returned else None, list(given))
    return outcome


def _held_reports(value: Any, given: list) -> list:
    if _is_report(value):
        return [value]
    if isinstance(value, (list, tuple)) and value and all(map(_is_report, value)):
        return list(value)
    return given


def _label(report) -> str:
    """`model.py:train_step  mesh fsdp=8 (8 cpu devices)`."""
    from irshard.reporting.text import headline
    what, where = headline(report)[:2]
    return f"{os.path.basename(what)}  {where}"


def _hold(item, budgets: list[str], value: Any, given: list) -> None:
    from irshard.reporting import budget
    from irshard.core.errors import IrshardError
    from irshard.reporting.text import render_text_lines
    reports = _held_reports(value, given)
    if not reports:
        pytest.fail(f"{MARKER}: the test gave no report to hold to its budgets; "
                    f"return the report of irshard.compile(...), or call "
                    f"irshard.compile or irshard.run in it", pytrace=False)
    try:
        parsed = [budget.parse_budget(text) for text in budgets]
        held = [(r, budget.evaluate(r, parsed)) for r in reports]
    except IrshardError as e:
        _write(item, [(r, None) for r in reports])
        pytest.fail(f"{MARKER}: {e}", pytrace=False)
    _write(item, held)
    broken = [(r, outcomes) for r, outcomes in held
              if any(not o.passed for o in outcomes)]
    if not broken:
        return
    lines = []
    for report, outcomes in broken:
        lines += [f"{MARKER}: {_label(report)}"]
        lines += budget.breach_lines(report, outcomes)
        item.add_report_section(
            "call", "irshard report",
            "\n".join(render_text_lines(budget.recorded(report, outcomes),
                                        tensors=False, fold=True)))
    pytest.fail("\n".join(lines), pytrace=False)


def _write(item, held: list) -> None:
    """The reports' JSON and HTML pages under --irshard-report, named by the
    test's id."""
    folder = item.config.getoption("irshard_report")
    if not folder:
        return
    from irshard.reporting import budget
    from irshard.core import files
    from irshard.reporting.writer import render_json
    os.makedirs(folder, exist_ok=True)
    stem = report_name(item.nodeid)
    for i, (report, outcomes) in enumerate(held):
        if outcomes is not None:
            report = budget.recorded(report, outcomes)
        name = stem if len(held) == 1 else f"{stem}-{i + 1}"
        path = os.path.join(folder, name)
        files.write(path + ".json", render_json(report))
        to_html = getattr(report, "to_html", None)
        if to_html is not None:
            files.write(path + ".html", to_html())
        item.config.stash[_WRITTEN].append(path)


def pytest_terminal_summary(terminalreporter, config) -> None:
    written = config.stash.get(_WRITTEN, [])
    if written:
        folder = config.getoption("irshard_report")
        terminalreporter.write_line(
            f"irshard: {len(written)} report{'' if len(written) == 1 else 's'} "
            f"written to {folder}")
