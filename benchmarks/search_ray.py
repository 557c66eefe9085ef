"""A knob search compiled by worker processes (`--jobs 1`) and by a local
Ray cluster with 1, 2, ... workers at once: the same report byte for
byte, the wall-time ratio, and a model of throughput against workers
fitted to what was measured.

    python benchmarks/search_ray.py [--workers 1,2,3,4] [--repeats 2]

The search: `tests/programs/factory.py` over batch x width x remat on a
fixed mesh (`--mesh data=2,tensor=2`, knobs only), every candidate
compiled (`--no-cache`). Each configuration runs `--repeats` times; the
fastest is kept. The time is the search's own ("searched in N s": the
compiles, not starting Ray or tracing the factory's programs). The model
is the universal scalability law, throughput(w) = w * X1 / (1 + s * (w - 1)
+ k * w * (w - 1)), s (contention) and k (coherence) fitted by least squares
to the measured throughputs. On this machine's two cores, workers beyond
two share cores: the fit says how much each costs, and where more stop
helping.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FACTORY = os.path.join(ROOT, "tests", "programs", "factory.py")
SEARCH = ["search", FACTORY, "--factory", "make", "--knob", "batch=32,64,128,256",
          "--knob", "width=256,512,1024", "--knob", "remat=none,full",
          "--mesh", "data=2,tensor=2", "--no-cache", "--format", "json"]


def run(compiler: list[str], out: str) -> tuple[float, str]:
    done = subprocess.run([sys.executable, "-m", "irshard", *SEARCH, *compiler,
                           "-o", out], capture_output=True, text=True, cwd=ROOT)
    if done.returncode != 0:
        raise SystemExit(f"irshard search {' '.join(compiler)} failed:\n{done.stderr}")
    seconds = float(re.search(r"searched in (\d+(?:\.\d+)?) s", done.stderr).group(1))
    with open(out) as f:
        return seconds, f.read()


def fit(points: list[tuple[int, float]]) -> tuple[float, float, float]:
    """(X1, s, k) of the universal scalability law, throughput(w) =
    w X1 / (1 + s (w - 1) + k w (w - 1)): X1 the one-worker throughput
    measured, s (contention) and k (coherence: what makes more workers
    slower than fewer) by least squares on w X1 / X(w) - 1."""
    x1 = dict(points)[1]
    rows = [(w - 1, w * (w - 1), w * x1 / x - 1) for w, x in points if w > 1]
    if not rows:
        return x1, 0.0, 0.0
    a11 = sum(a * a for a, _, _ in rows)
    a12 = sum(a * b for a, b, _ in rows)
    a22 = sum(b * b for _, b, _ in rows)
    b1 = sum(a * y for a, _, y in rows)
    b2 = sum(b * y for _, b, y in rows)
    det = a11 * a22 - a12 * a12
    if len(rows) < 2 or abs(det) < 1e-12:
        return x1, b1 / a11, 0.0
    s = (b1 * a22 - b2 * a12) / det
    k = (a11 * b2 - a12 * b1) / det
    return x1, s, k


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", default="1,2,3,4")
    parser.add_argument("--repeats", type=int, default=2)
    options = parser.parse_args()
    workers = [int(w) for w in options.workers.split(",")]
    if 1 not in workers:
        workers = [1] + workers
    with tempfile.TemporaryDirectory(prefix="irshard-search-ray-") as work:
        out = os.path.join(work, "search.json")

        def best(compiler):
            found = [run(compiler, out) for _ in range(options.repeats)]
            return min(s for s, _ in found), found[0][1]

        local_s, local = best(["--jobs", "1"])
        candidates = len(json.loads(local)["candidates"])
        print(f"{candidates} candidates; --jobs 1 (processes): {local_s:.1f} s")
        points = []
        for w in workers:
            seconds, text = best(["--ray", "local", "--jobs", str(w)])
            same = text == local
            points.append((w, candidates / seconds))
            print(f"--ray local --jobs {w}: {seconds:.1f} s, "
                  f"{candidates / seconds:.2f} candidates/s, "
                  f"{local_s / seconds:.2f}x --jobs 1; the same report: {same}")
            if not same:
                raise SystemExit("the Ray search's report differs from --jobs 1's")
    x1, s, k = fit(points)
    print(f"\nmodel: throughput(w) = w x {x1:.2f} / (1 + {s:.3f} (w - 1) + "
          f"{k:.3f} w (w - 1)) candidates/s (the universal scalability law), "
          f"fitted to w = {', '.join(str(w) for w, _ in points)} on "
          f"{os.cpu_count()} cores")

    def model(w: int) -> float:
        return w * x1 / (1 + s * (w - 1) + k * w * (w - 1))

    for w, x in points:
        print(f"  w={w}: measured {x:.2f}, model {model(w):.2f} ({model(w) / x - 1:+.1%})")
    best = max(range(1, 65), key=model)
    print(f"  the model's best: {best} workers, {model(best):.2f} candidates/s "
          f"({model(best) / x1:.2f}x one worker)")


if __name__ == "__main__":
    main()
