"""How the decision engine compiles its candidates: one interface, three
ways. A compiler takes `(key, Change)` pairs and a deadline, and calls back
with each one's result, a typed report (`CollectiveReport`) or a `Failure`:

- `Traced`: in this process, from the program already traced (its StableHLO
  with the change's input and output shardings and constraints: JAX does
  not trace again; no other mesh or knobs);
- `Calls`: in this process, by a function that compiles a change (the
  Python API, which traces the user's function again);
- `Processes`: in `jobs` processes, each running `irshard compile` with the
  change's flags appended (a candidate that crashes or hangs is that
  candidate's failure; those still running at the deadline, or an
  interruption, are stopped);
- `irshard.strategy.raycompile.RayCluster`: the same command on a Ray
  cluster's workers.

Reports cross a process's edge as JSON and are typed again at once. The
cache (`Cache`) keeps compiled reports by what decides the compile.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import shutil
import signal
import sys
import tempfile
import time
from typing import Any, Callable, Sequence

from irshard.core import files, interrupts, schema
from irshard.core.errors import ERROR_PREFIX, InputError, IrshardError, UsageError
from irshard.reporting.report import CollectiveReport
from irshard.strategy.change import Change

# An entry larger than this is not read: a large program's report is a
# few MB.
MAX_ENTRY_BYTES = 256 << 20

# What a cached report must hold (what every report has, and what the
# verdict and the moves read of one).
_MEMORY = schema.Object({}, {
    **schema.MEMORY.optional, "fits": schema.Null(schema.Boolean()),
    "capacity_bytes": schema.Null(schema.Number(integer=True))})
_SHARDING = schema.Null(schema.Either(schema.List(schema.String()), schema.String()))
_TENSOR = schema.Object({"name": schema.String(),
                         "shape": schema.List(schema.Number(integer=True))},
                        {"sharding": _SHARDING})
ENTRY = schema.Object({"key": schema.String(), "report": schema.Object(
    {**schema.REPORT.required, "inputs": schema.List(_TENSOR)},
    {**schema.REPORT.optional, "step": schema.Null(schema.STEP),
     "memory": schema.Null(_MEMORY),
     "outputs": schema.List(schema.Object({}, {"name": schema.Null(schema.String()),
                                               "sharding": _SHARDING}))})})

# What a compiler calls back with: the key it was given, the result, and
# the compile's wall time.
Done = Callable[[Any, "CollectiveReport | Failure", float], None]
# Whether to pass a candidate by, asked just before it would begin.
Skip = Callable[[Any], bool]


class Failure(str):
    """Why a candidate did not compile, with the exit status its `irshard
    compile` ended with (3 for a crash)."""

    exit_code: int = 2

    def __new__(cls, text: str, exit_code: int = 2) -> "Failure":
        failure = super().__new__(cls, text)
        failure.exit_code = exit_code
        return failure


def failure_of(returncode: int, stderr: str) -> Failure:
    """A finished `irshard compile`'s failure: its error line, or the
    signal that ended it."""
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        return Failure(f"the compile crashed ({name})", 3)
    return Failure(first_line(stderr) or f"exit status {returncode}",
                   returncode if returncode in (1, 2, 3) else 3)


class Cache:
    """Compiled candidates' reports, one JSON file each, keyed by what
    decides the compile: the command's arguments, the program file's
    bytes, the profile's, and the versions of irshard, JAX and libtpu.

    Only reports are kept (a failure is compiled again). The directory may
    be shared: an entry is written under a fresh name (never through a
    planted link) and renamed into place, and read back only from a regular
    file, and only when it is a whole report of the same key; anything
    else is missing. `option` (`--cache-dir`) names a directory the user
    gave: one that cannot be used is an error, where the default one is
    let be."""

    def __init__(self, directory: str | None, salt: str,
                 option: str | None = None):
        self.directory = directory
        self.salt = salt
        if directory is not None and option is not None:
            problem = files.unusable_directory(directory)
            if problem:
                raise UsageError(f"{option} '{directory}' {problem}; give a "
                                 f"writable directory, or --no-cache")

    def _where(self, argv: Sequence[str]) -> tuple[str | None, str]:
        digest = hashlib.sha256(json.dumps([self.salt, list(argv)]).encode())
        key = digest.hexdigest()
        if self.directory is None:
            return None, key
        return os.path.join(self.directory, key[:32] + ".json"), key

    def get(self, argv: Sequence[str]) -> CollectiveReport | None:
        """The report cached for `argv`, or None."""
        path, key = self._where(argv)
        if path is None:
            return None
        entry = _read_entry(path)
        if entry is None:
            return None
        try:
            schema.check(entry, ENTRY, "search cache entry")
            if entry["key"] != key:
                return None
            return CollectiveReport.read(entry["report"], "search cache entry")
        except InputError:
            return None

    def put(self, argv: Sequence[str], report: Any) -> None:
        """Keeps `report` (a compile's report; anything else is not kept)."""
        path, key = self._where(argv)
        if path is None or not isinstance(report, CollectiveReport):
            return
        tmp = None
        try:
            os.makedirs(self.directory, exist_ok=True)
            name = f"{path}.{os.getpid()}.{secrets.token_hex(8)}.tmp"
            # O_EXCL: a file or link already there (planted) is an error,
            # never written through, nor removed.
            fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL
                         | getattr(os, "O_NOFOLLOW", 0)
                         | getattr(os, "O_CLOEXEC", 0), 0o666)
            tmp = name
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump({"key": key, "report": report.to_json()}, f)
            os.replace(tmp, path)
            tmp = None
        except (OSError, ValueError):
            pass
        finally:
            if tmp is not None:
                try:
                    os.unlink(tmp)
                except OSError:
                    pass


