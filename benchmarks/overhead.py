"""What irshard adds on top of JAX's own lower + compile.

Times, as whole processes, `irshard compile FILE --mesh ... [--grad]` (the
default report) against a plain script that does only
`jax.jit(f, in_shardings=...).lower(...).compile()` for the same function,
mesh and shardings, alternating the two, and prints the median of each and
their ratio. Also times `irshard --help`, which must not import JAX.

    python benchmarks/overhead.py                 # the scanned transformer
    python benchmarks/overhead.py --runs 11
    python benchmarks/overhead.py --file examples/heat1d.py --fn simulate_set \
        --mesh x=4 --no-grad
"""

from __future__ import annotations

import argparse
import ast
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)

from irshard.core.specs import parse_mesh, parse_type  # noqa: E402  (no JAX)
from timing import timed  # noqa: E402

BASELINE = '''
import os, sys
os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count={devices}"
os.environ["JAX_PLATFORMS"] = "cpu"
sys.path.insert(0, {directory!r})
import jax
import jax.numpy as jnp
from jax.sharding import AxisType, Mesh, NamedSharding, PartitionSpec as P
import numpy as np
import {module} as user
mesh = Mesh(np.array(jax.devices()[:{devices}]).reshape({shape}), {names},
            axis_types=(AxisType.Auto,) * {rank})
fn = user.{fn}
if {grad}:
    fn = jax.grad(fn, argnums={argnums})
shardings = [NamedSharding(mesh, P(*spec)) for spec in {specs}]
avals = [jax.ShapeDtypeStruct(s, d) for s, d in {avals}]
jax.jit(fn, in_shardings=shardings).lower(*avals).compile()
'''


def baseline_script(path: str, fn: str, mesh_text: str, grad: bool) -> str:
    """A plain JAX script compiling the same function, mesh and shardings."""
    mesh = parse_mesh(mesh_text)
    module = os.path.splitext(os.path.basename(path))[0]
    specs, avals, argnums = [], [], []
    tree = ast.parse(open(path).read())
    func = next(n for n in tree.body
                if isinstance(n, ast.FunctionDef) and n.name == fn)
    for i, arg in enumerate(func.args.args):
        ttype = parse_type(ast.literal_eval(arg.annotation))
        dims = ttype.sharding.dims if ttype.sharding else [None] * ttype.rank
        specs.append(tuple(tuple(d.axes) if d and d.axes else None for d in dims))
        avals.append((ttype.shape, ttype.dtype.numpy))
        if ttype.dtype.is_float:
            argnums.append(i)
    return BASELINE.format(
        devices=mesh.num_devices, directory=os.path.dirname(os.path.abspath(path)),
        module=module, shape=mesh.shape, names=mesh.names, rank=len(mesh.axes),
        fn=fn, grad=grad, argnums=tuple(argnums), specs=specs, avals=avals)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--file", default=os.path.join(HERE, "transformer.py"))
    parser.add_argument("--fn", default="loss")
    parser.add_argument("--mesh", default="dp=2,tp=4")
    parser.add_argument("--no-grad", dest="grad", action="store_false")
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()

    irshard = [sys.executable, "-m", "irshard", "compile", args.file,
               "--fn", args.fn, "--mesh", args.mesh] + (["--grad"] if args.grad else [])
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
        f.write(baseline_script(args.file, args.fn, args.mesh, args.grad))
        baseline = [sys.executable, f.name]
    try:
        timed(irshard), timed(baseline)        # warm the file system caches
        ours, theirs = [], []
        for _ in range(args.runs):
            ours.append(timed(irshard))
            theirs.append(timed(baseline))
        helps = [timed([sys.executable, "-m", "irshard", "--help"])
                 for _ in range(args.runs)]
    finally:
        os.unlink(f.name)

    check = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "irshard", "--help"],
        capture_output=True, text=True, check=True)
    jax_imported = any(line.split("|")[-1].strip() in ("jax", "jaxlib")
                       for line in check.stderr.splitlines())

    print(f"case: {os.path.relpath(args.file)}:{args.fn} --mesh {args.mesh}"
          + (" --grad" if args.grad else ""))
    print(f"runs: {args.runs} of each, alternating, whole processes")
    print(f"irshard compile (report):     median {statistics.median(ours):.3f} s "
          f"(min {min(ours):.3f})")
    print(f"jax.jit(f).lower().compile(): median {statistics.median(theirs):.3f} s "
          f"(min {min(theirs):.3f})")
    print(f"ratio (median): {statistics.median(ours) / statistics.median(theirs):.3f}")
    print(f"irshard --help: median {statistics.median(helps):.3f} s, imports JAX: "
          f"{'yes' if jax_imported else 'no'}")


if __name__ == "__main__":
    main()
