"""XLA tile assignments named by the user's mesh axes."""

import math

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from irshard import backend
from irshard.reporting import layout
from irshard.core.specs import parse_mesh
from irshard.xla.tiling import Tiling, mesh_axes_of

MESH = parse_mesh("x=2,y=4")


@pytest.mark.parametrize("text, rank, axes, local", [
    ("{replicated}", 2, ("_", "_"), (8, 16)),
    ("{devices=[2,4]<=[8]}", 2, ("x", "y"), (4, 4)),
    ("{devices=[4,2]<=[2,4]T(1,0)}", 2, ("y", "x"), (2, 8)),
    ("{devices=[8,1]<=[8]}", 2, ("x+y", "_"), (1, 16)),
    ("{devices=[8,1]<=[2,4]T(1,0)}", 2, ("y+x", "_"), (1, 16)),
    ("{devices=[2,1,4]<=[8] last_tile_dim_replicate}", 2, ("x", "_"), (4, 16)),
    ("{devices=[1,4,2]<=[2,4]T(1,0) last_tile_dim_replicate}", 2, ("_", "y"), (8, 4)),
    ("{devices=[1,2,4]<=[8] last_tile_dim_replicate}", 2, ("_", "x"), (8, 8)),
    ("{devices=[2,2,2]<=[8] last_tile_dim_replicate}", 2, None, (4, 8)),  # part of y
    ("{maximal device=3}", 2, None, (8, 16)),
])
def test_mesh_axes_of_each_tiling(text, rank, axes, local):
    tiling = Tiling.from_hlo_sharding(backend.hlo_sharding_from_text(text), rank)
    assert mesh_axes_of(tiling, MESH) == axes
    assert tiling.local_shape((8, 16)) == local


def test_uneven_tiles_round_up():
    tiling = Tiling.from_hlo_sharding(
        backend.hlo_sharding_from_text("{devices=[4,1]<=[4]}"), 2)
    assert tiling.local_shape((10, 3)) == (3, 3)


def test_layout_grids():
    places = [layout.DeviceSlice(d, 0, ((r * 4, r * 4 + 4),)) for d, r in
              [(0, 0), (1, 1), (2, 0), (3, 1)]]
    assert layout.render((8,), places, indent="") == [
        "index   0:4  4:8", "device  0,2  1,3"]
    assert layout.device_list([0, 1, 2, 3, 6, 8, 9]) == "0-3,6,8-9"
    one = [layout.DeviceSlice(0, 0, ())]
    assert layout.render((), one, indent="") == ["on device 0"]


# Sharding text read without XLA (the plain forms a parameter carries),
# against XLA's parser on every form it prints.

@st.composite
def _sharding_texts(draw):
    kind = draw(st.sampled_from(["replicated", "manual", "maximal", "iota",
                                 "listed"]))
    if kind in ("replicated", "manual"):
        return "{" + kind + "}"
    if kind == "maximal":
        return f"{{maximal device={draw(st.integers(0, 15))}}}"
    dims = draw(st.lists(st.sampled_from([1, 2, 3, 4]), min_size=1, max_size=4))
    n = math.prod(dims)
    replicate = " last_tile_dim_replicate" if len(dims) > 1 and draw(st.booleans()) else ""
    if kind == "listed":
        devices = draw(st.permutations(range(n)))
        return f"{{devices=[{','.join(map(str, dims))}]{','.join(map(str, devices))}{replicate}}}"
    reshape = draw(st.lists(st.sampled_from([1, 2, 3, 4]), min_size=1, max_size=3))
    if math.prod(reshape) != n:
        reshape = [n]
    text = f"{{devices=[{','.join(map(str, dims))}]<=[{','.join(map(str, reshape))}]"
    if len(reshape) > 1:
        perm = draw(st.permutations(range(len(reshape))))
        text += f"T({','.join(map(str, perm))})"
    return text + replicate + "}"


