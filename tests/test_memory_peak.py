"""The memory peak: XLA's buffer assignment and live ranges read from its
dumps (every form in tests/data/buffers: CPU and TPU, both JAX versions),
broken down by what holds each buffer, summed against XLA's own figures."""

import json
import os

import pytest

from irshard.collectives import memory
from irshard.core import schema
from irshard.core.errors import SpecError
from irshard.reporting import budget, peak as peak_text
from irshard.reporting.cells import human_bytes
from irshard.xla import buffers
from tests.conftest import EXAMPLES, ROOT, run_irshard

DATA = os.path.join(ROOT, "tests", "data", "buffers")
DUMPS = sorted(name[:-5] for name in os.listdir(DATA) if name.endswith(".json"))


def _dump(name):
    def read(suffix):
        with open(os.path.join(DATA, f"{name}{suffix}")) as f:
            return f.read()
    return read("-buffer-assignment.txt"), read("-live-range.txt"), \
        json.loads(read(".json"))


class _Input:
    """An entry parameter as the report's TensorInfo names it."""

    def __init__(self, name, donated=False):
        self.name, self.donated = name, donated
        self.dtype, self.local_shape = "f32", (1,)


# The step in every dump: grad of tanh(x @ w1) @ w2, w1 donated.
INPUTS = [_Input("params/w1", donated=True), _Input("params/w2"),
          _Input("batch/x")]


def test_every_dump_form_is_read():
    assert {d.split("-jax")[0] for d in DUMPS} == {"cpu", "tpu-v5e"}
    for name in DUMPS:
        assignment, ranges, figures = _dump(name)
        allocations = buffers.parse_assignment(assignment)
        main = [a for a in allocations if a.color == 0]
        params = sorted(a.parameter for a in main if a.parameter is not None)
        assert params == [0, 1, 2], name
        # The allocations XLA counts as arguments are the ones read here.
        assert sum(a.size for a in main if a.parameter is not None) == \
            figures["argument_size_in_bytes"], name
        outputs = sum(a.size for a in main if a.live_out)
        assert outputs == figures["output_size_in_bytes"], name
        live = buffers.parse_live_ranges(ranges)
        assert live.sequence and live.ranges, name
        # Every value the assignment places has a live range in the schedule
        # (but a reduction's own scalars, which live in thread-local scratch).
        values = [v for a in allocations if not a.thread_local for v in a.values]
        assert values and all(v.key in live.ranges for v in values), name
        first, last = min(r[0] for r in live.ranges.values()), \
            max(r[1] for r in live.ranges.values())
        assert 0 <= first and last <= len(live.sequence), name


@pytest.mark.parametrize("name", DUMPS)
def test_the_peak_sums_to_xla_s_figures(name):
    assignment, ranges, figures = _dump(name)
    found = memory.peak(assignment, ranges, INPUTS)
    assert found.bytes == sum(b.bytes for b in found.buffers)
    assert {b.kind for b in found.buffers} <= set(peak_text.KINDS)
    kinds = found.by_kind()
    # Inputs by their paths: the donated w1 is a parameter all the same.
    assert kinds["parameter"] == figures["argument_size_in_bytes"] - 128 * 512 * 4 // 4
    assert kinds["argument"] == 128 * 512 * 4 // 4            # batch/x's shard
    # Results not written over a donated input.
    assert kinds["output"] == figures["output_size_in_bytes"] - figures["alias_size_in_bytes"]
    # The whole footprint is what XLA's own memory usage report totals for
    # the device's main memory.
    assert found.bytes == figures["memory_usage_report_total_bytes"]
    analysed = (figures["argument_size_in_bytes"] + figures["output_size_in_bytes"]
                + figures["temp_size_in_bytes"] - figures["alias_size_in_bytes"])
    if name.startswith("cpu"):
        # CPU: XLA's memory_analysis is the whole footprint, within 1%
        # (it leaves out the few bytes of constants).
        assert abs(found.bytes - analysed) <= 0.01 * analysed
        assert found.position is not None and found.at
    else:
        # TPU: memory_analysis counts no temporaries; the buffer
        # assignment's temporary block in HBM is counted on top of it.
        assert figures["temp_size_in_bytes"] == 0
        assert found.bytes > analysed


