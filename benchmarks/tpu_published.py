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

Which program a row is. The tables were measured in 2023 and have not
been measured again; the scripts and `base.yml` that MaxText 0.2.5 installs
have changed since (its default model is another: head_dim 256 to 128, a
ReLU MLP to a gated SiLU one, a shared 32,768-token embedding to separate
32,000-token ones; the v5p 32B and v5e 128B scripts changed batch, flags
and remat). `--configs published` (the default) builds each row from the
script and `base.yml` of the MaxText commit it was published with (v5p and
v5e: 76bd53b0, 2023-12-15, the first to put each table beside its
scripts; v5e's numbers were printed in October 2023 with the scripts of
`MaxText/configs/largest_job/`, which set the same; v4: the commits of
March and April 2023 that printed its numbers, `HISTORY`), kept in
`maxtext-published-configs.json` (`--read-history` writes it from a clone
of MaxText's repository). The 2023 settings are given to MaxText 0.2.5 by
their names of today (`PUBLISHED_NAMES`); its train step, layers and
sharding rules are today's. `--configs installed`
builds the scripts 0.2.5 installs instead. `--add-flags='--xla_...'`
adds libtpu flags to every row's own: a what-if, headed as not the
programs published.

Each row compiles in a process of its own (libtpu reads the row's flags
when it loads), at most `--timeout` seconds (default 600). A row whose
config does not compile as published (libtpu refuses one of its flags, the
step does not fit in HBM, the compile runs past the limit) is printed with
the reason; nothing is tuned to make it fit.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import re
import shlex
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
STEP_DIR = os.path.join(HERE, "programs")
# This folder's maxtext.py would hide MaxText's package.
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != HERE]
PUBLISHED_CONFIGS = os.path.join(HERE, "maxtext-published-configs.json")
# Where each published row's config is read in MaxText's repository: the
# commit and script that printed the row's table. v5p's and v5e's tables
# are built from the first commit to put each table beside its own folder
# of scripts; v4's numbers were printed in March and April 2023, measured
# with sequences of 1,024 tokens (base.yml's then), and the scripts of that
# folder ask for 2,048, which does not fit a v4 chip's HBM at their batch:
# they come from the commits that printed them.
FOLDERS_COMMIT = ("76bd53b0f44caf989c88189afadeb1062f9254f0", "2023-12-15")
HISTORY = {
    "v4/22b": ("281e04bf31557482e2aa6bb870897e7b7be47f38", "2023-04-27",
               "MaxText/configs/1xv4-128.sh"),
    "v4/52b": ("e286533d8cb48d2e07426d73b7bdf79d7f3bc0cf", "2023-03-14",
               "MaxText/configs/1xv4-384.sh"),
}
# What of 2023's base.yml makes the program (the model, its batch, remat,
# attention and mesh), as MaxText 0.2.5 names it; None: the key is gone and
# only its default is accepted. Everything else (steps, paths, metrics,
# the optimizer's hyperparameters) is not part of the compiled step's shape.
PUBLISHED_NAMES = {
    "dtype": "dtype", "global_parameter_scale": "global_parameter_scale",
    "base_emb_dim": "base_emb_dim", "base_num_heads": ("base_num_query_heads",
                                                       "base_num_kv_heads"),
    "base_mlp_dim": "base_mlp_dim", "base_num_decoder_layers": "base_num_decoder_layers",
    "head_dim": "head_dim", "mlp_activations": "mlp_activations",
    "dropout_rate": "dropout_rate", "logits_via_embedding": "logits_via_embedding",
    "remat_policy": "remat_policy", "scan_layers": "scan_layers",
    "param_scan_axis": "param_scan_axis", "attention": "attention",
    "vocab_size": "vocab_size", "per_device_batch_size": "per_device_batch_size",
    "max_target_length": "max_target_length", "use_iota_embed": "use_iota_embed",
    "dcn_data_parallelism": "dcn_data_parallelism",
    "dcn_fsdp_parallelism": "dcn_fsdp_parallelism",
    "dcn_sequence_parallelism": "dcn_sequence_parallelism",
    "dcn_tensor_parallelism": "dcn_tensor_parallelism",
    "ici_data_parallelism": "ici_data_parallelism",
    "ici_fsdp_parallelism": "ici_fsdp_parallelism",
    "ici_sequence_parallelism": "ici_sequence_parallelism",
    "ici_tensor_parallelism": "ici_tensor_parallelism",
    "int8_training": None,
}
# Early 2023's `scale` multiplied these four; today's name for it,
# global_parameter_scale, rotates them.
SCALED = ("base_emb_dim", "base_num_heads", "base_mlp_dim", "base_num_decoder_layers")
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
        return _settings_of(f.read(), path)


