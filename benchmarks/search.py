"""`irshard search` on the GPT and Llama examples for two TPU slices: the
ranked table, how many candidates were compiled and in how long, the winner
against the best canonical strategy, and whether the winner's own command
reproduces its numbers.

    python benchmarks/search.py                       # all four cases
    python benchmarks/search.py --models gpt --targets tpu-v5e:4x4

Each search runs as `irshard search ... --format json` in its own process,
with a fresh cache (`--cache DIR` keeps one across runs). Needs libtpu
(`make test` installs it).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODELS = {
    "gpt": ["examples/gpt.py", "--fn", "train_step", "--args", "example_args"],
    "llama": ["examples/llama.py", "--fn", "train_step", "--args", "example_args",
              "--donate", "params", "--donate", "opt_state"],
}
TARGETS = ("tpu-v5e:4x4", "tpu-v5p:2x2x4")


def irshard(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "irshard", *args], cwd=ROOT,
                          capture_output=True, text=True)


def human_time(s: float | None) -> str:
    if s is None:
        return "-"
    for unit, scale in (("s", 1), ("ms", 1e-3), ("us", 1e-6)):
        if s >= scale:
            return f"{s / scale:.3g} {unit}"
    return f"{s * 1e9:.3g} ns"


def gib(n: int | None) -> str:
    return "-" if n is None else f"{n / 2**30:.2f} GiB"


def case(model: str, target: str, cache: str, budget: str) -> bool:
    started = time.perf_counter()
    done = irshard("search", *MODELS[model], "--target", target, "--cache-dir", cache,
                   "--budget-time", budget, "--format", "json")
    wall = time.perf_counter() - started
    print(f"\n== {model} on {target}")
    if done.returncode != 0:
        print(f"search failed: {done.stderr.strip()}")
        return False
    data = json.loads(done.stdout)
    print(f"{data['compiled']} candidates compiled, "
          f"{sum(1 for c in data['candidates'] if c['status'] == 'pruned')} pruned, "
          f"{sum(1 for c in data['candidates'] if c['status'] == 'skipped')} left "
          f"by the budget; {wall:.0f} s wall")
    print(f"{'rank':>4}  {'strategy':<26} {'mesh':<24} {'step':>9} {'compute':>9} "
          f"{'exposed':>9} {'memory':>10} {'fits':>4}  origin")
    for c in data["candidates"]:
        mesh = ",".join(f"{m['name']}={m['size']}" for m in c["mesh"])
        if c["rank"] is None:
            continue
        print(f"{c['rank']:>4}  {c['strategy']:<26} {mesh:<24} "
              f"{human_time(c.get('step_s')):>9} {human_time(c.get('compute_s')):>9} "
              f"{human_time(c.get('exposed_comm_s')):>9} {gib(c.get('memory_bytes')):>10} "
              f"{'yes' if c.get('fits') else 'no':>4}  {c['origin']}"
              + (f": {c['change'][:60]}" if c.get("change") else ""))
    unranked = [c for c in data["candidates"] if c["rank"] is None]
    for c in unranked:
        mesh = ",".join(f"{m['name']}={m['size']}" for m in c["mesh"])
        print(f"   -  {c['strategy']:<26} {mesh:<24} {c['status']}: "
              f"{(c.get('reason') or '')[:90]}")
    winner, canonical = data["winner"], data["best_canonical"]
    if winner is None:
        print("no candidate fits")
        return False
    ok = True
    if canonical is not None:
        ratio = winner["step_s"] / canonical["step_s"]
        print(f"winner {winner['strategy']} {human_time(winner['step_s'])}; best "
              f"canonical {canonical['strategy']} {human_time(canonical['step_s'])}; "
              f"ratio {ratio:.3f}")
        ok = ratio <= 1.0
    else:
        print(f"winner {winner['strategy']} {human_time(winner['step_s'])}; no "
              f"canonical strategy fits")
    again = irshard("compile", *winner["args"], "--format", "json")
    if again.returncode != 0:
        print(f"reproduce: failed: {again.stderr.strip()}")
        return False
    report = json.loads(again.stdout)
    memory = report["memory"]
    same = (report["step"]["step_s"] == winner["step_s"]
            and report["totals"]["bytes_per_run"] == winner["bytes_per_step"]
            and memory["argument_bytes"] + memory["output_bytes"]
            + memory["temp_bytes"] - memory.get("alias_bytes", 0)
            == winner["memory_bytes"])
    print(f"reproduce: irshard compile {' '.join(winner['args'][:1])} ... "
          f"{'gives the same step, memory and bytes' if same else 'DIFFERS'}")
    print(f"search time {wall:.0f} s "
          f"({'within' if wall <= 600 else 'OVER'} 10 minutes)")
    return ok and same and wall <= 600


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="gpt,llama")
    parser.add_argument("--targets", default=",".join(TARGETS))
    parser.add_argument("--cache", help="a cache directory kept across runs")
    parser.add_argument("--budget-time", default="10m")
    args = parser.parse_args()
    results = []
    with tempfile.TemporaryDirectory(prefix="irshard-search-") as fresh:
        cache = args.cache or fresh
        for model in args.models.split(","):
            for target in args.targets.split(","):
                results.append(case(model, target, cache, args.budget_time))
    print(f"\n{sum(results)} of {len(results)} cases: winner at least as fast as "
          f"the best canonical strategy, fits, and reproduces")
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
