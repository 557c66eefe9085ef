"""What irshard adds to JAX's own lower + compile, on real steps, phase by
phase, in CPU time.

Each step is the framework's own jitted object with its own arguments:

  - flax: the Flax NNX guide's sharded step (data=2, model=4)
  - equinox: an Equinox `filter_jit` step (batch=4)
  - keras: a Keras `fit` step under `ModelParallel` (batch=2, model=2)
  - penzai: a Penzai `StatefulTrainer` step (data=4)
  - gpt24: a 24-layer GPT train step (fsdp=4, tp=2)
  - maxtext-cpu, maxtext-tpu: MaxText's train step on the CPU mesh and for
    a v5e-16 slice (only where MaxText is installed, see maxtext.py)

and each is compiled four ways, each way in a process of its own, the ways
interleaved round after round:

  - plain: `step.lower(*args).compile()` (`fit`'s step: Keras builds it
    first, as `fit` does);
  - compile: `irshard.compile(step, *args, mesh=...)`;
  - report: `irshard.report(step.lower(*args))`;
  - command: `irshard compile FILE --fn ... --args ...`, the whole process,
    against a plain script's whole process; both less the start-up they
    share (the interpreter, JAX, the framework and the step's file imported,
    its arguments made), measured on its own.

For the API ways the time is the call's, with the irshard modules it
imports (their import is also shown apart). Times are CPU time of the whole
process (XLA's compile threads included) and wall time, medians of
`--runs`. Then irshard's extra CPU time by phase (`irshard.core.phases`):
the trace and XLA's compile less plain JAX's own, and each phase plain JAX
does not have.

    python benchmarks/overhead.py                       # every step, 5 runs
    python benchmarks/overhead.py --steps flax,gpt24 --runs 3
    .venv-maxtext/bin/python benchmarks/overhead.py --steps maxtext-cpu
"""

from __future__ import annotations

import argparse
import functools
import importlib
import importlib.util
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
FRAMEWORKS = os.path.join(ROOT, "tests", "programs", "frameworks")

# name: (file, --fn, --args, mesh, extra command flags, modules it needs)
STEPS = {
    "flax": (os.path.join(FRAMEWORKS, "flax_nnx_guide.py"), "train_step", "args",
             "data=2,model=4", (), ("flax", "optax")),
    "equinox": (os.path.join(FRAMEWORKS, "equinox_step.py"), "make_step", "args",
                "batch=4", (), ("equinox", "optax")),
    "keras": (os.path.join(FRAMEWORKS, "keras_fit.py"), "model", "batch",
              "batch=2,model=2", ("--keras-fit",), ("keras",)),
    "penzai": (os.path.join(FRAMEWORKS, "penzai_trainer.py"), "step_fn", "args",
               "data=4", (), ("penzai", "optax")),
    "gpt24": (os.path.join(HERE, "programs", "gpt24.py"), "step", "args",
              "fsdp=4,tp=2", (), ()),
    "maxtext-cpu": (os.path.join(HERE, "programs", "maxtext_step.py"), "step",
                    "args", None, ("--context", "context"), ("maxtext",)),
    "maxtext-tpu": (os.path.join(HERE, "programs", "maxtext_step.py"), "step",
                    "args", None, ("--context", "context",
                                   "--target", "tpu-v5e:4x4"),
                    ("maxtext", "libtpu")),
}
WAYS = ("plain", "compile", "report", "command")
# What the report's CPU time is held to (the command's: start-up excluded).
GOALS = {"compile": 1.05, "report": 1.05, "command": 1.10}

# The irshard modules a compile and its report import, imported (and timed)
# before the call in the API ways; the child says which it imported beyond.
IRSHARD_MODULES = (
    "irshard.api", "irshard.library", "irshard.stages.staged",
    "irshard.stages.output", "irshard.frontend", "irshard.loading.program",
    "irshard.collectives.analysis", "irshard.collectives.memory",
    "irshard.timemodel.schedule", "irshard.reporting.report",
    "irshard.ir.annotation", "irshard.core.matching", "irshard.reporting.budget",
    "irshard.running.distributed")


# ---------------------------------------------------------------------------
# One measurement, in a process of its own (`--child STEP WAY`)

def _environment(step: str) -> None:
    mesh = _mesh_text(step)
    devices = 1
    for part in mesh.split(","):
        devices *= int(part.split("=")[1])
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_force_"
                               f"host_platform_device_count={devices}").strip()
    if step == "maxtext-cpu":
        os.environ["MAXTEXT_PLATFORM"] = "cpu"
    if step != "maxtext-tpu":
        os.environ.setdefault("JAX_PLATFORMS", "cpu")
    os.environ.setdefault("KERAS_BACKEND", "jax")


@functools.cache
def _mesh_text(step: str) -> str:
    mesh = STEPS[step][3]
    if mesh is None:                        # MaxText's: its topology's
        env = dict(os.environ)
        if step == "maxtext-cpu":
            env["MAXTEXT_PLATFORM"] = "cpu"
        mesh = subprocess.run([sys.executable, STEPS[step][0], "--mesh"],
                              capture_output=True, text=True, check=True,
                              env=env).stdout.strip().splitlines()[-1]
    return mesh


