"""Replica groups in each form XLA prints, and the mesh axes they span."""

import pytest

from irshard.xla import replica_groups as rg
from irshard.core.specs import parse_mesh


@pytest.mark.parametrize("text, groups", [
    ("{{0,1},{2,3}}", [[0, 1], [2, 3]]),
    ("{{0,2},{1,3}}", [[0, 2], [1, 3]]),
    ("{{0,1,2,3}}", [[0, 1, 2, 3]]),
    ("{}", [[0, 1, 2, 3]]),                    # no groups: every device
    ("[2,2]<=[4]", [[0, 1], [2, 3]]),
    ("[2,2]<=[2,2]T(1,0)", [[0, 2], [1, 3]]),
    ("[1,4]<=[4]", [[0, 1, 2, 3]]),
    ("[2,4]<=[4,2]T(1,0)", [[0, 2, 4, 6], [1, 3, 5, 7]]),
    ("[4,2]<=[2,2,2]T(2,1,0)", [[0, 4], [2, 6], [1, 5], [3, 7]]),
    ("mesh['x'=2,'y'=2] {'y'}", [[0, 1], [2, 3]]),
    ("mesh['x'=2,'y'=2] {'x'}", [[0, 2], [1, 3]]),
    ("mesh['x'=2,'y'=2] {'x','y'}", [[0, 1, 2, 3]]),
    ("mesh['x'=2,'y'=2] {'y','x'}", [[0, 2, 1, 3]]),
    ("mesh[x=2,y=2] {x}", [[0, 2], [1, 3]]),   # unquoted axis names
    ("mesh['axis_0'=4] {'axis_0'}", [[0, 1, 2, 3]]),
    ("mesh['a'=4] {'a':(1)2}", [[0, 2], [1, 3]]),
    ("mesh['a'=4] {'a':(2)2}", [[0, 1], [2, 3]]),
    ("mesh['a'=2,'b'=2], device_ids=(0,2,1,3) {'a'}", [[0, 1], [2, 3]]),
    # device_ids as an iota: arange(8).reshape(4,2).T = 0,2,4,6,1,3,5,7.
    ("mesh['a'=2,'b'=2,'c'=2], device_ids=([4,2]T(1,0)) {'a'}",
     [[0, 1], [2, 3], [4, 5], [6, 7]]),
    ("mesh['a'=2,'b'=2,'c'=2], device_ids=([4,2]T(1,0)) {'c'}",
     [[0, 2], [4, 6], [1, 3], [5, 7]]),
])
def test_forms(text, groups):
    assert rg.parse_replica_groups(text, num_devices=4) == groups


@pytest.mark.parametrize("iota", [
    "[2,4]<=[8]", "[2,4]<=[4,2]T(1,0)", "[4,2]<=[2,2,2]T(2,1,0)",
    "[2,6]<=[2,3,2]T(1,0,2)", "[3,4]<=[3,4]T(1,0)",
])
def test_iota_matches_xla(iota):
    """XLA expands the same iota notation for tile assignments."""
    from jaxlib import _hlo
    sharding = _hlo.HloSharding.from_string("{devices=" + iota + "}")
    expected = list(sharding.tile_assignment_devices())
    flat = [d for g in rg.parse_replica_groups(iota, 0) for d in g]
    assert flat == expected


def test_mesh_form_round_trips_through_xla():
    """XLA's parser accepts each mesh form we read, and prints it back."""
    from irshard.xla.hlo import HloModuleView
    for form in ["mesh['x'=2,'y'=2] {'y'}", "mesh['a'=4] {'a':(1)2}",
                 "mesh['a'=2,'b'=2], device_ids=(0,2,1,3) {'a'}",
                 "mesh['a'=2,'b'=2,'c'=2], device_ids=([4,2]T(1,0)) {'a'}"]:
        view = HloModuleView.from_text(_module(form))
        assert view.instructions["ar"].attrs["replica_groups"] == form


def _module(groups: str) -> str:
    return f"""HloModule m, num_partitions=8

%add (a: f32[], b: f32[]) -> f32[] {{
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(%a, %b)
}}

ENTRY %main (p: f32[8]) -> f32[8] {{
  %p = f32[8]{{0}} parameter(0)
  ROOT %ar = f32[8]{{0}} all-reduce(%p), channel_id=1, replica_groups={groups}, use_global_device_ids=true, to_apply=%add
}}
"""


@pytest.mark.parametrize("text", ["[2,3]<=[4]", "{{0,1},{2", "garbage",
                                  "mesh['x'=2] {'z'}"])
def test_malformed(text):
    with pytest.raises(ValueError):
        rg.parse_replica_groups(text, 4)


MESH = parse_mesh("x=2,y=4")


@pytest.mark.parametrize("groups, axes", [
    ([[0, 1, 2, 3], [4, 5, 6, 7]], ["y"]),
    ([[0, 4], [1, 5], [2, 6], [3, 7]], ["x"]),
    ([list(range(8))], ["x", "y"]),
    ([[0, 4, 1, 5, 2, 6, 3, 7]], ["y", "x"]),          # y major in the group
    ([[0, 2], [1, 3], [4, 6], [5, 7]], ["y:(1)2"]),     # a sub-axis of y
    ([[0, 1], [2, 3], [4, 5], [6, 7]], ["y:(2)2"]),
    ([[0, 1, 4, 5], [2, 3, 6, 7]], ["x", "y:(2)2"]),
    ([[0, 3], [1, 2], [4, 7], [5, 6]], None),           # not mesh-aligned
    ([[0, 9]], None),                                   # outside the mesh
])
def test_span_axes(groups, axes):
    assert rg.span_axes(groups, MESH) == axes


def test_span_axes_of_each_form_on_the_users_mesh():
    mesh = parse_mesh("dp=2,tp=4")
    cases = {
        "[2,4]<=[8]": ["tp"],
        "[4,2]<=[2,4]T(1,0)": ["dp"],
        "mesh['axis_0'=2,'axis_1'=4] {'axis_1'}": ["tp"],
        "mesh['axis_0'=2,'axis_1'=4] {'axis_0'}": ["dp"],
        "{{0,4},{1,5},{2,6},{3,7}}": ["dp"],
    }
    for text, axes in cases.items():
        assert rg.span_axes(rg.parse_replica_groups(text, 8), mesh) == axes, text


def test_pairs():
    pairs = rg.parse_pairs("{{0,1},{1,2},{2,3},{3,0}}")
    assert pairs == [(0, 1), (1, 2), (2, 3), (3, 0)]
    assert rg.pair_axes(pairs, parse_mesh("x=4")) == ["x"]
    assert rg.pair_axes([(0, 4), (1, 5)], MESH) == ["x"]
    assert rg.pair_axes([(0, 1), (0, 4)], MESH) == ["x", "y"]
    assert rg.pair_axes([(0, 8)], MESH) is None
    with pytest.raises(ValueError):
        rg.parse_pairs("{{0,1,2}}")