def test_values_sharing_bytes_count_once():
    assert buffers.covered([(0, 10), (0, 10), (5, 10), (30, 2)]) == 17
    assert buffers.covered([]) == 0


def test_input_kinds_follow_the_path():
    kind = memory.input_kind
    assert kind("params/layers/0/attn/wq", False) == "parameter"
    assert kind("opt_state/mu/layers/0/attn/wq", True) == "optimizer-state"
    assert kind("opt_state/count", False) == "optimizer-state"
    assert kind("state/params/dense/kernel", False) == "parameter"
    assert kind("batch/tokens", False) == "argument"
    assert kind("cache", True) == "donated"
    # A weight named like a moment is a weight; a moment outside the
    # parameters is state.
    assert kind("params/layers/0/attn/v", False) == "parameter"
    assert kind("params/gaussian/mu", False) == "parameter"
    assert kind("state/0/mu/w", True) == "optimizer-state"


def test_peak_budgets():
    assert budget.parse_budget("peak@activation+temporary<=12GiB").axes == (
        "activation", "temporary")
    assert budget.parse_budget("peak<=1MiB").limit == 2 ** 20
    with pytest.raises(SpecError, match="'bogus' is not a kind of buffer"):
        budget.parse_budget("peak@bogus<=1")
    with pytest.raises(SpecError, match="not measured in ms"):
        budget.parse_budget("peak<=1ms")


GPT = [os.path.join(EXAMPLES, "gpt.py"), "--fn", "train_step",
       "--args", "example_args", "--mesh", "fsdp=4",
       "--shard", "**/embed=fsdp,_", "--shard", "**/w*=fsdp,_",
       "--shard", "batch/*=fsdp,_"]


@pytest.fixture(scope="module")
def gpt_report(tmp_path_factory):
    out = tmp_path_factory.mktemp("peak") / "gpt.json"
    result = run_irshard("compile", *GPT, "--format", "json", "-o", str(out),
                         "--budget", "peak@activation<=1KiB")
    assert result.returncode == 1, result.stderr
    assert "peak@activation<=1KiB" in result.stderr
    with open(out) as f:
        return json.load(f)


def test_a_training_step_s_peak(gpt_report):
    schema.check(gpt_report, schema.REPORT, "report")
    m = gpt_report["memory"]
    found = m["peak"]
    analysed = m["argument_bytes"] + m["output_bytes"] + m["temp_bytes"] - m["alias_bytes"]
    assert abs(found["bytes"] - analysed) <= 0.01 * analysed
    assert sum(b["bytes"] for b in found["buffers"]) == found["bytes"]
    # The parameters and the optimizer state are the sharded input leaves'
    # local sizes, each leaf once.
    local = {}
    for t in gpt_report["inputs"]:
        n = 4 if t["dtype"] in ("f32", "i32", "s32", "u32") else 8
        for d in t["local_shape"]:
            n *= d
        local[t["name"]] = n
    held = {b["path"]: b["bytes"] for b in found["buffers"] if "path" in b}
    assert held == local
    assert sum(v for k, v in held.items() if k.startswith(("params/", "opt_state/"))) == \
        found["by_kind"]["parameter"] + found["by_kind"]["optimizer-state"]
    # A training step at its peak holds the forward pass's activations,
    # each attributed to the model's line.
    activations = [b for b in found["buffers"] if b["kind"] == "activation"]
    assert activations and all(b["source"] and b["source"]["file"] == "gpt.py"
                               and "jvp(" in b["op_name"] for b in activations)
    assert any(b["kind"] == "collective-buffer" for b in found["buffers"])
    assert gpt_report["budgets"][0]["passed"] is False


