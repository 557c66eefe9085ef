"""The decision engine's compiles on a Ray cluster (`search --ray`): each
candidate is a Ray task that runs `irshard compile COMMAND FLAGS --format
json` on a worker, as `compilers.Processes` runs it here, and returns its
exit status and output; the report is typed again on this side.

`--ray local` starts a Ray instance on 127.0.0.1 for the search and stops
it afterwards (`running.raylaunch` starts and stops it, as for `run
--launcher ray`); `--ray ADDRESS` joins a cluster and leaves it as it was.
Workers need irshard and the program's environment; the program's file
and the Python files beside it are shipped with each task and written
where the command names them, under a directory of the task's own: the
same command in the same relative place gives the same report, byte for
byte. (A program named by an absolute path, or one outside the working
directory, is read where it is: the nodes must share it.) A task whose
worker dies is retried once; one that fails is that candidate's failure;
Ctrl-C cancels every task and stops a local instance.
"""

from __future__ import annotations

import glob
import os
import time
from typing import Any, Sequence

from irshard.core import interrupts
from irshard.strategy.compilers import Compiler, Failure, result_of

_POLL = 0.1
# Seconds a Ray instance has to start or a cluster to answer.
_START_S = 120.0


def shipped(path: str) -> dict[str, bytes]:
    """The program's file and the Python files beside it, by the path the
    command names them with (relative to the working directory); nothing
    where the program lies outside it."""
    if os.path.isabs(path) or os.path.normpath(path).startswith(".."):
        return {}
    folder = os.path.dirname(path)
    found = {}
    for name in sorted({os.path.normpath(path),
                        *glob.glob(os.path.join(folder, "*.py"))}):
        try:
            with open(name, "rb") as f:
                found[os.path.normpath(name)] = f.read()
        except OSError:
            continue
    return found


def _compile_task(files: dict[str, bytes], argv: list[str]) -> tuple[int, str, str]:
    """On a worker: the shipped files written under a directory of the
    task's own, and `irshard compile ARGV` run there."""
    import shutil
    import subprocess
    import sys
    import tempfile
    root = tempfile.mkdtemp(prefix="irshard-ray-")
    try:
        for name, data in files.items():
            where = os.path.join(root, name)
            os.makedirs(os.path.dirname(where) or root, exist_ok=True)
            with open(where, "wb") as f:
                f.write(data)
        temp = os.path.join(root, ".tmp")
        os.makedirs(temp)
        done = subprocess.run([sys.executable, "-m", "irshard", "compile", *argv],
                              cwd=root if files else None, capture_output=True,
                              text=True, env=dict(os.environ, TMPDIR=temp))
        return done.returncode, done.stdout, done.stderr
    finally:
        shutil.rmtree(root, ignore_errors=True)


class RayCluster(Compiler):
    """Compiles on the Ray cluster at `address` (`local`: one started here
    for the search), `jobs` candidates at once (default: as many as the
    cluster has CPUs)."""

    def __init__(self, command: Sequence[str], address: str, program_path: str,
                 jobs: int | None = None):
        from irshard.running import raylaunch
        local = address == "local"
        self.ray = raylaunch._import_ray(local)
        self.command = list(command)
        self.session = raylaunch._init(self.ray, None if local else address,
                                       jobs or os.cpu_count() or 1, _START_S, _START_S)
        self.jobs = jobs or max(1, int(self.ray.cluster_resources().get("CPU", 1)))
        self.files = shipped(program_path)
        self.task = self.ray.remote(num_cpus=1, max_retries=1)(_compile_task)

    def run(self, work, deadline, done, skip=None):
        ray = self.ray
        waiting = list(work)
        pending: dict[Any, tuple[Any, float]] = {}
        left: list[Any] = []
        with interrupts.unwinding():
            try:
                while waiting or pending:
                    # As many tasks in flight as the cluster has CPUs: the
                    # rest wait here, where the deadline and the engine's
                    # judgement still reach them.
                    while waiting and len(pending) < self.jobs \
                            and time.monotonic() < deadline:
                        key, change = waiting.pop(0)
                        if skip is not None and skip(key):
                            continue
                        flags = change.flags() if hasattr(change, "flags") \
                            else list(change)
                        ref = self.task.remote(self.files, [*self.command, *flags,
                                                            "--format", "json"])
                        pending[ref] = (key, time.monotonic())
                    if time.monotonic() >= deadline:
                        for ref, (key, _) in pending.items():
                            ray.cancel(ref, force=True)
                            left.append(key)
                        left += [key for key, _ in waiting]
                        break
                    if not pending:
                        continue
                    ready, _ = ray.wait(list(pending), num_returns=1, timeout=_POLL)
                    for ref in ready:
                        key, started = pending.pop(ref)
                        done(key, self._result(ref), time.monotonic() - started)
            except KeyboardInterrupt:
                for ref in pending:
                    ray.cancel(ref, force=True)
                raise
        return left

    def _result(self, ref) -> Any:
        try:
            code, out, err = self.ray.get(ref)
        except Exception as e:             # the worker died twice, or Ray failed
            return Failure(f"the Ray task failed: {str(e).splitlines()[0] if str(e) else type(e).__name__}", 3)
        return result_of(code, out, err)

    def close(self) -> None:
        from irshard.running import raylaunch
        raylaunch._shutdown(self.ray, self.session)
