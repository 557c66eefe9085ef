"""How `irshard search` compiles its candidates: as `irshard compile`
does, in this process or in `jobs` processes running that command (stopped
at the deadline), with a cache of compiled candidates' reports.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import tempfile
import time
from typing import Any, Callable, Sequence

from irshard.core.errors import ERROR_PREFIX
from irshard.strategy.candidates import Candidate




class Cache:
    """Compiled candidates' reports, one JSON file each, keyed by what
    decides the compile: the command's arguments, the program file's
    bytes, and the versions of irshard, JAX and libtpu."""

    def __init__(self, directory: str | None, salt: str):
        self.directory = directory
        self.salt = salt

    def _path(self, argv: Sequence[str]) -> str | None:
        if self.directory is None:
            return None
        digest = hashlib.sha256(json.dumps([self.salt, list(argv)]).encode())
        return os.path.join(self.directory, digest.hexdigest()[:32] + ".json")

    def get(self, argv: Sequence[str]) -> Any:
        path = self._path(argv)
        if path is None or not os.path.exists(path):
            return None
        try:
            with open(path, encoding="utf-8") as f:
                entry = json.load(f)
        except (OSError, ValueError):
            return None
        return entry.get("report") if "report" in entry else entry.get("error")

    def put(self, argv: Sequence[str], result: Any) -> None:
        path = self._path(argv)
        if path is None:
            return
        entry = {"report": result} if isinstance(result, dict) else {"error": str(result)}
        try:
            os.makedirs(self.directory, exist_ok=True)
            tmp = f"{path}.{os.getpid()}.tmp"
            with open(tmp, "w", encoding="utf-8") as f:
                json.dump(entry, f)
            os.replace(tmp, path)
        except OSError:
            pass


def default_cache_dir() -> str:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(
        os.path.expanduser("~"), ".cache")
    return os.path.join(base, "irshard", "search")


def versions_salt(path: str | None) -> str:
    """What makes a cached compile stale: the program's file, the Python
    files beside it, and the versions of irshard, JAX and libtpu."""
    from importlib import metadata
    from irshard import __version__
    parts = [__version__]
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
    return ";".join(parts)


def first_line(text: str) -> str:
    return (text.strip().splitlines() or [""])[0].removeprefix(ERROR_PREFIX)


class Processes:
    """Compiles candidates in `jobs` processes, each running `irshard
    compile ARGV FLAGS --format json`; those still running at the deadline
    are stopped."""

    def __init__(self, argv: Sequence[str], jobs: int):
        self.argv = list(argv)
        self.jobs = jobs

    def run(self, work: Sequence[tuple[Candidate, bool]], deadline: float,
            done: Callable[[Candidate, bool, Any, float], None]) -> list[Candidate]:
        """Compiles `work`, calling `done` for each as it finishes; returns
        the candidates the deadline left uncompiled."""
        import subprocess
        pending = list(work)
        running: list[tuple[Any, Candidate, bool, float]] = []
        left: list[Candidate] = []
        try:
            while pending or running:
                now = time.monotonic()
                while pending and len(running) < self.jobs and now < deadline:
                    candidate, explain = pending.pop(0)
                    command = [sys.executable, "-m", "irshard", "compile",
                               *self.argv, *candidate.flags(), "--format", "json"]
                    if explain:
                        command.append("--explain")
                    # Files, not pipes: a report larger than a pipe's
                    # buffer would block its writer, which nobody reads
                    # until it ends.
                    out, err = tempfile.TemporaryFile(), tempfile.TemporaryFile()
                    proc = subprocess.Popen(command, stdout=out, stderr=err)
                    running.append((proc, candidate, explain, now, out, err))
                if not running:
                    left += [c for c, _ in pending]
                    break
                if time.monotonic() >= deadline:
                    for proc, candidate, *_ in running:
                        proc.kill()
                        proc.wait()
                        left.append(candidate)
                    left += [c for c, _ in pending]
                    break
                finished = None
                for item in running:
                    if item[0].poll() is not None:
                        finished = item
                        break
                if finished is None:
                    time.sleep(0.05)
                    continue
                running.remove(finished)
                proc, candidate, explain, started, out, err = finished
                seconds = time.monotonic() - started
                if proc.returncode == 0:
                    try:
                        result: Any = json.loads(_read(out))
                    except ValueError:
                        result = "irshard compile wrote no JSON report"
                else:
                    result = first_line(_read(err)) or f"exit status {proc.returncode}"
                done(candidate, explain, result, seconds)
        finally:
            for proc, *_ in running:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
            for _, _, _, _, out, err in running:
                out.close()
                err.close()
        return left


def _read(f) -> str:
    """A finished process's output file, whole, closed."""
    with f:
        f.seek(0)
        return f.read().decode("utf-8", errors="replace")


def default_jobs() -> int:
    cores = os.cpu_count() or 1
    return 1 if cores <= 2 else min(8, cores // 2)
