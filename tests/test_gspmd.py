"""Modules other exporters wrote: GSPMD `mhlo.sharding` strings, Shardy's
attributes kept as frontend attributes (older `jax.export`), no locations."""

import json

import pytest

from tests.conftest import run_irshard

GSPMD = """\
module @jit_f attributes {mhlo.num_partitions = 8 : i32, mhlo.num_replicas = 1 : i32} {
  func.func public @main(%arg0: tensor<16x8xf32> {mhlo.sharding = "{devices=[1,4,2]<=[8] last_tile_dim_replicate}"}, %arg1: tensor<8x4xf32> {mhlo.sharding = "{replicated}"}) -> (tensor<16x4xf32> {mhlo.sharding = "{devices=[4,2]<=[8]}"}) {
    %0 = stablehlo.dot_general %arg0, %arg1, contracting_dims = [1] x [0] : (tensor<16x8xf32>, tensor<8x4xf32>) -> tensor<16x4xf32>
    return %0 : tensor<16x4xf32>
  }
}
"""

FRONTEND = r"""module @jit_f attributes {mhlo.frontend_attributes = {xla.sdy.meshes = "{mesh = #sdy.mesh<[\22x\22=2, \22y\22=2]>}"}, mhlo.num_partitions = 4 : i32, mhlo.num_replicas = 1 : i32} {
  func.func public @main(%arg0: tensor<8x16xf32> {mhlo.frontend_attributes = {xla.sdy.sharding = "#sdy.sharding<@mesh, [{\22x\22}, {\22y\22}]>"}, mhlo.sharding = "{devices=[2,2]<=[4]}"}, %arg1: tensor<16x8xf32> {mhlo.frontend_attributes = {xla.sdy.sharding = "#sdy.sharding<@mesh, [{\22y\22}, {}]>"}, mhlo.sharding = "{devices=[2,1,2]<=[4] last_tile_dim_replicate}"}) -> (tensor<8x8xf32>) {
    %0 = stablehlo.dot_general %arg0, %arg1, contracting_dims = [1] x [0] : (tensor<8x16xf32>, tensor<16x8xf32>) -> tensor<8x8xf32>
    %1 = stablehlo.tanh %0 : tensor<8x8xf32>
    return %1 : tensor<8x8xf32>
  }
}
"""


def compile_json(path, *options):
    result = run_irshard("compile", path, "--format", "json", *options)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_gspmd_shardings_are_read_over_the_given_mesh(write):
    path = write("gspmd.mlir", GSPMD)
    report = compile_json(path, "--mesh", "x=4,y=2")
    # {replicated} stays replicated (the compiler may not move it); the
    # tiling with a replicated last dimension is x over dimension 1.
    assert [(t["name"], t["sharding"], t["local_shape"]) for t in report["inputs"]] == [
        ("arg0", ["_", "x"], [16, 2]), ("arg1", ["_", "_"], [8, 4])]
    assert report["outputs"][0]["sharding"] == ["x", "y"]
    # arg1 is whole on every device and arg0 split along the contraction:
    # arg0's blocks are exchanged to split its rows instead. The line is the
    # module's own.
    assert [(c["kind"], c["mesh_axes"]) for c in report["collectives"]] == [
        ("all-to-all", ["x"])]
    assert {c["source"]["file"] for c in report["collectives"]} == {"gspmd.mlir"}
    assert report["collectives"][0]["source"]["line"] == 3
    assert report["source"] == path


def test_without_a_mesh_one_is_inferred_and_said(write):
    path = write("gspmd.mlir", GSPMD)
    report = compile_json(path)
    assert report["mesh"]["axes"] == [{"name": "x", "size": 4}, {"name": "y", "size": 2}]
    assert [t["sharding"] for t in report["inputs"]] == [["_", "x"], ["_", "_"]]
    assert any("inferred from the module's mhlo.sharding" in n for n in report["notes"])


