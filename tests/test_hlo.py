"""Reading HLO: instruction text, shapes, metadata, source tables, loops."""

import json
import os

import pytest

from irshard.collectives import analysis
from irshard.core.specs import parse_mesh
from irshard.xla import loops
from irshard.xla.hlo import (HloModuleView, Instruction, opcode_name,
                             parse_instruction_text, parse_metadata)
from irshard.xla.shapes import ArrayShape, parse_shape, shape_bytes
from irshard.xla.stackframes import StackFrameTable
from tests.conftest import run_irshard

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
    assert loops.trip_count(view, view.instructions["oloop"]) == 3
    assert loops.trip_count(view, view.instructions["iloop"]) == 5


def test_trip_count_from_backend_config():
    view = load("known_trip_count.hlo")
    assert loops.trip_count(view, view.instructions["loop"]) == 100


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


@pytest.mark.parametrize("printed,meant", [
    # What XLA's printer escapes (absl::CEscape): quotes of both kinds, the
    # backslash, control characters, and non-ASCII bytes as octal.
    (r"params[\'embed\']", "params['embed']"),
    (r'say \"hi\"', 'say "hi"'),
    (r"a\\b", "a\\b"),
    (r"line\nnext\ttab", "line\nnext\ttab"),
    (r"caf\303\251.py", "café.py"),
    (r"\x41\101", "AA"),
    ("plain/path.py", "plain/path.py"),
])
def test_quoted_strings_as_xla_escapes_them(printed, meant):
    from irshard.core.syntax import c_unescape, unquote
    assert c_unescape(printed) == meant
    assert unquote(f'"{printed}"') == meant


def test_metadata_with_escaped_quotes():
    # jax 0.12 prints a pytree path's keys with escaped quotes.
    text = r'{op_name="jit(step)/params[\'embed\']/dot_general" stack_frame_id=3}'
    assert parse_metadata(text) == {
        "op_name": "jit(step)/params['embed']/dot_general", "stack_frame_id": "3"}


ESCAPED = r'''HloModule jit_step, entry_computation_layout={(f32[4,8]{1,0})->f32[8,8]{1,0}}, num_partitions=2

FileNames
1 "/home/user/caf\303\251/train.py"

FunctionNames
1 "step"

FileLocations
1 {file_name_id=1 function_name_id=1 line=12 end_line=12 column=4 end_column=20}

StackFrames
1 {file_location_id=1 parent_frame_id=0}

ENTRY %main (p: f32[4,8]) -> f32[8,8] {
  %p = f32[4,8]{1,0} parameter(0), sharding={devices=[2,1]<=[2]}, metadata={op_name="params[\'embed\']"}
  ROOT %all-gather = f32[8,8]{1,0} all-gather(%p), channel_id=1, replica_groups={{0,1}}, dimensions={0}, use_global_device_ids=true, metadata={op_name="jit(step)/params[\'embed\']/all_gather" stack_frame_id=1}
}
'''


def test_collectives_of_a_module_with_escaped_metadata(tmp_path):
    path = tmp_path / "step.hlo"
    path.write_text(ESCAPED)
    result = run_irshard("collectives", str(path), "--format", "json")
    assert result.returncode == 0, result.stderr
    module = json.loads(result.stdout)
    collective = module["collectives"][0]
    assert collective["op_name"] == "jit(step)/params['embed']/all_gather"
    assert collective["source"]["file"].endswith("café/train.py")
    assert module["inputs"][0]["name"] == "params['embed']"


TUPLE_ELEMENTS = """HloModule m, entry_computation_layout={(f32[16]{0})->f32[16]{0}}, num_partitions=4

%cond (param.1: (s32[], f32[16])) -> pred[] {
  %param.1 = (s32[], f32[16]{0}) parameter(0)
  %constant.1 = s32[] constant(5)
  ROOT %lt = pred[] compare(%param.1#0, %constant.1), direction=LT
}

%body (param: (s32[], f32[16])) -> (s32[], f32[16]) {
  %param = (s32[], f32[16]{0}) parameter(0)
  %constant.2 = s32[] constant(1)
  %add = s32[] add(%param#0, %constant.2)
  %collective-permute = f32[16]{0} collective-permute(%param#1), channel_id=1, source_target_pairs={{0,1},{1,2},{2,3},{3,0}}
  ROOT %tuple = (s32[], f32[16]{0}) tuple(%add, %collective-permute)
}

ENTRY %main (p: f32[16]) -> f32[16] {
  %p = f32[16]{0} parameter(0)
  %constant.0 = s32[] constant(0)
  %tuple.1 = (s32[], f32[16]{0}) tuple(%constant.0, %p)
  %while = (s32[], f32[16]{0}) while(%tuple.1), condition=%cond, body=%body
  ROOT %out = f32[16]{0} get-tuple-element(%while), index=1
}
"""


