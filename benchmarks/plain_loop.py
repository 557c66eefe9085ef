"""A program's step as plain JAX times it: `jax.jit(f)` called in a loop.

Given the arguments of an `irshard run` command, this loads the same
function (irshard's loader: the function the command names, its gradient
with `--grad`), gives it the shardings irshard's compile gives its inputs
and outputs and the program's donation, and calls the jitted function in a
loop as a training loop does: a donated input the jitted executable writes
an output over is that output of the call before. It prints the median and
minimum seconds per call as JSON (each call blocked on, after warm-up
calls), which `benchmarks/timemodel.py` sets beside `irshard run --repeat`.

    python benchmarks/plain_loop.py --repeat 20 -- examples/mlp.py --mesh dp=2,tp=2 --grad

With `--interleave` it also times each step as `irshard run --repeat` does
(irshard's executable of the same program, its donated inputs fed back as
`running.execution` feeds them), one irshard call after each plain call in
the same process, and prints both medians and their ratio: this machine's
process-to-process noise (the scheduling of the device threads on its
cores) is then shared by both instead of told apart as a difference.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
# This folder's modules would hide packages of the same name (maxtext.py).
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != HERE]
sys.path.insert(0, ROOT)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--interleave", action="store_true",
                        help="time irshard's execution of the same program "
                             "after each plain call, in this process")
    parser.add_argument("command", nargs=argparse.REMAINDER,
                        help="after --: the arguments of irshard run")
    options = parser.parse_args()
    command = options.command[1:] if options.command[:1] == ["--"] else options.command

    from irshard import cli, commands
    from irshard.backend.compiling import _aliases
    from irshard.stages import placing

    args = cli.build_parser().parse_args(["run", *command])
    lowered = commands._load(commands._source(args))   # sets up the devices
    compiled = lowered.compile()
    ins, outs = placing.placed(compiled)

    import jax
    import numpy as np
    rng = np.random.default_rng(0)

    def value(decl):
        """Random values as irshard run draws them: normal for floating
        point, small integers (valid indices) otherwise."""
        if decl.dtype.is_float:
            data = rng.standard_normal(decl.shape)
        else:
            data = rng.integers(0, 2, decl.shape)
        return jax.numpy.asarray(data, dtype=decl.dtype.numpy
                                 if decl.dtype.name != "bf16" else jax.numpy.bfloat16)

    arguments = [jax.device_put(value(t.decl), t.sharding) for t in ins]
    donated = tuple(i for i, d in enumerate(lowered.info.inputs) if d.donated)
    step = jax.jit(lowered.function, in_shardings=tuple(t.sharding for t in ins),
                   out_shardings=jax.tree_util.tree_unflatten(
                       lowered.out_tree, [t.sharding for t in outs]),
                   donate_argnums=donated)
    executable = step.lower(*arguments).compile()
    aliases = _aliases(executable.runtime_executable().hlo_modules()[0]
                       .as_serialized_hlo_module_proto()) if donated else {}
    fresh = [i for i in donated if i not in aliases.values()]

    def next_arguments(given, results):
        given = list(given)
        leaves = jax.tree_util.tree_leaves(results)
        for o, p in aliases.items():
            given[p] = leaves[o]
        for i in fresh:
            given[i] = jax.device_put(value(ins[i].decl), ins[i].sharding)
        return given

    ours = _irshard_runs(compiled.compiled, lowered.info, ins, outs, value) \
        if options.interleave else None
    given = arguments
    times, theirs = [], []
    for n in range(options.warmup + options.repeat):
        start = time.perf_counter()
        results = executable(*given)
        jax.block_until_ready(results)
        if n >= options.warmup:
            times.append(time.perf_counter() - start)
        given = next_arguments(given, results)
        if ours is not None:
            seconds = ours()
            if n >= options.warmup:
                theirs.append(seconds)
    found = {"median_s": statistics.median(times), "min_s": min(times),
             "runs": len(times)}
    if theirs:
        found.update(irshard_median_s=statistics.median(theirs),
                     irshard_min_s=min(theirs),
                     ratio=statistics.median(theirs) / statistics.median(times))
    print(json.dumps(found))
    return 0


def _irshard_runs(compiled, info, ins, outs, value):
    """One timed execution of irshard's executable a call, as `irshard run
    --repeat` times it (`running.execution`): its arguments made before the
    clock starts, a donated input the run before's aliased output."""
    import jax

    from irshard import backend
    from irshard.running.execution import _steady

    def fresh():
        return [jax.device_put(value(t.decl), t.sharding) for t in ins]

    arguments = _steady(compiled, fresh, info, outs)
    state = {"results": None}

    def run() -> float:
        given = arguments(state["results"])
        backend.block_until_ready(given)
        start = time.perf_counter()
        results = backend.execute(compiled, given, timed=True)
        backend.block_until_ready([a for arrays in results for a in arrays])
        state["results"] = results
        return time.perf_counter() - start
    return run


if __name__ == "__main__":
    sys.exit(main())
