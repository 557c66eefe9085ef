"""A compile JAX's persistent compilation cache already holds: irshard's
against plain JAX's.

A user who turned on JAX's cache (`JAX_COMPILATION_CACHE_DIR`, as
MaxText does by default) recompiles an unchanged step in a fraction of the
first compile. This times, each in a fresh process with the cache warm:

  - plain JAX: `step.lower(*args).compile()` of the step's own jitted
    object (after its arguments are made), and
  - irshard: `irshard.compile(step, *args, mesh=...)` of the same object —
    lowering, the cached executable and the whole report,
  - and `irshard compile FILE` as a command, whole, beside the same
    process with nothing but the imports and the arguments (its start-up),

and prints the medians and their ratio (the goal: irshard within 1.3x of
plain JAX's cached compile). The step: a stack of `--layers` dense layers
with a data- and model-sharded MLP block each, jitted with its parameters'
and batch's NamedShardings, its gradient and an SGD update.

    python benchmarks/cached_compile.py
    python benchmarks/cached_compile.py --layers 48 --runs 5
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

PROGRAM = textwrap.dedent("""\
    import functools
    import os

    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding, PartitionSpec as P

    LAYERS = int(os.environ.get("LAYERS", "24"))


    def loss(params, x):
        for w_in, w_out in params:
            x = x + jnp.tanh(x @ w_in) @ w_out
        return jnp.mean(x ** 2)


    @functools.partial(jax.jit, donate_argnums=0)
    def step(params, x):
        grads = jax.grad(loss)(params, x)
        return jax.tree.map(lambda p, g: p - 0.01 * g, params, grads)


    def args():
        mesh = jax.make_mesh((2, 2), ("data", "model"),
                             axis_types=(jax.sharding.AxisType.Auto,) * 2)
        col, row = NamedSharding(mesh, P(None, "model")), NamedSharding(mesh, P("model", None))
        params = [(jax.device_put(jnp.ones((256, 1024)), col),
                   jax.device_put(jnp.ones((1024, 256)), row)) for _ in range(LAYERS)]
        x = jax.device_put(jnp.ones((64, 256)), NamedSharding(mesh, P("data", None)))
        return params, x
    """)

TIMED = textwrap.dedent("""\
    import json, sys, time
    sys.path.insert(0, sys.argv[1])
    which = sys.argv[2]
    if which == "irshard":
        import irshard
        irshard.configure(devices=4)
    else:
        import os
        os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=4"
    import step_program
    args = step_program.args()
    start = time.perf_counter()
    if which == "irshard":
        report = irshard.compile(step_program.step, *args, mesh="data=2,model=2")
        notes = list(report.notes)
    elif which == "jax":
        step_program.step.lower(*args).compile()
        notes = []
    else:
        notes = []
    print(json.dumps({"seconds": time.perf_counter() - start, "notes": notes}))
    """)


def _run(argv, env) -> tuple[float, dict]:
    import time
    start = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=ROOT)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        sys.exit(f"cached_compile.py: {' '.join(argv[:3])} failed:\n{done.stderr}")
    last = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else "{}"
    try:
        return wall, json.loads(last)
    except json.JSONDecodeError:
        return wall, {}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=24)
    parser.add_argument("--runs", type=int, default=3)
    options = parser.parse_args()
    if options.layers < 1 or options.runs < 1:
        parser.error("--layers and --runs must be positive")
    work = tempfile.mkdtemp(prefix="irshard-cached-compile-")
    try:
        with open(os.path.join(work, "step_program.py"), "w") as f:
            f.write(PROGRAM)
        with open(os.path.join(work, "timed.py"), "w") as f:
            f.write(TIMED)
        results = {}
        for which in ("jax", "irshard", "command"):
            cache = os.path.join(work, f"cache-{which}")
            env = dict(os.environ, JAX_COMPILATION_CACHE_DIR=cache,
                       JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0",
                       JAX_PLATFORMS="cpu", LAYERS=str(options.layers),
                       PYTHONPATH=ROOT)
            if which == "command":
                argv = [sys.executable, "-m", "irshard", "compile",
                        os.path.join(work, "step_program.py"), "--fn", "step",
                        "--args", "args", "--mesh", "data=2,model=2",
                        "--format", "json", "-o", os.path.join(work, "r.json")]
                base = [sys.executable, os.path.join(work, "timed.py"), work, "none"]
            else:
                argv = [sys.executable, os.path.join(work, "timed.py"), work, which]
            cold = _run(argv, env)
            warm = [_run(argv, env) for _ in range(options.runs)]
            entry = {"cold": cold, "warm": warm}
            if which == "command":
                entry["start"] = [_run(base, env)[0] for _ in range(options.runs)]
                with open(os.path.join(work, "r.json")) as f:
                    entry["notes"] = json.load(f).get("notes", [])
            results[which] = entry

        def inside(which, runs):
            return statistics.median(r[1]["seconds"] for r in runs)

        jax_cold = results["jax"]["cold"][1]["seconds"]
        jax_warm = inside("jax", results["jax"]["warm"])
        ir_cold = results["irshard"]["cold"][1]["seconds"]
        ir_warm = inside("irshard", results["irshard"]["warm"])
        command = results["command"]
        cmd_warm = statistics.median(w for w, _ in command["warm"])
        cmd_start = statistics.median(command["start"])
        print(f"step: {options.layers} layers, data=2,model=2 on 4 CPU devices; "
              f"medians of {options.runs} warm runs, each a fresh process")
        print(f"{'':32} {'cold':>9} {'warm':>9}")
        print(f"{'plain JAX lower+compile':32} {jax_cold:8.3f}s {jax_warm:8.3f}s")
        print(f"{'irshard.compile (report too)':32} {ir_cold:8.3f}s {ir_warm:8.3f}s")
        print(f"{'irshard compile, whole command':32} {command['cold'][0]:8.3f}s "
              f"{cmd_warm:8.3f}s  (start-up and arguments {cmd_start:.3f}s)")
        print(f"irshard.compile / plain JAX, warm: {ir_warm / jax_warm:.2f}x")
        print(f"command less its start-up / plain JAX, warm: "
              f"{(cmd_warm - cmd_start) / jax_warm:.2f}x")
        print("notes of the last irshard.compile: "
              + "; ".join(results["irshard"]["warm"][-1][1]["notes"]))
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