def test_tuple_elements_as_operands():
    """jaxlib 0.11 on prints a tuple's element used by one instruction as
    `%param#0`: the loop's counter is still followed to its trip count, by
    any jaxlib (0.10's parser does not read the form)."""
    from irshard.xla import hloscan
    view = hloscan.ScannedModule.from_text(TUPLE_ELEMENTS)
    found = list(analysis.collectives(view, None, None))
    assert [(c.kind, c.loop_trip_counts, c.executions) for c in found] == [
        ("collective-permute", (5,), 5)]
    element = view.get("param#1", "body")
    assert (element.opcode, element.operands, element.attrs["index"]) == (
        "get-tuple-element", ["param"], "1")
    assert str(element.shape) == str(view.get("p", "main").shape)


DUMP_OPTIMIZED = """HloModule jit_step, is_scheduled=true, entry_computation_layout={(f32[4,4]{1,0}, f32[4,8]{1,0})->f32[4,8]{1,0}}, num_partitions=4

ENTRY %main (p0: f32[4,8], p1: f32[4,4]) -> f32[4,8] {
  %param.1 = f32[4,8]{1,0} parameter(1), metadata={op_name="y"}
  %param = f32[4,4]{1,0} parameter(0), metadata={op_name="x"}
  %dot = f32[4,8]{1,0} dot(%param, %param.1), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  ROOT %all-reduce = f32[4,8]{1,0} all-reduce(%dot), channel_id=1, replica_groups=mesh['axis_0'=2,'axis_1'=2] {'axis_1'}, use_global_device_ids=true, to_apply=%add
}
"""

DUMP_HANDED = """HloModule jit_step, entry_computation_layout={(f32[8,8]{1,0}, f32[8,8]{1,0})->f32[8,8]{1,0}}, num_partitions=4

ENTRY %main.4 (x.1: f32[8,8], y.1: f32[8,8]) -> f32[8,8] {
  %x.1 = f32[8,8]{1,0} parameter(0), sharding={mesh['a'=2,'b'=2], [{'a'}, {'b'}]}, metadata={op_name="x"}
  %y.1 = f32[8,8]{1,0} parameter(1), sharding={mesh['a'=2,'b'=2], [{'b'}, {}]}, metadata={op_name="y"}
  ROOT %dot.1 = f32[8,8]{1,0} dot(%x.1, %y.1), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}
"""


def test_a_dump_whose_final_module_prints_no_parameter_shardings(tmp_path):
    """jaxlib 0.12's final module: parameters without shardings, replica
    groups over XLA's own axis names, parameters printed out of order. The
    module XLA was handed names the mesh and the parameters' global shapes
    and shardings; the inputs are listed in argument order."""
    (tmp_path / "module_0000.jit_step.cpu_after_optimizations.txt").write_text(
        DUMP_OPTIMIZED)
    (tmp_path / "module_0000.jit_step.before_optimizations.txt").write_text(DUMP_HANDED)
    result = run_irshard("collectives", str(tmp_path), "--format", "json")
    assert result.returncode == 0, result.stderr
    [module] = json.loads(result.stdout)["modules"]
    assert module["mesh"]["axes"] == [{"name": "a", "size": 2}, {"name": "b", "size": 2}]
    assert [(t["name"], t["shape"], t["sharding"], t["local_shape"])
            for t in module["inputs"]] == [
        ("x", [8, 8], ["a", "b"], [4, 4]), ("y", [8, 8], ["b", "_"], [4, 8])]
    assert [c["mesh_axes"] for c in module["collectives"]] == [["b"]]


