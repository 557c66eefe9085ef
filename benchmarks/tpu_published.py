"""irshard's predicted TPU step against MaxText's published measurements.

MaxText publishes the TFLOP/s per chip and MFU its train step measured for
fixed configs on fixed slices (`configs/tpu/v5p/README.md`,
`configs/tpu/v4/README.md`, one table per model, one row per slice). Each
model's config script beside the table (`32b.sh`, `22b.sh`, ...) names the
model scale, batch, remat policy, attention and the `LIBTPU_INIT_ARGS` the
row ran with. For every row this builds MaxText's step from that script,
as `train_compile.py` builds it, compiles it for the row's slice through
irshard (libtpu, no TPU), and prints the predicted step time, the predicted
TFLOP/s per chip (MaxText's own count of the step's TFLOPs over the
predicted time) and MFU, the published figures and the error.

It runs in an environment of its own (Python >= 3.12):

    python3.12 -m venv .venv-maxtext
    .venv-maxtext/bin/pip install -e '.[tpu]' -r benchmarks/maxtext-requirements.txt
    .venv-maxtext/bin/pip install --no-deps maxtext==0.2.5
    .venv-maxtext/bin/python benchmarks/tpu_published.py [--only v5p] [--rows 32B,64B]

Each row compiles in a process of its own (libtpu reads the row's flags
when it loads), at most `--timeout` seconds (default 600). A row whose
config does not compile as published (libtpu refuses one of its flags, the
step does not fit in HBM, the compile runs past the limit) is printed with
the reason; nothing is tuned to make it fit.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
STEP_DIR = os.path.join(HERE, "programs")
# This folder's maxtext.py would hide MaxText's package.
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != HERE]
GENERATIONS = ("v5p", "v4")
# The other generations' published tables, kept for an independent check
# of the model (`--only v5e`): none is printed by default.
OTHERS = ("v5e", "v6e")


def _configs() -> str:
    import maxtext.configs
    return os.path.join(os.path.dirname(maxtext.configs.__file__), "tpu")


def published(generation: str) -> list[dict]:
    """The rows of MaxText's published table for `generation`: model,
    slice, slices, TFLOP/s per chip, MFU, and the model's config script."""
    folder = os.path.join(_configs(), generation)
    readme = os.path.join(folder, "README.md")
    if not os.path.exists(readme):
        return []
    # A table per model (`### 32B model`, then `| 1x v5p-128 | 328 | 71.47% |`)
    # or one table with a pair of columns per model (`| Hardware | 16B
    # TFLOP/sec/chip | 16B MFU | ...`).
    found, model, columns = [], None, None
    with open(readme, encoding="utf-8") as f:
        for line in f:
            heading = re.match(r"#+\s*(\S+)\s+model", line)
            if heading:
                model, columns = heading.group(1), None
                continue
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if cells and cells[0] == "Hardware" and len(cells) > 3:
                columns = [c.split()[0] for c in cells[1::2]]
                continue
            m = re.fullmatch(r"(\d+)x\s+(v\w+-\d+)", cells[0]) if cells else None
            if not m:
                continue
            pairs = list(zip(columns, cells[1::2], cells[2::2])) if columns \
                else [(model, cells[1], cells[2])] if model and len(cells) > 2 else []
            for name, tflops, mfu in pairs:
                script = os.path.join(folder, f"{name.lower()}.sh")
                found.append({"generation": generation, "model": name,
                              "slice": m.group(2), "slices": int(m.group(1)),
                              "tflops": float(tflops),
                              "mfu": float(mfu.rstrip("%")) / 100,
                              "script": script if os.path.exists(script) else None})
    return found


def script_config(path: str) -> tuple[list[str], str]:
    """The `key=value` settings a config script gives MaxText's trainer
    (those naming a shell variable, the run's output paths, left out) and
    the `LIBTPU_INIT_ARGS` it exports before it."""
    with open(path, encoding="utf-8") as f:
        text = f.read().replace("\\\n", " ")
    flags, settings = "", None
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("export LIBTPU_INIT_ARGS="):
            flags = shlex.split(line)[1].split("=", 1)[1]
        elif line.startswith("python3 -m maxtext") and settings is None:
            words = shlex.split(line)
            after = next(i for i, w in enumerate(words) if w.endswith("base.yml"))
            settings = [w for w in words[after + 1:] if "=" in w and "$" not in w]
    if settings is None:
        raise ValueError(f"{path}: no MaxText command")
    return settings, flags


def target_of(slice_name: str, slices: int) -> str:
    """irshard's `--target` for MaxText's name of a slice (`v5p-128`)."""
    from maxtext.utils.accelerator_to_spec_map import get_system_characteristics
    topology = get_system_characteristics(slice_name).topology_name
    generation = slice_name.split("-")[0]
    shape = topology.split(":")[1]
    return f"tpu-{generation}:{shape}" + (f",slices={slices}" if slices > 1 else "")


