"""The collective report of large HLO modules against XLA's parse of them.

Generates optimized-HLO modules of about 100k, 300k and 1M lines at two
densities, or reads the dumps given on the command line:

  - sparse: an unrolled stack of layers, each with fused elementwise work,
    an all-gather, a reduce-scatter and an all-reduce, plus a loop of
    collective-permutes (about 47k collectives per million lines);
  - dense: two collectives in every nine instructions, half of the module
    one `while` body (a training step whose unrolled model sits inside a
    loop over microbatches; about 222k collectives per million lines);

every instruction with metadata and a stack frame, as JAX's modules have,
and times as whole processes:

  - `irshard collectives FILE` (the whole report, as text and as JSON), and
  - XLA's own parser reading the same text (`hlo_module_from_text`),

printing for each size the seconds, their ratios, seconds per million lines
and each process's peak memory, beside the file's size; and the report's
own memory: the peak less that of the same command on a module of a few
lines (the interpreter and irshard's code), over the file's size.

Then `irshard compile`'s report of a dense program (a training step whose
unrolled layers sit in a loop over microbatches, with its gradient), in one
process: after JAX's lower and compile, the report of the optimized module
(collectives, the simulated step; text and JSON written) against XLA's
parse of that module's text, and the report's peak Python memory against
the text's size.

    python benchmarks/large_modules.py
    python benchmarks/large_modules.py --lines 100000,1000000 --runs 3
    python benchmarks/large_modules.py --density dense --layers 0
    python benchmarks/large_modules.py path/to/module.after_optimizations.txt
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

_FRAMES = 24          # stack frames in the tables, cycled through


def _tables() -> list[str]:
    lines = ["FileNames"]
    lines += [f'{i} "/home/user/model/layers_{i}.py"' for i in range(1, 5)]
    lines += ['5 "/site-packages/jax/_src/numpy/lax_numpy.py"', "",
              "FunctionNames"]
    lines += [f'{i} "block_{i}"' for i in range(1, _FRAMES + 1)]
    lines += ["", "FileLocations"]
    lines += [f"{i} {{file_name_id={1 + i % 4} function_name_id={i} "
              f"line={10 + 3 * i} end_line={10 + 3 * i} column=4 end_column=40}}"
              for i in range(1, _FRAMES + 1)]
    lines += ["", "StackFrames"]
    lines += [f"{i} {{file_location_id={i} parent_frame_id={i}}}"
              for i in range(1, _FRAMES + 1)]
    return lines + [""]


def _meta(op: str, i: int) -> str:
    return (f'metadata={{op_name="jit(train_step)/jit(main)/transformer/'
            f'layer_{i}/{op}" stack_frame_id={1 + i % _FRAMES}}}')


_ELEMENTWISE = ("add", "multiply", "subtract", "maximum", "minimum")


def generate(lines: int, path: str) -> int:
    """Writes a module of about `lines` lines to `path`; returns the count."""
    layer_lines = 2 * 24 + 16        # a fused computation and the entry's part
    layers = max(1, lines // layer_lines)
    shape, full = "f32[64,1024]{1,0}", "f32[512,1024]{1,0}"
    out: list[str] = [
        "HloModule jit_train_step, is_scheduled=true, entry_computation_layout="
        "{(f32[64,1024]{1,0})->f32[64,1024]{1,0}}, num_partitions=8", ""]
    out += _tables()
    out += ["%add_f32 (x: f32[], y: f32[]) -> f32[] {",
            "  %x = f32[] parameter(0)", "  %y = f32[] parameter(1)",
            "  ROOT %sum = f32[] add(%x, %y)", "}", ""]
    # A loop of collective-permutes (the ring of a pipelined layer).
    out += ["%ring_cond (c: (s32[], f32[64,1024])) -> pred[] {",
            "  %c = (s32[], f32[64,1024]{1,0}) parameter(0)",
            "  %ci = s32[] get-tuple-element(%c), index=0",
            "  %climit = s32[] constant(7)",
            "  ROOT %clt = pred[] compare(%ci, %climit), direction=LT", "}", "",
            "%ring_body (b: (s32[], f32[64,1024])) -> (s32[], f32[64,1024]) {",
            "  %b = (s32[], f32[64,1024]{1,0}) parameter(0)",
            "  %bi = s32[] get-tuple-element(%b), index=0",
            "  %bone = s32[] constant(1)",
            "  %bnext = s32[] add(%bi, %bone)",
            "  %bv = f32[64,1024]{1,0} get-tuple-element(%b), index=1",
            f"  %perm = {shape} collective-permute(%bv), channel_id=1, "
            "source_target_pairs={{0,1},{1,2},{2,3},{3,4},{4,5},{5,6},{6,7},{7,0}}, "
            + _meta("ppermute", 0),
            "  ROOT %bt = (s32[], f32[64,1024]{1,0}) tuple(%bnext, %perm)", "}", ""]
    for i in range(layers):
        out.append(f"%fused_computation.{i} (param_0.{i}: f32[512,1024], "
                   f"param_1.{i}: f32[512,1024]) -> f32[512,1024] {{")
        out.append(f"  %param_0.{i} = {full} parameter(0)")
        out.append(f"  %param_1.{i} = {full} parameter(1)")
        previous = f"param_0.{i}"
        for k in range(44):
            op = _ELEMENTWISE[k % len(_ELEMENTWISE)]
            out.append(f"  %{op}.{i}.{k} = {full} {op}(%{previous}, %param_1.{i}), "
                       + _meta(f"{op}_{k}", i))
            previous = f"{op}.{i}.{k}"
        out.append(f"  ROOT %tanh.{i} = {full} tanh(%{previous}), " + _meta("tanh", i))
        out.append("}")
        out.append("")
    out.append("ENTRY %main (p: f32[64,1024]) -> f32[64,1024] {")
    out.append(f"  %p = {shape} parameter(0), sharding={{devices=[8,1]<=[8]}}, "
               'metadata={op_name="params/w"}')
    x = "p"
    channel = 2
    for i in range(layers):
        out.append(f"  %all-gather.{i} = {full} all-gather(%{x}), channel_id={channel}, "
                   "replica_groups=[1,8]<=[8], dimensions={0}, "
                   "use_global_device_ids=true, " + _meta("all_gather", i))
        out.append(f"  %copy.{i} = {full} copy(%all-gather.{i}), " + _meta("copy", i))
        out.append(f"  %fusion.{i} = {full} fusion(%all-gather.{i}, %copy.{i}), "
                   f"kind=kLoop, calls=%fused_computation.{i}, " + _meta("mlp", i))
        out.append(f"  %reduce-scatter.{i} = {shape} reduce-scatter(%fusion.{i}), "
                   f"channel_id={channel + 1}, replica_groups=[1,8]<=[8], "
                   "dimensions={0}, use_global_device_ids=true, to_apply=%add_f32, "
                   + _meta("reduce_scatter", i))
        out.append(f"  %all-reduce.{i} = {shape} all-reduce(%reduce-scatter.{i}), "
                   f"channel_id={channel + 2}, replica_groups=[2,4]<=[8], "
                   "use_global_device_ids=true, to_apply=%add_f32, "
                   + _meta("psum", i))
        for k in range(11):
            out.append(f"  %bitcast.{i}.{k} = {shape} bitcast(%all-reduce.{i}), "
                       + _meta(f"reshape_{k}", i))
        x = f"bitcast.{i}.10"
        channel += 3
    out += ["  %zero = s32[] constant(0)",
            f"  %init = (s32[], f32[64,1024]{{1,0}}) tuple(%zero, %{x})",
            "  %ring = (s32[], f32[64,1024]{1,0}) while(%init), condition=%ring_cond, "
            'body=%ring_body, backend_config={"known_trip_count":{"n":"7"}}',
            f"  ROOT %out = {shape} get-tuple-element(%ring), index=1", "}", ""]
    with open(path, "w") as f:
        f.write("\n".join(out))
    return len(out)


def generate_dense(lines: int, path: str) -> int:
    """Writes a dense module of about `lines` lines to `path`: two
    collectives in every nine instructions, half of the module one `while`
    body (a training step whose unrolled model sits inside a loop over
    microbatches), the other half the entry's. Returns the line count."""
    unit = 9                              # instructions per two collectives
    units = max(2, (lines - 40) // unit)
    in_loop = units // 2
    shape, full = "f32[64,1024]{1,0}", "f32[512,1024]{1,0}"
    state = "(s32[], f32[64,1024]{1,0})"
    out: list[str] = [
        "HloModule jit_train_step, is_scheduled=true, entry_computation_layout="
        "{(f32[64,1024]{1,0})->f32[64,1024]{1,0}}, num_partitions=8", ""]
    out += _tables()
    out += ["%add_f32 (x: f32[], y: f32[]) -> f32[] {",
            "  %x = f32[] parameter(0)", "  %y = f32[] parameter(1)",
            "  ROOT %sum = f32[] add(%x, %y)", "}", "",
            "%fused_scale (param_0: f32[512,1024], param_1: f32[512,1024]) "
            "-> f32[512,1024] {",
            f"  %param_0 = {full} parameter(0)",
            f"  %param_1 = {full} parameter(1)",
            f"  ROOT %fma = {full} multiply(%param_0, %param_1)", "}", ""]
    channel = [1]

    def units_of(first: int, count: int, x: str) -> tuple[list[str], str]:
        body: list[str] = []
        for i in range(first, first + count):
            c = channel[0]
            channel[0] += 2
            if i % 2 == 0:
                body.append(f"  %all-gather.{i} = {full} all-gather(%{x}), "
                            f"channel_id={c}, replica_groups=[1,8]<=[8], "
                            "dimensions={0}, use_global_device_ids=true, "
                            + _meta("all_gather", i))
                body.append(f"  %multiply.{i} = {full} multiply(%all-gather.{i}, "
                            f"%all-gather.{i}), " + _meta("mul", i))
                body.append(f"  %fusion.{i} = {full} fusion(%multiply.{i}, "
                            f"%all-gather.{i}), kind=kLoop, calls=%fused_scale, "
                            + _meta("mlp", i))
                body.append(f"  %reduce-scatter.{i} = {shape} reduce-scatter("
                            f"%fusion.{i}), channel_id={c + 1}, replica_groups="
                            "[1,8]<=[8], dimensions={0}, use_global_device_ids="
                            "true, to_apply=%add_f32, " + _meta("reduce_scatter", i))
                last = f"reduce-scatter.{i}"
            else:
                body.append(f"  %all-reduce.{i} = {shape} all-reduce(%{x}), "
                            f"channel_id={c}, replica_groups=[2,4]<=[8], "
                            "use_global_device_ids=true, to_apply=%add_f32, "
                            + _meta("psum", i))
                body.append(f"  %multiply.{i} = {shape} multiply(%all-reduce.{i}, "
                            f"%{x}), " + _meta("mul", i))
                body.append(f"  %negate.{i} = {shape} negate(%multiply.{i}), "
                            + _meta("neg", i))
                body.append(f"  %collective-permute.{i} = {shape} "
                            f"collective-permute(%negate.{i}), channel_id={c + 1}, "
                            "source_target_pairs={{0,1},{1,2},{2,3},{3,4},{4,5},"
                            "{5,6},{6,7},{7,0}}, " + _meta("ppermute", i))
                last = f"collective-permute.{i}"
            body.append(f"  %add.{i} = {shape} add(%{last}, %{x}), " + _meta("add", i))
            for k in range(3):
                body.append(f"  %bitcast.{i}.{k} = {shape} bitcast(%add.{i}), "
                            + _meta(f"reshape_{k}", i))
            body.append(f"  %copy.{i} = {shape} copy(%bitcast.{i}.2), "
                        + _meta("copy", i))
            x = f"copy.{i}"
        return body, x

    body, last = units_of(0, in_loop, "bv")
    out += ["%micro_cond (c: (s32[], f32[64,1024])) -> pred[] {",
            f"  %c = {state} parameter(0)",
            "  %ci = s32[] get-tuple-element(%c), index=0",
            "  %climit = s32[] constant(4)",
            "  ROOT %clt = pred[] compare(%ci, %climit), direction=LT", "}", "",
            "%micro_body (b: (s32[], f32[64,1024])) -> (s32[], f32[64,1024]) {",
            f"  %b = {state} parameter(0)",
            "  %bi = s32[] get-tuple-element(%b), index=0",
            "  %bone = s32[] constant(1)",
            "  %bnext = s32[] add(%bi, %bone)",
            f"  %bv = {shape} get-tuple-element(%b), index=1"]
    out += body
    out += [f"  ROOT %bt = {state} tuple(%bnext, %{last})", "}", ""]
    entry, x = units_of(in_loop, units - in_loop, "p")
    out.append("ENTRY %main (p: f32[64,1024]) -> f32[64,1024] {")
    out.append(f"  %p = {shape} parameter(0), sharding={{devices=[8,1]<=[8]}}, "
               'metadata={op_name="params/w"}')
    out += entry
    out += ["  %zero = s32[] constant(0)",
            f"  %init = {state} tuple(%zero, %{x})",
            f"  %micro = {state} while(%init), condition=%micro_cond, "
            'body=%micro_body, backend_config={"known_trip_count":{"n":"4"}}',
            f"  ROOT %out = {shape} get-tuple-element(%micro), index=1", "}", ""]
    with open(path, "w") as f:
        f.write("\n".join(out))
    return len(out)


_GENERATORS = {"sparse": "generate", "dense": "generate_dense"}


def _generate_quietly(density: str, lines: int, path: str) -> None:
    """`generate` (or `generate_dense`) in a process of its own: a child's
    peak memory starts at its parent's, and the module's lines must not
    count in the parent."""
    code = ("import sys; sys.path.insert(0, sys.argv[1]); import large_modules; "
            f"large_modules.{_GENERATORS[density]}(int(sys.argv[2]), sys.argv[3])")
    subprocess.run([sys.executable, "-c", code, os.path.dirname(
        os.path.abspath(__file__)), str(lines), path], check=True)


def _xla_parse_command(path: str) -> list[str]:
    code = ("import sys\n"
            "from irshard import backend\n"
            "with open(sys.argv[1]) as f:\n"
            "    backend.hlo_module_from_text(f.read())\n")
    return [sys.executable, "-c", code, path]


def _measure(command: list[str]) -> tuple[float, int]:
    """Wall seconds and peak resident memory (bytes) of one process."""
    start = time.perf_counter()
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, cwd=ROOT)
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - start
    err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
    proc.stderr.close()
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"failed ({proc.returncode}): {' '.join(command)}\n{err}")
    return seconds, usage.ru_maxrss * 1024


