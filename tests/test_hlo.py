"""Reading HLO: instruction text, shapes, metadata, source tables, loops."""

import os

import pytest

from irshard import analysis
from irshard.hlo import (ArrayShape, HloModuleView, StackFrameTable,
                         opcode_name, parse_instruction_text, parse_metadata,
                         parse_shape, shape_bytes)
from irshard.specs import parse_mesh

DATA = os.path.join(os.path.dirname(__file__), "data")


def load(name: str) -> HloModuleView:
    with open(os.path.join(DATA, name)) as f:
        return HloModuleView.from_text(f.read())


@pytest.mark.parametrize("text, expected, nbytes", [
    ("f32[8,4]{1,0}", ArrayShape("f32", (8, 4)), 128),
    ("bf16[3]{0}", ArrayShape("bf16", (3,)), 6),
    ("s32[]", ArrayShape("s32", ()), 4),
    ("pred[2,2]", ArrayShape("pred", (2, 2)), 4),
    ("f32[<=8]", ArrayShape("f32", (8,)), 32),
    ("f8e4m3fn[16]", ArrayShape("f8e4m3fn", (16,)), 16),
    ("(f32[4]{0}, s32[])", (ArrayShape("f32", (4,)), ArrayShape("s32", ())), 20),
    ("((f32[2]), f32[2]{0}, u32[])",
     ((ArrayShape("f32", (2,)),), ArrayShape("f32", (2,)), ArrayShape("u32", ())), 20),
    ("(f32[1], /*index=1*/f32[2], token[])",
     (ArrayShape("f32", (1,)), ArrayShape("f32", (2,)), ArrayShape("token", ())), 12),
])
def test_shapes(text, expected, nbytes):
    assert parse_shape(text) == expected
    assert shape_bytes(parse_shape(text)) == nbytes


def test_instruction_text():
    name, shape, opcode, attrs = parse_instruction_text(
        'ROOT %all-gather.1 = f32[1024]{0} all-gather(%a, %b), channel_id=4, '
        "replica_groups=mesh['x'=4] {'x'}, dimensions={0}, "
        'use_global_device_ids=true, metadata={op_name="jit(f)/while/body/a, b" '
        'stack_frame_id=12}, backend_config={"k":{"n":"1"}}')
    assert (name, str(shape), opcode) == ("all-gather.1", "f32[1024]", "all-gather")
    assert attrs["replica_groups"] == "mesh['x'=4] {'x'}"
    assert attrs["dimensions"] == "{0}"
    assert parse_metadata(attrs["metadata"]) == {
        "op_name": "jit(f)/while/body/a, b", "stack_frame_id": "12"}
    assert attrs["backend_config"] == '{"k":{"n":"1"}}'


def test_instruction_text_tuple_result_and_mesh_device_ids():
    _, shape, opcode, attrs = parse_instruction_text(
        "%s = ((f32[2]{0}), f32[2]{0}) all-gather-start(%p), channel_id=1, "
        "replica_groups=mesh['a'=2,'b'=2], device_ids=(0,2,1,3) {'a'}, "
        "dimensions={0}")
    assert opcode == "all-gather-start"
    assert attrs["replica_groups"] == "mesh['a'=2,'b'=2], device_ids=(0,2,1,3) {'a'}"
    assert shape_bytes(shape) == 16


def test_metadata_old_form():
    assert parse_metadata('{op_name="x" source_file="/a/b.py" source_line=7}') == {
        "op_name": "x", "source_file": "/a/b.py", "source_line": "7"}


def test_opcode_names():
    assert opcode_name("kAllGatherStart") == "all-gather-start"
    assert opcode_name("kGetTupleElement") == "get-tuple-element"
    assert opcode_name("kAllToAll") == "all-to-all"
    assert opcode_name("kCollectivePermuteDone") == "collective-permute-done"


TABLES = """HloModule m

FileNames
1 "/u/a.py"
2 "/site-packages/jax/x.py"

FunctionNames
1 "outer"
2 "inner"
3 "lib"

FileLocations
1 {file_name_id=1 function_name_id=1 line=10 end_line=10 column=1 end_column=2}
2 {file_name_id=1 function_name_id=2 line=20 end_line=20 column=3 end_column=4}
3 {file_name_id=2 function_name_id=3 line=30 end_line=30 column=5 end_column=6}

StackFrames
"""