def _loaded(step: str):
    """The step's module, the jitted object, its arguments and the context
    its lowering needs."""
    import contextlib
    path, fn, args_fn, *_ = STEPS[step]
    sys.path.insert(0, os.path.dirname(path))
    module = importlib.import_module(os.path.splitext(os.path.basename(path))[0])
    args = getattr(module, args_fn)
    args = args() if callable(args) else args
    context = getattr(module, "context", None) if step.startswith("maxtext") \
        else None
    if step == "flax":
        import jax
        mesh = args[0].dot1.kernel.value.sharding.mesh
        context = lambda: jax.set_mesh(mesh)  # noqa: E731
    return module, getattr(module, fn), tuple(args), context or contextlib.nullcontext


def _plain(step: str, fn, args, context) -> dict:
    """Plain JAX's lower + compile: CPU and wall seconds, and the CPU
    seconds of each."""
    cpu, wall = time.process_time(), time.perf_counter()
    if step == "keras":
        fn, args = _keras_step(fn, args)
    with context():
        lowered = fn.lower(*args)
    lowering = time.process_time() - cpu
    lowered.compile()
    total = time.process_time() - cpu
    return {"cpu": total, "wall": time.perf_counter() - wall,
            "lower": lowering, "compile": total - lowering}


def _keras_step(model, batch):
    """The jitted step `fit` runs and its arguments, as `fit` builds them."""
    from keras.src.backend.jax import trainer
    data = trainer._distribute_data((*batch, None))
    model._symbolic_build(data_batch=data)
    model.make_train_function(force=True)
    state = model._get_jax_state(trainable_variables=True,
                                 non_trainable_variables=True,
                                 optimizer_variables=True,
                                 metrics_variables=True,
                                 purge_model_variables=False)
    from irshard.loading.kerasfit import _jitted_in
    return _jitted_in(model.train_function), (state, data)


def child(step: str, way: str) -> dict:
    _environment(step)
    # This folder's maxtext.py would hide MaxText's package.
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != HERE]
    sys.path.insert(0, ROOT)
    if way == "startup":
        _loaded(step)
        return {}
    _, fn, args, context = _loaded(step)
    if way == "plain":
        return _plain(step, fn, args, context)
    cpu, wall = time.process_time(), time.perf_counter()
    for name in IRSHARD_MODULES:
        importlib.import_module(name)
    imports = time.process_time() - cpu
    before = {m for m in sys.modules if m.startswith("irshard")}
    import irshard
    from irshard.core import phases
    mesh = _mesh_text(step)
    target = "tpu-v5e:4x4" if step == "maxtext-tpu" else None
    with phases.recording() as spent:
        if way == "compile":
            with context():
                irshard.compile(fn, *args, mesh=mesh, target=target,
                                keras_fit=step == "keras")
        else:
            # As plain JAX's is timed: Keras' building of its step included.
            with phases.phase("JAX trace and lower"), context():
                if step == "keras":
                    fn, args = _keras_step(fn, args)
                lowered = fn.lower(*args)
            irshard.report(lowered, mesh=mesh, target=target)
    late = sorted({m for m in sys.modules if m.startswith("irshard")} - before)
    return {"cpu": time.process_time() - cpu, "wall": time.perf_counter() - wall,
            "imports": imports, "late_imports": late,
            "phases": {k: v[:2] for k, v in spent.items()}}


# ---------------------------------------------------------------------------
# The parent: the processes, interleaved, and the tables

