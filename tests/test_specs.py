"""The spec grammar: every accepted form, and one clear error per violation."""

import pytest

from irshard.core.errors import SpecError
from irshard.core.specs import (DimSharding, MeshSpec, ShardingSpec, check_sharding,
                           parse_mesh, parse_sharding, parse_type)


@pytest.mark.parametrize("text, axes", [
    ("x=4", [("x", 4)]),
    ("dp=2,tp=4", [("dp", 2), ("tp", 4)]),
    (" dp = 2 , tp=4 ", [("dp", 2), ("tp", 4)]),
    ("_a1=1", [("_a1", 1)]),
])
def test_mesh_valid(text, axes):
    mesh = parse_mesh(text)
    assert [(a.name, a.size) for a in mesh.axes] == axes
    assert mesh.num_devices == __import__("math").prod(s for _, s in axes)


@pytest.mark.parametrize("text, message", [
    ("x=0", "mesh axis 'x' has size '0'; sizes must be positive integers"),
    ("x=a", "mesh axis 'x' has size 'a'; sizes must be positive integers"),
    ("x=-2", "mesh axis 'x' has size '-2'"),
    ("x", "mesh axis 'x' has no size; expected NAME=SIZE"),
    ("x=2,x=2", "mesh axis 'x' appears twice"),
    ("", "mesh is empty"),
    ("x=2,", "has an empty entry"),
    ("1x=2", "mesh axis name '1x' is not an identifier"),
])
def test_mesh_invalid(text, message):
    with pytest.raises(SpecError) as e:
        parse_mesh(text)
    assert message in str(e.value)