# Every attribute form the printer writes, for the one-pattern reading of
# attribute lists (`syntax.attribute_pairs`) against the bracket-by-bracket
# split it stands in for.
_PRINTED_FORMS = [
    '%ag = f32[8]{0} all-gather(%p), channel_id=1, replica_groups=[2,2]<=[2,2]T(1,0), '
    'dimensions={0}, use_global_device_ids=true, metadata={op_name="jit(f)/ag" '
    'stack_frame_id=3}',
    "%s = ((f32[2]{0}), f32[2]{0}) all-gather-start(%p), channel_id=1, "
    "replica_groups=mesh['a'=2,'b'=2], device_ids=(0,2,1,3) {'a'}, dimensions={0}",
    "%ar = f32[4]{0} all-reduce(%p), replica_groups=mesh['x'=4] {'x'}, to_apply=%add",
    '%cp = f32[4]{0} collective-permute(%p), source_target_pairs={{0,1},{1,0}}, '
    'frontend_attributes={_xla_send_recv_validation="{{0,1},{1,2}}"}',
    '%f = f32[4]{0} fusion(%a, %b), kind=kLoop, calls=%fused.1, '
    'output_to_operand_aliasing={{0}: (0, {})}, backend_config={"outer_dimension_partitions":'
    '["2"],"k":{"n":[1,{"m":"x, y=z"}]}}',
    '%c = f32[4,4]{1,0} convolution(%a, %b), window={size=3x3 pad=1_1x1_1}, '
    'dim_labels=b01f_01io->b01f, metadata={op_name="conv" source_file="/a, b=c.py" '
    'source_line=3 source_end_line=3}',
    '%sl = f32[2]{0} slice(%a), slice={[0:4:2]}',
    '%w = (s32[], f32[4]{0}) while(%t), condition=%cond, body=%body, '
    'backend_config={"known_trip_count":{"n":"7"}}',
    '%k = (f32[1], /*index=1*/f32[2]) tuple(%a, %b), sharding={{replicated}, '
    '{devices=[2]<=[2]}}',
    '%cc = f32[4]{0} custom-call(%a), custom_call_target="Sharding", '
    'sharding={devices=[2,1,2]<=[4] last_tile_dim_replicate}, '
    'api_version=API_VERSION_STATUS_RETURNING',
    '%x = f32[4]{0} conditional(%p, %a, %b), branch_computations={%b0, %b1}',
    r'%q = f32[4]{0} add(%a, %b), metadata={op_name="jit(step)/params[\'embed\']/\"x\"" '
    'stack_frame_id=1}',
    "%d = f32[4]{0} dot(%a, %b), lhs_contracting_dims={1}, rhs_contracting_dims={0}, "
    "operand_precision={default,default}",
    # What the one pattern leaves to the split: a top-level comma without a
    # space, an empty value, a key the pattern does not name.
    "%odd = f32[4]{0} custom-call(%a), dims=1,2, empty=, Weird-Key=3",
    "%p = f32[4]{0} parameter(0)",
    "ROOT %r = f32[4]{0} add(%a, %b)",
    "%t = f32[8,16]{1,0:T(8,128)} copy(%a), sharding={maximal device=1}",
]


@pytest.mark.parametrize("line", _PRINTED_FORMS)
def test_attribute_lists_read_as_the_split_reads_them(line):
    from irshard.xla.hlo import _parse_instruction_slowly
    assert parse_instruction_text(line) == _parse_instruction_slowly(line)
    assert parse_instruction_text("  " + line) == _parse_instruction_slowly(line)


def test_every_line_of_the_suites_modules_reads_as_the_split_reads_it():
    """The same on every instruction of the suite's HLO files, as written
    and as this jaxlib's XLA prints them back."""
    from irshard.xla.hlo import _parse_instruction_slowly
    texts = []
    for name in sorted(os.listdir(DATA)):
        if name.endswith(".hlo"):
            with open(os.path.join(DATA, name)) as f:
                texts.append(f.read())
    texts += [ESCAPED, TUPLE_ELEMENTS]
    texts += [printed for printed in map(load_text_reprinted, list(texts))
              if printed]
    lines = [line for text in texts for line in text.splitlines()
             if line.startswith("  ") and " = " in line]
    assert len(lines) > 40
    for line in lines:
        assert parse_instruction_text(line) == _parse_instruction_slowly(line), line
    # What an instruction calls, read with and without its attributes parsed.
    calling = 0
    for line in lines + _PRINTED_FORMS + [
            '%f.2 = f32[4]{0} fusion(%a), kind=kLoop, calls=%fused.2, '
            'metadata={op_name="f" stack_frame_id=1}',
            '%f.3 = f32[4]{0} fusion(%a), frontend_attributes={k=", kind=kLoop, '
            'calls=%no"}, kind=kOutput, calls=%yes']:
        opcode = parse_instruction_text(line)[2]
        quick = Instruction("i", opcode, "c", [], [], line.strip())
        parsed = Instruction("i", opcode, "c", [], [], line.strip())
        parsed.attrs
        assert quick.called_computations() == parsed.called_computations(), line
        calling += bool(quick.called_computations())
    assert calling > 10


def load_text_reprinted(text: str) -> str | None:
    """`text` as XLA prints it back, or None where this jaxlib's parser does
    not read it (`%t#0` operands are jaxlib 0.11's)."""
    try:
        return HloModuleView.from_text(text).text
    except ValueError:
        return None


