"""Targets, links and times: parsing, the cost model against hand-computed
formulas, TPU compiles equal to plain JAX's, calibration."""

import json
import os
import sys

import pytest

import irshard
from irshard.core.errors import SpecError
from irshard.hardware import targets
from irshard.reporting.cells import human_time
from irshard.timemodel import links, profiles
from tests.conftest import EXAMPLES, require, run_irshard


@pytest.mark.parametrize("text, kind, devices", [
    ("cpu", "cpu", None), ("tpu-v5e:4x4", "tpu", 16),
    ("tpu-v5p:2x2x2,slices=4", "tpu", 32), ("gpu-h100:2x8", "gpu", 16),
])
def test_targets_parse(text, kind, devices):
    target = targets.parse_target(text)
    assert (target.kind, target.num_devices) == (kind, devices)


@pytest.mark.parametrize("text, message", [
    ("tpu-v5e", "expected cpu, tpu-v4|v5e|v5p|v6e:TOPOLOGY"),
    ("tpu-v5e:4x4x4", "a v5e slice is a 2-D torus"),
    ("tpu-v5e:4x4,cores=2", "unknown option 'cores'"),
    ("tpu-v5e:4x4,slices=1,slices=2", "option 'slices' is given twice"),
    ("gpu-a100:1x8", "unknown GPU 'a100'"),
    ("gpu-h100:8", "give NODESxGPUS"),
])
def test_bad_targets(text, message):
    with pytest.raises(SpecError, match=message):
        targets.parse_target(text)


def test_every_profile_number_has_a_source():
    with open(profiles.PROFILES_PATH) as f:
        shipped = json.load(f)["profiles"]
    for name, data in shipped.items():
        for key in ("hbm_bytes", "hbm_bandwidth", "peak_flops"):
            if key in data:
                assert data[key]["source"], (name, key)
        measured = [data] + list(data.get("by_devices", {}).values())
        for entry in measured:
            for key, value in entry.get("compute", {}).items():
                assert value["source"], (name, "compute", key)
                if key == "flops_dtype":      # what `flops` was measured in
                    assert value["value"] in ("bfloat16", "float16"), name
                    continue
                numbers = [r for _, r in value["value"]] \
                    if isinstance(value["value"], list) else [value["value"]]
                assert numbers and all(v >= 0 for v in numbers), (name, key)
            for link, values in entry["links"].items():
                for key in ("bandwidth", "latency", "base"):
                    if key in values:
                        assert values[key]["source"], (name, link, key)


def test_a_host_profile_holds_for_the_devices_measured_nearest():
    """The CPU host's numbers were measured with 2, 4, 8 and 16 devices
    sharing its cores: a mesh gets those of the nearest count (fewer on a
    tie)."""
    host = profiles.profile("cpu-host")
    measured = sorted(host.by_devices)
    assert measured == [2, 4, 8, 16]
    for devices, nearest in ((1, 2), (3, 2), (4, 4), (6, 4), (7, 8), (12, 8),
                             (13, 16), (64, 16)):
        found = host.for_devices(devices)
        assert found.compute["devices"] == nearest
        entry = host.by_devices[nearest]
        assert found.launch == entry["compute"]["launch"]["value"]
        assert found.links["host"].latency == \
            entry["links"]["host"]["latency"]["value"]
    assert profiles.profile("tpu-v5e").for_devices(4) == profiles.profile("tpu-v5e")


def _ring(n):
    return [list(range(n))]


