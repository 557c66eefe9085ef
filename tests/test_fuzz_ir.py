"""Malformed HLO and StableHLO: never a traceback, a signal or a hang — one
`irshard: error:` line (exit 2), or a report.

The cases below were each an abort inside XLA, an internal error (exit 3)
or a silent misreading; the fuzzer (tests/fuzz_ir.py) then throws a fixed
number of seeded mutants of real modules at the readers, in a process of
its own."""

import json
import os
import subprocess
import sys

import pytest

from irshard import cli
from tests.conftest import run_irshard

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

MODULE = """\
HloModule m, entry_computation_layout={(f32[4,8]{1,0})->f32[8,8]{1,0}}, num_partitions=4

%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(%a, %b)
}

ENTRY %main (p: f32[4,8]) -> f32[8,8] {
  %p = f32[4,8]{1,0} parameter(0), sharding={devices=[2,1,2]<=[4] last_tile_dim_replicate}
  %ag = f32[8,8]{1,0} all-gather(%p), channel_id=1, replica_groups=[2,2]<=[4], dimensions={0}, use_global_device_ids=true, metadata={op_name="jit(f)/all_gather" source_file="m.py" source_line=3}
  %ar = f32[8,8]{1,0} all-reduce(%ag), channel_id=2, replica_groups={{0,1},{2,3}}, use_global_device_ids=true, to_apply=%add
  ROOT %cp = f32[8,8]{1,0} collective-permute(%ar), channel_id=3, source_target_pairs={{0,1},{1,0}}
}
"""

LOOP = """\
HloModule loop, entry_computation_layout={(f32[8]{0})->f32[8]{0}}, num_partitions=2

%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(%a, %b)
}

%cond (c: (s32[], f32[8])) -> pred[] {
  %c = (s32[], f32[8]{0}) parameter(0)
  %i = s32[] get-tuple-element(%c), index=0
  %n = s32[] constant(4)
  ROOT %lt = pred[] compare(%i, %n), direction=LT
}

%body (b: (s32[], f32[8])) -> (s32[], f32[8]) {
  %b = (s32[], f32[8]{0}) parameter(0)
  %j = s32[] get-tuple-element(%b), index=0
  %one = s32[] constant(1)
  %next = s32[] add(%j, %one)
  %v = f32[8]{0} get-tuple-element(%b), index=1
  %r = f32[8]{0} all-reduce(%v), channel_id=1, replica_groups={{0,1}}, use_global_device_ids=true, to_apply=%add
  ROOT %t = (s32[], f32[8]{0}) tuple(%next, %r)
}

ENTRY %main (x: f32[8]) -> f32[8] {
  %x = f32[8]{0} parameter(0)
  %zero = s32[] constant(0)
  %init = (s32[], f32[8]{0}) tuple(%zero, %x)
  %w = (s32[], f32[8]{0}) while(%init), condition=%cond, body=%body, backend_config={"known_trip_count":{"n":"TRIPS"}}
  ROOT %out = f32[8]{0} get-tuple-element(%w), index=1
}
"""

CASES = [
    # (module, replaced, replacement, the message's essential part)
    (MODULE, "devices=[2,1,2]<=[4]", "devices=[2,1,2]<=[5]",
     "'[2,1,2]<=[5]': 4 tiles or groups but an iota of 5 devices"),
    (MODULE, "devices=[2,1,2]<=[4] last_tile_dim_replicate", "devices=[0]<=[0]",
     "'[0]<=[0]': every dimension must be at least 1"),
    (MODULE, "devices=[2,1,2]<=[4]", "devices=[99999999999,1,2]<=[199999999998]",
     "more than 16777216 devices"),
    (MODULE, "replica_groups=[2,2]<=[4]", "replica_groups=[0,0]<=[0]",
     "%ag (all-gather): malformed replica_groups='[0,0]<=[0]': every dimension"),
    (MODULE, "replica_groups=[2,2]<=[4]", "replica_groups=[2,-2]<=[4]",
     "%ag (all-gather): malformed replica_groups='[2,-2]<=[4]'"),
    (MODULE, "replica_groups=[2,2]<=[4]", "replica_groups=[2,2]<=[2,2]T(2,0)",
     "T(2,0) is not a permutation of the 2 iota dimensions"),
    (MODULE, "replica_groups={{0,1},{2,3}}", "replica_groups={{0,1},{2,3}",
     "%ar (all-reduce): malformed replica_groups="),
    (MODULE, "replica_groups={{0,1},{2,3}}", "replica_groups={{a,b}}",
     "replica_groups='{{a,b}}': each group must list device ids"),
    (MODULE, "replica_groups={{0,1},{2,3}}", "replica_groups={{}}",
     "replica_groups='{{}}': each group must list device ids"),
    (MODULE, "replica_groups={{0,1},{2,3}}", "replica_groups={{0,1},{1,3}}",
     "a device appears in more than one place"),
    (MODULE, "replica_groups={{0,1},{2,3}}", "replica_groups={{0,1},{2,9}}",
     "device 9 is not among the program's 4 devices"),
    (MODULE, "source_target_pairs={{0,1},{1,0}}", "source_target_pairs={{0}}",
     "%cp (collective-permute): malformed source_target_pairs='{{0}}': entry {0} "
     "is not a pair of device ids"),
    (MODULE, "replica_groups=[2,2]<=[4]", "replica_groups=mesh['x'=4] {'q'}",
     "unknown mesh axis"),
    (LOOP, '"TRIPS"', '"four"', "%w (while): known_trip_count 'four' is not a "
                                "whole number of iterations"),
    (LOOP, '"TRIPS"', "-3", "known_trip_count '-3' is not a whole number"),
]