def compile_row(row: dict) -> dict:
    """In this process (its flags already in the environment): the row's
    step compiled through irshard, its predicted step and MaxText's count
    of its TFLOPs per device."""
    settings, _ = script_config(row["script"])
    os.environ["MAXTEXT_OVERRIDES"] = " ".join(
        settings + [f"compile_topology={row['slice']}",
                    f"compile_topology_num_slices={row['slices']}"])
    sys.path.insert(0, STEP_DIR)
    import irshard
    import maxtext_step
    from maxtext.utils import maxtext_utils
    start = time.perf_counter()
    step, shaped_args, shaped_kwargs, context, _, config = maxtext_step.step_and_args()
    with context():
        lowered = step.lower(*shaped_args, **shaped_kwargs)
    report = irshard.report(lowered, target=row["target"]).to_json()
    tflops, _, _ = maxtext_utils.calculate_tflops_training_per_device(config, log=False)
    memory = report.get("memory") or {}
    from irshard.hardware import targets
    profile = targets.place(row["target"]).profile
    return {"step": report.get("step"), "tflops_per_device": tflops,
            "fits": memory.get("fits"), "over_bytes": memory.get("over_bytes"),
            "peak_flops": profile.peak_flops,
            "clock_hz": report["target"].get("clock_hz"),
            "seconds": time.perf_counter() - start}


def _run(row: dict, timeout: float) -> dict:
    """The row compiled in a process of its own, or why it was not."""
    settings, flags = script_config(row["script"])
    env = dict(os.environ, LIBTPU_INIT_ARGS=flags, JAX_PLATFORMS="cpu",
               ALLOW_MULTIPLE_LIBTPU_LOAD="1")
    try:
        done = subprocess.run([sys.executable, __file__, "--compile-row",
                               json.dumps(row)], env=env, capture_output=True,
                              text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"the compile ran past {timeout:.0f} s"}
    if done.returncode != 0 or not done.stdout.strip():
        return {"error": _reason(done.stderr)}
    return json.loads(done.stdout.strip().splitlines()[-1])


def _reason(stderr: str) -> str:
    """Why a row's process failed, in a line: libtpu's refusal of a flag,
    or the exception it ended in, its class and XLA's wrapping left out."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    refused = [line for line in lines if line.startswith("ERROR:")]
    raised = [line for line in lines if re.match(r"[\w.]+(Error|Exception): ", line)]
    reason = (refused or raised or lines or ["no output"])[-1]
    reason = re.sub(r"^[\w.]+(Error|Exception): ", "", reason)
    reason = re.sub(r"^XLA failed to compile the module: ", "", reason)
    return reason.split(", and this might")[0][:240]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default=",".join(GENERATIONS),
                        help="generations, comma separated (default v5p,v4; "
                             f"also {', '.join(OTHERS)})")
    parser.add_argument("--rows", default=None,
                        help="models to keep, comma separated (e.g. 32B,22B)")
    parser.add_argument("--max-chips", type=int, default=512,
                        help="leave out slices of more chips (default 512)")
    parser.add_argument("--timeout", type=float, default=600.0)
    parser.add_argument("--json", default=None, help="also write the rows here")
    parser.add_argument("--compile-row", default=None, help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.compile_row:
        print(json.dumps(compile_row(json.loads(options.compile_row))))
        return
    rows = [r for g in options.only.split(",") for r in published(g.strip())]
    if options.rows:
        keep = {m.strip().upper() for m in options.rows.split(",")}
        rows = [r for r in rows if r["model"].upper() in keep]
    print(f"{'row':24} {'target':26} {'step':>9} {'TFLOP/s':>8} {'MFU':>6} "
          f"{'published':>9} {'error':>7}  compute (estimate/roofline), "
          f"exposed + overlapped comm")
    for row in rows:
        name = f"{row['generation']} {row['model']} {row['slices']}x {row['slice']}"
        row["target"] = target_of(row["slice"], row["slices"])
        chips = int(row["slice"].split("-")[1]) // (1 if row["generation"] in OTHERS else 2)
        if row["script"] is None:
            row["result"] = {"error": "no config script for this model"}
        elif chips * row["slices"] > options.max_chips:
            row["result"] = {"error": f"{chips * row['slices']} chips: past --max-chips"}
        else:
            row["result"] = _run(row, options.timeout)
        result = row["result"]
        step = (result.get("step") or {}).get("step_s")
        if result.get("error") or not step:
            print(f"{name:24} {row['target']:26} not compiled: "
                  f"{result.get('error', 'no step simulated')}", flush=True)
            continue
        tflops = result["tflops_per_device"] / step
        mfu = tflops * 1e12 / result["peak_flops"]
        row["predicted_tflops"], row["predicted_mfu"] = tflops, mfu
        row["error"] = tflops / row["tflops"] - 1
        s = result["step"]
        sources = (s.get("compute") or {}).get("by_source", {})
        fits = "" if result.get("fits") is not False else \
            f"  does not fit ({result['over_bytes'] / 2**30:.1f} GiB over)"
        print(f"{name:24} {row['target']:26} {step * 1e3:>7.0f}ms {tflops:>8.0f} "
              f"{mfu:>6.1%} {row['tflops']:>9.0f} {row['error']:>+7.1%}  "
              f"{sources.get('libtpu-estimate', 0) * 1e3:.0f}/"
              f"{sources.get('roofline', 0) * 1e3:.0f} ms, "
              f"{s['exposed_comm_s'] * 1e3:.0f} + {s['overlapped_comm_s'] * 1e3:.0f} ms"
              f"{fits}", flush=True)
    errors = sorted(abs(r["error"]) for r in rows if "error" in r)
    if errors:
        median = errors[len(errors) // 2] if len(errors) % 2 else \
            (errors[len(errors) // 2 - 1] + errors[len(errors) // 2]) / 2
        print(f"{len(errors)} of {len(rows)} rows compiled: median |error| "
              f"{median:.1%}, largest {errors[-1]:.1%}")
    if options.json:
        with open(options.json, "w", encoding="utf-8") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
