"""libtpu's collective fusions read as the collectives they run: an
asynchronous collective fusion chain (start, fusions computing while it runs,
done) is one collective, counted, timed and attributed once; an
all-reduce-scatter fusion is a reduce-scatter, at its result's bytes and the
fusion's line."""

import os

import pytest

from irshard.collectives import analysis
from irshard.core.specs import parse_mesh
from irshard.timemodel import schedule
from irshard.xla import tpufusions, hloscan
from irshard.xla.hlo import HloModuleView

DATA = os.path.join(os.path.dirname(__file__), "data", "tpu")


def _text(name):
    with open(os.path.join(DATA, name)) as f:
        return f.read()


# The two HLO readers: XLA's parser, and the scan that streams a large
# module's text.
READERS = {"parsed": HloModuleView.from_text,
           "scanned": hloscan.ScannedModule.from_text}


def _module_fixture(name, path):
    """A fixture `name`: the module in `path`, read by each reader."""
    @pytest.fixture(name=name, params=sorted(READERS))
    def read(request):
        return READERS[request.param](_text(path))
    return read


# Hand-trimmed from libtpu 0.0.42.1's executable of an FSDP step for a v5e
# 4x4 slice: a synchronous all-gather (channel 2), then chain 0 (channel 4):
# its start fusion, one fusion computing while it runs, its done fusion,
# each holding a copy of all-gather(bf16[16,256]) -> bf16[256,256].
CHAIN = "v5e_async_all_gather.hlo"


chain_view = _module_fixture("chain_view", CHAIN)


def test_the_fixture_holds_the_chain_three_times():
    """What the test below counts once is there three times."""
    text = _text(CHAIN)
    assert text.count('chain_id="0"') == 3
    assert text.count('custom_call_target="AsyncCollectiveStart"') == 1
    assert text.count('custom_call_target="AsyncCollectiveDone"') == 1
    assert "calls=%async_collective_fusion.34" in text


def test_an_async_collective_fusion_chain_is_one_collective(chain_view):
    found = analysis.collectives(chain_view, parse_mesh("fsdp=16"), None)
    assert [(c.name, c.kind, c.is_async) for c in found] == [
        ("all-gather.56", "all-gather", False),
        ("all-gather.33", "all-gather", True)]
    chained = found[1]
    # Gathered per device: bf16[256,256], of which each device had 1/16.
    assert chained.shape == (256, 256) and chained.dtype == "bf16"
    assert chained.bytes == 256 * 256 * 2
    assert chained.wire_bytes == 256 * 256 * 2 * 15 // 16
    assert chained.mesh_axes == ("fsdp",) and chained.group_size == 16
    # The start's own metadata: stack frame 3, fsdp.py line 9.
    assert (str(chained.source), chained.attribution) == \
        ("fsdp.py:9 (loss_fn)", "metadata")


def test_fusion_roles_are_read_from_the_called_computations_root(chain_view):
    roles = {}
    for inst in chain_view.visits(chain_view.entry):
        if inst.opcode == "fusion":
            roles[inst.name] = tpufusions.role(chain_view, inst)
    assert roles["async-collective-start"] == tpufusions.START
    assert roles["async-collective-done"] == tpufusions.DONE
    assert roles["fusion.34"] is None


def test_a_chain_is_timed_once_between_its_start_and_done():
    """The step's communication is the report's: the chain's all-gather
    runs once, beside the fusion computing in between."""
    view = HloModuleView.from_text(_text(CHAIN))
    found = analysis.collectives(view, parse_mesh("fsdp=16"), None)
    seconds = {"all-gather.56": 3.0, "all-gather.33": 5.0}
    assert {c.name for c in found} == set(seconds)
    timed = []

    def collective_s(inst):
        timed.append(inst.name)
        return seconds.get(inst.name, 0.0), inst.name

    rates = schedule.Rates(peak_flops=1e30, memory_bandwidth=1e30,
                           overhead_s=1.0)
    step = schedule.simulate(view, rates, collective_s)
    assert sorted(timed) == sorted(seconds)
    assert step.exposed_comm_s + step.overlapped_comm_s == \
        pytest.approx(sum(seconds.values()))
    # The fusion between start and done computes while the chain runs.
    assert step.overlapped_comm_s > 0


