"""A mutation fuzzer over real HLO and StableHLO modules, run by
tests/test_fuzz_ir.py in a process of its own (an abort in native code must
not take pytest with it).

    python -m tests.fuzz_ir OUTDIR SEED COUNT

Seeds: the optimized HLO and the annotated StableHLO of two examples, and
the HLO files under tests/data. Each mutant is one of: a deleted line, two
tokens swapped, the text cut short, an instruction renamed to another's
name, replica groups or source-target pairs corrupted, a sharding's device
list corrupted, metadata or the StackFrames tables corrupted. Each is run
through an irshard command in this process (`collectives` for HLO; `opt`
with Shardy's propagation or `compile` for StableHLO), under an alarm. One
JSON line per mutant goes to OUTDIR/results.jsonl as it finishes — the
mutant's name before it runs, so that a signal names its mutant.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import random
import re
import signal
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLES = os.path.join(ROOT, "examples")
DATA = os.path.join(ROOT, "tests", "data")
SECONDS = 60          # a mutant that takes longer is a hang

GROUPS = ["{}", "{{}}", "{{0}}", "{{0,0}}", "{{a,b}}", "{{0,1},{2,3}",
          "{{0,1},{1,2}}", "{{0,99}}", "[0,0]<=[0]", "[2,-2]<=[4]",
          "[2,2]<=[2,2]T(2,0)", "[4]<=[5]", "[99999999999]<=[99999999999]",
          "[2,2]<=[4]T(0)", "mesh['x'=4] {'q'}", "mesh['x'=0] {'x'}", ""]
PAIRS = ["{{0}}", "{{0,1,2}}", "{}", "{{a,b}}", "{{0,1},{1,0}", "{{-1,0}}",
         "{{0,1},{0,2}}", "{{0,99}}"]
DEVICES = ["devices=[2,1,2]<=[5]", "devices=[0]<=[0]", "devices=[2,2]<=[4]T(2,0)",
           "devices=[99999999999,1]<=[99999999999]", "devices=[2]0,1,2",
           "devices=[2]0", "devices=[-2]<=[2]", "devices=[]<=[]"]
METADATA = ['source_line=abc', 'source_line=-5', 'stack_frame_id=9999',
            'stack_frame_id=-1', 'source_file=""', 'op_name="\\"', 'source_end_line=0']
TABLES = ["parent_frame_id=9999", "file_location_id=0", "file_location_id=9999",
          "file_name_id=9999", "function_name_id=0", "line=-1", "line=abc"]
SHARDINGS = ['{"q"}', '{"x", "x"}', '{"x":(1)3}', '{?}', '{}, {}, {}, {}, {}',
             '{"x"}p-1', '{"x"}p99999999999999999999']
MESHES = ['"x"=0', '"x"=-1', '"x"=3', '"x"=99999999999', '"x"=4, "x"=4', '']


def seeds(workdir: str) -> list[tuple[str, str]]:
    """(name, text) of the modules mutated: HLO (`.hlo`) and StableHLO
    (`.mlir`), made by irshard from two examples, and tests/data's HLO."""
    from irshard import cli
    made = []
    for name, argv in [
            ("heat", ["compile", os.path.join(EXAMPLES, "heat1d.py"), "--fn",
                      "simulate_roll", "--mesh", "x=4"]),
            ("matmul", ["compile", os.path.join(EXAMPLES, "matmul.py"), "--mesh",
                        "x=2,y=2"])]:
        for stage, ext in (("optimized", "hlo"), ("stablehlo", "mlir")):
            out = io.StringIO()
            with contextlib.redirect_stdout(out):
                assert cli.main(argv + ["--emit", stage]) == 0
            made.append((f"{name}.{ext}", out.getvalue()))
    for f in sorted(os.listdir(DATA)):
        if f.endswith(".hlo"):
            with open(os.path.join(DATA, f), encoding="utf-8") as fh:
                made.append((f, fh.read()))
    return made


_TOKEN = re.compile(r"%[\w.\-]+|\"[^\"\n]*\"|[\w.\-]+|[{}\[\](),=<>:]")


