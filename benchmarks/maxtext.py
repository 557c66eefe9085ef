"""MaxText's train step, compiled as its `train_compile.py` compiles it,
through irshard and through plain JAX, compared.

MaxText is too heavy for the test suite (Python >= 3.12, its own
requirements); this runs in an environment of its own:

    python3.12 -m venv .venv-maxtext
    .venv-maxtext/bin/pip install -e '.[tpu]' -r benchmarks/maxtext-requirements.txt
    .venv-maxtext/bin/pip install --no-deps maxtext==0.2.5
    .venv-maxtext/bin/python benchmarks/maxtext.py [--target tpu-v5e:4x4]

The step (`benchmarks/programs/maxtext_step.py`: MaxText's own base config with
`MAXTEXT_OVERRIDES`, a small model for v5e-16 by default) is lowered under
the mesh and logical axis rules `train_compile.py` uses, then:

  - plain JAX: `lowered.compile()` for the TPU topology (libtpu, no TPU),
    its collectives read from its HLO by irshard's reader, its
    `memory_analysis()`;
  - `irshard.report(lowered)`: the Lowered the user already has;
  - `irshard.compile(step, *args, context=...)`: the jitted step itself;
  - `irshard compile benchmarks/programs/maxtext_step.py --fn step --args args
    --context context`: the command line;

and prints, for each, the collectives by kind, bytes and wire bytes a run,
donated inputs, outputs, XLA's memory figures and the seconds it took, and
whether each equals plain JAX's (on the CPU, bytes aside: irshard counts
a bf16 collective at bf16, where the CPU backend's HLO widens it to f32).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
# The step's module lives apart: this file's own name would hide MaxText's
# package from a module beside it.
STEP = os.path.join(HERE, "programs", "maxtext_step.py")


def _plain(step, shaped_args, shaped_kwargs, context) -> dict:
    from irshard.collectives import dumps
    start = time.perf_counter()
    with context():
        lowered = step.lower(*shaped_args, **shaped_kwargs)
    compiled = lowered.compile()
    seconds = time.perf_counter() - start
    with tempfile.TemporaryDirectory(prefix="irshard-maxtext-") as work:
        path = os.path.join(work, "train_step.hlo")
        with open(path, "w") as f:
            f.write(compiled.as_text())
        (report,), _ = dumps.reports(path, "optimized", None)
    memory = compiled.memory_analysis()
    import jax
    return {"totals": report.totals(),
            "donated": sum(bool(a.donated) for a in
                           jax.tree_util.tree_leaves(lowered.args_info)),
            "outputs": len(jax.tree_util.tree_leaves(lowered.out_info)),
            "memory": {"argument_bytes": memory.argument_size_in_bytes,
                       "output_bytes": memory.output_size_in_bytes,
                       "temp_bytes": memory.temp_size_in_bytes},
            "alias_bytes": memory.alias_size_in_bytes,
            "peak_memory_in_bytes": memory.peak_memory_in_bytes,
            "seconds": seconds}


def _of(report_json: dict, seconds: float) -> dict:
    memory = report_json.get("memory", {})
    return {"totals": report_json["totals"],
            "donated": sum(bool(i.get("donated")) for i in report_json["inputs"]),
            "outputs": len(report_json["outputs"]),
            "memory": {k: memory.get(k) for k in
                       ("argument_bytes", "output_bytes", "temp_bytes")},
            "peak": memory.get("peak"), "inputs": report_json["inputs"],
            "seconds": seconds}


_BYTES = {"f32": 4, "s32": 4, "i32": 4, "u32": 4, "bf16": 2, "f16": 2,
          "s8": 1, "u8": 1, "i8": 1, "pred": 1, "f64": 8, "s64": 8, "u64": 8}


def _peak_lines(plain: dict, row: dict) -> list[str]:
    """The memory peak read from XLA's buffer assignment, against XLA's own
    figures, and its parameters and optimizer state against the sharded
    input leaves' local sizes."""
    peak = row.get("peak")
    if not peak:
        return ["memory peak: not read"]
    m = plain["memory"]
    analysed = m["argument_bytes"] + m["output_bytes"] + m["temp_bytes"] \
        - plain["alias_bytes"]
    kinds = peak["by_kind"]
    held = kinds.get("parameter", 0) + kinds.get("optimizer-state", 0)
    local = 0
    for t in row["inputs"]:
        from irshard.collectives.memory import input_kind
        if input_kind(t["name"], bool(t.get("donated"))) in ("parameter", "optimizer-state"):
            n = _BYTES.get(t["dtype"], 4)
            for d in t["local_shape"]:
                n *= d
            local += n
    gib = 2 ** 30
    return [
        f"memory peak (XLA's buffer assignment): {peak['bytes'] / gib:.3f} GiB; "
        f"memory_analysis arguments + outputs + temp - alias: {analysed / gib:.3f} GiB; "
        f"peak_memory_in_bytes: {plain['peak_memory_in_bytes'] / gib:.3f} GiB",
        "  by kind: " + ", ".join(f"{k} {v / gib:.3f} GiB" for k, v in kinds.items()),
        f"  parameters + optimizer state at the peak {held} bytes; their input "
        f"leaves' local sizes {local} bytes ({100 * (held - local) / max(local, 1):+.2f}%: "
        f"the allocations' padding to the device's tiles)",
        f"  arguments at the peak {sum(v for k, v in kinds.items() if k in ('parameter', 'optimizer-state', 'argument', 'donated'))} "
        f"bytes; memory_analysis arguments {m['argument_bytes']} bytes"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", default="tpu-v5e:4x4",
                        help="irshard's target for the config's "
                             "compile_topology (default tpu-v5e:4x4, v5e-16), "
                             "or 'cpu': the same mesh on 16 simulated CPU "
                             "devices")
    options = parser.parse_args()
    target = None if options.target == "cpu" else options.target
    if target is None:
        os.environ["MAXTEXT_PLATFORM"] = "cpu"
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != HERE]
    sys.path.insert(0, os.path.dirname(STEP))
    import irshard
    if target is None:
        irshard.configure(devices=16)
    import maxtext_step
    step, shaped_args, shaped_kwargs, context, mesh, _ = maxtext_step.step_and_args()
    spec = maxtext_step.mesh_spec()
    rows = {"plain JAX": _plain(step, shaped_args, shaped_kwargs, context)}

    start = time.perf_counter()
    with context():
        lowered = step.lower(*shaped_args, **shaped_kwargs)
    report = irshard.report(lowered, target=target)
    rows["irshard.report(lowered)"] = _of(report.to_json(),
                                          time.perf_counter() - start)

    start = time.perf_counter()
    report = irshard.compile(step, *shaped_args, mesh=mesh, target=target,
                             context=context)
    rows["irshard.compile(step)"] = _of(report.to_json(),
                                        time.perf_counter() - start)

    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "irshard", "compile",
         STEP, "--fn", "step", "--args", "args",
         "--context", "context", "--mesh", spec, "--format", "json",
         *(["--target", target] if target else [])],
        capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"maxtext.py: irshard compile failed:\n{done.stderr}")
    rows["irshard compile (command)"] = _of(json.loads(done.stdout),
                                            time.perf_counter() - start)

    plain = rows["plain JAX"]
    print(f"MaxText train step, mesh {spec}, target {options.target}")
    print(f"{'':28} {'collectives':>11} {'bytes/run':>12} {'wire/run':>12} "
          f"{'donated':>7} {'outputs':>7} {'args MiB':>9} {'temp MiB':>9} "
          f"{'seconds':>8}  same as plain JAX")
    for name, row in rows.items():
        totals, memory = row["totals"], row["memory"]
        compared = ("count", "by_kind") if target is None else \
            ("count", "by_kind", "bytes_per_run", "wire_bytes_per_run")
        same = all(row[k] == plain[k] for k in ("donated", "outputs")) and all(
            totals[k] == plain["totals"][k] for k in compared) and \
            memory == plain["memory"]
        print(f"{name:28} {totals['count']:>11} {totals['bytes_per_run']:>12} "
              f"{totals['wire_bytes_per_run']:>12} {row['donated']:>7} "
              f"{row['outputs']:>7} {memory['argument_bytes'] / 2**20:>9.1f} "
              f"{memory['temp_bytes'] / 2**20:>9.1f} {row['seconds']:>8.1f}  "
              + ("-" if name == "plain JAX" else "yes" if same else "NO"))
    for line in _peak_lines(plain, rows["irshard compile (command)"]):
        print(line)
    print("by kind (plain JAX): " + ", ".join(
        f"{k} {v}" for k, v in sorted(plain["totals"]["by_kind"].items())))
    if target is None:
        print("on the CPU, irshard counts a bf16 collective at the bytes the "
              "program moves (bf16); the CPU backend widens it to f32, and "
              "plain JAX's HLO shows that: bytes are not compared")


if __name__ == "__main__":
    main()
