"""The step simulation: instructions in schedule order on a compute and a
collective stream, async collectives overlapping the compute between their
start and done, loops counted by their trips; and its trace."""

import json
import os

import pytest

from irshard.timemodel import controlflow, costs, schedule
from irshard.xla.hlo import HloModuleView

HLO = """HloModule m, is_scheduled=true, num_partitions=2

%body (p: (s32[], f32[8])) -> (s32[], f32[8]) {
  %p = (s32[], f32[8]) parameter(0)
  %i = s32[] get-tuple-element(%p), index=0
  %x = f32[8] get-tuple-element(%p), index=1
  %one = s32[] constant(1)
  %next = s32[] add(%i, %one)
  %y = f32[8] multiply(%x, %x)
  ROOT %t = (s32[], f32[8]) tuple(%next, %y)
}

%cond (q: (s32[], f32[8])) -> pred[] {
  %q = (s32[], f32[8]) parameter(0)
  %j = s32[] get-tuple-element(%q), index=0
  %n = s32[] constant(TRIPS)
  ROOT %c = pred[] compare(%j, %n), direction=LT
}

ENTRY %main (x: f32[8]) -> f32[16] {
  %x0 = f32[8] parameter(0)
  GATHER
  %e = f32[8] exponential(%x0)
  %zero = s32[] constant(0)
  %init = (s32[], f32[8]) tuple(%zero, %e)
  %w = (s32[], f32[8]) while(%init), condition=%cond, body=%body
  DONE
  ROOT %o = f32[16] add(%g, %g)
}
"""

ASYNC = ("%ag = (f32[8], f32[16]) all-gather-start(%x0), channel_id=1, "
         "replica_groups={{0,1}}, dimensions={0}, use_global_device_ids=true",
         "%g = f32[16] all-gather-done(%ag)")
SYNC = ("%g = f32[16] all-gather(%x0), channel_id=1, replica_groups={{0,1}}, "
        "dimensions={0}, use_global_device_ids=true", "")

# Every timed instruction takes one second; the collective `gather_s`.
ONE_EACH = schedule.Rates(peak_flops=1e30, memory_bandwidth=1e30, overhead_s=1.0)


def simulate(gather, trips, gather_s):
    text = HLO.replace("GATHER", gather[0]).replace("DONE", gather[1]) \
        .replace("TRIPS", str(trips))
    view = HloModuleView.from_text(text)
    name = "ag" if gather is ASYNC else "g"
    return schedule.simulate(
        view, ONE_EACH,
        lambda inst: (gather_s, inst.name) if inst.name == name else (0.0, None))


@pytest.mark.parametrize("gather, gather_s, step, exposed, overlapped", [
    # exponential 1 + 5 trips x (compare, add, multiply) + the last compare
    # + the final add: 18 s of compute. An async all-gather of 10 s ends
    # while the loop runs: all of it overlapped.
    (ASYNC, 10.0, 18.0, 0.0, 10.0),
    # Of 30 s, 17 pass beside the compute before its done; 13 are waited for.
    (ASYNC, 30.0, 31.0, 13.0, 17.0),
    # A synchronous one stops compute for all of its time.
    (SYNC, 10.0, 28.0, 10.0, 0.0),
])
def test_async_collectives_overlap_the_compute_before_their_done(
        gather, gather_s, step, exposed, overlapped):
    found = simulate(gather, 5, gather_s)
    assert found.compute_s == pytest.approx(18.0)
    assert found.step_s == pytest.approx(step)
    assert found.exposed_comm_s == pytest.approx(exposed)
    assert found.overlapped_comm_s == pytest.approx(overlapped)
    assert found.step_s == pytest.approx(found.compute_s + found.exposed_comm_s)


