"""The start-up cost of a multi-process run.

Times, as whole processes, `irshard run` of the same program on the same
mesh in one process, with `--processes N` (N processes joined through
jax.distributed on 127.0.0.1), and with `--launcher ray` (the same N
processes as Ray tasks on a local Ray instance started and stopped by the
run, when Ray is installed), in turn, and prints the medians, their ratios
and differences.

    python benchmarks/multiprocess.py
    python benchmarks/multiprocess.py --processes 4 --runs 7 --no-ray
    python benchmarks/multiprocess.py --ray-address 127.0.0.1:6379

With `--ray-address`, the Ray case joins that running cluster instead: the
cost of the launcher alone, without starting Ray.
"""

from __future__ import annotations

import argparse
import importlib.util
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
    parser.add_argument("--no-ray", action="store_true",
                        help="leave out the Ray launcher")
    parser.add_argument("--ray-address", metavar="ADDR",
                        help="time the Ray launcher on this running cluster")
    args = parser.parse_args()

    one = [sys.executable, "-m", "irshard", "run", args.file, "--fn", args.fn,
           "--mesh", args.mesh]
    many = one + ["--processes", str(args.processes)]
    cases = {"1 process": one, f"{args.processes} processes (--processes)": many}
    if not args.no_ray and importlib.util.find_spec("ray") is not None:
        ray = many + ["--launcher", "ray"]
        name = f"{args.processes} processes (--launcher ray)"
        if args.ray_address:
            ray += ["--ray-address", args.ray_address]
            name = f"{args.processes} processes (--launcher ray, running cluster)"
        cases[name] = ray
    for argv in cases.values():
        timed(argv)                               # warm the file system caches
    times: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(args.runs):
        for name, argv in cases.items():
            times[name].append(timed(argv))
    print(f"case: irshard run {os.path.relpath(args.file)} --fn {args.fn} "
          f"--mesh {args.mesh}")
    print(f"runs: {args.runs} of each, in turn, whole processes")
    base = statistics.median(times["1 process"])
    width = max(map(len, cases)) + 1
    for name, values in times.items():
        median = statistics.median(values)
        line = f"{name + ':':<{width}} median {median:.3f} s (min {min(values):.3f})"
        if name != "1 process":
            line += f", ratio {median / base:.2f}, start-up cost {median - base:+.3f} s"
        print(line)


if __name__ == "__main__":
    main()