def test_stack_frames_parent_printed_one_higher():
    """The printer of this XLA shows each parent id one higher: the root
    frame shows itself as its parent."""
    table = StackFrameTable.parse(TABLES + (
        "1 {file_location_id=1 parent_frame_id=1}\n"
        "2 {file_location_id=2 parent_frame_id=2}\n"
        "3 {file_location_id=3 parent_frame_id=3}\n\nENTRY %e () -> f32[] {\n"))
    chain = table.chain(3)
    assert [(f.function, f.line) for f in chain] == [
        ("lib", 30), ("inner", 20), ("outer", 10)]


def test_stack_frames_parent_printed_as_is():
    table = StackFrameTable.parse(TABLES + (
        "1 {file_location_id=1 parent_frame_id=0}\n"
        "2 {file_location_id=2 parent_frame_id=1}\n"
        "3 {file_location_id=3 parent_frame_id=2}\n\nENTRY %e () -> f32[] {\n"))
    assert [f.line for f in table.chain(3)] == [30, 20, 10]
    assert table.chain(0) == [] and table.chain(9) == []


def test_view_structure():
    view = load("async_collectives.hlo")
    assert view.entry == "main"
    assert view.num_partitions == 4
    assert view.instructions["ag-done"].operands == ["ag-start"]
    assert view.instructions["ag-start"].users == ["ag-done"]
    assert view.instructions["rs-start"].wrapped == "reduce-scatter.1"
    loop = view.instructions["oloop"]
    assert dict(loop.called_computations()) == {
        "condition": "outer_cond", "body": "outer_body"}


def test_trip_count_from_the_loop_pattern():
    view = load("async_collectives.hlo")
    # `3 > i` with i += 1 from 0; `i < 5` inside.
    assert analysis.trip_count(view, view.instructions["oloop"]) == 3
    assert analysis.trip_count(view, view.instructions["iloop"]) == 5


def test_trip_count_from_backend_config():
    view = load("known_trip_count.hlo")
    assert analysis.trip_count(view, view.instructions["loop"]) == 100


def test_collectives_of_every_kind_and_form():
    view = load("async_collectives.hlo")
    found = {c.name: c for c in analysis.collectives(
        view, parse_mesh("a=2,b=2"), "/home/user/model")}
    assert set(found) == {"ag-start", "ar-start", "a2a", "reduce-scatter.1",
                          "cp-start"}

    ag = found["ag-start"]
    assert (ag.kind, ag.shape, ag.bytes, ag.wire_bytes) == (
        "all-gather", (8, 8), 256, 128)
    assert ag.mesh_axes == ("a",) and ag.group_size == 2 and ag.is_async
    # Its innermost frame is JAX's own; the user's frame is the next one.
    assert (ag.source.file, ag.source.line, ag.source.function) == (
        "train.py", 12, "loss")
    assert ag.attribution == "metadata"

    ar = found["ar-start"]   # combined: two f32[8] in one all-reduce
    assert (ar.kind, ar.operands, ar.bytes, ar.wire_bytes) == (
        "all-reduce", 2, 64, 64)
    assert ar.mesh_axes == ("b",)
    assert ar.attribution == "inferred"        # no metadata of its own
    assert ar.source.line == 12 and ar.op_name == "jit(loss)/neg"

    rs = found["reduce-scatter.1"]             # async-start wrapping it
    assert (rs.kind, rs.bytes, rs.wire_bytes, rs.group_size) == (
        "reduce-scatter", 8, 24, 4)
    assert rs.is_async and rs.mesh_axes == ("a", "b")
    assert (rs.source.line, rs.source.function) == (40, None)

    a2a = found["a2a"]
    assert (a2a.kind, a2a.mesh_axes, a2a.wire_bytes) == ("all-to-all", ("b",), 16)

    cp = found["cp-start"]
    assert (cp.kind, cp.bytes, cp.wire_bytes) == ("collective-permute", 32, 32)
    assert cp.loop_trip_counts == (3, 5) and cp.executions == 15
    assert cp.source.function == "step"


def test_collectives_without_a_mesh():
    view = load("async_collectives.hlo")
    found = {c.name: c for c in analysis.collectives(view, None, None)}
    assert found["ag-start"].mesh_axes is None
    assert found["ag-start"].group_size == 2
    # Without a user directory the first frame outside JAX is the user's.
    assert found["ag-start"].source.line == 12


@pytest.mark.parametrize("kind, n, nbytes, wire", [
    ("all-gather", 4, 4096, 3072),
    ("all-to-all", 4, 256, 192),
    ("reduce-scatter", 4, 256, 768),
    ("all-reduce", 4, 256, 384),
    ("all-reduce", 2, 100, 100),
    ("collective-permute", 4, 4, 4),
    ("all-gather", 1, 64, 0),
])
def test_wire_bytes(kind, n, nbytes, wire):
    assert analysis.wire_bytes(kind, nbytes, n) == wire