def test_mesh_coords_are_row_major():
    mesh = parse_mesh("x=2,y=3")
    assert [mesh.coords(d) for d in range(6)] == [
        (0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (1, 2)]
    assert str(mesh) == "x=2,y=3"


@pytest.mark.parametrize("text, dims", [
    ("x,_", [(("x",), False), ((), False)]),
    ("x+y", [(("x", "y"), False)]),
    ("x?,_?", [(("x",), True), ((), True)]),
    ("x+y?", [(("x", "y"), True)]),
    ("", []),
])
def test_sharding_valid(text, dims):
    spec = parse_sharding(text)
    assert [(d.axes, d.open) for d in spec.dims] == dims
    if text:
        assert str(spec) == text


@pytest.mark.parametrize("text, message", [
    ("x,,_", "empty entry"),
    ("x+", "'(empty)' is not a mesh axis name"),
    ("1x", "'1x' is not a mesh axis name"),
    ("x y", "'x y' is not a mesh axis name"),
])
def test_sharding_syntax_errors(text, message):
    with pytest.raises(SpecError) as e:
        parse_sharding(text)
    assert message in str(e.value)


MESH = parse_mesh("x=2,y=4")


@pytest.mark.parametrize("spec, shape, message", [
    ("x", (8, 8), "has 1 entry but the tensor has shape [8,8] (rank 2); give "
                  "one entry per dimension, e.g. _,_"),
    ("x,_,_", (8, 8), "has 3 entries"),
    ("z,_", (8, 8), "unknown mesh axis 'z'; the mesh has axes x, y"),
    ("x,x", (8, 8), "mesh axis 'x' is used twice"),
    ("x+x,_", (8, 8), "mesh axis 'x' is used twice"),
    ("_,y", (8, 6), "dimension 1 has size 6, which is not divisible by 4 (y=4)"),
    ("x+y,_", (4, 8), "not divisible by 8 (x=2 x y=4)"),
])
def test_sharding_checks(spec, shape, message):
    with pytest.raises(SpecError) as e:
        check_sharding(parse_sharding(spec), shape, MESH, "argument 'a'")
    assert message in str(e.value)
    assert "argument 'a'" in str(e.value)


def test_sharding_fits():
    spec = parse_sharding("x+y,_?")
    check_sharding(spec, (16, 3), MESH, "argument 'a'")
    assert spec.local_shape((16, 3), MESH) == (2, 3)
    assert spec.shards(MESH) == (8, 1)


@pytest.mark.parametrize("text, dtype, shape, sharding", [
    ("f32[16,32]", "f32", (16, 32), None),
    ("bf16[8]", "bf16", (8,), None),
    ("i32[]", "i32", (), None),
    ("bool[3]", "pred", (3,), None),
    ("pred[3]", "pred", (3,), None),
    ("float32[8]", "f32", (8,), None),
    ("c128[2,2]", "c128", (2, 2), None),
    ("f32[0]", "f32", (0,), None),
    ("f32[1024@x]", "f32", (1024,), "x"),
    ("f32[8@x,4@y]", "f32", (8, 4), "x,y"),
    ("f32[8@x+y,4]", "f32", (8, 4), "x+y,_"),
    ("f32[8@x?,4]", "f32", (8, 4), "x?,_"),
    (" u8 [ 2 , 3 ] ", "u8", (2, 3), None),
])
def test_type_valid(text, dtype, shape, sharding):
    t = parse_type(text)
    assert t.dtype.name == dtype
    assert t.shape == shape
    assert (str(t.sharding) if t.sharding else None) == sharding


@pytest.mark.parametrize("text, message", [
    ("f33[4]", "unknown dtype 'f33'; expected one of pred i8 i16 i32 i64 u8 "
               "u16 u32 u64 f16 bf16 f32 f64 c64 c128"),
    ("f32[4,]", "dimension 2 is empty"),
    ("f32[-1]", "dimension 1 has size '-1'; sizes are non-negative integers"),
    ("f32[a]", "dimension 1 has size 'a'"),
    ("f32", "expected DTYPE[DIM,...]"),
    ("f32[4", "expected DTYPE[DIM,...]"),
    ("f32[4@]", "empty entry"),
])
def test_type_invalid(text, message):
    with pytest.raises(SpecError) as e:
        parse_type(text)
    assert message in str(e.value)
    assert f"type '{text}'" in str(e.value)


def test_type_prints_back():
    for text in ["f32[16,32]", "f32[8@x,4]", "f32[8@x+y?,4]", "i32[]"]:
        assert str(parse_type(text)) == text


def test_type_bytes():
    assert parse_type("bf16[8,4]").nbytes == 64
    assert parse_type("c64[3]").nbytes == 24
    assert parse_type("pred[]").nbytes == 1


def test_dim_sharding_str():
    assert str(DimSharding()) == "_"
    assert str(DimSharding((), True)) == "_?"
    assert str(ShardingSpec.replicated(2)) == "_,_"
    assert MeshSpec(()).num_devices == 1


def test_a_sharding_does_what_callers_did_with_strings():
    """Entries in and out, an axis taken off or added, sub-axes read as
    their axis, the per-device shape rounded up as the partitioner pads."""
    from irshard.core.specs import ShardingSpec, parse_mesh
    spec = ShardingSpec.of_entries(["x+y", "_", "z:(1)2"])
    assert spec.entries() == ("x+y", "_", "z:(1)2") and str(spec) == "x+y,_,z:(1)2"
    assert spec.uses("z") and not spec.uses("w") and spec.dim_of("y") == 0
    assert spec.without({"x", "z"}).entries() == ("y", "_", "_")
    assert spec.with_axes(1, ["w"]).entries() == ("x+y", "w", "z:(1)2")
    assert ShardingSpec.of_entries(["x?", "_"]).dims[0].open
    assert ShardingSpec.of_axes([(("x", "y"), False), ((), True)]) == \
        parse_sharding("x+y,_?")
    mesh = parse_mesh("x=2,y=2,z=4")
    assert spec.local_shape((9, 5, 7), mesh) == (3, 5, 4)
    assert mesh.axis_size("z:(1)2") == 2 and mesh.axis_size("z") == 4