def _baseline(tmp: str) -> int:
    """Peak memory of `irshard collectives` on a module of a few lines."""
    path = os.path.join(tmp, "tiny.hlo")
    generate_dense(200, path)
    peak = max(_measure([sys.executable, "-m", "irshard", "collectives", path,
                         "--format", fmt])[1] for fmt in ("text", "json"))
    os.remove(path)
    return peak


def _row(label: str, path: str, runs: int, baseline: int) -> None:
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        lines = sum(1 for _ in f)
    base = [sys.executable, "-m", "irshard", "collectives", path]
    commands = {"text": base, "json": base + ["--format", "json"],
                "xla": _xla_parse_command(path)}
    for command in commands.values():
        _measure(command)                         # warm the page cache
    measured: dict[str, list[tuple[float, int]]] = {k: [] for k in commands}
    for _ in range(runs):
        for key, command in commands.items():
            measured[key].append(_measure(command))
    t = {k: statistics.median(s for s, _ in v) for k, v in measured.items()}
    m = {k: max(b for _, b in v) for k, v in measured.items()}
    mib = 1024 * 1024
    collectives = _count_collectives(path)
    print(f"{label:>12} {lines:>9} {collectives:>8} {size / mib:>7.1f} {t['text']:>7.2f} "
          f"{t['json']:>7.2f} {t['xla']:>7.2f} {t['text'] / t['xla']:>6.2f} "
          f"{t['json'] / t['xla']:>6.2f} {t['text'] / lines * 1e6:>8.2f} "
          f"{m['text'] / mib:>7.0f} {m['json'] / mib:>7.0f} {m['xla'] / mib:>7.0f} "
          f"{max(m['text'], m['json']) / size:>8.2f} "
          f"{(max(m['text'], m['json']) - baseline) / size:>8.2f}")


