"""A report crosses a process's or a file's edge as JSON and is typed again
on the other side (`CollectiveReport.from_json`): every report irshard
writes reads back to the same value, byte for byte, and a short report
written by hand or by an older irshard reads too."""

import json
import os

import pytest

from irshard import cli
from irshard.reporting.report import CollectiveReport
from irshard.reporting.writer import dumps_json
from tests.conftest import EXAMPLES, require

GPT = [os.path.join(EXAMPLES, "gpt.py"), "--fn", "train_step", "--args",
       "example_args"]
CASES = {
    "loops": [os.path.join(EXAMPLES, "heat1d.py"), "--fn", "simulate_set",
              "--mesh", "x=4", "--explain"],
    "findings": [os.path.join(EXAMPLES, "remat.py"), "--mesh", "x=4,y=2",
                 "--explain"],
    "explained model": [*GPT, "--mesh", "fsdp=4,tp=2", "--shard", "**/embed=fsdp,_",
                        "--shard", "**/w*=fsdp,tp", "--explain"],
    "budgets": [*GPT, "--mesh", "fsdp=8", "--shard", "**/w*=fsdp,_",
                "--budget", "all-gather<=1", "--budget", "peak<=1GiB"],
    "estimated target": [*GPT, "--mesh", "fsdp=8", "--shard", "**/w*=fsdp,_",
                         "--target", "gpu-h100:1x8"],
    "partitioned": [os.path.join(EXAMPLES, "matmul.py"), "--mesh", "x=2,y=2",
                    "--stage", "partitioned"],
}


def _written(capsys, argv) -> str:
    code = cli.main(["compile", *argv, "--format", "json"])
    out, err = capsys.readouterr()
    assert code in (0, 1), err
    return out


def _round_trip(written: str) -> CollectiveReport:
    back = CollectiveReport.from_json(json.loads(written))
    assert dumps_json(back.to_json()) + "\n" == written
    return back


@pytest.mark.parametrize("case", sorted(CASES))
def test_every_report_reads_back_byte_for_byte(capsys, case):
    back = _round_trip(_written(capsys, CASES[case]))
    assert back.collectives
    if case == "findings":
        assert back.findings and all(c.why for c in back.collectives)
    if case == "budgets":
        assert back.budgets and not all(b.passed for b in back.budgets)
        assert back.memory.peak.buffers


@pytest.mark.tpu
def test_a_tpu_report_reads_back(capsys):
    require("libtpu", "TPU targets")
    back = _round_trip(_written(capsys, [*GPT, "--mesh", "fsdp=8", "--target",
                                         "tpu-v5e:2x4"]))
    assert back.target.kind == "tpu" and back.memory.capacity_bytes


def test_a_short_report_reads_with_what_it_says():
    """What `irshard diff` takes: a report with only what its schema
    requires (an older irshard's, one written by hand)."""
    back = CollectiveReport.from_json({
        "collectives": [{"name": "ag", "kind": "all-gather", "bytes": 64,
                         "executions": 3, "source": {"file": "m.py", "line": 4}}],
        "totals": {"count": 1}})
    (c,) = back.collectives
    assert (c.kind, c.bytes, c.executions, c.source.line) == ("all-gather", 64, 3, 4)
    assert back.totals()["bytes_per_run"] == 192 and back.memory is None