@pytest.mark.parametrize("trips", [1, 3, 4, 50])
def test_a_loop_counts_every_trip_and_draws_the_first(trips):
    found = simulate(ASYNC, trips, 0.5)
    assert found.compute_s == pytest.approx(1 + 3 * trips + 1 + 1)
    drawn = [e for e in found.events if e.iteration and e.repeats == 1
             and e.iteration[0] < trips]
    shown = trips if trips <= controlflow.DRAWN_TRIPS + 1 else controlflow.DRAWN_TRIPS
    assert len({e.iteration for e in drawn}) == shown
    summary = [e for e in found.events if e.repeats > 1]
    if trips > controlflow.DRAWN_TRIPS + 1:
        [e] = summary
        assert e.repeats == trips - controlflow.DRAWN_TRIPS
        assert e.duration_s == pytest.approx(3.0 * e.repeats)
    else:
        assert summary == []
    # Events on one stream never overlap, and end where the step ends.
    for track in ("compute", "collectives"):
        spans = sorted((e.start_s, e.start_s + e.duration_s)
                       for e in found.events if e.track == track)
        assert all(a[1] <= b[0] + 1e-9 for a, b in zip(spans, spans[1:]))
    assert max(e.start_s + e.duration_s for e in found.events) == \
        pytest.approx(found.step_s)