def mutate(text: str, rng: random.Random) -> tuple[str, str]:
    """(what was done, the mutant)."""
    lines = text.split("\n")
    how = rng.choice(["delete", "swap", "truncate", "rename", "groups", "pairs",
                      "devices", "metadata", "tables", "sharding", "mesh"])
    if how == "delete":
        i = rng.randrange(len(lines))
        return f"delete line {i + 1}", "\n".join(lines[:i] + lines[i + 1:])
    if how == "truncate":
        n = rng.randrange(len(text))
        return f"truncate at {n}", text[:n]
    if how == "swap":
        tokens = list(_TOKEN.finditer(text))
        a, b = sorted(rng.sample(range(len(tokens)), 2))
        ta, tb = tokens[a], tokens[b]
        mutant = (text[:ta.start()] + tb.group(0) + text[ta.end():tb.start()]
                  + ta.group(0) + text[tb.end():])
        return f"swap {ta.group(0)!r} and {tb.group(0)!r}", mutant
    if how == "rename":
        names = sorted(set(re.findall(r"^\s*(?:ROOT )?(%[\w.\-]+) =", text, re.M))) \
            or sorted(set(re.findall(r"(%[\w]+) = ", text)))
        if len(names) >= 2:
            a, b = rng.sample(names, 2)
            return f"rename {a} to {b}", re.sub(re.escape(a) + r"(?![\w.\-])", b,
                                                 text, count=1)
    patterns = {
        "groups": (r"replica_groups=(\{[^=]*?\}(?=[,\s])|\[[^\s,]*\](?:<=\[[^\]]*\])"
                   r"(?:T\([^)]*\))?)", "replica_groups=", GROUPS),
        "pairs": (r"source_target_pairs=\{[^=]*?\}(?=[,\s])", "source_target_pairs=", PAIRS),
        "devices": (r"devices=\[[^\]]*\](?:<=\[[^\]]*\](?:T\([^)]*\))?|[\d,]+)",
                    "", DEVICES),
        "metadata": (r"(?:source_line|stack_frame_id|source_file|op_name)=(?:\"[^\"]*\"|\S+?)(?=[\s}])",
                     "", METADATA),
        "tables": (r"(?:parent_frame_id|file_location_id|file_name_id|"
                   r"function_name_id|line)=\d+", "", TABLES),
        "sharding": (r"\{\"[\w]+\"\}", "", SHARDINGS),
        "mesh": (r"\"[\w]+\"=\d+", "", MESHES),
    }
    pattern, prefix, choices = patterns.get(how, patterns["groups"])
    found = list(re.finditer(pattern, text))
    if not found:
        i = rng.randrange(len(lines))
        return f"delete line {i + 1}", "\n".join(lines[:i] + lines[i + 1:])
    m = rng.choice(found)
    new = prefix + rng.choice(choices)
    return f"{how}: {m.group(0)[:40]!r} -> {new!r}", \
        text[:m.start()] + new + text[m.end():]


def run_one(argv: list[str]) -> tuple[int, str]:
    from irshard import cli
    err, out = io.StringIO(), io.StringIO()

    def hang(*_):
        raise TimeoutError
    signal.signal(signal.SIGALRM, hang)
    signal.alarm(SECONDS)
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
            code = cli.main(argv)
    except TimeoutError:
        code, err = -1, io.StringIO(f"hang: over {SECONDS} s")
    except BaseException as e:          # what cli.main let out
        code = -2
        err = io.StringIO(f"escaped {type(e).__name__}: {e}")
    finally:
        signal.alarm(0)
    return code, err.getvalue()


def main(outdir: str, seed: int, count: int) -> None:
    from irshard import backend
    backend.configure(4, "cpu")
    rng = random.Random(seed)
    modules = seeds(outdir)
    with open(os.path.join(outdir, "results.jsonl"), "w", encoding="utf-8") as log:
        for i in range(count):
            name, text = modules[i % len(modules)]
            how, mutant = mutate(text, rng)
            path = os.path.join(outdir, f"m{i}_{name}")
            with open(path, "w", encoding="utf-8") as f:
                f.write(mutant)
            if name.endswith(".hlo"):
                argv = ["collectives", path]
            elif rng.random() < 0.5:
                argv = ["opt", path, "-p", "sdy-propagation-pipeline", "-o",
                        path + ".out.mlir"]
            else:
                argv = ["compile", path, "-o", path + ".txt"]
            log.write(json.dumps({"mutant": i, "seed": name, "how": how,
                                  "argv": argv}) + "\n")
            log.flush()
            code, err = run_one(argv)
            log.write(json.dumps({"mutant": i, "exit": code, "stderr": err}) + "\n")
            log.flush()


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))