# An FSDP step written with explicit collectives: each of LAYERS weights
# (DIM x DIM, bf16) is sharded over `fsdp` by rows, gathered whole for the
# forward pass, and its gradient reduce-scattered back to its shard.
LAYERS, DIM, BATCH = 3, 256, 64


def _fsdp_step(weights, x):
    import jax
    import jax.numpy as jnp

    def loss(full, x):
        h = x
        for w in full:
            h = jnp.tanh(h @ w)
        return jnp.mean(h.astype(jnp.float32) ** 2)

    def local(weights, x):
        full = [jax.lax.all_gather(w, "fsdp", axis=0, tiled=True)
                for w in weights]
        value, grads = jax.value_and_grad(loss)(full, x)
        grads = [jax.lax.psum_scatter(g, "fsdp", scatter_dimension=0, tiled=True)
                 for g in grads]
        return ([w - 0.01 * g for w, g in zip(weights, grads)],
                jax.lax.pmean(value, "fsdp"))

    from jax.sharding import PartitionSpec as P
    return jax.shard_map(local, in_specs=([P("fsdp")] * LAYERS, P("fsdp")),
                         out_specs=([P("fsdp")] * LAYERS, P()),
                         check_vma=False)(weights, x)


@pytest.mark.tpu
@pytest.mark.parametrize("target, mesh, fsdp", [
    ("tpu-v5e:4x4", "fsdp=4,tp=4", 4), ("tpu-v6e:4x4", "fsdp=4,tp=4", 4),
    ("tpu-v5p:2x2x2", "fsdp=4,tp=2", 4), ("tpu-v4:2x2x2", "fsdp=8", 8),
])
def test_an_fsdp_steps_gathers_and_reduce_scatters_on_a_tpu_slice(target, mesh, fsdp):
    """What the program does, on each TPU generation: LAYERS all-gathers of
    a whole weight (libtpu runs some as asynchronous fusion chains) and
    LAYERS gradient reductions, each counted once. A reduce-scatter is
    reported at its shard's bytes; where libtpu runs the gradients' reduction
    as one all-reduce of the whole gradients (v4 and v6e, sliced after),
    that is what is reported, at the whole gradients' bytes."""
    from tests.conftest import require
    require("libtpu", "TPU targets")
    import irshard
    import jax
    import jax.numpy as jnp
    weights = [jax.ShapeDtypeStruct((DIM, DIM), jnp.bfloat16)] * LAYERS
    x = jax.ShapeDtypeStruct((BATCH, DIM), jnp.bfloat16)
    report = irshard.compile(_fsdp_step, weights, x, mesh=mesh, target=target,
                             rules=[("**", "fsdp,_")])
    whole, shard = DIM * DIM * 2, DIM // fsdp * DIM * 2
    by_kind = {}
    for c in report.collectives:
        by_kind.setdefault(c.kind, []).append(c)
    gathers = by_kind.get("all-gather", [])
    assert sum(c.executions * c.operands for c in gathers) == LAYERS
    assert {(c.shape, c.bytes // c.operands) for c in gathers} == {((DIM, DIM), whole)}
    scatters = by_kind.get("reduce-scatter", [])
    for c in scatters:
        assert (c.shape, c.bytes // c.operands, c.group_size, c.mesh_axes) == \
            ((DIM // fsdp, DIM), shard, fsdp, ("fsdp",))
        assert c.wire_bytes == c.bytes * (fsdp - 1)
        assert c.source is not None and c.source.file.endswith("test_tpu_fusions.py")
    reduced = [c for c in by_kind.get("all-reduce", []) if c.bytes >= shard]
    for c in reduced:
        assert (c.shape, c.bytes // c.operands) == ((DIM, DIM), whole)
    assert sum(c.executions * c.operands for c in scatters + reduced) == LAYERS
    if "v5e" in target or "v5p" in target:
        # Where libtpu keeps them: no all-reduce of a gradient's size.
        assert len(scatters) == LAYERS and not reduced
    totals = report.totals()
    assert totals["bytes_per_run"] == sum(c.bytes * c.executions
                                          for c in report.collectives)


# libtpu 0.0.42.1's executable of a row-parallel product for a v5e 2x2
# slice, `x @ w` summed over `t` and kept sharded over its columns
# (`tp.py:7`): the reduce-scatter runs as a fusion whose computation
# all-reduces bf16[256,1024] and slices this device's bf16[256,256].
REDUCE_SCATTER = "v5e_all_reduce_scatter.hlo"


scatter_view = _module_fixture("scatter_view", REDUCE_SCATTER)


def test_an_all_reduce_scatter_fusion_is_one_reduce_scatter(scatter_view):
    """Its kind, its result's shape and bytes, reduce-scatter's wire bytes,
    the all-reduce's groups, and the fusion's own line: the all-reduce
    inside carries no metadata, and is not counted besides."""
    text = _text(REDUCE_SCATTER)
    assert text.count(" all-reduce(") == 1 and "calls=%all-reduce-scatter," in text
    found = analysis.collectives(scatter_view, parse_mesh("t=4"), None)
    assert [(c.name, c.kind) for c in found] == [("fusion", "reduce-scatter")]
    (c,) = found
    assert (c.dtype, c.shape, c.bytes) == ("bf16", (256, 256), 256 * 256 * 2)
    assert c.wire_bytes == c.bytes * 3
    assert (c.mesh_axes, c.group_size, c.operands) == (("t",), 4, 1)
    assert (str(c.source), c.attribution) == ("tp.py:7 (f)", "metadata")
    assert c.scope is None and c.op_name == "jit(f)/dot_general"


def test_an_all_reduce_scatter_fusion_is_timed_as_the_collective():
    """The step runs the fusion as the report's reduce-scatter (by the
    fusion's name) on the collectives' stream, not as compute."""
    view = HloModuleView.from_text(_text(REDUCE_SCATTER))
    timed = []

    def collective_s(inst):
        timed.append(inst.name)
        return 7.0, inst.name

    rates = schedule.Rates(peak_flops=1e30, memory_bandwidth=1e30,
                           overhead_s=1.0)
    step = schedule.simulate(view, rates, collective_s)
    assert timed == ["fusion"]
    assert step.exposed_comm_s + step.overlapped_comm_s == pytest.approx(7.0)


def test_a_fusion_slicing_a_tuple_all_reduce_is_one_reduce_scatter():
    """The same fusion over several inputs: its root a tuple of slices of
    one combined all-reduce's results (each `get-tuple-element`)."""
    text = _text(REDUCE_SCATTER)
    text = text.replace(
        "%all-reduce-scatter (input: bf16[256,1024]) -> bf16[256,256] {",
        "%all-reduce-scatter (input: bf16[256,1024]) -> (bf16[256,256], bf16[256,256]) {")
    text = text.replace(
        "%all-reduce.2 = bf16[256,1024]{1,0:T(8,128)(2,1)} all-reduce(%input)",
        "%all-reduce.2 = (bf16[256,1024]{1,0:T(8,128)(2,1)}, bf16[256,1024]{1,0:T(8,128)(2,1)}) "
        "all-reduce(%input, %input)")
    root = next(line for line in text.splitlines()
                if line.lstrip().startswith("ROOT %dynamic-slice.3"))
    pieces = []
    for i in range(2):
        pieces.append(f"  %gte.{i} = bf16[256,1024]{{1,0:T(8,128)(2,1)}} "
                      f"get-tuple-element(%all-reduce.2), index={i}")
        pieces.append(root.replace("ROOT %dynamic-slice.3", f"%slice.{i}")
                      .replace("dynamic-slice(%all-reduce.2", f"dynamic-slice(%gte.{i}"))
    pieces.append("  ROOT %both = (bf16[256,256]{1,0:T(8,128)(2,1)}, "
                  "bf16[256,256]{1,0:T(8,128)(2,1)}) tuple(%slice.0, %slice.1)")
    text = text.replace(root, "\n".join(pieces))
    text = text.replace(
        "ROOT %fusion = bf16[256,256]{1,0:T(8,128)(2,1)} fusion(%fusion.1)",
        "%fusion = (bf16[256,256]{1,0:T(8,128)(2,1)}, bf16[256,256]{1,0:T(8,128)(2,1)}) "
        "fusion(%fusion.1)")
    entry = text.rsplit("\n}", 1)
    text = entry[0] + ("\n  ROOT %first = bf16[256,256]{1,0:T(8,128)(2,1)} "
                       "get-tuple-element(%fusion), index=0\n}") + entry[1]
    for view in (read(text) for read in READERS.values()):
        found = analysis.collectives(view, parse_mesh("t=4"), None)
        assert [(c.name, c.kind, c.operands, c.bytes) for c in found] == [
            ("fusion", "reduce-scatter", 2, 2 * 256 * 256 * 2)]


FSDP_LAYERS, FSDP_DIM = 4, 1024


def _gspmd_fsdp_step(ws, x):
    """A scanned stack of FSDP layers: weights sharded over `fsdp` by
    columns (rules), gathered for each layer, gradients summed over the
    batch's shards and kept sharded as the weights."""
    import jax
    import jax.numpy as jnp
    from jax.sharding import PartitionSpec as P

    def loss(ws, x):
        def layer(h, w):
            return jnp.tanh(h @ w), None
        h, _ = jax.lax.scan(layer, x, ws)
        return jnp.mean(h.astype(jnp.float32) ** 2)

    grads = jax.grad(loss)(ws, x)
    grads = jax.lax.with_sharding_constraint(grads, P(None, None, "fsdp"))
    return ws - 0.01 * grads


@pytest.mark.tpu
@pytest.mark.parametrize("target", ["tpu-v5e:2x2", "tpu-v4:2x2x1", "tpu-v5p:2x2x1",
                                    "tpu-v6e:2x2"])
def test_an_fsdp_steps_gradient_reduce_scatters_on_every_generation(target):
    """The partitioner sums each layer's gradient with an all-reduce and
    slices it; libtpu runs that as an all-reduce-scatter fusion. Reported:
    a reduce-scatter a layer (FSDP_LAYERS runs), at the gradient shard's
    bytes, over `fsdp`, at the fusion's line, and no all-reduce of a whole
    gradient."""
    from tests.conftest import require
    require("libtpu", "TPU targets")
    import irshard
    import jax
    import jax.numpy as jnp
    ws = jax.ShapeDtypeStruct((FSDP_LAYERS, FSDP_DIM, FSDP_DIM), jnp.bfloat16)
    x = jax.ShapeDtypeStruct((256, FSDP_DIM), jnp.bfloat16)
    report = irshard.compile(_gspmd_fsdp_step, ws, x, mesh="fsdp=4", target=target,
                             rules=[("ws", "_,_,fsdp"), ("x", "fsdp,_")])
    shard = FSDP_DIM * FSDP_DIM // 4 * 2
    scatters = [c for c in report.collectives if c.kind == "reduce-scatter"]
    assert sum(c.executions for c in scatters) == FSDP_LAYERS
    for c in scatters:
        assert (c.dtype, c.bytes, c.wire_bytes) == ("bf16", shard, shard * 3)
        assert (c.mesh_axes, c.group_size) == (("fsdp",), 4)
        assert c.source is not None and c.source.file.endswith("test_tpu_fusions.py")
    assert not [c for c in report.collectives
                if c.kind == "all-reduce" and c.bytes >= shard]
    # The partitioner's own module has the all-reduce the fusion performs.
    partitioned = report.stage("partitioned")
    assert "all-reduce(" in partitioned and "reduce-scatter(" not in partitioned