@settings(max_examples=300, deadline=None)
@given(_sharding_texts(), st.integers(1, 4))
# A transposed iota replicated over a last dimension that is not its minor
# one whole: XLA lists the devices (the text was kept as given).
@example("{devices=[3,4,3]<=[3,3,4]T(1,0,2) last_tile_dim_replicate}", 1)
@example("{devices=[2,4,3]<=[3,2,4]T(1,0,2) last_tile_dim_replicate}", 2)
def test_sharding_text_read_as_xla_reads_it(text, rank):
    from irshard import backend
    from irshard.xla.tiling import _plain_sharding
    plain = _plain_sharding(text, rank)
    try:
        parsed = backend.hlo_sharding_from_text(text)
    except RuntimeError:
        assert plain is None or "devices" in text   # XLA rejects; we may too
        return
    if plain is not None:
        assert plain == Tiling.from_hlo_sharding(parsed, rank)
    assert Tiling.from_text(text, rank) == Tiling.from_hlo_sharding(parsed, rank)


@pytest.mark.parametrize("text", ["{{replicated}, {maximal device=0}}", "{unknown}"])
def test_shardings_without_one_tile_assignment_are_unread(text):
    """Asking XLA for these tile assignments aborts the process: they are
    kept as text."""
    tiling = Tiling.from_text(text, 1)
    assert tiling.opaque and tiling.text == text
    assert tiling.shards() == (1,)


@pytest.mark.parametrize("text,rank,mesh,dims,devices,axes", [
    ("{mesh['a'=2,'b'=2], [{'a'}, {'b'}]}", 2, "a=2,b=2", (2, 2), (0, 1, 2, 3), ("a", "b")),
    # An unused axis is the replicated last tile dimension.
    ("{mesh['a'=2,'b'=2], [{'b'}, {}]}", 2, "a=2,b=2", (2, 1, 2), (0, 2, 1, 3), ("b", "_")),
    ("{mesh['a'=2,'b'=2], [{'b', 'a'}, {}]}", 2, "a=2,b=2", (4, 1), (0, 2, 1, 3), ("b+a", "_")),
    ("{mesh['x'=2,'y'=2,'z'=2], [{'z'}, {'x'}, {}]}", 3, "x=2,y=2,z=2",
     (2, 2, 1, 2), (0, 2, 4, 6, 1, 3, 5, 7), ("z", "x", "_")),
    # The mesh's own device order.
    ("{mesh['x'=4], device_ids=[3,2,1,0], [{'x'}]}", 1, "x=4", (4,), (3, 2, 1, 0), None),
])
def test_named_shardings_as_jaxlib_0_11_prints_them(text, rank, mesh, dims, devices, axes):
    """Read without XLA (whose 0.10 parser does not know the form), as the
    same tile assignment XLA's own parser gives."""
    tiling = Tiling.from_text(text, rank)
    assert (tiling.tile_dims, tiling.devices) == (dims, devices)
    assert mesh_axes_of(tiling, parse_mesh(mesh)) == axes


def test_named_sharding_of_no_axis_is_replicated():
    tiling = Tiling.from_text("{mesh['a'=2,'b'=2], [{}, {}]}", 2)
    assert tiling.replicated and tiling.shards() == (1, 1)


@pytest.mark.parametrize("text, entries", [
    ("{devices=[2,1,2]<=[4] last_tile_dim_replicate}", ("x", "_")),
    ("{devices=[2,2]<=[4]}", ("x", "y")),
    ("{devices=[4,1]<=[2,2]T(1,0)}", ("y+x", "_")),
    ("{replicated}", ("_", "_")),
    ("{maximal device=1}", None),
])
def test_one_way_from_an_xla_sharding_to_mesh_axes(text, entries):
    """An XLA sharding as its object, its printed text or a Tiling reads
    as the same ShardingSpec over the mesh's axes (or none)."""
    from irshard.xla import tiling
    mesh = parse_mesh("x=2,y=2")
    hlo = backend.hlo_sharding_from_text(text)
    found = {tiling.in_mesh(given, 2, mesh) for given in
             (text, hlo, Tiling.from_hlo_sharding(hlo, 2))}
    assert len(found) == 1
    [spec] = found
    assert (spec.entries() if spec is not None else None) == entries
