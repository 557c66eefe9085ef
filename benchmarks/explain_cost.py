"""What `--explain` and `--verify` cost over a plain `irshard compile`.

Runs, as whole processes and alternating, the same compile command plain,
with `--explain` (the causes named from Shardy's origins: one more
propagation with origins recorded, in a child process) and, once each,
with `--verify` (one more compile per decision named as a cause) one
recompile at a time and `--jobs` at once; prints the median of each, wall
and CPU time (the processes' own and their children's), the ratios, and
the number of recompiles `--verify` made. The target `--explain` is held
to is 1.5x plain.

    python benchmarks/explain_cost.py                # the GPT step, fsdp+tp
    python benchmarks/explain_cost.py --runs 7
    python benchmarks/explain_cost.py -- examples/heat1d.py --fn simulate_set --mesh x=4
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

GPT = ["examples/gpt.py", "--fn", "train_step", "--args", "example_args",
       "--mesh", "fsdp=4,tp=2", "--shard", "**/embed=fsdp,tp",
       "--shard", "**/attn/w[qkv]=fsdp,tp", "--shard", "**/attn/wo=tp,fsdp",
       "--shard", "**/mlp/w_in=fsdp,tp", "--shard", "**/mlp/w_out=tp,fsdp",
       "--shard", "batch/*=fsdp,_"]


def _run(argv: list[str]) -> tuple[float, float, str]:
    """(wall seconds, CPU seconds, stdout) of one `irshard compile` run."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "irshard", "compile", *argv],
                          cwd=ROOT, check=True, capture_output=True, text=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, done.stdout


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--jobs", default="auto",
                        help="--verify's recompiles at once, against one at a time")
    parser.add_argument("command", nargs="*", help="compile's arguments "
                        "(default: the GPT step under fsdp and tensor parallel rules)")
    args = parser.parse_args(argv)
    command = args.command or GPT
    plain, explain = [], []
    for _ in range(args.runs):
        plain.append(_run(command)[:2])
        explain.append(_run([*command, "--explain"])[:2])
    verify = {}
    for jobs in ("1", args.jobs):
        wall, cpu, out = _run([*command, "--verify", "--jobs", jobs, "--format", "json"])
        notes = json.loads(out)["notes"]
        said = next((n for n in notes if n.startswith("--verify:")), "--verify: ?")
        verify[jobs] = wall, cpu, said.removeprefix("--verify: ").split(", each")[0]

    def median(rows, i):
        return statistics.median(r[i] for r in rows)

    print(f"irshard compile {' '.join(command)}")
    print(f"{'':12}{'wall s':>9}{'cpu s':>9}")
    for name, rows in (("plain", plain), ("--explain", explain)):
        print(f"{name:12}{median(rows, 0):9.2f}{median(rows, 1):9.2f}")
    for jobs, (wall, cpu, said) in verify.items():
        name = f"--verify --jobs {jobs}"
        print(f"{name:12}{wall:9.2f}{cpu:9.2f}   ({said})")
    ratio_wall = median(explain, 0) / median(plain, 0)
    ratio_cpu = median(explain, 1) / median(plain, 1)
    print(f"--explain / plain: {ratio_wall:.2f}x wall, {ratio_cpu:.2f}x cpu "
          f"(median of {args.runs}; target 1.5x)")
    for jobs, (wall, _, _) in verify.items():
        print(f"--verify --jobs {jobs} / plain: {wall / median(plain, 0):.2f}x wall")
    return 0


if __name__ == "__main__":
    sys.exit(main())