@pytest.mark.parametrize("room", [14, 9, 0])
def test_a_loop_the_timeline_has_no_room_for_is_summarized(monkeypatch, room):
    """Iterations beyond the events left (a loop body of half a million
    instructions) are not drawn but summarized, with the same step."""
    whole = simulate(ASYNC, 4, 0.5)
    before = sum(1 for e in whole.events if not e.iteration)    # exp, the gather
    monkeypatch.setattr(controlflow, "MAX_EVENTS", before + room)
    found = simulate(ASYNC, 4, 0.5)
    for field in ("step_s", "compute_s", "exposed_comm_s", "overlapped_comm_s",
                  "flops", "bytes_accessed"):
        assert getattr(found, field) == pytest.approx(getattr(whole, field))
    drawn = {e.iteration for e in found.events if e.iteration and e.repeats == 1
             and e.iteration[0] < 4}
    # Seven instructions a body (three timed), at least one iteration drawn.
    assert len(drawn) == max(1, room // 7)
    [summary] = [e for e in found.events if e.repeats > 1]
    assert summary.repeats == 4 - len(drawn)
    assert len(found.events) <= before + room + 1


def test_costs_count_as_xla_does():
    """A dot's flops are two per multiply-add; an elementwise op's one per
    element; a transcendental apart; bytes are what is read and written."""
    view = HloModuleView.from_text("""HloModule d
ENTRY %main (a: f32[8,16], b: f32[16,4]) -> f32[8,4] {
  %a = f32[8,16] parameter(0)
  %b = f32[16,4] parameter(1)
  %d = f32[8,4] dot(%a, %b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  %t = f32[8,4] tanh(%d)
  ROOT %m = f32[8,4] multiply(%t, %t)
}
""")
    counted = costs.Costs(view)
    dot, tanh, mul = (counted.of(view.instructions[n]) for n in ("d", "t", "m"))
    assert dot.flops == 2 * 8 * 4 * 16
    assert dot.bytes == 4 * (8 * 16 + 16 * 4 + 8 * 4)
    assert (tanh.flops, tanh.transcendentals) == (0, 32)
    assert (mul.flops, mul.bytes) == (32, 4 * 32 * 3)


def test_a_compiled_programs_trace_opens_as_a_perfetto_trace(tmp_path):
    """`--format trace`: the trace-event JSON, one process, a compute and a
    collectives track, the heat loop's collectives named with their kind,
    bytes, axes and line, its step in `otherData`."""
    from tests.conftest import EXAMPLES, run_irshard
    path = tmp_path / "step.json"
    done = run_irshard("compile", f"{EXAMPLES}/heat1d.py", "--fn", "simulate_set",
                       "--mesh", "x=4", "--format", "trace", "-o", str(path))
    assert done.returncode == 0, done.stderr
    trace = json.loads(path.read_text())
    names = {(e["tid"], e["args"]["name"]) for e in trace["traceEvents"]
             if e["ph"] == "M" and e["name"] == "thread_name"}
    assert names == {(1, "compute"), (2, "collectives")}
    spans = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    gathers = [e for e in spans if e["args"].get("kind") == "all-gather"]
    assert gathers and all(e["tid"] == 2 and e["args"]["mesh_axes"] == ["x"]
                           and e["args"]["source"] == "heat1d.py:25" for e in gathers)
    # Compute names the user's lines too.
    assert any(e["args"].get("source", "").startswith("heat1d.py:")
               for e in spans if e["tid"] == 1)
    # 100 trips: three drawn, the other 97 one event.
    assert {tuple(e["args"].get("iteration", ())) for e in gathers} == {(0,), (1,), (2,)}
    assert [e["args"]["repeats"] for e in spans if "repeats" in e["args"]] == [97]
    step = trace["otherData"]["step"]
    assert step["step_s"] == pytest.approx(step["launch_s"] + step["compute_s"]
                                           + step["exposed_comm_s"])
    assert max(e["ts"] + e["dur"] for e in spans) == pytest.approx(step["step_s"] * 1e6,
                                                                   rel=1e-6)
    # The same program, the same bytes.
    again = tmp_path / "again.json"
    run_irshard("compile", f"{EXAMPLES}/heat1d.py", "--fn", "simulate_set",
                "--mesh", "x=4", "--format", "trace", "-o", str(again))
    assert again.read_bytes() == path.read_bytes()


def test_run_writes_the_simulated_and_the_measured_step(tmp_path):
    """`irshard run --format trace -o` writes the simulated step, `--trace`
    JAX's profile of real runs, whose device threads ran the thunks the
    simulation names; `--repeat` sets the prediction beside the median."""
    from tests.conftest import EXAMPLES, run_irshard
    simulated, measured = tmp_path / "sim.json", tmp_path / "real.json"
    done = run_irshard("run", f"{EXAMPLES}/heat1d.py", "--fn", "simulate_roll",
                       "--mesh", "x=4", "--format", "trace", "-o", str(simulated),
                       "--trace", str(measured))
    assert done.returncode == 0, done.stderr
    sim = json.loads(simulated.read_text())
    assert sim["otherData"]["step"]["step_s"] > 0
    real = json.loads(measured.read_text())
    ran = {e["name"] for e in real["traceEvents"] if e.get("ph") == "X"}
    permutes = {e["name"] for e in sim["traceEvents"]
                if e["ph"] == "X" and e["args"].get("kind") == "collective-permute"}
    assert permutes and permutes <= ran
    done = run_irshard("run", f"{EXAMPLES}/heat1d.py", "--fn", "simulate_roll",
                       "--mesh", "x=4", "--repeat", "3", "--format", "json")
    timing = json.loads(done.stdout)["run"]["timing"]
    assert timing["predicted_s"] == json.loads(done.stdout)["step"]["step_s"]
    assert timing["error"] == pytest.approx(
        (timing["predicted_s"] - timing["median_s"]) / timing["median_s"])


def test_run_refuses_one_file_for_both_traces(tmp_path):
    from tests.conftest import EXAMPLES, run_irshard
    path = tmp_path / "t.json"
    done = run_irshard("run", f"{EXAMPLES}/heat1d.py", "--fn", "simulate_set",
                       "--mesh", "x=4", "--format", "trace", "-o", str(path),
                       "--trace", str(path))
    assert done.returncode == 2
    assert done.stderr.startswith(f"irshard: error: --trace {path} is also -o")
    assert done.stderr.count("\n") == 1
    assert not path.exists()


def test_launch_and_collective_waits_add_to_the_step():
    """A step starts with the launch; its first collective wakes the
    devices, and each collective after compute waits up to the skew."""
    rates = schedule.Rates(peak_flops=1e30, memory_bandwidth=1e30, overhead_s=1.0,
                           launch_s=2.0, first_collective_s=4.0,
                           rendezvous_skew_s=0.5)
    view = HloModuleView.from_text(
        HLO.replace("GATHER", SYNC[0]).replace("DONE", "").replace("TRIPS", "2"))
    found = schedule.simulate(view, rates,
                              lambda inst: (10.0, "g") if inst.name == "g"
                              else (0.0, None))
    # The gather comes first: no compute before it, so no skew; it wakes
    # the devices (4 s) and takes 10 s. Compute: exp + 2 x 3 + compare + add.
    assert found.launch_s == 2.0
    assert found.exposed_comm_s == pytest.approx(14.0)
    assert found.compute_s == pytest.approx(9.0)
    assert found.step_s == pytest.approx(2.0 + 14.0 + 9.0)


def test_memory_bandwidth_follows_the_bytes_moved():
    rates = schedule.Rates(peak_flops=1e30, memory_bandwidth=1.0,
                           bandwidth_curve=((1e3, 10.0), (1e5, 1000.0)))
    assert rates.bandwidth(10.0) == 10.0          # below: the first point
    assert rates.bandwidth(1e4) == pytest.approx(100.0)   # between: log scale
    assert rates.bandwidth(1e9) == 1000.0         # above: the last point
    assert rates.seconds(0.0, 0.0, 1e4) == pytest.approx(100.0)


def test_in_place_updates_and_slices_count_what_they_touch():
    """A dynamic-update-slice (alone or fused) writes its update in place
    and a slice reads what it keeps, as XLA's cost analysis counts them:
    not the whole buffer (a scanned layer's stacked weights)."""
    view = HloModuleView.from_text("""HloModule u
%fused (p0: f32[64,1024], p1: f32[1,1024], p2: s32[]) -> f32[64,1024] {
  %p0 = f32[64,1024] parameter(0)
  %p1 = f32[1,1024] parameter(1)
  %p2 = s32[] parameter(2)
  %z = s32[] constant(0)
  %t = f32[1,1024] tanh(%p1)
  ROOT %u = f32[64,1024] dynamic-update-slice(%p0, %t, %p2, %z)
}

%sliced (q0: f32[64,1024], q1: s32[]) -> f32[1,1024] {
  %q0 = f32[64,1024] parameter(0)
  %q1 = s32[] parameter(1)
  %z = s32[] constant(0)
  %s = f32[1,1024] dynamic-slice(%q0, %q1, %z), dynamic_slice_sizes={1,1024}
  ROOT %n = f32[1,1024] negate(%s)
}

ENTRY %main (a: f32[64,1024], b: f32[1,1024], i: s32[]) -> f32[1,1024] {
  %a = f32[64,1024] parameter(0)
  %b = f32[1,1024] parameter(1)
  %i = s32[] parameter(2)
  %f = f32[64,1024] fusion(%a, %b, %i), kind=kLoop, calls=%fused
  %d = f32[64,1024] dynamic-update-slice(%a, %b, %i, %i)
  %g = f32[1,1024] fusion(%f, %i), kind=kLoop, calls=%sliced
  ROOT %h = f32[1,1024] dynamic-slice(%d, %i, %i), dynamic_slice_sizes={1,1024}
}
""")
    counted = costs.Costs(view)
    row = 4 * 1024
    # Reads the update and the index, writes the update: the buffer is
    # neither read nor copied.
    assert counted.memory(view.instructions["f"]) == row + 4 + row
    assert counted.memory(view.instructions["d"]) == 2 * row
    # Reads the row it keeps and the index, writes its result.
    assert counted.memory(view.instructions["g"]) == row + 4 + row
    assert counted.memory(view.instructions["h"]) == 2 * row


# ---------------------------------------------------------------------------
# Convolutions: only window positions over real input elements multiply


def test_convolution_flops_count_real_taps_only():
    from irshard.xla.convolution import _taps, convolution_flops
    # A batched product as TPU's compiler writes it: dilated input, padded
    # window; per output position one tap per spatial dimension.
    attrs = {"window": "{size=16x8x4 stride=16x8x1 pad=15_15x7_7x3_3 "
                       "lhs_dilate=15x7x1 rhs_reversal=1x1x1}",
             "dim_labels": "0f1b2_01io2->01f2b"}
    got = convolution_flops([16, 2048, 8, 128, 1], [16, 8, 2048, 2048, 4],
                            [16, 8, 2048, 4, 128], attrs)
    assert got == 2 * (2048 * 128) * (16 * 8 * 4) * 2048
    # A 3x3 convolution with padding 1 on 8x8: 22 real taps per dimension.
    got = convolution_flops([1, 8, 8, 4], [3, 3, 4, 16], [1, 8, 8, 16],
                            {"window": "{size=3x3 pad=1_1x1_1}",
                             "dim_labels": "b01f_01io->b01f"})
    assert got == 2 * 16 * 4 * 22 * 22
    # Grouped: each output reads its group's input features only.
    got = convolution_flops([1, 8, 8], [3, 4, 8], [1, 6, 8],
                            {"window": "{size=3}", "dim_labels": "b0f_0io->b0f",
                             "feature_group_count": "2"})
    assert got == 2 * 8 * 4 * (6 * 3)

    def brute(n, out, w, stride, pad, ld, rd):
        size = (n - 1) * ld + 1
        return sum(1 for k in range(w) for o in range(out)
                   if 0 <= o * stride + k * rd - pad < size
                   and (o * stride + k * rd - pad) % ld == 0)
    import itertools
    for n, out, w, stride, pad, ld, rd in itertools.product(
            (1, 3, 7), (1, 4, 9), (1, 2, 5), (1, 2, 3), (0, 2, 4), (1, 2), (1, 3)):
        assert _taps(n, out, w, stride, pad, ld, rd) == \
            brute(n, out, w, stride, pad, ld, rd), (n, out, w, stride, pad, ld, rd)


def test_fusions_printed_alike_are_costed_once():
    """An unrolled model's copies of one fusion are costed once, and what
    the step reads of each fusion is what reading it alone gives (XLA's
    objects, which cost each fused computation by its name)."""
    import jax
    import jax.numpy as jnp
    from irshard.xla import hloscan

    def layers(ws, h, buf):
        for i in range(6):
            h = jnp.tanh(h @ ws[i]) + h[:, ::-1] * (i + 0.5)
            buf = jax.lax.dynamic_update_slice(buf, h[:1], (i, 0))
            h = h - jax.lax.dynamic_slice(buf, (5 - i, 0), (1, 32))
        return h, buf

    f32 = jnp.float32
    text = jax.jit(layers).lower(
        jax.ShapeDtypeStruct((6, 32, 32), f32), jax.ShapeDtypeStruct((8, 32), f32),
        jax.ShapeDtypeStruct((6, 32), f32)).compile().as_text()
    scan, parsed = hloscan.ScannedModule.from_text(text), HloModuleView.from_text(text)
    fusions = [i for i in parsed.instructions.values() if i.opcode == "fusion"]
    fused = {dict(i.called_computations())["calls"] for i in fusions}
    assert len({scan.form(c) for c in fused}) < len(fused) >= 6
    by_form, by_name = costs.Costs(scan), costs.Costs(parsed)
    for inst in fusions:
        assert by_form.of(scan.get(inst.name, inst.computation)) == by_name.of(inst)
    rates = schedule.Rates(peak_flops=1e9, memory_bandwidth=1e9, overhead_s=1e-6)
    steps = [schedule.simulate(view, rates, lambda i: (1e-5, i.name)).to_json()
             for view in (scan, parsed)]
    assert steps[0] == steps[1] and steps[0]["compute_s"] > 0


# A scan's layer of three stacked arrays (two of its slices, one whole
# array), summed and written with its last dimension first: `LAYOUT` is the
# transpose's result layout ({0,2,1} leaves memory in the order it was, a
# copy then reorders it), `ROWS` the rows of a slice.
STRIDED = """HloModule m, is_scheduled=true

%fused (p0: f32[4,ROWS,256], p1: f32[4,ROWS,256], p2: f32[8,ROWS,256], i: s32[]) -> f32[256,8,ROWS] {
  %p0 = f32[4,ROWS,256]{2,1,0} parameter(0)
  %p1 = f32[4,ROWS,256]{2,1,0} parameter(1)
  %p2 = f32[8,ROWS,256]{2,1,0} parameter(2)
  %i = s32[] parameter(3)
  %z = s32[] constant(0)
  %a = f32[8,ROWS,256]{2,1,0} dynamic-slice(%p0, %i, %z, %z), dynamic_slice_sizes={8,ROWS,256}
  %b = f32[8,ROWS,256]{2,1,0} dynamic-slice(%p1, %i, %z, %z), dynamic_slice_sizes={8,ROWS,256}
  %half = f32[] constant(0.5)
  %h = f32[8,ROWS,256]{2,1,0} broadcast(%half), dimensions={}
  %m = f32[8,ROWS,256]{2,1,0} multiply(%a, %h)
  %s = f32[8,ROWS,256]{2,1,0} add(%m, %b)
  %sum = f32[8,ROWS,256]{2,1,0} add(%s, %p2)
  %t = f32[256,8,ROWS]{LAYOUT} transpose(%sum), dimensions={2,0,1}
  ROOT %c = f32[256,8,ROWS]{2,1,0} copy(%t)
}

ENTRY %main (x: f32[4,ROWS,256], y: f32[4,ROWS,256], w: f32[8,ROWS,256], j: s32[]) -> f32[256,8,ROWS] {
  %x = f32[4,ROWS,256]{2,1,0} parameter(0)
  %y = f32[4,ROWS,256]{2,1,0} parameter(1)
  %w = f32[8,ROWS,256]{2,1,0} parameter(2)
  %j = s32[] parameter(3)
  ROOT %f = f32[256,8,ROWS]{2,1,0} fusion(%x, %y, %w, %j), kind=kLoop, calls=%fused
}
"""


def strided_view(layout: str, rows: int = 128) -> HloModuleView:
    return HloModuleView.from_text(
        STRIDED.replace("LAYOUT", layout).replace("ROWS", str(rows)))


def test_a_fusion_written_transposed_reads_its_operands_across_their_rows():
    view = strided_view("0,2,1")
    found = costs.Costs(view)
    fusion = view.get("f", "main")
    # Each operand as it is read (two 1 MiB slices, the 1 MiB array, the
    # index) and the 1 MiB result.
    assert found.memory(fusion) == 4 * (1 << 20) + 4
    strided, sliced = found.strided(fusion)
    assert strided == 3 * (1 << 20)
    assert sliced == 2 * (1 << 20)
    # The transpose alone leaves memory in its order; the copy reorders it.
    assert not costs.reorders(view.get("t", "fused"), view.get("sum", "fused"))
    assert costs.reorders(view.get("c", "fused"), view.get("t", "fused"))


def test_a_transpose_that_keeps_memory_in_order_reads_nothing_across_rows():
    # Laid out {2,1,0}, the transpose itself reorders memory and the copy
    # does not: the same operands are read across their rows.
    view = strided_view("2,1,0")
    assert costs.reorders(view.get("t", "fused"), view.get("sum", "fused"))
    assert not costs.reorders(view.get("c", "fused"), view.get("t", "fused"))
    assert costs.Costs(view).strided(view.get("f", "main")) == (3 << 20, 2 << 20)
    # Only dimensions of one element moved: no order changes.
    flat = HloModuleView.from_text(
        "HloModule m\n\nENTRY %main (x: f32[1,64]) -> f32[64,1] {\n"
        "  %x = f32[1,64]{1,0} parameter(0)\n"
        "  ROOT %t = f32[64,1]{1,0} transpose(%x), dimensions={1,0}\n}\n")
    assert costs.Costs(flat).strided(flat.get("t", "main")) == (0.0, 0.0)


def test_small_slices_read_across_rows_are_not_slowed():
    view = strided_view("0,2,1", rows=32)       # 256 KiB slices
    assert costs.Costs(view).strided(view.get("f", "main")) == (3 << 18, 0.0)


def test_large_slices_read_across_rows_take_the_strided_rate():
    view = strided_view("0,2,1")
    rates = schedule.Rates(peak_flops=1e30, memory_bandwidth=1e9,
                           sliced_strided_bandwidth=1e8)
    step = schedule.simulate(view, rates, lambda inst: (0.0, None))
    # 3 MiB read and 1 MiB written as streams, of which the 2 MiB of
    # slices at a tenth of the rate.
    mib = 1 << 20
    assert step.compute_s == pytest.approx(2 * mib / 1e9 + 2 * mib / 1e8)
    plain = schedule.simulate(view, schedule.Rates(1e30, 1e9),
                              lambda inst: (0.0, None))
    assert plain.compute_s == pytest.approx(4 * mib / 1e9)


GPU_DATA = os.path.join(os.path.dirname(__file__), "data", "gpu")


def _gpu_module(name):
    with open(os.path.join(GPU_DATA, name), encoding="utf-8") as f:
        return f.read()


def test_a_gpu_library_product_is_timed_as_a_product():
    """A GPU executable's cuBLAS call (H200, an 8192-wide bf16 product):
    2 x 8192^3 FLOPs, its operands and result moved but not its scratch
    space, timed at the 16-bit rate and not reported untimed."""
    text = _gpu_module("h200_matmul_bf16.hlo")
    view = HloModuleView.from_text(text)
    call = next(i for i in view.instructions_of(view.entry)
                if i.opcode == "custom-call")
    found = costs.Costs(view).of(call)
    assert found.flops == found.products == 2.0 * 8192 ** 3
    assert found.wide == 0.0
    assert found.bytes == 3 * 8192 * 8192 * 2
    rates = schedule.Rates(peak_flops=1e15, memory_bandwidth=1e12,
                           overhead_s=1e-6, wide_flops=5e14)
    step = schedule.simulate(view, rates, lambda inst: (0.0, None))
    assert step.untimed == {} and step.untimed_s == 0.0
    assert step.step_s == pytest.approx(1e-6 + 2.0 * 8192 ** 3 / 1e15)
    # Not a product: a custom call stays untimed, its traffic a lower bound.
    other = text.replace("__cublas$lt$matmul", "__my$kernel")
    step = schedule.simulate(HloModuleView.from_text(other), rates,
                             lambda inst: (0.0, None))
    assert step.untimed == {"custom-call": 1}
    assert step.untimed_s == pytest.approx(
        1e-6 + (3 * 8192 * 8192 * 2 + 32 * 2 ** 20) / 1e12)


def test_every_product_of_a_gpu_gradient_is_counted():
    """The MLP's gradient compiled for an H200 (Triton GEMM fusions, two of
    them split over K): the products add up to the six of the gradient,
    each 2 x 32 x 64 x 256 FLOPs of f32, whichever view reads it."""
    from irshard.xla import hloscan
    text = _gpu_module("h200_mlp_grad.hlo")
    for view in (HloModuleView.from_text(text),
                 hloscan.ScannedModule.from_text(text)):
        counted = costs.Costs(view)
        found = [counted.of(i) for i in view.instructions_of(view.entry)]
        assert sum(c.products for c in found) == 6 * 2.0 * 32 * 64 * 256
        assert sum(c.wide for c in found) == 6 * 2.0 * 32 * 64 * 256


def test_products_are_timed_at_their_sizes_rate():
    """Rates by the size of a product, log-interpolated between measured
    points and held at the ends; f32 products at their own; other flops at
    the peak."""
    rates = schedule.Rates(
        peak_flops=1e15, memory_bandwidth=1e30,
        flops_curve=((1e6, 1e12), (1e8, 1e14)), wide_flops=4e14,
        wide_curve=((1e6, 5e11), (1e8, 5e13)))
    assert rates.seconds(1e6, 0, 0, products=1e6) == pytest.approx(1e6 / 1e12)
    # Halfway in log between the points: the rate's geometric mean.
    assert rates.seconds(1e7, 0, 0, products=1e7) == pytest.approx(1e7 / 1e13)
    assert rates.seconds(1e10, 0, 0, products=1e10) == pytest.approx(1e10 / 1e14)
    assert rates.seconds(1e7, 0, 0, products=1e7, wide=1e7) == \
        pytest.approx(1e7 / (5e11 * 10))
    # An elementwise op's flops are not a product's.
    assert rates.seconds(1e7, 0, 0) == pytest.approx(1e7 / 1e15)
    assert rates.seconds(3e7, 0, 0, products=2e7, wide=1e7) == pytest.approx(
        1e7 / 1e15 + 1e7 / 1e13 + 1e7 / 5e12)


def test_results_and_loop_trips_cost_what_the_profile_says():
    """Each array an execution returns adds `output_s` to its launch, each
    trip of a loop `loop_trip_s` to its compute."""
    text = HLO.replace("GATHER", SYNC[0]).replace("DONE", SYNC[1]) \
        .replace("TRIPS", "5").replace(
            "ROOT %o = f32[16] add(%g, %g)",
            "%o = f32[16] add(%g, %g)\n  ROOT %r = (f32[16], f32[16], f32[8]) "
            "tuple(%o, %g, %e)").replace(
            "-> f32[16] {", "-> (f32[16], f32[16], f32[8]) {")
    view = HloModuleView.from_text(text)
    plain = schedule.simulate(view, ONE_EACH, lambda inst: (0.0, None))
    rates = schedule.Rates(peak_flops=1e30, memory_bandwidth=1e30,
                           overhead_s=1.0, launch_s=0.5, output_s=10.0,
                           loop_trip_s=100.0)
    step = schedule.simulate(view, rates, lambda inst: (0.0, None))
    assert step.launch_s == 0.5 + 3 * 10.0
    assert step.compute_s == plain.compute_s + 5 * 100.0
    assert step.step_s == plain.step_s + 0.5 + 30.0 + 500.0


def test_one_time_story_per_report():
    """Every line of a report tells the simulated step's time story: on the
    CPU mesh, where the step's communication is more than the collectives'
    own times, a line says what the rest is; on a TPU target the verdict
    beside the memory is the step's, not the roofline's."""
    import re

    import irshard
    import jax
    import jax.numpy as jnp
    f32 = jnp.float32

    def matmul(a, b):
        return a @ b
    args = (jax.ShapeDtypeStruct((64, 64), f32), jax.ShapeDtypeStruct((64, 64), f32))
    report = irshard.compile(matmul, *args, mesh="x=2,y=2",
                             rules=[("a", "x,y"), ("b", "y,_")])
    text = report.to_text()
    own = report.totals()["time_s"]
    step = report.step
    line = next(l for l in text.splitlines() if l.startswith("  communication: "))
    assert f"the collectives' own {irshard_time(own)}" in line
    assert f"{irshard_time(step.exposed_comm_s + step.overlapped_comm_s)} in the step" in line
    assert "rendezvous" in line
    # What the model assumed of the host, and its stated error.
    import os
    model = next(l for l in text.splitlines() if l.startswith("  model: "))
    cores = os.cpu_count()
    assert model.startswith(f"  model: 4 simulated devices on {cores} core")
    assert "at the rates measured with 4 running at once" in model
    assert model.endswith(f"; error band ±{step.error_band:.0%}") and step.error_band > 0
    assert report.to_json()["step"]["assumes"] == step.assumes
    tpu = irshard.compile(matmul, *args, mesh="x=2,y=2", rules=[("a", "x,y"), ("b", "y,_")],
                          target="tpu-v5e:2x2")
    verdict = next(l for l in tpu.to_text().splitlines() if l.startswith("fits in"))
    s = tpu.step
    expected = "communication" if s.exposed_comm_s > s.compute_s else "compute"
    assert verdict.endswith(f"; the step is {expected}-bound")
    assert not re.search(r"comm .* vs compute", tpu.to_text())


def irshard_time(seconds):
    from irshard.reporting.cells import human_time
    return human_time(seconds)


def test_a_fusions_other_arithmetic_runs_at_its_own_measured_rate():
    """A CPU host's elementwise arithmetic and transcendentals are far
    slower than its matrix products (measured by calibrate): each part of
    an instruction's flops is timed at its own rate, products at theirs."""
    rates = schedule.Rates(peak_flops=100.0, memory_bandwidth=1e30,
                           elementwise_flops=10.0, transcendentals=1.0)
    assert rates.seconds(1000.0, 0.0, 0.0) == pytest.approx(100.0)
    assert rates.seconds(1000.0, 0.0, 0.0, products=1000.0) == pytest.approx(10.0)
    assert rates.seconds(1500.0, 5.0, 0.0, products=1000.0) == \
        pytest.approx(10.0 + 50.0 + 5.0)
    # Without a measurement, the product rate, as before.
    plain = schedule.Rates(peak_flops=100.0, memory_bandwidth=1e30)
    assert plain.seconds(1000.0, 5.0, 0.0) == pytest.approx(10.0 + 0.05)


def test_the_host_profile_times_elementwise_work_per_device_count():
    """The CPU host's profile carries, for every device count measured, the
    rate of a fusion's arithmetic and of its transcendentals, each below
    the product rate of the same count, and the rates read them."""
    from irshard.timemodel import profiles
    profile = profiles.profile("cpu-host")
    assert sorted(profile.by_devices) == [2, 4, 8, 16]
    for n, entry in profile.by_devices.items():
        compute = entry["compute"]
        elementwise = compute["flops_elementwise"]["value"]
        assert 0 < elementwise < compute["flops"]["value"]
        assert 0 < compute["transcendentals"]["value"] < elementwise
        assert "measured by irshard calibrate" in compute["flops_elementwise"]["source"]
        found = profile.for_devices(n).compute
        assert found["flops_elementwise"] == elementwise


def test_the_cpu_meshs_rates_are_those_measured_with_as_many_devices():
    from irshard.hardware import targets
    from irshard.timemodel import profiles, rates
    host = profiles.profile("cpu-host")
    for devices in (2, 4, 8, 16):
        found = rates.rates(targets.place(None, "cpu", None), devices)
        compute = host.by_devices[devices]["compute"]
        assert found.peak_flops == compute["flops"]["value"]
        assert found.elementwise_flops == compute["flops_elementwise"]["value"]
        assert found.transcendentals == compute["transcendentals"]["value"]