def _settings_of(text: str, name: str) -> tuple[list[str], str]:
    """`script_config` of a script's text: its trainer is MaxText 0.2.5's
    module (`python3 -m maxtext...`) or 2023's `python3 MaxText/train.py`."""
    text = text.replace("\\\n", " ")
    flags, settings = "", None
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("export LIBTPU_INIT_ARGS="):
            flags = shlex.split(line)[1].split("=", 1)[1]
        elif line.startswith(("python3 -m maxtext", "python3 MaxText/train.py")) \
                and settings is None:
            words = shlex.split(line)
            after = next(i for i, w in enumerate(words) if w.endswith("base.yml"))
            settings = [w for w in words[after + 1:] if "=" in w and "$" not in w]
    if settings is None:
        raise ValueError(f"{name}: no MaxText command")
    return settings, flags


def read_history(repository: str) -> dict:
    """The published configs, read from a clone of MaxText's repository:
    per script, its commit, settings and flags; per commit, its base.yml's
    program settings."""
    import yaml

    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", repository, *args], check=True,
                              capture_output=True, text=True).stdout
    commit, date = FOLDERS_COMMIT
    sources = {}
    for generation in ("v5p", "v5e"):
        folder = f"MaxText/configs/{generation}/"
        for path in sorted(git("ls-tree", "--name-only", commit, folder).split()):
            if path.endswith(".sh"):
                sources[f"{generation}/{os.path.basename(path)[:-3]}"] = (commit, date, path)
    sources.update(HISTORY)
    bases, scripts = {}, {}
    for key, (commit, date, path) in sources.items():
        if commit not in bases:
            base = yaml.safe_load(git("show", f"{commit}:MaxText/configs/base.yml"))
            bases[commit] = {"date": date, "base": {k: base[k] for k in (*PUBLISHED_NAMES, "scale")
                                                    if k in base}}
        settings, flags = _settings_of(git("show", f"{commit}:{path}"), path)
        scripts[key] = {"commit": commit, "path": path, "settings": settings,
                        "flags": flags}
    return {"repository": "https://github.com/AI-Hypercomputer/maxtext",
            "bases": bases, "scripts": scripts}


@functools.cache
def _published_configs() -> dict:
    with open(PUBLISHED_CONFIGS, encoding="utf-8") as f:
        return json.load(f)


def published_config(generation: str, model: str,
                     slices: int = 1) -> tuple[list[str], str] | None:
    """The MaxText 0.2.5 settings and the flags of a row as published: the
    2023 base.yml's program settings, then its script's, by today's names;
    None where 2023 had no script for it."""
    history = _published_configs()
    script = history["scripts"].get(f"{generation}/{model.lower()}")
    if script is None:
        return None
    given = dict(history["bases"][script["commit"]]["base"])
    for setting in script["settings"]:
        key, value = setting.split("=", 1)
        given[key] = value.strip("'\"")
    scale = int(given.pop("scale", 1))
    for key in SCALED:
        given[key] = int(given[key]) * scale
    given.setdefault("attention", "dot_product")   # before flash attention
    if slices > 1 and int(given.get("dcn_data_parallelism", -1)) == 1:
        # A one-slice script; its commit's scripts for N slices set N.
        given["dcn_data_parallelism"] = slices
    overrides = ["decoder_block=default"]     # 2023's one decoder layer
    for key, value in given.items():
        if key not in PUBLISHED_NAMES:
            continue
        names = PUBLISHED_NAMES[key]
        if names is None:
            if str(value).lower() not in ("false", "0"):
                raise ValueError(f"{key}={value}: MaxText 0.2.5 has no such setting")
            continue
        if isinstance(value, list):
            value = "[" + ",".join(map(str, value)) + "]"
        for name in (names,) if isinstance(names, str) else names:
            overrides.append(f"{name}={value}")
    overrides += ["enable_checkpointing=false", "dataset_type=synthetic"]
    return overrides, script["flags"]


# The TFLOPs a step counted in MaxText's train.py when each table was
# printed (per device: N parameters, B sequences of T tokens, L layers of H
# heads of D): 6NBT in March-April 2023 (v4); 6NBT + 12HLDT^2B from
# October 2023 (v5e's numbers); the attention halved for the causal mask
# by December 2023 (v5p's). MaxText 0.2.5 counts matmuls instead: for
# these models the same 6NBT, its attention halved.
ATTENTION_COUNTED = {"v4": 0.0, "v5e": 1.0, "v5p": 0.5}