# A training step whose unrolled layers sit in a loop over microbatches,
# each weight sharded over the mesh (an all-gather a layer, its gradient's
# reduce-scatter).
DENSE_PROGRAM = """
import jax
import jax.numpy as jnp

LAYERS = {layers}


def step(params, batch):
    def micro(i, acc):
        h = batch[i]
        for w in params:
            h = jnp.tanh(h @ w)
        return acc + jnp.sum(h)
    return jax.lax.fori_loop(0, batch.shape[0], micro, 0.0)


def example_args():
    return ([jax.ShapeDtypeStruct((256, 256), jnp.float32)] * LAYERS,
            jax.ShapeDtypeStruct((4, 64, 256), jnp.float32))
"""

# Compiles the program as `irshard compile` does, then times the report and
# XLA's parse of the module the report reads; prints one JSON line.
_COMPILE_REPORT = """
import json, os, statistics, sys, time, tracemalloc
os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=4"
from irshard import backend, frontend
from irshard.stages import output
path, runs = sys.argv[1], int(sys.argv[2])
source = frontend.Source(path, mesh="x=4", fn="step", args_fn="example_args",
                         shards=("params/*=x,_", "batch=_,x,_"), grad=("params",))
lowered = frontend.load(source)
_, compiled = output.emit(lowered, [], "optimized", False)
text = compiled.as_text()


def report():
    found = output.report(lowered, compiled, "optimized", False)
    for fmt in ("text", "json"):
        for _ in output.ReportOutput(found, compiled).render(fmt):
            pass
    return found


def xla():
    backend.hlo_module_from_text(text)


found = report()                                   # each warmed once
xla()
seconds = {"report": [], "xla": []}
for _ in range(runs):
    for what in (report, xla):
        start = time.perf_counter()
        what()
        seconds[what.__name__].append(time.perf_counter() - start)
times = {k: statistics.median(v) for k, v in seconds.items()}
tracemalloc.start()
report()
peak = tracemalloc.get_traced_memory()[1]
print(json.dumps({"lines": text.count(chr(10)), "bytes": len(text),
                  "collectives": len(found.collectives), "peak": peak, **times}))
"""