def _process(command: list[str], env: dict | None = None) -> tuple[float, float, str]:
    """(CPU seconds, wall seconds, stdout) of one process that must succeed."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"overhead: {' '.join(command)} failed:\n{done.stderr}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu, wall, done.stdout


def _measure(step: str, way: str) -> dict:
    me = [sys.executable, os.path.abspath(__file__), "--child", step]
    if way in ("plain", "compile", "report"):
        _, _, out = _process(me + [way])
        return json.loads(out.strip().splitlines()[-1])
    if way == "startup":
        cpu, wall, _ = _process(me + ["startup"])
        return {"cpu": cpu, "wall": wall}
    if way == "plain-process":
        cpu, wall, _ = _process(me + ["plain"])
        return {"cpu": cpu, "wall": wall}
    path, fn, args_fn, _, flags, _ = STEPS[step]
    with tempfile.NamedTemporaryFile(suffix=".phases", delete=False) as f:
        record = f.name
    env = dict(os.environ, IRSHARD_PHASES=record, PYTHONPATH=ROOT)
    if step == "maxtext-cpu":
        env["MAXTEXT_PLATFORM"] = "cpu"
    try:
        cpu, wall, _ = _process(
            [sys.executable, "-m", "irshard", "compile", path, "--fn", fn,
             "--args", args_fn, "--mesh", _mesh_text(step), *flags,
             "--output", os.devnull], env)
        spent = {}
        with open(record, encoding="utf-8") as f:
            for line in f:
                name, c, w = line.rstrip("\n").split("\t")
                spent[name] = [float(c), float(w)]
    finally:
        os.unlink(record)
    return {"cpu": cpu, "wall": wall, "phases": spent}


def _available(step: str) -> str | None:
    """Why `step` cannot run here, or None."""
    for module in STEPS[step][5]:
        try:
            found = importlib.util.find_spec(module)
        except (ImportError, ValueError):
            found = None
        if found is None:
            return f"{module} is not installed"
    return None


def _median(runs: list[dict], key: str) -> float:
    return statistics.median(r[key] for r in runs)


def _phases(runs: list[dict]) -> dict[str, float]:
    names = {n for r in runs for n in r.get("phases", {})}
    return {n: statistics.median(r.get("phases", {}).get(n, [0.0, 0.0])[0]
                                 for r in runs) for n in names}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", default=",".join(
        s for s in STEPS if not s.startswith("maxtext")) + ",maxtext-cpu,maxtext-tpu",
        help="comma-separated: " + ", ".join(STEPS))
    parser.add_argument("--ways", default=",".join(WAYS))
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--child", nargs=2, metavar=("STEP", "WAY"),
                        help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(*args.child)))
        return
    steps = [s for s in args.steps.split(",") if s]
    # Every way is a ratio to plain JAX's, which is always measured.
    ways = ["plain"] + [w for w in args.ways.split(",") if w and w != "plain"]
    for name in steps + ways:
        if name not in STEPS and name not in WAYS:
            raise SystemExit(f"overhead: unknown step or way '{name}'")
    kept = []
    for step in steps:
        why = _available(step)
        if why:
            print(f"{step}: skipped ({why})")
        else:
            kept.append(step)
    measured = {(s, w): [] for s in kept
                for w in ways + (["startup", "plain-process"]
                                 if "command" in ways else [])}
    for step in kept:                               # warm the file caches
        _measure(step, "plain")
    for _ in range(args.runs):
        for step in kept:
            for way in measured:
                if way[0] == step:
                    measured[way].append(_measure(step, way[1]))
    _print(kept, ways, measured, args.runs)


def _print(steps, ways, measured, runs) -> None:
    print(f"\nCPU time (s) and wall time (s), median of {runs} runs, each in "
          f"its own process, ways interleaved; {os.cpu_count()} cores")
    print(f"{'step':<12} {'way':<8} {'plain cpu':>9} {'irshard cpu':>11} "
          f"{'ratio':>6} {'goal':>5} {'wall ratio':>10}  note")
    for step in steps:
        plain = measured[(step, "plain")]
        for way in ways:
            if way == "plain":
                continue
            ours = measured[(step, way)]
            if way == "command":
                start = _median(measured[(step, "startup")], "cpu")
                whole = _median(measured[(step, "plain-process")], "cpu")
                mine = _median(ours, "cpu")
                note = f"whole processes {mine / whole:.3f}x; start-up " \
                       f"{start:.2f} s excluded"
                wall = _median(ours, "wall") / _median(
                    measured[(step, "plain-process")], "wall")
                base, mine = whole - start, mine - start
                if base < 0.5:
                    # Less than the start-up's own spread between runs.
                    print(f"{step:<12} {way:<8} {whole:9.2f} {mine + start:11.2f} "
                          f"{'n/a':>6} {GOALS[way]:5.2f} {wall:10.3f}  "
                          f"{note} leaves too little to compare")
                    continue
            else:
                base, mine = _median(plain, "cpu"), _median(ours, "cpu")
                wall = _median(ours, "wall") / _median(plain, "wall")
                imports = _median(ours, "imports")
                late = sorted({m for r in ours for m in r.get("late_imports", ())})
                note = f"irshard imports {imports:.2f} s, {(mine - imports) / base:.3f}x " \
                       f"without them" + (f" (+{len(late)} modules during the call)"
                                          if late else "")
            ratio = mine / base
            flag = "" if ratio <= GOALS[way] else " over"
            print(f"{step:<12} {way:<8} {base:9.2f} {mine:11.2f} {ratio:6.3f} "
                  f"{GOALS[way]:5.2f} {wall:10.3f}  {note}{flag}")
    print("\nirshard's extra CPU time by phase (s, median): JAX's trace and "
          "XLA's compile less plain JAX's own; `other`: the rest of the "
          "call (set-up, imports during it, assembling the report)")
    for step in steps:
        plain = measured[(step, "plain")]
        own = {"JAX trace and lower": _median(plain, "lower"),
               "XLA compile": _median(plain, "compile")}
        for way in ways:
            if way in ("plain", "command"):
                continue
            ours = measured[(step, way)]
            spent = _phases(ours)
            extra = {name: seconds - own.get(name, 0.0)
                     for name, seconds in spent.items()}
            extra["irshard imports"] = _median(ours, "imports")
            extra["other"] = _median(ours, "cpu") - sum(spent.values()) \
                - extra["irshard imports"]
            parts = ", ".join(f"{name} {seconds:+.3f}" for name, seconds in
                              sorted(extra.items(), key=lambda kv: -kv[1])
                              if abs(seconds) >= 0.0005)
            print(f"{step:<12} {way:<8} {parts}")


if __name__ == "__main__":
    main()
