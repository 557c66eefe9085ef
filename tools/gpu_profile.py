"""Writes one GPU's measured compute into irshard/timemodel/profiles.json.

`irshard calibrate --platform gpu --mesh x=1 --format json` times one GPU's
matrix products by size (in its 16-bit type and in f32), an elementwise
op over growing arrays, what each instruction, each result buffer and each
trip of a loop take beyond their work, and the launch of an execution. This
writes those numbers under `gpu-CHIP.compute`, each with its source, so
that a `--target gpu-CHIP:...` step is timed by them rather than by the
chip's peak rates:

    python tools/gpu_profile.py [--from CALIBRATION.json] [--chip h200]
                                [--machine "one NVIDIA H200, jax 0.11.2"]

Without `--from` it runs the calibration on the GPU present; without
`--chip` it names the chip by `nvidia-smi`.
"""

import argparse
import datetime
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROFILES = os.path.join(ROOT, "irshard", "timemodel", "profiles.json")
CHIPS = ("h100", "h200", "b200")

# What each number measured (computerates.measure_compute, its GPU plan).
MEASURED = {
    "flops": "the largest matrix product in its 16-bit type (the side 8192)",
    "flops_by_size": "matrix products in the 16-bit type of sides 256 to 8192, "
                     "small ones 64 or fewer in a row, [FLOPs of one, FLOP/s]",
    "flops_f32": "the largest matrix product in f32 at default precision",
    "flops_f32_by_size": "matrix products in f32 of sides 256 to 8192, [FLOPs "
                         "of one, FLOP/s]",
    "bandwidth": "an elementwise op with a fresh result, [bytes read and "
                 "written, bytes/s] (smaller arrays take the smallest's rate)",
    "op_overhead": "64 tiny products, each followed by a tanh, per instruction",
    "output": "33 results against 1, less the instructions' own time, per result",
    "loop_trip": "loops of 110 and 10 trips around one elementwise op, less "
                 "the instructions' own time, per trip",
    "launch": "the median execution of x + 1",
}


def detected_chip() -> str:
    done = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                          capture_output=True, text=True)
    name = done.stdout.lower()
    chip = next((c for c in CHIPS if c in name), None)
    if done.returncode != 0 or chip is None:
        raise SystemExit(f"gpu_profile: no {', '.join(CHIPS)} found; give --chip")
    return chip


def calibrated() -> dict:
    done = subprocess.run([sys.executable, "-m", "irshard", "calibrate", "--platform",
                           "gpu", "--mesh", "x=1", "--format", "json"], cwd=ROOT,
                          capture_output=True, text=True, check=True)
    return json.loads(done.stdout)


def entry(compute: dict, machine: str, day: str) -> dict:
    """The profile's `compute`: each measured number with its source."""
    where = f"measured by irshard calibrate --platform gpu --mesh x=1 on {day} " \
            f"({machine}; programs run whole, launch taken off)"
    found = {"devices": {"value": 1, "source": where}}
    if compute.get("flops_dtype"):
        found["flops_dtype"] = {"value": compute["flops_dtype"], "source": where}
    for key, what in MEASURED.items():
        if key in compute:
            found[key] = {"value": compute[key], "source": f"{where}: {what}"}
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--from", dest="source", metavar="PATH",
                        help="a calibration's JSON (irshard calibrate --format json)")
    parser.add_argument("--chip", choices=CHIPS)
    parser.add_argument("--machine", default="one GPU",
                        help="what was measured, for the sources")
    parser.add_argument("--date", default=datetime.date.today().isoformat())
    args = parser.parse_args()
    if args.source:
        with open(args.source, encoding="utf-8") as f:
            result = json.load(f)
    else:
        result = calibrated()
    if result.get("platform") != "gpu" or not result.get("compute"):
        raise SystemExit("gpu_profile: give a calibration of --platform gpu")
    chip = args.chip or detected_chip()
    with open(PROFILES, encoding="utf-8") as f:
        data = json.load(f)
    data["profiles"][f"gpu-{chip}"]["compute"] = entry(result["compute"],
                                                      args.machine, args.date)
    with open(PROFILES, "w", encoding="utf-8") as f:
        f.write(json.dumps(data, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
