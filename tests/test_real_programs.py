"""Programs as their authors write them: meshes built at import from the
devices JAX lists, JAX options set at import, shardings of the program's
own mesh, and the other habits of public JAX programs (the Flax lm1b step,
the shard_map tutorial, JAX's training cookbook, Equinox's examples, a
GShard mixture of experts)."""

import json
import os

import pytest

from tests.conftest import require, run_irshard

PROGRAMS = os.path.join(os.path.dirname(__file__), "programs")
SHARD_MAP = os.path.join(PROGRAMS, "shard_map_tutorial.py")
EQUINOX = os.path.join(PROGRAMS, "equinox_style.py")


def report_of(*args):
    done = run_irshard(*args, "--format", "json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def kinds(report):
    return sorted(c["kind"] for c in report["collectives"])


@pytest.mark.parametrize("target", ["cpu", pytest.param("tpu-v5e:2x2",
                                                        marks=pytest.mark.tpu)])
def test_a_mesh_built_from_jax_devices_at_import_sees_the_targets_devices(target):
    """`Mesh(np.array(jax.devices()[:4]), ...)` at import: on a TPU target
    the program sees the slice's chips (not the one CPU device that
    compiles for it), and its mesh lays them out as it chose."""
    if target != "cpu":
        require("libtpu", "TPU targets")
    report = report_of("compile", SHARD_MAP, "--fn", "matmul_allgather",
                       "--mesh", "i=4", "--arg", "lhs_block=f32[16,8]",
                       "--arg", "rhs_block=f32[8,16]", "--target", target)
    assert kinds(report) == ["all-gather"]
    assert report["collectives"][0]["mesh_axes"] == ["i"]
    assert report["collectives"][0]["source"]["file"].endswith("shard_map_tutorial.py")


@pytest.mark.parametrize("target, mesh", [
    ("cpu", "batch=8"),
    pytest.param("tpu-v5e:2x2", "batch=4", marks=pytest.mark.tpu)])
def test_jax_options_and_device_counts_at_import(target, mesh):
    """`jax.config.update("jax_num_cpu_devices", 8)` at import runs before
    JAX's backends start; `jax.device_count()` there is the target's."""
    if target != "cpu":
        require("libtpu", "TPU targets")
    report = report_of("compile", EQUINOX, "--fn", "train_step", "--args", "args",
                       "--mesh", mesh, "--target", target)
    assert kinds(report) == ["all-reduce"]
    assert report["collectives"][0]["mesh_axes"] == ["batch"]


def test_a_program_that_sets_too_few_cpu_devices_is_told_so(write):
    text = open(EQUINOX).read().replace('"jax_num_cpu_devices", 8',
                                        '"jax_num_cpu_devices", 2')
    done = run_irshard("compile", write("few.py", text), "--fn", "train_step",
                       "--args", "args", "--mesh", "batch=8")
    assert done.returncode == 2
    assert done.stderr == (
        "irshard: error: the mesh needs 8 devices but cpu has 2; the program "
        "sets jax_num_cpu_devices=2: set it to 8 or more, or leave it to irshard\n")


def test_check_of_constraints_on_the_programs_own_mesh():
    """The step constrains values to NamedShardings of its own 8-device
    mesh; one device cannot trace it again, so the reference is the traced
    module with its shardings stripped, run on one device."""
    report = report_of("run", EQUINOX, "--fn", "train_step", "--args", "args",
                       "--mesh", "batch=8", "--check")
    check = report["run"]["check"]
    assert check["passed"] is True
    assert [o["name"] for o in check["outputs"]] == ["result/b", "result/w"]
    assert all(o["reference"] == "unsharded" for o in check["outputs"])


COOKBOOK = os.path.join(PROGRAMS, "cookbook_style.py")
MOE = os.path.join(PROGRAMS, "gshard_moe.py")


def test_a_combined_bf16_gradient_all_reduce_has_the_programs_bytes():
    """XLA combines the bf16 weight gradients' all-reduces into one tuple
    all-reduce, which the CPU backend runs in f32: the report gives the
    program's bf16 bytes (every parameter once), marked as widened."""
    report = report_of("compile", COOKBOOK, "--fn", "train_step", "--args", "args",
                       "--mesh", "data=4", "--shard", "tokens=data,_",
                       "--shard", "targets=data,_")
    [reduce] = report["collectives"]
    assert reduce["kind"] == "all-reduce" and reduce["operands"] == 5
    params = 2 * (64 * 256 + 256 * 64) + 64 * 16
    assert (reduce["dtype"], reduce["backend_dtype"]) == ("bf16", "f32")
    assert reduce["bytes"] == params * 2
    assert any("runs 1 bf16 collective in f32" in n for n in report["notes"])


def test_a_split_bf16_all_to_all_has_the_programs_bytes():
    """The dispatch and the way back are bf16 all-to-alls that XLA splits
    into tuple all-to-alls of four parts: bf16 bytes, the same for both."""
    report = report_of("compile", MOE, "--fn", "moe_layer", "--args", "args",
                       "--mesh", "expert=4", "--shard", "params/experts/*=expert,_,_",
                       "--shard", "tokens=expert,_,_")
    alls = report["collectives"]
    assert [c["kind"] for c in alls] == ["all-to-all", "all-to-all"]
    # [groups=8, experts=4, capacity=4, model=16] bf16, a quarter per device.
    assert [(c["dtype"], c["bytes"]) for c in alls] == [("bf16", 8 * 4 * 4 * 16 * 2 // 4)] * 2
    assert all(c["backend_dtype"] == "f32" and c["operands"] == 4 for c in alls)


MIXED = os.path.join(PROGRAMS, "mixed_precision.py")


def test_check_of_a_mixed_precision_step_uses_its_compute_precision():
    """f32 parameters, bf16 matmuls, f32 loss and gradients: the float64
    run keeps the bf16 casts, so it is no truth; the outputs are held to
    bf16 tolerances and pass (with f32 tolerances they failed by 5000x)."""
    report = report_of("run", MIXED, "--fn", "grad_step", "--args", "args",
                       "--mesh", "dp=2,tp=4", "--shard", "params/w1=_,tp",
                       "--shard", "params/w2=tp,_", "--shard", "x=dp,_",
                       "--shard", "y=dp,_", "--check")
    check = report["run"]["check"]
    assert check["passed"] is True
    assert [(o["name"], o["precision"], o["reference"], o["rtol"])
            for o in check["outputs"]] == [
        (name, "bf16", "unsharded", 1e-2)
        for name in ("result/0", "result/1/w1", "result/1/w2")]
    # The sharded gradients do differ from the single-device ones, by
    # bf16 rounding: more than f32's tolerances would allow.
    assert all(o["max_abs_error"] > 1e-4 for o in check["outputs"][1:])


LM1B = os.path.join(PROGRAMS, "lm1b_style.py")
LM1B_SHARDS = ("--mesh", "data=2,model=2", "--shard", "state/*/mlp/wi=_,model",
               "--shard", "state/*/mlp/wo=model,_", "--shard", "batch/*=data,_")


def in_use(memory):
    return (memory["argument_bytes"] + memory["output_bytes"]
            + memory["temp_bytes"] - memory.get("alias_bytes", 0))


@pytest.mark.slow
def test_the_programs_own_jit_options_count():
    """`jax.jit(train_step, static_argnums=2, donate_argnums=0)`: the config
    (ints and a callable) is static, the train state donated, so the memory
    verdict counts it once."""
    jitted = report_of("compile", LM1B, "--fn", "p_train_step", "--args", "args",
                       *LM1B_SHARDS)
    donated = [t["name"] for t in jitted["inputs"] if t.get("donated")]
    assert donated == [t["name"] for t in jitted["inputs"]
                       if t["name"].startswith("state/")]
    assert "batch/inputs" not in donated and len(donated) == 7
    # The same function unjitted, told nothing: the config's callable
    # passes through as it is and its numbers are traced, as jax.jit would
    # trace them; named static (by number), the config is no input at all
    # and nothing is donated.
    told_nothing = report_of("compile", LM1B, "--fn", "train_step", "--args",
                             "args", *LM1B_SHARDS)
    assert any(t["name"].startswith("config/") for t in told_nothing["inputs"])
    assert ("passed as they are (static): config/learning_rate_fn (function)"
            in told_nothing["notes"][-1])
    plain = report_of("compile", LM1B, "--fn", "train_step", "--args", "args",
                      *LM1B_SHARDS, "--static", "2")
    assert not any(t["name"].startswith("config/") for t in plain["inputs"])
    assert not any(t.get("donated") for t in plain["inputs"])
    assert plain["memory"].get("alias_bytes", 0) == 0
    state = sum(4 * (128 * 64 + 64 * 128 + 128 * 64) for _ in ("params", "mu"))
    assert jitted["memory"]["alias_bytes"] >= state
    # XLA's temporaries change with the aliasing; the total still drops.
    assert in_use(jitted["memory"]) < in_use(plain["memory"])


@pytest.mark.slow
def test_donate_by_name_number_and_path():
    def donated(*flags):
        report = report_of("compile", LM1B, "--fn", "train_step", "--args",
                           "args", *LM1B_SHARDS, "--static", "config", *flags)
        return [t["name"] for t in report["inputs"] if t.get("donated")]

    everything = ["state/mu/embed", "state/mu/mlp/wi", "state/mu/mlp/wo",
                  "state/params/embed", "state/params/mlp/wi",
                  "state/params/mlp/wo", "state/step"]
    assert donated("--donate", "state") == everything
    assert donated("--donate", "0") == everything
    assert donated("--donate", "state/params/**") == everything[3:6]
    assert donated("--donate", "state/*/embed", "--donate", "state/step") == [
        "state/mu/embed", "state/params/embed", "state/step"]
    done = run_irshard("compile", LM1B, "--fn", "train_step", "--args", "args",
                       *LM1B_SHARDS, "--static", "config", "--donate", "opt")
    assert done.returncode == 2
    assert done.stderr.startswith("irshard: error: --donate opt: 'opt' matches "
                                  "no input; the inputs are state/mu/embed, ")


def test_a_donating_step_runs_repeatedly_and_checks():
    report = report_of("run", LM1B, "--fn", "p_train_step", "--args", "args",
                       *LM1B_SHARDS, "--check", "--repeat", "3")
    assert report["run"]["check"]["passed"] is True
    assert report["run"]["timing"]["runs"] == 3


def on_a_terminal(*args, env=None):
    """`irshard ARGS` with stdout and stderr on a pseudo-terminal: what a
    person sees (both streams, in order)."""
    import pty
    import subprocess
    import sys
    try:
        master, slave = pty.openpty()
    except OSError as e:             # a container without /dev/pts
        pytest.skip(f"no pseudo-terminal here: {e}")
    process = subprocess.Popen([sys.executable, "-m", "irshard", *args],
                               stdout=slave, stderr=slave, stdin=subprocess.DEVNULL,
                               env=dict(os.environ, **(env or {})))
    os.close(slave)
    seen = b""
    while True:
        try:
            chunk = os.read(master, 1 << 16)
        except OSError:
            break
        if not chunk:
            break
        seen += chunk
    os.close(master)
    assert process.wait() == 0, seen.decode()
    return seen.decode().replace("\r\n", "\n")


LM1B_RUN = ("run", LM1B, "--fn", "p_train_step", "--args", "args", *LM1B_SHARDS)


@pytest.mark.slow
def test_a_terminal_gets_folded_tables_and_no_layouts():
    """On a terminal, `run` leaves the layouts out and cuts tables longer
    than 20 rows; --full and a pipe get everything."""
    from irshard.reporting.text import FOLDED_ROWS
    assert FOLDED_ROWS == 20
    text = on_a_terminal(*LM1B_RUN)
    assert "\nlayout\n" not in text
    assert "layout: where each of the 16 inputs and outputs lives is left out " \
           "(--full shows it; irshard show draws it)" in text
    full = on_a_terminal(*LM1B_RUN, "--full")
    assert "\nlayout\n" in full and "every block on devices" in full
    piped = run_irshard(*LM1B_RUN)
    assert "\nlayout\n" in piped.stdout
    assert len(full.splitlines()) > len(text.splitlines()) + 40


@pytest.mark.slow
def test_long_tables_fold_to_their_heaviest_rows(write):
    """60 inputs, 59 outputs, 15 collectives: 20 rows each at most."""
    from tests.conftest import EXAMPLES
    gpt = ("compile", os.path.join(EXAMPLES, "gpt.py"), "--fn", "train_step",
           "--args", "example_args", "--mesh", "fsdp=8", "--shard", "**/embed=fsdp,_",
           "--shard", "**/w*=fsdp,_", "--shard", "batch/*=fsdp,_")
    text = on_a_terminal(*gpt)
    assert "  ... 40 more inputs (--full lists every one)" in text
    assert "  ... 39 more outputs (--full lists every one)" in text
    full = on_a_terminal(*gpt, "--full")
    assert "more inputs" not in full and "params/layers/1/norm2" in full


MANY = '''import jax
import jax.numpy as jnp


def many(x: "f32[64@x,64]", w: "f32[64,64@x]"):
    for _ in range(12):
        x = jnp.tanh(x @ w)
        x = jax.lax.with_sharding_constraint(x, jax.P("x", None))
        x = x - x.mean(axis=0)
        x = jnp.roll(x, 1, axis=0)
    return x
'''


def test_a_folded_collectives_table_is_summed_by_source_line(write):
    """25 collectives from three lines: the folded table has the 20
    heaviest, and a table by source line has every line, heaviest first."""
    path = write("many.py", MANY)
    text = on_a_terminal("compile", path, "--mesh", "x=4")
    assert "collectives (the 20 that move the most bytes per run, of 25)" in text
    by_line = text.split("\nby source line (3 lines)\n", 1)[1].split("\n\n")[0]
    assert by_line.splitlines() == [
        "  source             collectives  kinds               bytes per run",
        "  many.py:7 (many)             1  all-gather                  16384",
        "  many.py:10 (many)           12  collective-permute           3072",
        "  many.py:9 (many)            12  all-reduce                   3072"]
    full = on_a_terminal("compile", path, "--mesh", "x=4", "--full")
    assert "by source line" not in full and "collective-permute.11" in full


@pytest.mark.slow
def test_a_long_compile_shows_progress_on_a_terminal():
    """Past a few seconds (here: at once) a compile says what it is doing,
    on the terminal's stderr, and clears the line when done."""
    from tests.conftest import EXAMPLES
    gpt = ("compile", os.path.join(EXAMPLES, "gpt.py"), "--fn", "train_step",
           "--args", "example_args", "--mesh", "fsdp=8")
    text = on_a_terminal(*gpt, env={"IRSHARD_PROGRESS_AFTER": "0"})
    assert text.startswith("\rirshard: compiling with XLA for 8 devices... ")
    line = text.split("\n", 1)[0]
    # Cleared before the report starts.
    assert line.rsplit("\r", 2)[-2].strip() == ""
    assert line.rsplit("\r", 1)[-1].startswith(os.path.join(EXAMPLES, "gpt.py"))
    piped = run_irshard(*gpt)
    assert piped.returncode == 0 and "compiling" not in piped.stderr


@pytest.mark.parametrize("flags, message", [
    (("--donate", "9"), "--donate 9: 'train_step' takes 3 arguments (state, "
                        "batch, config); argument numbers count from 0"),
    (("--donate", "config"), "--donate config: 'config' is a static argument of "
                             "'train_step'; only traced arrays are donated"),
    (("--static", "7"), "--static 7: 'train_step' takes 3 arguments (state, "
                        "batch, config); argument numbers count from 0"),
])
def test_donate_and_static_mistakes_are_one_error_line(flags, message):
    done = run_irshard("compile", LM1B, "--fn", "train_step", "--args", "args",
                       "--mesh", "data=2,model=2", "--static", "config", *flags)
    assert done.returncode == 2
    assert done.stderr == f"irshard: error: {message}\n"


def test_non_array_leaves_pass_through_as_static():
    """Equinox's modules hold functions and strings beside their arrays, in
    the arguments and in the model a step returns: those leaves are passed
    as they are, the compiled program has the arrays, and the report says
    which leaves were left as they were."""
    report = report_of("run", EQUINOX, "--fn", "make_step", "--args",
                       "model_args", "--mesh", "batch=8", "--check")
    assert [t["name"] for t in report["inputs"]] == [
        "model/0/weight", "model/0/bias", "model/1/weight", "model/1/bias",
        "x", "y"]
    assert [t["name"] for t in report["outputs"]] == [
        "result/0", "result/1/0/weight", "result/1/0/bias",
        "result/1/1/weight", "result/1/1/bias"]
    assert kinds(report) == ["all-reduce"]
    assert report["run"]["check"]["passed"] is True
    notes = "\n".join(report["notes"])
    assert ("inputs that are not arrays are passed as they are (static): "
            "model/0/activation (custom_jvp), model/0/name (str), "
            "model/1/activation (PjitFunction), model/1/name (str)") in notes
    assert ("outputs that are not arrays are left out of the compiled "
            "program: result/1/0/activation (custom_jvp)") in notes


@pytest.mark.slow
def test_ref_arguments_are_updated_in_place():
    """The cookbook's train state is a pytree of `jax.Ref`s the step writes:
    each ref leaf is an input donated to its final value, an output named
    `updated(train_state)/...`; the step's gradient all-reduce is there and
    the run matches one device."""
    report = report_of("run", COOKBOOK, "--fn", "train_step_refs", "--args",
                       "ref_args", "--mesh", "data=4", "--shard",
                       "tokens=data,_", "--shard", "targets=data,_", "--check")
    state = [t for t in report["inputs"] if t["name"].startswith("train_state/")]
    assert len(state) == 15 and all(t.get("donated") for t in state)
    assert not any(t.get("donated") for t in report["inputs"]
                   if t["name"] in ("tokens", "targets"))
    outputs = [t["name"] for t in report["outputs"]]
    assert outputs[0] == "result/train_loss"
    assert outputs[1:] == ["updated(" + t["name"].replace("/", ")/", 1)
                           for t in state]
    # One all-reduce: every f32 gradient and the loss (the writes to the
    # refs are what need the gradients).
    assert kinds(report) == ["all-reduce"]
    params = 4 * (2 * 2 * 64 * 256 + 64 * 16)
    assert report["collectives"][0]["bytes"] == params + 4
    assert report["run"]["check"]["passed"] is True


def test_grad_of_a_step_that_writes_refs_is_one_error_line():
    done = run_irshard("compile", COOKBOOK, "--fn", "train_step_refs", "--args",
                       "ref_args", "--mesh", "data=4", "--grad")
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr.startswith(
        "irshard: error: --grad: 'train_step_refs' takes jax.Ref arguments "
        "(train_state/opt/layers/0/in_kernel/count, ")
    assert len(done.stderr.splitlines()) == 1