def _compile_row(layers: int, tmp: str, runs: int) -> None:
    import json
    path = os.path.join(tmp, f"dense_program_{layers}.py")
    with open(path, "w") as f:
        f.write(DENSE_PROGRAM.format(layers=layers))
    done = subprocess.run([sys.executable, "-c", _COMPILE_REPORT, path, str(runs)],
                          capture_output=True, text=True, cwd=ROOT)
    if done.returncode != 0:
        raise SystemExit(f"compiling {layers} layers failed:\n{done.stderr}")
    r = json.loads(done.stdout.strip().splitlines()[-1])
    mib = 1024 * 1024
    print(f"{layers:>7} {r['lines']:>8} {r['collectives']:>7} {r['bytes'] / mib:>6.1f} "
          f"{r['report']:>7.2f} {r['xla']:>6.2f} {r['report'] / r['xla']:>6.2f} "
          f"{r['peak'] / mib:>6.1f} {r['peak'] / r['bytes']:>8.2f}")


def _count_collectives(path: str) -> int:
    pattern = re.compile(rb" (?:all-gather|all-reduce|reduce-scatter|all-to-all"
                         rb"|collective-permute)(?:-start)?\(")
    with open(path, "rb") as f:
        return sum(len(pattern.findall(line)) for line in f)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dumps", nargs="*", help="HLO text files to time as well")
    parser.add_argument("--lines", default="100000,300000,1000000",
                        help="sizes of the generated modules (default %(default)s)")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--density", default="sparse,dense",
                        help="which generated modules (default %(default)s)")
    parser.add_argument("--layers", default="64,256",
                        help="unrolled layers of the dense programs compiled "
                             "(default %(default)s; 0: none)")
    args = parser.parse_args()
    sizes = {}
    for option in ("lines", "layers"):
        text = getattr(args, option)
        try:
            sizes[option] = [int(x) for x in text.split(",") if x]
        except ValueError:
            parser.error(f"--{option} {text}: give whole numbers separated by commas")
    print(f"runs: {args.runs} of each, in turn, whole processes; seconds are "
          "medians, memory the peak resident set (MiB)")
    print("text, json: irshard collectives FILE [--format json]; xla: XLA's "
          "parser reading FILE; ratios against xla")
    print("mem/file: the larger peak (text or json) over the file's size; "
          "own/file: that peak less an empty report's, over the file's size")
    with tempfile.TemporaryDirectory(prefix="irshard-bench-") as tmp:
        baseline = _baseline(tmp)
        print(f"an empty report's peak: {baseline / 2**20:.0f} MiB")
        print(f"{'module':>12} {'lines':>9} {'colls':>8} {'MiB':>7} {'text':>7} "
              f"{'json':>7} {'xla':>7} {'ratio':>6} {'json':>6} {'s/Mline':>8} "
              f"{'mem':>7} {'json':>7} {'xla':>7} {'mem/file':>8} {'own/file':>8}")
        for density in (d for d in args.density.split(",") if d):
            if density not in _GENERATORS:
                parser.error(f"--density {density}: give sparse, dense or both")
            for n in sizes["lines"]:
                path = os.path.join(tmp, f"gen_{n}.hlo")
                _generate_quietly(density, n, path)
                _row(f"{n // 1000}k {density}", path, args.runs, baseline)
                os.remove(path)
        for path in args.dumps:
            _row(os.path.basename(path)[:10], path, args.runs, baseline)
        layers = [n for n in sizes["layers"] if n > 0]
        if layers:
            print()
            print("compile's report of a dense program (medians of "
                  f"{args.runs}): report = collectives and the simulated step, "
                  "text and JSON written; xla = XLA's parse of the optimized "
                  "module's text; mem = the report's peak Python memory")
            print(f"{'layers':>7} {'lines':>8} {'colls':>7} {'MiB':>6} {'report':>7} "
                  f"{'xla':>6} {'ratio':>6} {'mem':>6} {'mem/text':>8}")
            for n in layers:
                _compile_row(n, tmp, args.runs)


if __name__ == "__main__":
    main()
