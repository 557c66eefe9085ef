"""What the fork server saves a search: the same `irshard search` with its
candidates forked from a warm server (the default) and started afresh
(`IRSHARD_FORK_SERVER=0`), interleaved round after round, each in a
process of its own, with no cache. Prints the wall and CPU time (the
search's whole process tree) of each way, their ratio, and whether the two
reports are the same byte for byte.

    python benchmarks/forkserver.py [--runs 3] [--only tutorial ...]

The TPU case needs libtpu (`make test` installs it).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import resource
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SEARCHES = {
    # name: (the search's arguments, whether it needs libtpu)
    "tutorial mlp, 8 cpu devices": (
        ["tests/programs/tutorial_mlp.py", "--fn", "update", "--args", "args",
         "--devices", "8", "--jobs", "1"], False),
    "factory knobs, 4 cpu devices": (
        ["tests/programs/factory.py", "--factory", "make", "--knob", "batch=64,256",
         "--knob", "width=100,256", "--mesh", "data=2,tensor=2"], False),
    "gpt, tpu-v5e:4x4": (
        ["examples/gpt.py", "--fn", "train_step", "--args", "example_args",
         "--target", "tpu-v5e:4x4", "--max-candidates", "12"], True),
}


def search(argv: list[str], forked: bool) -> tuple[float, float, str]:
    """One search: its wall time, its process tree's CPU time, its JSON."""
    env = dict(os.environ, IRSHARD_FORK_SERVER="1" if forked else "0")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "irshard", "search", *argv,
                           "--no-cache", "--format", "json"], cwd=ROOT, env=env,
                          capture_output=True, text=True)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        sys.exit(f"search failed: {done.stderr.strip()}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, done.stdout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--only", nargs="*", default=None,
                        help="searches whose name starts so")
    args = parser.parse_args()
    tpu = importlib.util.find_spec("libtpu") is not None
    print(f"{'search':32} {'afresh wall':>11} {'forked wall':>11} {'ratio':>6}"
          f" {'afresh cpu':>10} {'forked cpu':>10} {'ratio':>6}  reports")
    for name, (argv, needs_tpu) in SEARCHES.items():
        if args.only and not any(name.startswith(o) for o in args.only):
            continue
        if needs_tpu and not tpu:
            print(f"{name:32} skipped: libtpu is not installed")
            continue
        times: dict[bool, list[tuple[float, float]]] = {True: [], False: []}
        reports: set[str] = set()
        for _ in range(args.runs):
            for forked in (False, True):
                wall, cpu, report = search(argv, forked)
                times[forked].append((wall, cpu))
                reports.add(report)
        fresh_wall, forked_wall = (statistics.median(w for w, _ in times[f])
                                   for f in (False, True))
        fresh_cpu, forked_cpu = (statistics.median(c for _, c in times[f])
                                 for f in (False, True))
        same = "same" if len(reports) == 1 else f"{len(reports)} different"
        print(f"{name:32} {fresh_wall:10.1f}s {forked_wall:10.1f}s "
              f"{forked_wall / fresh_wall:5.2f}x {fresh_cpu:9.1f}s {forked_cpu:9.1f}s "
              f"{forked_cpu / fresh_cpu:5.2f}x  {same}")
    print(f"(medians of {args.runs} runs each, interleaved; cpu: the search's "
          f"process tree, user + system)")


if __name__ == "__main__":
    main()