def published_count(generation: str, result: dict) -> float:
    """TFLOPs per device of a step as MaxText counted them when the row's
    table was printed."""
    shape = result["shape"]
    tokens = shape["batch"] * shape["length"]
    attention = 12 * shape["heads"] * shape["layers"] * shape["head_dim"] \
        * shape["length"] * tokens
    return (6 * result["params"] * tokens
            + ATTENTION_COUNTED[generation] * attention) / 1e12


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
    os.environ["MAXTEXT_OVERRIDES"] = " ".join(
        row["settings"] + [f"compile_topology={row['slice']}",
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
    import jax
    from flax import nnx
    params = sum(leaf.size for leaf in
                 jax.tree.leaves(shaped_args[0]["model"].filter(nnx.Param)))
    memory = report.get("memory") or {}
    from irshard.hardware import targets
    profile = targets.place(row["target"]).profile
    return {"step": report.get("step"), "tflops_per_device": tflops,
            "params": int(params),
            "shape": {"heads": config.num_query_heads, "layers": config.num_decoder_layers,
                      "head_dim": config.head_dim, "length": config.max_target_length,
                      "batch": config.per_device_batch_size},
            "fits": memory.get("fits"), "over_bytes": memory.get("over_bytes"),
            "peak_flops": profile.peak_flops,
            "clock_hz": report["target"].get("clock_hz"),
            "seconds": time.perf_counter() - start}


def _run(row: dict, timeout: float) -> dict:
    """The row compiled in a process of its own, or why it was not."""
    env = dict(os.environ, LIBTPU_INIT_ARGS=row["flags"], JAX_PLATFORMS="cpu",
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
    parser.add_argument("--configs", choices=("published", "installed"),
                        default="published",
                        help="build each row from the 2023 scripts it was "
                             "published with (default), or from those MaxText "
                             "0.2.5 installs")
    parser.add_argument("--read-history", metavar="REPOSITORY", default=None,
                        help="write maxtext-published-configs.json from a clone "
                             "of MaxText's repository, and stop")
    parser.add_argument("--add-flags", metavar="FLAGS", default="",
                        help="libtpu flags added to each row's own, given as "
                             "--add-flags='--xla_...' (a what-if: the rows "
                             "are then not the programs published)")
    parser.add_argument("--timeout", type=float, default=600.0)
    parser.add_argument("--json", default=None, help="also write the rows here")
    parser.add_argument("--compile-row", default=None, help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.compile_row:
        print(json.dumps(compile_row(json.loads(options.compile_row))))
        return
    if options.read_history:
        # Read whole before the file is touched: a failed read leaves it as it was.
        try:
            history = read_history(options.read_history)
        except (OSError, subprocess.CalledProcessError) as e:
            parser.error(f"--read-history {options.read_history}: "
                         f"{(getattr(e, 'stderr', '') or str(e)).strip().splitlines()[-1]}")
        partial = PUBLISHED_CONFIGS + ".partial"
        with open(partial, "w", encoding="utf-8") as f:
            json.dump(history, f, indent=1)
            f.write("\n")
        os.replace(partial, PUBLISHED_CONFIGS)
        print(f"wrote {PUBLISHED_CONFIGS}")
        return
    rows = [r for g in options.only.split(",") for r in published(g.strip())]
    if options.rows:
        keep = {m.strip().upper() for m in options.rows.split(",")}
        rows = [r for r in rows if r["model"].upper() in keep]
    if options.add_flags:
        print(f"not as published: every row compiled with {options.add_flags} "
              "added to its own flags")
    print(f"{'row':24} {'target':26} {'step':>9} {'TFLOP/s':>8} {'MFU':>6} "
          f"{'published':>9} {'error':>7}  compute (estimate/roofline), "
          f"exposed + overlapped comm, the model's size")
    for row in rows:
        name = f"{row['generation']} {row['model']} {row['slices']}x {row['slice']}"
        row["target"] = target_of(row["slice"], row["slices"])
        chips = int(row["slice"].split("-")[1]) // (1 if row["generation"] in OTHERS else 2)
        config = published_config(row["generation"], row["model"], row["slices"]) \
            if options.configs == "published" else \
            script_config(row["script"]) if row["script"] else None
        if config is None:
            row["result"] = {"error": "no config script for this model"}
        elif chips * row["slices"] > options.max_chips:
            row["result"] = {"error": f"{chips * row['slices']} chips: past --max-chips"}
        else:
            row["settings"], row["flags"] = config
            row["flags"] = " ".join(filter(None, (row["flags"], options.add_flags)))
            row["result"] = _run(row, options.timeout)
        result = row["result"]
        step = (result.get("step") or {}).get("step_s")
        if result.get("error") or not step:
            print(f"{name:24} {row['target']:26} not compiled: "
                  f"{result.get('error', 'no step simulated')}", flush=True)
            continue
        counted = published_count(row["generation"], result) \
            if options.configs == "published" else result["tflops_per_device"]
        row["counted_tflops"] = counted
        tflops = counted / step
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
              f"{s['exposed_comm_s'] * 1e3:.0f} + {s['overlapped_comm_s'] * 1e3:.0f} ms, "
              f"{result['params'] / 1e9:.1f}B parameters{fits}", flush=True)
    errors = sorted(abs(r["error"]) for r in rows if "error" in r)
    if errors:
        print(f"{len(errors)} of {len(rows)} rows compiled: median |error| "
              f"{statistics.median(errors):.1%}, largest {errors[-1]:.1%}")
    if options.json:
        with open(options.json, "w", encoding="utf-8") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
