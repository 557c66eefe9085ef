"""Every report of the examples and the test programs, written to a folder,
so that two versions of irshard can be compared byte for byte.

    python tools/golden.py write DIR     # one file per case: stdout, exit code
    python tools/golden.py compare A B   # the cases whose output differs

A case is an `irshard` command line run from the current directory (a
checkout of the repository) with `python -m irshard`; its
standard output, standard error and exit code go to DIR/NAME.out, and a
file it writes with `-o` to DIR/NAME.<ext>. Cases whose output holds a
measured time are not listed: the comparison is of what is deterministic.
(The IR names only the user's frames: irshard's own are left out of its
locations, so `--emit` compares too.)
"""

import argparse
import concurrent.futures
import difflib
import os
import subprocess
import sys

ROOT = os.getcwd()

HEAT = ("examples/heat1d.py", "--mesh", "x=4")
GPT = ("examples/gpt.py", "--fn", "train_step", "--args", "example_args")
GPT_FSDP = (*GPT, "--mesh", "fsdp=8", "--shard", "**/embed=fsdp,_",
            "--shard", "**/w*=fsdp,_", "--shard", "batch/*=fsdp,_")
GPT_TP = (*GPT, "--mesh", "fsdp=4,tp=2", "--shard", "**/embed=fsdp,tp",
          "--shard", "**/attn/w[qkv]=fsdp,tp", "--shard", "**/attn/wo=tp,fsdp",
          "--shard", "**/mlp/w_in=fsdp,tp", "--shard", "**/mlp/w_out=tp,fsdp",
          "--shard", "batch/*=fsdp,_")
P = "tests/programs/"
LM1B = (P + "lm1b_style.py", "--fn", "train_step", "--args", "args",
        "--static", "config", "--mesh", "data=2,model=2",
        "--shard", "state/*/mlp/wi=_,model", "--shard", "state/*/mlp/wo=model,_",
        "--shard", "batch/*=data,_")