def _read_entry(path: str) -> Any:
    """The JSON value of a cache entry, or None: a missing, unreadable,
    over-large or not regular file (a FIFO is opened without waiting for a
    writer), or one that is not JSON nested at most `schema.MAX_DEPTH`."""
    try:
        data = files.read_regular(path, MAX_ENTRY_BYTES)
    except files.Unreadable:
        return None
    if data is None:
        return None
    try:
        value = json.loads(data)
    except (ValueError, RecursionError):
        return None
    return value if schema._depth(value, schema.MAX_DEPTH) <= schema.MAX_DEPTH \
        else None


def default_cache_dir() -> str:
    return files.cache_dir("search")


def versions_salt(path: str | None, profile: str | None = None) -> str:
    """What makes a cached compile stale: the program's file, the Python
    files beside it, the `--profile` file, and the versions of irshard, JAX
    and libtpu."""
    from importlib import metadata
    from irshard.core.version import VERSION
    parts = [VERSION]
    for package in ("jax", "jaxlib", "libtpu"):
        try:
            parts.append(f"{package}={metadata.version(package)}")
        except metadata.PackageNotFoundError:
            parts.append(f"{package}=-")
    if path is not None:
        # The program's file and its neighbours, which it may import.
        import glob
        folder = os.path.dirname(os.path.abspath(path))
        for name in sorted({os.path.abspath(path),
                            *glob.glob(os.path.join(folder, "*.py"))}):
            try:
                with open(name, "rb") as f:
                    parts.append(hashlib.sha256(f.read()).hexdigest())
            except OSError:
                continue
    if profile is not None:
        try:
            with open(profile, "rb") as f:
                parts.append("profile=" + hashlib.sha256(f.read()).hexdigest())
        except OSError:
            parts.append("profile=-")
    return ";".join(parts)


def first_line(text: str) -> str:
    return (text.strip().splitlines() or [""])[0].removeprefix(ERROR_PREFIX)


# ---------------------------------------------------------------------------
# The compilers


