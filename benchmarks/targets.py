"""Compiling for a TPU slice that is not here: irshard against plain JAX.

Times, as whole processes, `irshard compile FILE --target tpu-v5e:16x16 ...`
(the report with times and the HBM verdict) against a plain script that
describes the same slice with `jax.experimental.topologies` and compiles
`jax.jit(f, in_shardings=...)` for it, alternating the two, and prints the
medians and their ratio. Then runs `irshard calibrate` on the simulated CPU
mesh and prints the time model's median error on held-out sizes.

    python benchmarks/targets.py                  # transformer, v5e:16x16
    python benchmarks/targets.py --runs 5 --no-calibrate
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from overhead import baseline_script  # noqa: E402
from timing import timed  # noqa: E402


def tpu_baseline(path: str, fn: str, mesh: str, grad: bool, topology: str) -> str:
    """The plain script, with the mesh laid onto the described slice."""
    script = baseline_script(path, fn, mesh, grad)
    script = script.replace(
        'os.environ["JAX_PLATFORMS"] = "cpu"',
        'os.environ["JAX_PLATFORMS"] = "cpu"\n'
        'os.environ["ALLOW_MULTIPLE_LIBTPU_LOAD"] = "1"')
    start = script.index("mesh = Mesh(")
    end = script.index("\n", script.index("axis_types", start))
    names = mesh_names(mesh)
    shape = tuple(int(a.split("=")[1]) for a in mesh.split(","))
    return (script[:start]
            + "from jax.experimental import topologies\n"
            f"topology = topologies.get_topology_desc(topology_name={topology!r}, "
            "platform='tpu')\n"
            f"mesh = jax.make_mesh({shape}, {names}, devices=topology.devices, "
            f"axis_types=(AxisType.Auto,) * {len(shape)})"
            + script[end:])


def mesh_names(mesh: str) -> tuple[str, ...]:
    return tuple(a.split("=")[0] for a in mesh.split(","))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--file", default=os.path.join(HERE, "transformer.py"))
    parser.add_argument("--fn", default="loss")
    parser.add_argument("--mesh", default="dp=16,tp=16")
    parser.add_argument("--target", default="tpu-v5e:16x16")
    parser.add_argument("--no-grad", dest="grad", action="store_false")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--no-calibrate", dest="calibrate", action="store_false")
    parser.add_argument("--calibrate-mesh", default="x=8")
    args = parser.parse_args()

    topology = args.target.split("-", 1)[1]
    irshard = [sys.executable, "-m", "irshard", "compile", args.file, "--fn",
               args.fn, "--mesh", args.mesh, "--target", args.target] \
        + (["--grad"] if args.grad else [])
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
        f.write(tpu_baseline(args.file, args.fn, args.mesh, args.grad, topology))
        baseline = [sys.executable, f.name]
    try:
        timed(irshard), timed(baseline)
        ours, theirs = [], []
        for _ in range(args.runs):
            ours.append(timed(irshard))
            theirs.append(timed(baseline))
    finally:
        os.unlink(f.name)
    print(f"case: {os.path.relpath(args.file)}:{args.fn} --mesh {args.mesh} "
          f"--target {args.target}" + (" --grad" if args.grad else ""))
    print(f"runs: {args.runs} of each, alternating, whole processes")
    print(f"irshard compile --target:        median {statistics.median(ours):.3f} s "
          f"(min {min(ours):.3f})")
    print(f"jax.jit on the described slice:  median {statistics.median(theirs):.3f} s "
          f"(min {min(theirs):.3f})")
    print(f"ratio (median): {statistics.median(ours) / statistics.median(theirs):.3f}")
    if args.calibrate:
        result = subprocess.run(
            [sys.executable, "-m", "irshard", "calibrate", "--mesh",
             args.calibrate_mesh, "--format", "json"],
            capture_output=True, text=True, check=True)
        found = json.loads(result.stdout)
        host = found["links"]["host"]
        print(f"calibration on --mesh {args.calibrate_mesh} (simulated CPU "
              f"devices): {len(found['measurements'])} measurements; fitted "
              f"bandwidth {host['bandwidth']['value'] / 2 ** 30:.2f} GiB/s, "
              f"latency {host['latency']['value'] * 1e6:.1f} us per step; "
              f"median relative error on {found['held_out']} held-out sizes: "
              f"{found['error']:.1%}")


if __name__ == "__main__":
    main()