def test_the_text_report_shows_the_top_buffers(gpt_report):
    text = "\n".join(peak_text.lines(gpt_report["memory"]["peak"], human_bytes))
    first = text.splitlines()[0]
    assert first.startswith("memory peak per device ") and "activation" in first
    rows = text.splitlines()[2:2 + peak_text.ROWS]
    assert len(rows) == peak_text.ROWS and "gpt.py:" in text
    assert "more rows" in text.splitlines()[-1]
    unfolded = peak_text.lines(gpt_report["memory"]["peak"], human_bytes, fold=False)
    assert len(unfolded) > len(text.splitlines())


def test_a_combined_op_name_is_named_by_its_first_distinct_parts():
    """A fusion XLA made of twenty-one ops joins their op_names: its row's
    `what` once ran to 900 characters, and the table's column with it."""
    joined = ("jit(train_step)/(" + ":".join(
        ["transpose(jvp())/scatter-add"] + ["transpose(jvp())/dot_general"] * 12
        + ["transpose(jvp())/reduce_sum"] * 7 + ["jvp()/reduce_sum"]) + ")")
    assert peak_text._short_op(joined) == \
        "(transpose(jvp())/scatter-add +3 more)"
    assert peak_text._short_op("jit(f)/(add:mul:add)") == "(add:mul)"
    assert peak_text._short_op("jit(f)/jvp()/dot_general") == "jvp()/dot_general"


@pytest.mark.tpu
def test_a_tpu_slice_s_peak(tmp_path):
    from tests.conftest import require
    require("libtpu", "compiling for a TPU slice")
    out = tmp_path / "tpu.json"
    result = run_irshard("compile", *GPT, "--target", "tpu-v5e:2x2", "--format",
                         "json", "-o", str(out))
    assert result.returncode == 0, result.stderr
    report = json.loads(out.read_text())
    m = report["memory"]
    found = m["peak"]
    kinds = found["by_kind"]
    inputs = kinds.get("parameter", 0) + kinds.get("optimizer-state", 0) \
        + kinds.get("argument", 0) + kinds.get("donated", 0)
    assert inputs == m["argument_bytes"]
    assert kinds["output"] == m["output_bytes"] - m["alias_bytes"]
    assert m["fits"] is True
    assert any(n.startswith("XLA's figures differ: its memory analysis counts")
               for n in report.get("notes", []))


@pytest.mark.tpu
def test_what_libtpu_refuses_for_memory_is_still_reported(tmp_path):
    """libtpu refuses to build an executable that runs out of HBM; what it
    dumped first (the optimized module, its buffer assignment) is the
    report, which says it does not fit and by how much."""
    from tests.conftest import require
    from tests.test_suggest import LLAMA_8B
    require("libtpu", "compiling for a TPU slice")
    out = tmp_path / "llama.json"
    done = run_irshard("compile", *LLAMA_8B, "--format", "json", "-o", str(out))
    assert done.returncode == 0, done.stderr
    report = json.loads(out.read_text())
    schema.check(report, schema.REPORT, "report")
    m = report["memory"]
    assert m["fits"] is False and m["over_bytes"] == \
        m["peak"]["bytes"] - m["capacity_bytes"] > 0
    assert any(n.startswith("XLA did not build the executable: RESOURCE_EXHAUSTED")
               for n in report["notes"])
    # The replicated optimizer state is what breaks the capacity.
    kinds = m["peak"]["by_kind"]
    assert max(kinds, key=kinds.get) == "optimizer-state"
    assert report["collectives"] and report["step"]["step_s"] > 0
    # Its stages still print.
    emitted = run_irshard("compile", *LLAMA_8B, "--emit", "optimized")
    assert emitted.returncode == 0 and emitted.stdout.startswith("HloModule ")