CASES: dict[str, tuple[str, ...]] = {
    # The examples, every way a report is written.
    "heat_set": ("compile", *HEAT, "--fn", "simulate_set"),
    "heat_roll": ("compile", *HEAT, "--fn", "simulate_roll"),
    "heat_set_json": ("compile", *HEAT, "--fn", "simulate_set", "--format", "json"),
    "heat_roll_json": ("compile", *HEAT, "--fn", "simulate_roll", "--format", "json"),
    "heat_set_explain": ("compile", *HEAT, "--fn", "simulate_set", "--explain"),
    "heat_set_explain_json": ("compile", *HEAT, "--fn", "simulate_set", "--explain",
                              "--format", "json"),
    "heat_set_html": ("compile", *HEAT, "--fn", "simulate_set", "--format", "html",
                      "-o", "{out}.html"),
    "heat_set_partitioned": ("compile", *HEAT, "--fn", "simulate_set", "--stage",
                             "partitioned", "--format", "json"),
    "heat_set_emit": ("compile", *HEAT, "--fn", "simulate_set", "--emit", "stablehlo",
                      "--emit", "propagated", "--emit", "partitioned",
                      "--emit", "optimized", "--debug-info"),
    "heat_set_budget": ("compile", *HEAT, "--fn", "simulate_set",
                        "--budget", "all-gather<=1", "--budget", "bytes<=1KiB"),
    "heat_show": ("show", *HEAT, "--fn", "simulate_set"),
    "heat_run_check": ("run", *HEAT, "--fn", "simulate_roll", "--check",
                       "--format", "json"),
    "matmul": ("compile", "examples/matmul.py", "--mesh", "x=2,y=2"),
    "matmul_json": ("compile", "examples/matmul.py", "--mesh", "x=2,y=2",
                    "--format", "json"),
    "matmul_show": ("show", "examples/matmul.py", "--mesh", "x=2,y=2"),
    "mlp_grad": ("compile", "examples/mlp.py", "--mesh", "dp=2,tp=2", "--grad"),
    "mlp_grad_json": ("compile", "examples/mlp.py", "--mesh", "dp=2,tp=2", "--grad",
                      "--explain", "--format", "json"),
    "mlp_target_gpu": ("compile", "examples/mlp.py", "--mesh", "dp=2,tp=4", "--grad",
                       "--target", "gpu-h100:1x8", "--format", "json"),
    "remat": ("compile", "examples/remat.py", "--mesh", "x=4,y=2"),
    "remat_explain": ("compile", "examples/remat.py", "--mesh", "x=4,y=2", "--explain"),
    "remat_suggest": ("suggest", "examples/remat.py", "--mesh", "x=4,y=2"),
    "explicit_auto": ("compile", "examples/explicit.py", "--fn", "loss",
                      "--mesh", "dp=2,tp=4", "--format", "json"),
    "explicit": ("compile", "examples/explicit.py", "--fn", "loss",
                 "--mesh", "dp=2,tp=4", "--axis-types", "explicit"),
    "gpt_fsdp": ("compile", *GPT_FSDP, "--budget", "all-gather@fsdp<=14",
                 "--budget", "bytes<=8MiB"),
    "gpt_fsdp_json": ("compile", *GPT_FSDP, "--explain", "--format", "json"),
    "gpt_tp": ("compile", *GPT_TP),
    "gpt_tp_json": ("compile", *GPT_TP, "--format", "json"),
    "gpt_tp_html": ("compile", *GPT_TP, "--format", "html", "-o", "{out}.html"),
    "gpt_tp_show": ("show", *GPT_TP),
    # The test suite's programs.
    "attention": ("compile", P + "attention.py", "--mesh", "x=2,y=2",
                  "--shard", "q=x,_,y,_", "--shard", "k=x,_,y,_", "--shard", "v=x,_,_,_",
                  "--format", "json"),
    "cumsum": ("compile", P + "cumsum.py", "--mesh", "x=4", "--shard", "a=x,_",
               "--format", "json"),
    "cube": ("compile", P + "cube.py", "--mesh", "x=2,y=2", "--shard", "a=x,y,_"),
    "loops_fori": ("compile", P + "loops.py", "--fn", "fori", "--mesh", "x=4",
                   "--shard", "d=x", "--format", "json"),
    "loops_scan": ("compile", P + "loops.py", "--fn", "scan", "--mesh", "x=2,y=2",
                   "--shard", "w=_,x,y", "--shard", "x=_,x", "--explain"),
    "reductions": ("compile", P + "reductions.py", "--mesh", "x=2,y=2",
                   "--shard", "a=x,y"),
    "softmax": ("compile", P + "softmax.py", "--mesh", "x=4", "--shard", "logits=_,x"),
    "integers": ("compile", P + "integers.py", "--mesh", "x=4", "--shard", "tokens=x,_",
                 "--shard", "table=x,_", "--format", "json"),
    "models_mlp": ("compile", P + "models.py", "--fn", "mlp_loss", "--mesh", "dp=2,tp=4",
                   "--grad", "--format", "json"),
    "models_moe": ("compile", P + "models.py", "--fn", "moe_loss",
                   "--mesh", "dp=2,ep=4", "--explain"),
    "shard_map": ("compile", P + "shard_map_tutorial.py", "--fn", "matmul_allgather",
                  "--mesh", "i=4", "--arg", "lhs_block=f32[16,8]",
                  "--arg", "rhs_block=f32[8,16]", "--format", "json"),
    "equinox": ("compile", P + "equinox_style.py", "--fn", "train_step", "--args",
                "args", "--mesh", "batch=8", "--format", "json"),
    "cookbook": ("compile", P + "cookbook_style.py", "--fn", "train_step", "--args",
                 "args", "--mesh", "data=4", "--shard", "tokens=data,_",
                 "--shard", "targets=data,_", "--format", "json"),
    "moe": ("compile", P + "gshard_moe.py", "--fn", "moe_layer", "--args", "args",
            "--mesh", "expert=4", "--shard", "params/experts/*=expert,_,_",
            "--shard", "tokens=expert,_,_"),
    "mixed": ("compile", P + "mixed_precision.py", "--fn", "grad_step", "--args",
              "args", "--mesh", "dp=2,tp=4", "--shard", "params/w1=_,tp",
              "--shard", "params/w2=tp,_", "--shard", "x=dp,_", "--shard", "y=dp,_",
              "--explain", "--format", "json"),
    "lm1b": ("compile", *LM1B, "--format", "json"),
    "lm1b_text": ("compile", *LM1B),
    # HLO files and dumps read directly; IR through opt.
    "hlo_async": ("collectives", "tests/data/async_collectives.hlo", "--format", "json"),
    "hlo_trip_count": ("collectives", "tests/data/known_trip_count.hlo"),
    "hlo_dense": ("collectives", "tests/data/dense_loop.hlo", "--format", "json"),
    "hlo_dense_html": ("collectives", "tests/data/dense_loop.hlo", "--format", "html",
                       "-o", "{out}.html"),
    # Errors: one line each.
    "error_mesh": ("compile", *HEAT[:1], "--fn", "simulate_set", "--mesh", "x=3"),
    "error_fn": ("compile", *HEAT, "--fn", "simulate"),
    "error_spec": ("compile", *HEAT, "--fn", "simulate_set", "--shard", "d=z"),
}

