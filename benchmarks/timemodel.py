"""Predicted against measured step time, on the simulated CPU mesh or on
one GPU.

For each program, `irshard compile --format trace` simulates one step in the
executable's schedule (`otherData.step.step_s`); `jax.jit` of the same
function with the same shardings and donation, called in a loop
(`benchmarks/plain_loop.py`), measures the step as a framework's loop does,
and `irshard run --repeat N` measures it as irshard does (each the median of
N runs after a warm-up; the median of that over `--processes` processes).
Prints the three, irshard's measurement against plain JAX's, and the
prediction's error against plain JAX's, then the median of each:

    python benchmarks/timemodel.py [--repeat 20] [--processes 3] [--only NAME ...]

With `--interleave` both measurements come from one process per program
and run (`plain_loop.py --interleave`: one irshard execution after each
plain call), so the process-to-process noise of a shared machine is not
told apart as a difference between them.

`--platform gpu` runs `GPU_PROGRAMS` on one GPU instead (the programs of
`benchmarks/gpu.py`, then the CPU mesh's on a mesh of one device), with the
target named by the GPU present (`--target` names another, `--profile` a
saved calibration).
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


# Programs the CPU model was never fitted to (`benchmarks/programs/
# heldout.py`), each on 2, 4, 8 and 16 devices: `--heldout`.
HELDOUT_FILE = "benchmarks/programs/heldout.py"
HELDOUT = {
    # name: (meshes by device count, rules)
    "mlp_grad": ({2: "dp=2", 4: "dp=4", 8: "dp=8", 16: "dp=16"},
                 ("w1=dp,_", "w2=dp,_", "x=dp,_", "y=dp,_")),
    "attention": ({2: "dp=1,tp=2", 4: "dp=2,tp=2", 8: "dp=2,tp=4", 16: "dp=2,tp=8"},
                  ("wq=_,tp,_", "wk=_,tp,_", "wv=_,tp,_", "wo=tp,_,_", "x=dp,_,_")),
    "conv_grad": ({2: "dp=2", 4: "dp=4", 8: "dp=8", 16: "dp=16"},
                  ("images=dp,_,_,_",)),
    "scan_blocks": ({2: "dp=1,tp=2", 4: "dp=2,tp=2", 8: "dp=2,tp=4", 16: "dp=4,tp=4"},
                    ("w_in=_,_,tp", "w_out=_,tp,_", "x=dp,_")),
    "embed_xent": ({2: "dp=1,tp=2", 4: "dp=2,tp=2", 8: "dp=2,tp=4", 16: "dp=2,tp=8"},
                   ("table=tp,_", "ids=dp", "labels=dp")),
    "gelu_stream": ({2: "dp=2", 4: "dp=4", 8: "dp=8", 16: "dp=16"}, ("x=dp",)),
}


def heldout_programs(counts) -> dict[str, tuple[str, ...]]:
    found = {}
    for name, (meshes, rules) in HELDOUT.items():
        for n in counts:
            found[f"{name} {n}"] = (HELDOUT_FILE, "--fn", name, "--args", f"{name}_args",
                                    "--mesh", meshes[n],
                                    *[a for r in rules for a in ("--shard", r)])
    return found


GPU = ("benchmarks/gpu.py", "--mesh", "x=1", "--fn")
GPU_PROGRAMS = {
    "matmul bf16 8192": (*GPU, "matmul_bf16"),
    "matmul f32 4096": (*GPU, "matmul_f32"),
    "stream 256 MiB": (*GPU, "stream"),
    "mlp grad bf16": (*GPU, "mlp", "--grad"),
    "transformer bf16": (*GPU, "transformer", "--grad"),
    "heat set": ("examples/heat1d.py", "--fn", "simulate_set", "--mesh", "x=1"),
    "heat roll": ("examples/heat1d.py", "--fn", "simulate_roll", "--mesh", "x=1"),
    "matmul": ("examples/matmul.py", "--mesh", "x=1,y=1"),
    "mlp grad": ("examples/mlp.py", "--mesh", "dp=1,tp=1", "--grad"),
    "gpt": (*GPT, "--mesh", "fsdp=1"),
    "scanned transformer": ("benchmarks/transformer.py", "--mesh", "dp=1,tp=1",
                            "--grad"),
}


def gpu_target() -> str:
    """The target of the GPU present: gpu-h100:1x1 for an H100, ..."""
    done = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                          capture_output=True, text=True)
    name = done.stdout.lower()
    chip = next((c for c in ("h100", "h200", "b200") if c in name), None)
    if done.returncode != 0 or chip is None:
        raise SystemExit(f"timemodel: no H100, H200 or B200 found "
                         f"({done.stdout.strip() or done.stderr.strip()}); "
                         f"give --target")
    return f"gpu-{chip}:1x1"


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


def _plain_loops(program: tuple[str, ...], repeat: int, processes: int,
                 *options: str) -> list[dict]:
    """What `plain_loop.py` printed, one process after another."""
    found = []
    for _ in range(processes):
        done = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks",
                                                            "plain_loop.py"),
                               "--repeat", str(repeat), *options, "--", *program],
                              cwd=ROOT, capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(done.stderr.strip().splitlines()[-1])
        found.append(json.loads(done.stdout.splitlines()[-1]))
    return found


def plain(program: tuple[str, ...], repeat: int, processes: int) -> float:
    """The median of `processes` runs of the plain JAX loop."""
    return statistics.median(f["median_s"] for f in
                             _plain_loops(program, repeat, processes))


def interleaved(program: tuple[str, ...], repeat: int,
                processes: int) -> tuple[float, float]:
    """Plain JAX's loop and irshard's execution, timed in turn in one
    process: the median over `processes` processes of each one's medians."""
    found = _plain_loops(program, repeat, processes, "--interleave")
    return (statistics.median(f["median_s"] for f in found),
            statistics.median(f["irshard_median_s"] for f in found))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--processes", type=int, default=3)
    parser.add_argument("--only", nargs="*", default=[])
    parser.add_argument("--platform", choices=("cpu", "gpu"), default="cpu")
    parser.add_argument("--target", help="with --platform gpu (default: the "
                        "GPU present's, e.g. gpu-h200:1x1)")
    parser.add_argument("--profile", help="a profile saved by irshard calibrate -o")
    parser.add_argument("--interleave", action="store_true",
                        help="measure plain JAX and irshard in one process a run")
    parser.add_argument("--heldout", default=None, metavar="COUNTS",
                        help="the programs the model was never fitted to, on "
                             "these device counts (e.g. 2,4,8,16), instead")
    args = parser.parse_args()
    programs, extra = PROGRAMS, ()
    if args.heldout:
        programs = heldout_programs([int(n) for n in args.heldout.split(",")])
    if args.platform == "gpu":
        programs = GPU_PROGRAMS
        extra = ("--platform", "gpu", "--target", args.target or gpu_target())
    if args.profile:
        extra += ("--profile", args.profile)
    errors, agreement, by_count = [], [], {}
    print(f"{'program':22} {'predicted':>11} {'plain JAX':>11} {'irshard':>11} "
          f"{'irshard/plain':>13} {'error':>7}  "
          f"compute / exposed / overlapped communication (predicted)")
    for name, program in programs.items():
        if args.only and name not in args.only:
            continue
        program = program + extra
        try:
            step = predicted(program)
            if args.interleave:
                loop, real = interleaved(program, args.repeat, args.processes)
            else:
                loop = plain(program, args.repeat, args.processes)
                real = measured(program, args.repeat, args.processes)
        except RuntimeError as e:
            print(f"{name:22} failed: {str(e).splitlines()[0]}")
            continue
        error = abs(step["step_s"] - loop) / loop
        errors.append(error)
        if args.heldout:
            by_count.setdefault(name.split()[-1], []).append(error)
        agreement.append(abs(real - loop) / loop)
        print(f"{name:22} {step['step_s'] * 1e3:9.3f}ms {loop * 1e3:9.3f}ms "
              f"{real * 1e3:9.3f}ms {real / loop - 1:+13.1%} "
              f"{(step['step_s'] - loop) / loop:+7.1%}  {step['compute_s'] * 1e3:.3f} / "
              f"{step['exposed_comm_s'] * 1e3:.3f} / "
              f"{step['overlapped_comm_s'] * 1e3:.3f} ms", flush=True)
    for count, found in by_count.items():
        print(f"{count} devices: median error {statistics.median(found):.1%}, "
              f"largest {max(found):.1%} over {len(found)} programs")
    if errors:
        print(f"irshard run against plain JAX's loop: median difference "
              f"{statistics.median(agreement):.1%}, largest {max(agreement):.1%}")
        print(f"prediction against plain JAX's loop: median error "
              f"{statistics.median(errors):.1%} over {len(errors)} programs, "
              f"largest {max(errors):.1%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