def test_ici_times_follow_the_ring_formulas():
    """v5e 16x16: a dimension of 16 chips has wraparound (a ring both
    ways, n/2 steps); a 4x4 slice has none."""
    profile = profiles.profile("tpu-v5e")
    full = targets.parse_target("tpu-v5e:16x16")
    places = [links.Place(0, (i % 16, i // 16)) for i in range(256)]
    model = links.CostModel(full, profile, places)
    nbytes = 16 * 2 ** 20                   # the gathered array per device
    wire = nbytes * 15 // 16
    link, seconds = model.estimate("all-gather", nbytes, wire, 16, _ring(16))
    assert link == "ici"
    assert seconds == pytest.approx(1e-6 * 8 + wire / (2 * 4.5e10))
    _, reduce = model.estimate("all-reduce", nbytes, 2 * wire, 16, _ring(16))
    assert reduce == pytest.approx(2 * 1e-6 * 8 + 2 * wire / (2 * 4.5e10))
    small = targets.parse_target("tpu-v5e:4x4")
    model = links.CostModel(small, profile,
                           [links.Place(0, (i % 4, i // 4)) for i in range(16)])
    _, seconds = model.estimate("all-gather", nbytes, nbytes * 3 // 4, 4, _ring(4))
    assert seconds == pytest.approx(1e-6 * 3 + nbytes * 3 / 4 / 4.5e10)
    # A group over both dimensions of the torus uses twice the links.
    both = [[0, 1, 4, 5]]
    _, seconds = model.estimate("all-gather", nbytes, nbytes * 3 // 4, 4, both)
    assert seconds == pytest.approx(1e-6 * 3 + nbytes * 3 / 4 / (2 * 4.5e10))
    _, permute = model.estimate("collective-permute", 4096, 4096, 4, [[0, 1]])
    assert permute == pytest.approx(1e-6 + 4096 / 4.5e10)


def test_links_between_slices_and_nodes():
    v5e = profiles.profile("tpu-v5e")
    two = targets.parse_target("tpu-v5e:2x2,slices=2")
    places = [links.Place(i // 4, (i % 2, (i // 2) % 2)) for i in range(8)]
    model = links.CostModel(two, v5e, places)
    assert model.link_of([[0, 1, 2, 3]]) == "ici"
    assert model.link_of([[0, 4]]) == "dcn"
    link, seconds = model.estimate("all-reduce", 32768, 32768, 2, [[0, 4]])
    assert (link, seconds) == ("dcn", pytest.approx(2 * 1e-5 + 32768 / 3.125e9))
    gpus = targets.parse_target("gpu-h100:2x4")
    model = links.CostModel.for_devices(gpus, profiles.profile("gpu-h100"), range(8))
    assert model.link_of([[0, 1, 2, 3]]) == "nvlink"
    assert model.link_of([[0, 4]]) == "infiniband"
    _, seconds = model.estimate("all-gather", 8192, 6144, 4, [[0, 1, 2, 3]])
    assert seconds == pytest.approx(8.4e-6 + 3.4e-6 * 3 + 6144 / 4.5e11)


def test_roofline():
    profile = profiles.profile("tpu-v5e")
    found = links.roofline(profile, 1.97e14 * 0.008, 8.19e11 * 0.002, 0.003)
    assert found.bound == "compute"
    assert found.step_s == pytest.approx((0.008, 0.011))
    assert found.exposed_comm_s == pytest.approx((0.0, 0.003))
    assert found.to_json()["step_s"] == list(found.step_s)
    assert links.roofline(profile, 0.0, 0.0, 0.001).bound == "communication"


MLP_RULES = [("w1", "_,tp"), ("w2", "tp,_"), ("x", "dp,_"), ("y", "dp,_")]


def test_times_in_reports_and_budgets():
    sys.path.insert(0, EXAMPLES)
    import mlp
    report = irshard.compile(mlp.loss, *_mlp_args(), mesh="dp=2,tp=2", grad=True,
                             rules=MLP_RULES, target="gpu-h100:1x4")
    assert report.target.estimated and report.stage_name == "partitioned"
    assert {c.link for c in report.collectives} == {"nvlink"}
    total = report.totals()["time_s"]
    assert total == pytest.approx(sum(c.time_s for c in report.collectives))
    report.check_budget(f"time<={total * 1.01 * 1e3:.6f}ms", "memory<=1GiB")
    with pytest.raises(irshard.BudgetExceeded, match="time<=1us"):
        report.check_budget("time<=1us")
    assert report.memory.fits and report.memory.capacity_bytes == 80 * 10 ** 9


def test_the_simulated_step_in_reports_and_budgets():
    sys.path.insert(0, EXAMPLES)
    import mlp
    report = irshard.compile(mlp.loss, *_mlp_args(), mesh="dp=2,tp=2", grad=True,
                             rules=MLP_RULES)
    step = report.to_json()["step"]
    assert step["step_s"] == pytest.approx(step["launch_s"] + step["compute_s"]
                                           + step["exposed_comm_s"])
    assert step["compute_s"] > 0 and step["exposed_comm_s"] > 0
    # The runtime's start of the execution and of its four results.
    host = profiles.profile("cpu-host").for_devices(4)
    assert step["launch_s"] == pytest.approx(
        host.launch + 4 * host.compute.get("output", 0.0))
    [line] = [x for x in report.to_text().splitlines() if x.startswith("step: ")]
    assert line.startswith(f"step: {human_time(step['step_s'])} simulated = launch")
    report.check_budget(f"step<={step['step_s'] * 1.01 * 1e3:.6f}ms")
    with pytest.raises(irshard.BudgetExceeded, match="step<=1us"):
        report.check_budget("step<=1us")
    with pytest.raises(SpecError, match="'step' is not per mesh axis"):
        report.check_budget("step@dp<=1s")


def test_the_roofline_counts_a_loop_as_often_as_it_runs():
    """XLA's cost analysis reads a loop body once; the step's roofline
    counts its work once per trip."""
    import jax
    import jax.numpy as jnp

    def looped(trips):
        def f(x, w):
            return jax.lax.fori_loop(0, trips, lambda _, v: jnp.tanh(v @ w), x)
        return f

    args = (jax.ShapeDtypeStruct((64, 128), jnp.float32),
            jax.ShapeDtypeStruct((128, 128), jnp.float32))
    flops = [irshard.compile(looped(trips), *args, mesh="x=2",
                             rules=[("x", "x,_")],
                             target="gpu-h100:1x2").roofline.flops
             for trips in (1, 10)]
    dot = 2 * 32 * 128 * 128          # one device's product per trip
    assert flops[0] >= dot
    assert flops[1] == pytest.approx(10 * flops[0], rel=0.05)


def _mlp_args():
    import jax
    f32 = jax.numpy.float32
    return (jax.ShapeDtypeStruct((64, 256), f32), jax.ShapeDtypeStruct((256, 64), f32),
            jax.ShapeDtypeStruct((32, 64), f32), jax.ShapeDtypeStruct((32, 64), f32))




@pytest.mark.tpu
def test_tpu_counts_and_bytes_equal_plain_jax():
    """The same step compiled by plain JAX for the same described slice."""
    require("libtpu", "TPU targets")
    import jax
    from jax.experimental import topologies
    from jax.sharding import AxisType, NamedSharding, PartitionSpec as P

    from irshard.collectives import analysis
    from irshard.xla.hlo import HloModuleView
    from irshard.core.specs import parse_mesh
    sys.path.insert(0, EXAMPLES)
    import gpt
    rules = [("**/embed", "fsdp,_"), ("**/w*", "fsdp,_"), ("batch/*", "fsdp,_")]
    report = irshard.compile(gpt.train_step, *gpt.example_args(), mesh="fsdp=8",
                             rules=rules, target="tpu-v5e:2x4")
    topology = topologies.get_topology_desc(topology_name="v5e:2x4", platform="tpu")
    mesh = jax.make_mesh((8,), ("fsdp",), devices=topology.devices,
                         axis_types=(AxisType.Auto,))
    by_path = {t.name: t.sharding for t in report.inputs}
    names = ("params", "opt_state", "batch")

    def sharded(name):
        from irshard.core import tree

        def of(keys, leaf):
            entries = by_path[tree.path_of(name, keys)]
            spec = P(*[None if e == "_" else e for e in entries])
            return jax.ShapeDtypeStruct(leaf.shape, leaf.dtype,
                                        sharding=NamedSharding(mesh, spec))
        return of

    args = [jax.tree_util.tree_map_with_path(sharded(n), a)
            for n, a in zip(names, gpt.example_args())]
    text = jax.jit(gpt.train_step).lower(*args).compile().as_text()
    reference = analysis.collectives(HloModuleView.from_text(text),
                                     parse_mesh("fsdp=8"), None)
    from collections import Counter
    assert report.collectives
    assert Counter(c.kind for c in report.collectives) == \
        Counter(c.kind for c in reference)
    assert report.totals()["bytes_per_run"] == \
        sum(c.bytes * c.executions for c in reference)
    assert {c.link for c in report.collectives} == {"ici"}
    assert report.memory.capacity_bytes == 16 * 2 ** 30


@pytest.mark.tpu
def test_a_v4_slice_is_one_device_per_chip(capsys):
    """libtpu describes a v4 chip as two cores; JAX on v4 runs one device
    per chip (megacore), so a 2x2x2 slice takes a mesh of 8 devices."""
    require("libtpu", "TPU targets")
    from irshard import cli
    assert cli.main(["compile", os.path.join(EXAMPLES, "matmul.py"), "--mesh",
                     "x=4,y=2", "--target", "tpu-v4:2x2x2", "--format",
                     "json"]) == 0, capsys.readouterr().err
    import json
    report = json.loads(capsys.readouterr().out)
    assert report["mesh"]["devices"] == 8 and report["target"]["name"] == "tpu-v4:2x2x2"
    assert report["collectives"] and {c["link"] for c in report["collectives"]} == {"ici"}
    assert cli.main(["compile", os.path.join(EXAMPLES, "matmul.py"), "--mesh",
                     "x=4,y=4", "--target", "tpu-v4:2x2x2"]) == 2
    assert "has 16 devices but --target tpu-v4:2x2x2 has 8" in capsys.readouterr().err


@pytest.mark.tpu
def test_args_built_eagerly_on_a_tpu_target():
    """`--args` that makes a PRNG key and calls `jax.eval_shape` runs its
    eager work on this host's CPU while the program sees the slice's chips:
    the GPT step compiles abstractly for a v5e slice."""
    require("libtpu", "TPU targets")
    done = run_irshard("compile", os.path.join(EXAMPLES, "gpt.py"), "--fn",
                       "train_step", "--args", "example_args", "--mesh",
                       "fsdp=4,tp=4", "--target", "tpu-v5e:4x4",
                       "--shard", "**/w*=fsdp,tp", "--format", "json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["mesh"]["devices"] == 16 and report["target"]["kind"] == "tpu"
    assert any("fsdp" in c["mesh_axes"] for c in report["collectives"])


def test_without_libtpu_a_tpu_target_says_what_to_install(tmp_path):
    fake = tmp_path / "libtpu"
    fake.mkdir()
    (fake / "__init__.py").write_text("raise ImportError('not installed')\n")
    env = dict(os.environ, PYTHONPATH=str(tmp_path))
    import subprocess
    result = subprocess.run(
        [sys.executable, "-m", "irshard", "compile",
         os.path.join(EXAMPLES, "matmul.py"), "--mesh", "x=2,y=2",
         "--target", "tpu-v5e:2x2"], capture_output=True, text=True, env=env)
    assert result.returncode == 2
    assert result.stderr.strip() == (
        "irshard: error: --target tpu-v5e:2x2: compiling for a TPU needs "
        "libtpu; install it with pip install 'irshard[tpu]'")


@pytest.mark.slow
def test_calibration_measures_fits_and_is_used(tmp_path):
    """A small calibration: measurements for every kind, a fitted profile
    with its held-out error, and the profile changes the report's times."""
    saved = tmp_path / "host.json"
    result = run_irshard("calibrate", "--mesh", "x=4", "--sizes",
                         "4KiB,16KiB,64KiB,128KiB,256KiB", "--repeats", "1",
                         "--format", "json", "-o", str(saved))
    assert result.returncode == 0, result.stderr
    found = json.loads(result.stdout)
    kinds = {m["kind"] for m in found["measurements"]}
    assert kinds == {"all-gather", "reduce-scatter", "all-reduce", "all-to-all",
                     "collective-permute"}
    assert found["error"] is not None and found["held_out"] == 10
    # Held-out error by message size, and the compute the step simulation
    # times with, as measured with these 4 devices.
    assert [b["band"] for b in found["bands"]] == ["under 64 KiB",
                                                   "64 KiB to 1 MiB"]
    assert sum(b["held_out"] for b in found["bands"]) == 10
    compute = found["compute"]
    assert compute["devices"] == 4 and compute["flops"] > 0
    assert compute["launch"] > 0 and compute["bandwidth"]
    host = found["links"]["host"]
    assert host["bandwidth"]["value"] > 0 and host["latency"]["value"] >= 0
    # The rendezvous of each size of group 4 devices split into.
    assert sorted(host["rendezvous"]) == ["2", "4"]
    assert all(v >= 0 for v in host["rendezvous"].values())
    profile = json.loads(saved.read_text())
    # An absurdly slow host: every time grows accordingly.
    profile["links"]["host"] = {"bandwidth": {"value": 1.0, "source": "test"},
                                "latency": {"value": 1.0, "source": "test"},
                                "rendezvous": host["rendezvous"]}
    # And a host that takes 3 s to start a step: the simulated step says so.
    assert profile["compute"]["devices"] == 4
    profile["compute"]["launch"] = 3.0
    saved.write_text(json.dumps(profile))
    slow = run_irshard("compile", os.path.join(EXAMPLES, "matmul.py"), "--mesh",
                       "x=2,y=2", "--profile", str(saved), "--format", "json")
    assert slow.returncode == 0, slow.stderr
    found = json.loads(slow.stdout)
    times = [c["time_s"] for c in found["collectives"]]
    assert times and all(t > 1.0 for t in times)
    # The launch and the product's one result.
    assert found["step"]["launch_s"] == pytest.approx(3.0 + profile["compute"]["output"])
    assert found["step"]["step_s"] > 3.0 + sum(times)


@pytest.mark.slow
def test_a_calibration_of_one_device_measures_its_compute(tmp_path):
    """A mesh of one device has no collective to time: its compute alone
    is measured, and, saved, it times the simulated step, each result
    buffer of an execution included."""
    saved = tmp_path / "one.json"
    result = run_irshard("calibrate", "--mesh", "x=1", "--repeats", "1",
                         "--format", "json", "-o", str(saved))
    assert result.returncode == 0, result.stderr
    found = json.loads(result.stdout)
    assert found["links"] == {} and found["measurements"] == []
    assert found["error"] is None and found["held_out"] == 0
    compute = found["compute"]
    assert compute["devices"] == 1 and compute["flops"] > 0
    assert compute["output"] >= 0 and compute["loop_trip"] >= 0
    assert "rendezvous_skew" not in compute and "first_collective" not in compute
    text = run_irshard("calibrate", "--mesh", "x=1", "--repeats", "1")
    assert "no collectives: the mesh has no axis of 2 or more devices" in text.stdout
    assert "each result:" in text.stdout and "each trip of a loop:" in text.stdout
    # Results that take a second each: an MLP's gradient returns four.
    profile = json.loads(saved.read_text())
    profile["compute"].update(launch=0.5, output=1.0, loop_trip=0.0)
    saved.write_text(json.dumps(profile))
    done = run_irshard("compile", os.path.join(EXAMPLES, "mlp.py"), "--grad",
                       "--mesh", "dp=1,tp=1", "--profile", str(saved),
                       "--format", "json")
    assert done.returncode == 0, done.stderr
    step = json.loads(done.stdout)["step"]
    assert step["launch_s"] == 0.5 + 4 * 1.0
    assert step["step_s"] > step["launch_s"]


def test_a_calibration_judges_its_fit_between_sizes_it_fitted():
    """The held-out sizes are every other size between the smallest and
    the largest, which are fitted: the fit is judged by interpolation,
    never by extrapolation past the sizes it saw."""
    from irshard.measuring import calibrate
    assert calibrate.held_out_sizes([4, 1, 3, 2]) == {2}
    assert calibrate.held_out_sizes([1, 2, 3, 4, 5]) == {2, 4}
    assert calibrate.held_out_sizes([1, 2, 3, 4, 5, 6]) == {2, 4}
    sizes = calibrate.DEFAULT_SIZES
    assert sizes[0] == 4096 and sizes[-1] == 4 << 20
    held = calibrate.held_out_sizes(sizes)
    assert len(held) == 5 and min(held) > sizes[0] and max(held) < sizes[-1]
    # Each band of the report has a held-out size.
    for _, low, high in calibrate.BANDS:
        assert any(low <= s < high for s in held)


def test_a_fit_with_no_size_dependence_stays_finite():
    """Times that do not grow with the size (all latency, as 2 devices'
    small collectives can be) fit a finite bandwidth: the largest message
    moved within the times' spread."""
    from irshard.measuring import calibrate
    points = [calibrate.Measurement("all-gather", "x", 2, b, b // 2, 1, t)
              for b, t in ((4096, 2.2e-5), (16384, 2.1e-5), (65536, 2.0e-5))]
    latency, bandwidth = calibrate.fit(points)
    assert bandwidth == pytest.approx(32768 / 0.2e-5)
    assert latency == pytest.approx(2.1e-5 - 8192 / bandwidth)
    for p in points:
        assert calibrate.predict(p, latency, bandwidth) == pytest.approx(
            p.seconds, rel=0.15)


def test_a_measurement_below_the_hosts_noise_is_measured_again(monkeypatch):
    """A collective's time is the difference of runs with few and many
    trips; when the host's noise makes it zero or less (one repeat on a
    busy machine), it is measured again over more trips, never kept as a
    time of zero. One that never rises above the noise is left out of the
    fit (zero seconds, which `fit` skips) and the text says so."""
    from irshard.measuring import calibrate
    calls = []

    def run(compiled, x, trips, repeats):
        # 1 ms a launch, 10 us a trip; the first two attempts' few-trip
        # runs are held up by a second.
        calls.append(trips)
        slow = trips == 2 and len(calls) in (4, 6)
        return 1e-3 + 1e-5 * trips + (1.0 if slow else 0.0)

    monkeypatch.setattr(calibrate, "_run", run)
    seconds = calibrate._per_collective(None, None, 1)
    assert seconds == pytest.approx(1e-5)
    # Probe (three runs), then three attempts, each over four times the
    # extra trips of the one before.
    extra = [trips - 2 for trips in calls[3:] if trips != 2]
    assert len(calls) == 9 and extra == [extra[0], 4 * extra[0], 16 * extra[0]]
    monkeypatch.setattr(calibrate, "_run", lambda c, x, trips, r: 1.0)
    assert calibrate._per_collective(None, None, 1) == 0.0
    assert calibrate.fit([calibrate.Measurement("all-gather", "x", 2, b, b // 2, 1, t)
                          for b, t in ((4096, 0.0), (8192, 2e-5), (16384, 3e-5))]) \
        == pytest.approx(calibrate.fit([calibrate.Measurement(
            "all-gather", "x", 2, b, b // 2, 1, t) for b, t in ((8192, 2e-5), (16384, 3e-5))]))


def test_a_host_collective_waits_for_its_groups_threads():
    """On the CPU host a collective's latency is a rendezvous of its group's
    threads: a group of 2 of 8 devices takes the latency fitted for all 8
    in the ratio of their measured rendezvous (the nearest size measured,
    the smaller on a tie), whatever the size of the message."""
    link = profiles.Link("host", 1e9, 80e-6,
                        rendezvous={2: 20e-6, 4: 40e-6, 8: 80e-6})
    assert [link.group_scale(g) for g in (2, 3, 4, 6, 8, 16)] == \
        [0.25, 0.25, 0.5, 0.5, 1.0, 1.0]
    assert profiles.Link("host", 1e9, 80e-6).group_scale(2) == 1.0
    profile = profiles.profile_from_json("host", {"links": {"host": {
        "bandwidth": 1e9, "latency": 80e-6,
        "rendezvous": {"2": 20e-6, "4": 40e-6, "8": 80e-6}}}})
    model = links.CostModel(targets.parse_target("cpu"), profile,
                           [links.Place() for _ in range(8)])
    for n, group_latency in ((2, 20e-6), (4, 40e-6), (8, 80e-6)):
        wire = 4096 * (n - 1) // n
        link_name, seconds = model.estimate(
            "all-gather", 4096, wire, n, [list(range(n))])
        assert link_name == "host"
        assert seconds == pytest.approx(group_latency + wire / 1e9)
    # A collective-permute's rendezvous is not its group's.
    _, permute = model.estimate("collective-permute", 4096, 4096, 2, [[0, 1]])
    assert permute == pytest.approx(80e-6 + 4096 / 1e9)


def test_a_calibration_fits_the_latency_of_all_the_devices():
    """Measured over axes of 2 and of 4 of 4 devices, times that follow
    the model fit back its latency and bandwidth exactly: each point's
    latency weighed by its group's rendezvous (a collective-permute's
    not)."""
    from irshard.measuring import calibrate
    rendezvous = {2: 30e-6, 4: 60e-6}
    latency, bandwidth = 100e-6, 2e9
    points = [calibrate.Measurement(
        kind, axis, g, b, b * (g - 1) // g, 1.0,
        latency * (rendezvous[g] / 60e-6 if kind != "collective-permute" else 1)
        + (b * (g - 1) // g) / bandwidth)
        for kind in ("all-gather", "collective-permute")
        for axis, g in (("x", 2), ("y", 4)) for b in (4096, 65536, 1 << 20)]
    weighted = calibrate.weighted(points, rendezvous)
    assert [p.steps for p in weighted] == [0.5] * 3 + [1.0] * 9
    for kind in ("all-gather", "collective-permute"):
        mine = [p for p in weighted if p.kind == kind]
        assert calibrate.fit(mine) == pytest.approx((latency, bandwidth))
        for p in mine:
            assert calibrate.predict(p, latency, bandwidth) == pytest.approx(p.seconds)
    # Unweighed, the two groups' latencies cannot both be met.
    fitted = calibrate.fit([p for p in points if p.kind == "all-gather"])
    assert fitted != pytest.approx((latency, bandwidth))


@pytest.mark.tpu
def test_a_tpu_steps_communication_is_the_reports():
    """Every collective the report lists is in the simulated step, those a
    TPU executable holds inside fusions too: the step's communication adds
    up to the report's time per run."""
    require("libtpu", "TPU targets")
    result = run_irshard("compile", os.path.join(EXAMPLES, "gpt.py"), "--fn",
                         "train_step", "--args", "example_args", "--mesh",
                         "fsdp=4,tp=2", "--target", "tpu-v5e:2x4", "--shard",
                         "**/w*=fsdp,tp", "--format", "json")
    assert result.returncode == 0, result.stderr
    found = json.loads(result.stdout)
    step = found["step"]
    assert step["exposed_comm_s"] + step["overlapped_comm_s"] == pytest.approx(
        found["totals"]["time_s"], rel=1e-6)


def test_a_gpu_platform_starts_the_plugin_installed(tmp_path, monkeypatch):
    """JAX's "gpu" asks for every kind of GPU and fails on the kinds whose
    plugin is missing: irshard names the kinds whose plugin is there."""
    import importlib
    devices = importlib.import_module("irshard.backend.devices")
    (tmp_path / "jax_plugins" / "xla_cuda13").mkdir(parents=True)
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.invalidate_caches()
    assert "cuda" in devices._jax_platform("gpu").split(",")
    (tmp_path / "jax_plugins" / "xla_rocm7").mkdir()
    assert {"cuda", "rocm"} <= set(devices._jax_platform("gpu").split(","))
    assert devices._jax_platform("tpu") == "tpu"
    assert devices._jax_platform("cpu") == "cpu"


COMPUTES_AT_IMPORT = '''\
from functools import partial
import jax, jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, PartitionSpec as P
mesh = Mesh(np.array(jax.devices()[:4]), ("i",))

@jax.jit
@partial(jax.shard_map, mesh=mesh, in_specs=(P("i"), P("i")), out_specs=P("i"))
def add(a, b):
    return a + b

z = add(jnp.ones((8,)), jnp.ones((8,)))
'''


@pytest.mark.tpu
def test_a_program_that_computes_at_import_under_a_tpu_target_is_told_why(write):
    """The shard_map tutorial's style runs its step at import; under a TPU
    target there is no TPU to run it on, and the error line says so and
    what to do, with the program's own error under it."""
    require("libtpu", "compiling for a TPU slice")
    path = write("tutorial.py", COMPUTES_AT_IMPORT)
    done = run_irshard("compile", path, "--fn", "add", "--arg", "a=f32[8]",
                       "--arg", "b=f32[8]", "--mesh", "i=4",
                       "--target", "tpu-v5e:2x2")
    assert done.returncode == 2
    first, *rest = done.stderr.splitlines()
    assert first.startswith("irshard: error: ") and \
        "runs a JAX computation when imported" in first and \
        'if __name__ == "__main__":' in first
    assert rest and rest[0].startswith("  ") and "tutorial.py:12" in rest[0]
    # The same program compiles for this machine.
    assert run_irshard("compile", path, "--fn", "add", "--arg", "a=f32[8]",
                       "--arg", "b=f32[8]", "--mesh", "i=4").returncode == 0


@pytest.mark.tpu
@pytest.mark.parametrize("command", [
    ("compile", os.path.join(EXAMPLES, "heat1d.py"), "--fn", "simulate_set",
     "--mesh", "x=4"),
    ("devices",),
])
def test_platform_tpu_without_a_tpu_is_one_error_line(command):
    """libtpu's own warnings about the TPU it looks for stay off the
    terminal: a missing platform is one error line."""
    require("libtpu", "starting JAX's TPU platform")
    done = run_irshard(*command, "--platform", "tpu")
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and done.stderr.startswith(
        "irshard: error: platform 'tpu' is not available here"), done.stderr


@pytest.mark.tpu
def test_libtpu_logs_go_to_a_folder_of_irshard_that_is_removed(tmp_path):
    """Every TPU-target compile once left libtpu's logs in `tpu_logs` of the
    system's temporary folder (ignoring TMPDIR, never removed, recording the
    working directory), one set per process. Now they go to a folder of
    the command's own, removed when it ends; a TPU_LOG_DIR the user set is
    theirs."""
    require("libtpu", "TPU targets")
    import glob
    import subprocess
    import tempfile
    default = os.path.join(tempfile.gettempdir(), "tpu_logs")
    temp = tmp_path / "tmp"
    temp.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "TPU_LOG_DIR"}
    # Logs another process left there before (a PID reused) are not this
    # run's.
    before = set(glob.glob(os.path.join(default, "*")))
    proc = subprocess.Popen(
        [sys.executable, "-m", "irshard", "compile",
         os.path.join(EXAMPLES, "matmul.py"), "--mesh", "x=2,y=2",
         "--target", "tpu-v5e:2x2"], env=dict(env, TMPDIR=str(temp)),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err
    assert not set(glob.glob(os.path.join(default, f"*.{proc.pid}"))) - before
    assert os.listdir(temp) == []
    mine = tmp_path / "logs"
    done = subprocess.run(
        [sys.executable, "-m", "irshard", "compile",
         os.path.join(EXAMPLES, "matmul.py"), "--mesh", "x=2,y=2",
         "--target", "tpu-v5e:2x2"], env=dict(env, TPU_LOG_DIR=str(mine)),
        capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert os.listdir(mine)


def test_libtpu_errors_are_shown_with_a_failure_only(tmp_path, monkeypatch):
    """What libtpu logged as an error in this process, that the failure does
    not already say, follows the failure's line, indented."""
    import importlib
    devices = importlib.import_module("irshard.backend.tpuslice")
    folder = tmp_path / "irshard-tpu-logs-x"
    folder.mkdir()
    (folder / f"tpu_driver.vm.u.log.ERROR.20261127-1.{os.getpid()}").write_text(
        "Log file created at: 2026/11/27\n"
        "E1127 22:16:31.57 1 compiler.cc:1] XLA:TPU compile permanent error.\n"
        "E1127 22:16:31.58 1 compiler.cc:2] the cause, said only here\n"
        "I1127 22:16:31.59 1 compiler.cc:3] informational\n")
    (folder / "tpu_driver.vm.u.log.ERROR.20261127-1.1").write_text(
        "E1127 22:16:31.57 1 other.cc:1] another process's\n")
    monkeypatch.setenv("TPU_LOG_DIR", str(folder))
    assert devices.tpu_log_errors("XLA:TPU compile permanent error.") == \
        ["  libtpu: the cause, said only here"]
    monkeypatch.setenv("TPU_LOG_DIR", str(tmp_path))     # the user's: not read
    assert devices.tpu_log_errors("") == []
