"""The start-up cost of a multi-process run.

Times, as whole processes, `irshard run` of the same program on the same
mesh in one process and with `--processes N` (N processes joined through
jax.distributed on 127.0.0.1), alternating the two, and prints the medians,
their ratio and difference.

    python benchmarks/multiprocess.py
    python benchmarks/multiprocess.py --processes 4 --runs 7
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from timing import timed  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--file", default=os.path.join(ROOT, "examples", "heat1d.py"))
    parser.add_argument("--fn", default="simulate_roll")
    parser.add_argument("--mesh", default="x=4")
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()

    one = [sys.executable, "-m", "irshard", "run", args.file, "--fn", args.fn,
           "--mesh", args.mesh]
    many = one + ["--processes", str(args.processes)]
    timed(one), timed(many)                      # warm the file system caches
    singles, multis = [], []
    for _ in range(args.runs):
        singles.append(timed(one))
        multis.append(timed(many))
    a, b = statistics.median(singles), statistics.median(multis)
    print(f"case: irshard run {os.path.relpath(args.file)} --fn {args.fn} "
          f"--mesh {args.mesh}")
    print(f"runs: {args.runs} of each, alternating, whole processes")
    print(f"1 process:                median {a:.3f} s (min {min(singles):.3f})")
    print(f"{args.processes} processes (--processes): median {b:.3f} s "
          f"(min {min(multis):.3f})")
    print(f"ratio (median): {b / a:.2f}, start-up cost: {b - a:+.3f} s")


if __name__ == "__main__":
    main()