# Reports compared with each other and TPU targets, where libtpu is there.
DIFFS = {"diff_heat": ("heat_set_json", "heat_roll_json"),
         "diff_gpt": ("gpt_fsdp_json", "gpt_tp_json")}
TPU_CASES = {
    "gpt_tpu": ("compile", *GPT, "--mesh", "fsdp=4,tp=4", "--target", "tpu-v5e:4x4",
                *GPT_TP[len(GPT) + 2:], "--format", "json"),
    "heat_tpu": ("compile", *HEAT, "--fn", "simulate_roll", "--target", "tpu-v5e:2x2"),
}


def _run(name: str, args: tuple[str, ...], out: str) -> None:
    stem = os.path.join(out, name)
    argv = [a.replace("{out}", stem) for a in args]
    done = subprocess.run([sys.executable, "-m", "irshard", *argv], cwd=ROOT,
                          capture_output=True, text=True)
    with open(stem + ".out", "w") as f:
        f.write(f"$ irshard {' '.join(argv).replace(out, 'OUT')}\nexit {done.returncode}\n"
                f"--- stdout\n{done.stdout}--- stderr\n{done.stderr}")


def write(out: str, jobs: int, only: list[str]) -> None:
    os.makedirs(out, exist_ok=True)
    cases = dict(CASES)
    try:
        import libtpu  # noqa: F401
        cases.update(TPU_CASES)
    except ImportError:
        print("golden: no libtpu, TPU cases left out", file=sys.stderr)
    if only:
        cases = {k: v for k, v in cases.items() if k in only}
    with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
        for _ in pool.map(lambda kv: _run(*kv, out), cases.items()):
            pass
    diffs = {k: v for k, v in DIFFS.items() if v[0] in cases and v[1] in cases}
    for name, (a, b) in diffs.items():
        reports = []
        for side in (a, b):
            text = open(os.path.join(out, side + ".out")).read()
            body = text.split("--- stdout\n", 1)[1].split("--- stderr\n", 1)[0]
            path = os.path.join(out, side + ".json")
            with open(path, "w") as f:
                f.write(body)
            reports.append(path)
        _run(name, ("diff", *reports), out)
    print(f"golden: {len(cases) + len(diffs)} cases in {out}")


def compare(a: str, b: str) -> int:
    names = sorted(set(os.listdir(a)) | set(os.listdir(b)))
    differ = 0
    for name in names:
        pa, pb = os.path.join(a, name), os.path.join(b, name)
        if not (os.path.exists(pa) and os.path.exists(pb)):
            print(f"only in {a if os.path.exists(pa) else b}: {name}")
            differ += 1
            continue
        ta, tb = open(pa, "rb").read(), open(pb, "rb").read()
        if ta != tb:
            differ += 1
            lines = difflib.unified_diff(
                ta.decode(errors="replace").splitlines(),
                tb.decode(errors="replace").splitlines(), pa, pb, lineterm="", n=1)
            print("\n".join(list(lines)[:40]))
    print(f"golden: {len(names) - differ} of {len(names)} files identical")
    return 1 if differ else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    w = sub.add_parser("write")
    w.add_argument("dir")
    w.add_argument("--jobs", type=int, default=2)
    w.add_argument("--only", nargs="*", default=[])
    c = sub.add_parser("compare")
    c.add_argument("a")
    c.add_argument("b")
    args = parser.parse_args()
    if args.command == "write":
        write(os.path.abspath(args.dir), args.jobs, args.only)
        return 0
    return compare(args.a, args.b)


if __name__ == "__main__":
    sys.exit(main())