class Compiler:
    """Compiles changes: `run(work, deadline, done, skip)` calls
    `done(key, result, seconds)` for each `(key, change)` of `work` it
    compiles and returns the keys the deadline left; just before it begins
    one, `skip(key)` may say to pass it by (the engine has judged it
    already). `jobs` is how many it compiles at once."""

    jobs = 1

    def run(self, work: Sequence[tuple[Any, Change]], deadline: float,
            done: Done, skip: Skip | None = None) -> list[Any]:
        raise NotImplementedError

    def close(self) -> None:
        """Ends what the compiler keeps running between `run`s."""

    def compile_all(self, work: Sequence[tuple[Any, Change]]) -> list[Any]:
        """Each change's result, in order, with no deadline."""
        results: dict[int, Any] = {}
        self.run([(i, change) for i, (_, change) in enumerate(work)], float("inf"),
                 lambda i, result, seconds: results.__setitem__(i, result))
        return [results[i] for i in range(len(work))]


class _OneAtATime(Compiler):
    """A compiler that compiles in this process, one change after another;
    one that would not finish before the deadline (as long as the typical
    compile so far) is not begun."""

    def compile(self, change: Change) -> CollectiveReport:
        raise NotImplementedError

    def run(self, work, deadline, done, skip=None):
        left, took = [], []
        for key, change in work:
            typical = sorted(took)[len(took) // 2] if took else 0.0
            if time.monotonic() + typical >= deadline:
                left.append(key)
                continue
            if skip is not None and skip(key):
                continue
            started = time.monotonic()
            try:
                result: Any = self.compile(change)
            except IrshardError as e:
                result = Failure(first_line(str(e)) or type(e).__name__, e.exit_code)
            seconds = time.monotonic() - started
            took.append(seconds)
            done(key, result, seconds)
        return left


class Traced(_OneAtATime):
    """From the program already traced (`lowered`, the `stablehlo` stage):
    its module with the change's input and output shardings and
    constraints, compiled as `compile` compiles it."""

    def __init__(self, lowered, explain: bool = False):
        self.lowered = lowered
        self.explain = explain

    def compile(self, change: Change) -> CollectiveReport:
        import dataclasses

        from irshard.backend import shardy
        from irshard.core.specs import parse_sharding
        from irshard.ir.annotation import annotate
        from irshard.passes import pass_class
        if change.mesh is not None or change.knobs:
            raise UsageError("a traced program's mesh and knobs are its own")
        module = shardy.clone_module(self.lowered.module)
        annotate(module, self.lowered.info.mesh,
                 {i: parse_sharding(s) for i, s in change.inputs},
                 {i: parse_sharding(s) for i, s in change.outputs})
        constrain = pass_class("irshard-constrain")
        for match, spec in change.constraints:
            constrain(match=match, sharding=spec).apply(module)
        stage = dataclasses.replace(self.lowered, module=module)
        compiled = stage.compile(partitioned=self.explain)
        report = compiled.report()
        if self.explain:
            from irshard.collectives import explain
            report = explain.explained(report, stage, compiled)
        return report


class Calls(_OneAtATime):
    """By `compile_change(change)`, which returns its report (the API's
    search: the user's function traced again for each change)."""

    def __init__(self, compile_change: Callable[[Change], CollectiveReport]):
        self.compile_change = compile_change

    def compile(self, change: Change) -> CollectiveReport:
        return self.compile_change(change)


def result_of(returncode: int, out: str, err: str) -> "CollectiveReport | Failure":
    """A finished `irshard compile --format json`'s report, typed, or its
    failure."""
    if returncode != 0:
        return failure_of(returncode, err)
    try:
        return CollectiveReport.read(json.loads(out), "irshard compile's report")
    except (ValueError, InputError):
        return Failure("irshard compile wrote no JSON report", 3)


class Processes(Compiler):
    """Compiles candidates in `jobs` processes, each running `irshard
    compile ARGV FLAGS --format json`: a candidate that crashes or hangs is
    that candidate's failure, and those still running at the deadline (or
    an interruption) are stopped. Each process's temporary files go to a
    directory of its own, removed when it ends, however it ends. The
    processes are forked from a warm server (`forking`) where it can run
    them, started afresh otherwise; `close` ends the server."""

    def __init__(self, argv: Sequence[str], jobs: int):
        self.argv = list(argv)
        self.jobs = jobs
        self._server: Any = None

    def _start(self, flags: Sequence[str], root: str) -> tuple[Any, str]:
        """A candidate's process, and its temporary directory (which holds
        its stdout and stderr)."""
        import subprocess
        from irshard.strategy import forking
        argv = ["compile", *self.argv, *flags, "--format", "json"]
        tmp = tempfile.mkdtemp(dir=root)
        env = dict(os.environ, TMPDIR=tmp)
        # Files, not pipes: a report larger than a pipe's buffer would
        # block its writer, which nobody reads until it ends.
        out, err = os.path.join(tmp, "stdout"), os.path.join(tmp, "stderr")
        for path in (out, err):
            with open(path, "wb"):
                pass
        if self._server is None and forking.available():
            self._server = forking.Server()
        proc = self._server.start(argv, env, out, err) if self._server is not None \
            else None
        if proc is None:
            with open(out, "ab") as stdout, open(err, "ab") as stderr:
                proc = subprocess.Popen([sys.executable, "-m", "irshard", *argv],
                                        stdin=subprocess.DEVNULL, stdout=stdout,
                                        stderr=stderr, env=env)
        interrupts.track(proc)
        return proc, tmp

    def run(self, work, deadline, done, skip=None):
        pending = list(work)
        running: list[tuple[Any, Any, float, str]] = []
        left: list[Any] = []
        root = interrupts.temp_dir("irshard-search-")
        try:
            while pending or running:
                now = time.monotonic()
                while pending and len(running) < self.jobs and now < deadline:
                    key, change = pending.pop(0)
                    if skip is not None and skip(key):
                        continue
                    flags = change.flags() if isinstance(change, Change) else list(change)
                    proc, tmp = self._start(flags, root)
                    running.append((proc, key, now, tmp))
                if not running:
                    left += [key for key, _ in pending]
                    break
                if time.monotonic() >= deadline:
                    interrupts.stop([item[0] for item in running])
                    left += [item[1] for item in running]
                    left += [key for key, _ in pending]
                    break
                finished = next((item for item in running
                                 if item[0].poll() is not None), None)
                if finished is None:
                    time.sleep(0.02)
                    continue
                running.remove(finished)
                proc, key, started, tmp = finished
                interrupts.untrack(proc)
                if _never_ran(proc, self._server):
                    # The server ended before it forked this one: it is
                    # started afresh.
                    shutil.rmtree(tmp, ignore_errors=True)
                    pending.insert(0, (key, next(c for k, c in work if k is key)))
                    continue
                seconds = time.monotonic() - started
                out, err = (_read(os.path.join(tmp, name)) for name in ("stdout", "stderr"))
                shutil.rmtree(tmp, ignore_errors=True)
                error = getattr(proc, "error", None)
                done(key, Failure(error, 3) if error else
                     result_of(proc.returncode, out, err), seconds)
        finally:
            interrupts.stop([item[0] for item in running])
            for item in running:
                interrupts.untrack(item[0])
            interrupts.remove(root)
        return left

    def close(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None


def _never_ran(proc: Any, server: Any) -> bool:
    """Whether `proc` is a command the fork server was asked for and ended
    without forking."""
    return getattr(proc, "pid", 0) is None and server is not None and not server.alive


def _read(path: str) -> str:
    """A finished process's output file, whole ('' where it is gone)."""
    try:
        with open(path, "rb") as f:
            return f.read().decode("utf-8", errors="replace")
    except OSError:
        return ""


def default_jobs() -> int:
    cores = os.cpu_count() or 1
    return 1 if cores <= 2 else min(8, cores // 2)
