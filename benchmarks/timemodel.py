"""Predicted against measured step time, on the simulated CPU mesh.

For each program, `irshard compile --format trace` simulates one step in the
executable's schedule (`otherData.step.step_s`), and `irshard run --repeat N`
measures the step (the median of N runs after a warm-up; the median of that
over `--processes` runs). Prints both and the relative error, then the
median error:

    python benchmarks/timemodel.py [--repeat 20] [--processes 3] [--only NAME ...]
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GPT = ("examples/gpt.py", "--fn", "train_step", "--args", "example_args")

PROGRAMS = {
    "heat set": ("examples/heat1d.py", "--fn", "simulate_set", "--mesh", "x=4"),
    "heat roll": ("examples/heat1d.py", "--fn", "simulate_roll", "--mesh", "x=4"),
    "matmul": ("examples/matmul.py", "--mesh", "x=2,y=2"),
    "mlp grad dp/tp": ("examples/mlp.py", "--mesh", "dp=2,tp=2", "--grad"),
    "mlp grad fsdp": ("examples/mlp.py", "--mesh", "dp=4", "--grad",
                      "--shard", "w1=dp,_", "--shard", "w2=dp,_",
                      "--shard", "x=dp,_", "--shard", "y=dp,_"),
    "gpt fsdp": (*GPT, "--mesh", "fsdp=8", "--shard", "**/embed=fsdp,_",
                 "--shard", "**/w*=fsdp,_", "--shard", "batch/*=fsdp,_"),
    "gpt fsdp+tp": (*GPT, "--mesh", "fsdp=4,tp=2", "--shard", "**/embed=fsdp,tp",
                    "--shard", "**/attn/w[qkv]=fsdp,tp",
                    "--shard", "**/attn/wo=tp,fsdp", "--shard", "**/mlp/w_in=fsdp,tp",
                    "--shard", "**/mlp/w_out=tp,fsdp", "--shard", "batch/*=fsdp,_"),
    "scanned transformer": ("benchmarks/transformer.py", "--mesh", "dp=2,tp=4",
                            "--grad"),
}


def irshard(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "irshard", *args], cwd=ROOT,
                          capture_output=True, text=True)


def predicted(program: tuple[str, ...]) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "step.json")
        done = irshard("compile", *program, "--format", "trace", "-o", path)
        if done.returncode != 0:
            raise RuntimeError(done.stderr.strip())
        with open(path) as f:
            return json.load(f)["otherData"]["step"]


def measured(program: tuple[str, ...], repeat: int, processes: int) -> float:
    """The median of `processes` runs of `irshard run --repeat`, each the
    median of its timed runs: a shared machine drifts between processes."""
    medians = []
    for _ in range(processes):
        done = irshard("run", *program, "--repeat", str(repeat), "--format", "json")
        if done.returncode != 0:
            raise RuntimeError(done.stderr.strip())
        medians.append(json.loads(done.stdout)["run"]["timing"]["median_s"])
    return statistics.median(medians)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--processes", type=int, default=3)
    parser.add_argument("--only", nargs="*", default=[])
    args = parser.parse_args()
    errors = []
    print(f"{'program':22} {'predicted':>11} {'measured':>11} {'error':>7}  "
          f"compute / exposed / overlapped communication (predicted)")
    for name, program in PROGRAMS.items():
        if args.only and name not in args.only:
            continue
        try:
            step = predicted(program)
            real = measured(program, args.repeat, args.processes)
        except RuntimeError as e:
            print(f"{name:22} failed: {str(e).splitlines()[0]}")
            continue
        error = abs(step["step_s"] - real) / real
        errors.append(error)
        print(f"{name:22} {step['step_s'] * 1e3:9.3f}ms {real * 1e3:9.3f}ms "
              f"{error:7.1%}  {step['compute_s'] * 1e3:.3f} / "
              f"{step['exposed_comm_s'] * 1e3:.3f} / "
              f"{step['overlapped_comm_s'] * 1e3:.3f} ms")
    if errors:
        print(f"median error {statistics.median(errors):.1%} over {len(errors)} "
              f"programs, largest {max(errors):.1%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