def test_instructions_printed_alike():
    """`hlo.alike` splits a line into what differs between collectives
    alike (name, operands, channel id, op_name) and the rest: the key
    decides the parse, and where a form could hide an attribute in a
    string it gives up."""
    from irshard.xla.hlo import alike, parse_metadata, shape_of_text
    line = ('%ag.1 = f32[8]{0} all-gather(%p.1), channel_id=7, '
            'replica_groups=[2,2]<=[4], dimensions={0}, metadata={op_name='
            '"jit(f)/ag" stack_frame_id=3}')
    key, op_name, channel = alike(line)
    assert (op_name, channel) == ("jit(f)/ag", "7")
    assert key == ("f32[8]{0}", "all-gather",
                   ", replica_groups=[2,2]<=[4], dimensions={0}",
                   " stack_frame_id=3", "")
    renamed = ('ROOT %other.9 = f32[8]{0} all-gather(%q.3), channel_id=12, '
               'replica_groups=[2,2]<=[4], dimensions={0}, metadata={op_name='
               '"jit(f)/layer_2/ag" stack_frame_id=3}')
    assert alike(renamed)[0] == key
    for changed in (line.replace("f32[8]", "f32[16]"),
                    line.replace("[2,2]<=[4]", "[1,4]<=[4]"),
                    line.replace("stack_frame_id=3", "stack_frame_id=4"),
                    line + ', backend_config={"is_sync":true}'):
        assert alike(changed)[0] != key
    for unread in (
            line.replace('jit(f)/ag', r'jit(f)/\"ag\"'),       # an escape
            line.replace("dimensions={0}", 'frontend_attributes={a="b"}, '
                         'dimensions={0}'),                     # a string before
            line.split(", metadata")[0]):                       # no metadata
        assert alike(unread) is None
    tupled = ("%s = ((f32[2]{0}), f32[8]{0}) all-gather-start(%p), channel_id=1, "
              "replica_groups={{0,1}}, dimensions={0}, metadata={op_name=\"s\" "
              "source_file=\"/a, b.py\" source_line=3}")
    key, op_name, _ = alike(tupled)
    assert op_name == "s" and key[3] == ' source_file="/a, b.py" source_line=3'
    assert shape_of_text(key[0]) == parse_instruction_text(tupled)[1]
    # Wherever it reads a line, it reads what the parse reads.
    for line in _PRINTED_FORMS + [tupled]:
        found = alike(line)
        if found is None:
            continue
        key, op_name, channel = found
        _, shape, opcode, attrs = parse_instruction_text(line)
        assert (shape_of_text(key[0]), key[1]) == (shape, opcode)
        assert parse_metadata(attrs["metadata"])["op_name"] == op_name
        assert attrs.get("channel_id", "") == channel


@pytest.mark.parametrize("line, expected", [
    ('%a = f32[4]{0} add(%x, %y), metadata={op_name="jit(f)/add" '
     'stack_frame_id=3}', {"op_name": "jit(f)/add", "stack_frame_id": "3"}),
    # More attributes after it.
    ('%f = f32[4]{0} fusion(%x), kind=kLoop, calls=%c, metadata={op_name="m" '
     'stack_frame_id=12}, backend_config={"a":"b"}',
     {"op_name": "m", "stack_frame_id": "12"}),
    # A string before it that holds the same text: read whole.
    ('%c = f32[4]{0} custom-call(%x), custom_call_target="t", '
     'frontend_attributes={k=", metadata={op_name=\\"no\\" stack_frame_id=9}"}, '
     'metadata={op_name="yes" stack_frame_id=1}',
     {"op_name": "yes", "stack_frame_id": "1"}),
    ('%d = f32[4]{0} negate(%x), metadata={op_name="n" source_file="/a.py" '
     'source_line=4}', {"op_name": "n", "source_file": "/a.py", "source_line": "4"}),
    ('%e = f32[4]{0} negate(%x), metadata={op_name="q\\"uoted" stack_frame_id=2}',
     {"op_name": 'q"uoted', "stack_frame_id": "2"}),
    ('%g = f32[4]{0} negate(%x)', {}),
])
def test_metadata_read_at_once_is_metadata_parsed(line, expected):
    """An instruction's metadata read without its other attributes (the
    common form, nothing quoted before it) is what parsing them all gives."""
    inst = Instruction(name="n", opcode="negate", computation="c", operands=[],
                       users=[], text=line)
    assert inst.metadata == expected
    parsed = parse_instruction_text(line)[3].get("metadata")
    assert (parse_metadata(parsed) if parsed else {}) == expected