@pytest.mark.parametrize("module, old, new, message", CASES)
def test_malformed_hlo_is_one_error_line(module, old, new, message, tmp_path):
    # Each of these once aborted the process or exited 3: a process apart.
    path = tmp_path / "m.hlo"
    assert old in module
    path.write_text(module.replace(old, new))
    for fmt in ("text", "html"):
        done = run_irshard("collectives", str(path), "--format", fmt)
        assert done.returncode == 2, done.stderr[-2000:]
        assert done.stdout == ""
        assert done.stderr.startswith("irshard: error: ")
        assert done.stderr.count("\n") == 1, done.stderr
        assert message in done.stderr


def test_a_parameter_number_out_of_range_never_reaches_xla(tmp_path):
    # XLA's parser CHECK-fails on it (the scan, which reads no parameter
    # numbers of a reduction, reports the module).
    path = tmp_path / "m.hlo"
    path.write_text(MODULE.replace("%b = f32[] parameter(1)",
                                   "%b = f32[] parameter(2)"))
    code = ("import sys\nfrom irshard.xla.hlo import HloModuleView\n"
            "try:\n    HloModuleView.from_text(open(sys.argv[1]).read())\n"
            "except ValueError as e:\n    print(e)\n")
    done = subprocess.run([sys.executable, "-c", code, str(path)],
                          capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout == "computation %add has 2 parameters but a parameter(2)\n"


def test_the_unmutated_modules_read(tmp_path, capsys):
    path = tmp_path / "m.hlo"
    path.write_text(MODULE)
    assert cli.main(["collectives", str(path), "--format", "json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert [c["group_size"] for c in report["collectives"]] == [2, 2, 2]
    path.write_text(LOOP.replace('"TRIPS"', '"4"'))
    assert cli.main(["collectives", str(path), "--format", "json"]) == 0
    (c,) = json.loads(capsys.readouterr().out)["collectives"]
    assert c["executions"] == 4


def test_the_same_guard_stands_before_xla_in_a_dump_of_a_diff(tmp_path):
    good, bad = tmp_path / "a.hlo", tmp_path / "b.hlo"
    good.write_text(MODULE)
    bad.write_text(MODULE.replace("devices=[2,1,2]<=[4]", "devices=[2,1,2]<=[5]"))
    done = run_irshard("diff", str(good), str(bad))
    assert done.returncode == 2 and done.stderr.count("\n") == 1
    assert "4 tiles or groups but an iota of 5 devices" in done.stderr


@pytest.mark.slow
def test_mutants_of_real_modules(tmp_path):
    """1500 seeded mutants of the optimized HLO and annotated StableHLO of two
    examples and of tests/data's HLO, through `collectives`, `opt` and
    `compile`: each exits 0 or 2, and 2 is one error line (a message from
    XLA or MLIR follows it indented)."""
    count = 1500
    done = subprocess.run([sys.executable, "-m", "tests.fuzz_ir", str(tmp_path),
                           "0", str(count)], cwd=ROOT, capture_output=True,
                          text=True, timeout=900)
    rows = [json.loads(line) for line in
            (tmp_path / "results.jsonl").read_text().splitlines()]
    mutants = {r["mutant"]: r for r in rows if "how" in r}
    results = {r["mutant"]: r for r in rows if "exit" in r}
    unfinished = [mutants[i] for i in mutants if i not in results]
    assert done.returncode == 0 and not unfinished, \
        (done.returncode, unfinished, done.stderr[-3000:])
    assert len(results) == count
    wrong = []
    for i, r in results.items():
        lines = r["stderr"].splitlines()
        if r["exit"] == 0:
            continue
        if r["exit"] != 2 or not lines or not lines[0].startswith("irshard: error: ") \
                or any(line and not line.startswith("  ") for line in lines[1:]):
            wrong.append((mutants[i]["how"], mutants[i]["argv"][0], r))
    assert not wrong, wrong[:5]
    # The mutants reach the readers: both outcomes are common.
    exits = [r["exit"] for r in results.values()]
    assert exits.count(0) > count // 5 and exits.count(2) > count // 5