def test_a_mesh_the_tiling_does_not_fit_is_one_error_line(write):
    path = write("gspmd.mlir", GSPMD)
    result = run_irshard("compile", path, "--mesh", "x=8")
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        f"irshard: error: {path}: argument 0 has mhlo.sharding \"{{devices=[1,4,2]"
        f"<=[8] last_tile_dim_replicate}}\", which is not a sharding over the mesh "
        f"x=8 (8 devices); give a --mesh whose axes it tiles (its tile counts: "
        f"1x4x2)"]


@pytest.mark.parametrize("sharding,what", [
    ("{maximal device=1}", "puts it on one device"),
    ("{manual}", "is manual"),
])
def test_gspmd_shardings_that_are_no_mesh_sharding(write, sharding, what):
    path = write("m.mlir", GSPMD.replace("{replicated}", sharding))
    result = run_irshard("compile", path, "--mesh", "x=4,y=2")
    assert result.returncode == 2
    assert len(result.stderr.splitlines()) == 1
    assert f"argument 1 has mhlo.sharding \"{sharding}\", which {what}" in result.stderr


def test_frontend_attribute_shardings_of_older_exports(write):
    path = write("front.mlir", FRONTEND)
    report = compile_json(path)
    assert report["mesh"]["axes"] == [{"name": "x", "size": 2}, {"name": "y", "size": 2}]
    assert [t["sharding"] for t in report["inputs"]] == [["x", "y"], ["y", "_"]]
    assert [(c["kind"], c["mesh_axes"]) for c in report["collectives"]] == [
        ("all-reduce", ["y"])]
    result = run_irshard("run", path, "--check", "--format", "json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["run"]["check"]["passed"]


def test_shard_rules_override_gspmd_shardings(write):
    path = write("gspmd.mlir", GSPMD)
    report = compile_json(path, "--mesh", "x=4,y=2", "--shard", "arg1=x,_")
    assert [t["sharding"] for t in report["inputs"]] == [["_", "x"], ["x", "_"]]
    # Both operands now split the contraction the same way: one sum over x.
    assert [(c["kind"], c["mesh_axes"]) for c in report["collectives"]] == [
        ("all-reduce", ["x"])]


MANUAL = """\
module @m attributes {mhlo.num_partitions = 2 : i32} {
  func.func public @main(%arg0: tensor<8xf32> {mhlo.sharding = "{devices=[2]<=[2]}"}) -> (tensor<8xf32> {mhlo.sharding = "{devices=[2]<=[2]}"}) {
    %0 = stablehlo.custom_call @Sharding(%arg0) {mhlo.sharding = "{devices=[2]<=[2]}"} : (tensor<8xf32>) -> tensor<8xf32>
    %1 = stablehlo.custom_call @SPMDFullToShardShape(%0) {mhlo.sharding = "{manual}"} : (tensor<8xf32>) -> tensor<4xf32>
    %2 = stablehlo.multiply %1, %1 : tensor<4xf32>
    %3 = stablehlo.custom_call @Sharding(%2) {mhlo.sharding = "{manual}"} : (tensor<4xf32>) -> tensor<4xf32>
    %4 = stablehlo.custom_call @SPMDShardToFullShape(%3) {mhlo.sharding = "{devices=[2]<=[2]}"} : (tensor<4xf32>) -> tensor<8xf32>
    return %4 : tensor<8xf32>
  }
}
"""


def test_a_gspmd_manual_module_runs_and_check_says_why_it_cannot(write, capsys):
    # XLA's one-device compile of the stripped module fails in its
    # sharding-remover pass; the error said nothing of the reference.
    from irshard import cli
    path = write("manual.mlir", MANUAL)
    assert cli.main(["run", path]) == 0
    capsys.readouterr()
    assert cli.main(["run", path, "--check"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("irshard: error: --check cannot make a single-device "
                          "reference of this module: its GSPMD manual regions")


@pytest.mark.parametrize("given", ["in_shardings", "constraint"])
def test_a_lowering_for_gspmds_propagation_is_refused_not_misread(given):
    """`jax_use_shardy_partitioner=False`: JAX compiles the lowering with
    GSPMD's propagation. irshard's report of it was once over a mesh of one
    device, every sharding lost and the all-gather JAX makes missing; now
    it is one error that says why and what to do, whether the GSPMD
    shardings are the inputs' or a constraint's."""
    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding, PartitionSpec as P

    import irshard
    mesh = jax.make_mesh((4,), ("x",), axis_types=(jax.sharding.AxisType.Auto,),
                         devices=jax.devices()[:4])
    rows = NamedSharding(mesh, P("x", None))

    def f(a, b):
        h = jnp.tanh(a @ b)
        return jax.lax.with_sharding_constraint(h, NamedSharding(mesh, P(None, "x"))) \
            if given == "constraint" else h

    jitted = jax.jit(f, in_shardings=(rows, NamedSharding(mesh, P()))) \
        if given == "in_shardings" else jax.jit(f)
    args = jnp.ones((64, 128)), jnp.ones((128, 64))
    was = jax.config.jax_use_shardy_partitioner
    jax.config.update("jax_use_shardy_partitioner", False)
    try:
        lowered = jitted.lower(*args)
    finally:
        jax.config.update("jax_use_shardy_partitioner", was)
    assert "mhlo.sharding" in lowered.as_text()
    with pytest.raises(irshard.UsageError, match=r"^report: this lowering carries GSPMD "
                       r"shardings .* jax_use_shardy_partitioner=True"):
        irshard.report(lowered)
    # The same program lowered for Shardy is reported.
    report = irshard.report(jitted.lower(*args))
    assert report.mesh.num_devices == 4


def test_under_gspmd_s_propagation_irshard_lowers_for_shardy_and_says_so():
    """With JAX set to GSPMD's propagation, a jitted step's replicated
    input was read open (GSPMD's `{replicated}` string) and shown sharded
    `_,x`; irshard now lowers for Shardy as JAX does by default, reports
    what it reports under Shardy, and says which it ran."""
    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding, PartitionSpec as P

    import irshard
    from irshard.frontend import GSPMD_NOTE
    mesh = jax.make_mesh((4,), ("x",), axis_types=(jax.sharding.AxisType.Auto,),
                         devices=jax.devices()[:4])

    def f(a, b):
        h = jnp.tanh(a @ b)
        return jax.lax.with_sharding_constraint(h, NamedSharding(mesh, P(None, "x")))

    jitted = jax.jit(f, in_shardings=(NamedSharding(mesh, P("x", None)),
                                      NamedSharding(mesh, P())))
    args = jnp.ones((64, 128)), jnp.ones((128, 64))

    def reported():
        report = irshard.compile(jitted, *args)
        return ([(t.name, t.sharding) for t in report.inputs],
                [(c.kind, c.bytes) for c in report.collectives], report.notes)

    shardy = reported()
    was = jax.config.jax_use_shardy_partitioner
    jax.config.update("jax_use_shardy_partitioner", False)
    try:
        gspmd = reported()
        assert not jax.config.jax_use_shardy_partitioner     # left as it was
    finally:
        jax.config.update("jax_use_shardy_partitioner", was)
    assert shardy[0] == gspmd[0] == [("a", ("x", "_")), ("b", ("_", "_"))]
    assert shardy[1] == gspmd[1] == [("all-gather", 32768)]
    assert GSPMD_NOTE not in shardy[2] and GSPMD_NOTE in gspmd[2]


def test_which_partitioner_built_an_executable_irshard_did_not_compile(tmp_path):
    """An XLA dump says which partitioner ran in the module XLA was
    handed (Shardy's meshes as `xla.sdy.` attributes, or GSPMD's bare
    `sharding=`): a dump of GSPMD's compile is said to be GSPMD's, one of
    Shardy's says nothing more. An executable (`jax.stages.Compiled`) and
    a lone HLO file record neither, and their reports say so."""
    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding, PartitionSpec as P

    import irshard
    mesh = jax.make_mesh((4,), ("x",), axis_types=(jax.sharding.AxisType.Auto,),
                         devices=jax.devices()[:4])
    jitted = jax.jit(lambda a, b: jnp.tanh(a @ b),
                     in_shardings=(NamedSharding(mesh, P("x", None)),
                                   NamedSharding(mesh, P())),
                     out_shardings=NamedSharding(mesh, P(None, "x")))
    args = jnp.ones((64, 128)), jnp.ones((128, 64))

    def dumped(shardy: bool):
        folder = tmp_path / ("shardy" if shardy else "gspmd")
        was = jax.config.jax_use_shardy_partitioner
        jax.config.update("jax_use_shardy_partitioner", shardy)
        try:
            compiled = jitted.lower(*args).compile(
                compiler_options={"xla_dump_to": str(folder)})
        finally:
            jax.config.update("jax_use_shardy_partitioner", was)
        found = irshard.collectives_of(str(folder))
        main = [r for r in found.reports if "jit__lambda" in (r.module or "")]
        assert len(main) == 1, [r.module for r in found.reports]
        return compiled, main[0]

    compiled, shardy = dumped(True)
    _, gspmd = dumped(False)
    assert [c.kind for c in shardy.collectives] == \
        [c.kind for c in gspmd.collectives] == ["all-gather"]
    assert not any("partition" in n for n in shardy.notes)
    assert any(n.startswith("XLA partitioned this module with GSPMD's")
               for n in gspmd.notes), gspmd.notes

    report = irshard.report(compiled)
    assert any("which partitioner (Shardy or GSPMD) built this executable is "
               "not recorded in it; JAX is set to Shardy's" in n
               for n in report.notes), report.notes
    lone = tmp_path / "step.hlo"
    lone.write_text(compiled.as_text())
    found = irshard.collectives_of(str(lone))
    assert any(n.startswith("which partitioner (Shardy or GSPMD) made this "
                            "module's collectives is not recorded")
               for n in found.reports[0].notes)
    assert [c.kind for c in found.reports[0].collectives] == ["all-gather"]


@pytest.mark.parametrize("handed, which", [
    # jaxlib 0.10: Shardy's mesh and shardings as frontend attributes.
    ('HloModule jit_f, num_partitions=4, frontend_attributes={xla.sdy.meshes='
     '{mesh = #sdy.mesh<["x"=4]>}}\n  %a.1 = f32[8,8]{1,0} parameter(0), '
     'sharding={devices=[4,1]<=[4]}, frontend_attributes={xla.sdy.sharding='
     '"#sdy.sharding<@mesh, [{\\"x\\"}, {}]>"}\n', "shardy"),
    # jaxlib 0.11 on: named shardings, one array or a tuple.
    ("HloModule jit_f, num_partitions=4\n  %a.1 = f32[64,128]{1,0} parameter(0), "
     "sharding={mesh['x'=4], [{'x'}, {}]}\n", "shardy"),
    ("HloModule jit_f, num_partitions=4\n  %p = (f32[4], f32[4]) parameter(0), "
     "sharding={{mesh['x'=4], [{'x'}]}, {mesh['x'=4], [{}]}}\n", "shardy"),
    # GSPMD's tilings, the forms XLA prints.
    ("HloModule jit_f, num_partitions=4\n  %a.1 = f32[8,8]{1,0} parameter(0), "
     "sharding={devices=[4,1]<=[4]}\n", "gspmd"),
    ("HloModule jit_f, num_partitions=4\n  %a.1 = f32[8,8]{1,0} parameter(0), "
     "sharding={devices=[2,1,2]0,1,2,3 last_tile_dim_replicate}\n", "gspmd"),
    ("HloModule jit_f, num_partitions=4\n  %a.1 = f32[8]{0} parameter(0), "
     "sharding={replicated}\n", "gspmd"),
    # Nothing sharded, or nothing read.
    ("HloModule jit_f, num_partitions=4\n  %a.1 = f32[8]{0} parameter(0)\n", None),
    ("", None),
])
def test_the_partitioner_read_from_the_module_xla_was_handed(handed, which):
    from irshard.collectives import dumps
    assert dumps.partitioner(handed) == which
