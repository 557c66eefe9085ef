"""The streaming scan of printed HLO against XLA's own parser.

Modules are generated from blocks of every form a collective report reads
(sync and async collectives, every replica-group form, tuple results long
enough for `/*index=N*/` comments, loops with and without a known trip
count, nested loops, calls, fusions, metadata in both forms and none,
scheduled and unscheduled modules), and each is read three ways: XLA's
parser (`HloModuleView`), the scan of the generated text, and the scan of
the text XLA prints back. The collectives, loops, sources and parameters
must be the same.
"""

import dataclasses
import itertools
import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from irshard.collectives import analysis, dumps
from irshard.core.specs import MeshAxis, MeshSpec
from irshard.xla import blocks, hlolines, hloscan
from irshard.xla.hlo import HloModuleView

DATA = os.path.join(os.path.dirname(__file__), "data")

_GROUPS = ["{{0,1},{2,3}}", "[2,2]<=[4]", "[2,2]<=[2,2]T(1,0)",
           "mesh['a'=2,'b'=2] {'b'}", "{{0,2},{1,3}}"]
_V = "f32[8,16]{1,0}"


class _Module:
    """A module under construction: computations and the entry's lines."""

    def __init__(self, scheduled: bool):
        self.scheduled = scheduled
        self.computations: list[str] = []
        self.entry: list[str] = []
        self.n = 0
        self.channel = 0
        self.value = "p0"

    def fresh(self, stem: str) -> str:
        self.n += 1
        return f"{stem}.{self.n}"

    def chan(self) -> int:
        self.channel += 1
        return self.channel

    def text(self) -> str:
        head = ("HloModule generated, "
                + ("is_scheduled=true, " if self.scheduled else "")
                + "entry_computation_layout={(f32[8,16]{1,0}, f32[8,16]{1,0})"
                "->f32[8,16]{1,0}}, num_partitions=4\n\n"
                "FileNames\n1 \"/home/user/model.py\"\n2 \"/site-packages/jax/x.py\"\n\n"
                "FunctionNames\n1 \"layer\"\n2 \"helper\"\n3 \"step\"\n\n"
                "FileLocations\n"
                "1 {file_name_id=1 function_name_id=1 line=12 end_line=12 column=4 end_column=9}\n"
                "2 {file_name_id=2 function_name_id=2 line=90 end_line=90 column=1 end_column=2}\n"
                "3 {file_name_id=1 function_name_id=3 line=40 end_line=40 column=2 end_column=7}\n\n"
                "StackFrames\n"
                "1 {file_location_id=3 parent_frame_id=1}\n"
                "2 {file_location_id=1 parent_frame_id=2}\n"
                "3 {file_location_id=2 parent_frame_id=3}\n\n")
        add = ("%add (a: f32[], b: f32[]) -> f32[] {\n  %a = f32[] parameter(0)\n"
               "  %b = f32[] parameter(1)\n  ROOT %s = f32[] add(%a, %b)\n}\n\n")
        entry = ("ENTRY %main (p0: f32[8,16], p1: f32[8,16]) -> f32[8,16] {\n"
                 "  %p0 = f32[8,16]{1,0} parameter(0), sharding={devices=[2,1,2]<=[4] "
                 "last_tile_dim_replicate}, metadata={op_name=\"params/w\"}\n"
                 "  %p1 = f32[8,16]{1,0} parameter(1), sharding={replicated}\n"
                 + "".join(f"  {line}\n" for line in self.entry)
                 + f"  ROOT %result = {_V} add(%{self.value}, %p1)\n}}\n")
        return head + add + "".join(self.computations) + entry


def _meta(kind: int, op: str) -> str:
    if kind == 0:
        return ""
    if kind == 1:
        return f', metadata={{op_name="jit(step)/{op}" stack_frame_id=2}}'
    if kind == 2:
        return (f', metadata={{op_name="jit(step)/{op}" '
                f'source_file="/home/user/model.py" source_line=77}}')
    return f', metadata={{op_name="jit(step)/{op}" stack_frame_id=3}}'   # library


def _collective(m: _Module, lines: list, x: str, form: int, group: str,
                meta: int) -> str:
    """Lines computing a collective of `x` (f32[8,16]); returns the name of
    an f32[8,16] result."""
    md = _meta(meta, "collective")
    if form == 0:
        ar = m.fresh("all-reduce")
        lines.append(f"%{ar} = {_V} all-reduce(%{x}), channel_id={m.chan()}, "
                     f"replica_groups={group}, use_global_device_ids=true, "
                     f"to_apply=%add{md}")
        return ar
    if form == 1:
        start, done = m.fresh("ar-start"), m.fresh("ar-done")
        lines.append(f"%{start} = {_V} all-reduce-start(%{x}), channel_id={m.chan()}, "
                     f"replica_groups={group}, use_global_device_ids=true, "
                     f"to_apply=%add{md}")
        lines.append(f"%{done} = {_V} all-reduce-done(%{start})")
        return done
    if form == 2:
        ag, sl = m.fresh("all-gather"), m.fresh("slice")
        lines.append(f"%{ag} = f32[16,16]{{1,0}} all-gather(%{x}), channel_id={m.chan()}, "
                     f"replica_groups={group}, dimensions={{0}}, "
                     f"use_global_device_ids=true{md}")
        lines.append(f"%{sl} = {_V} slice(%{ag}), slice={{[0:8], [0:16]}}")
        return sl
    if form == 3:
        start, done, sl = m.fresh("ag-start"), m.fresh("ag-done"), m.fresh("slice")
        lines.append(f"%{start} = ({_V}, f32[16,16]{{1,0}}) all-gather-start(%{x}), "
                     f"channel_id={m.chan()}, replica_groups={group}, dimensions={{0}}, "
                     f"use_global_device_ids=true{md}")
        lines.append(f"%{done} = f32[16,16]{{1,0}} all-gather-done(%{start})")
        lines.append(f"%{sl} = {_V} slice(%{done}), slice={{[0:8], [0:16]}}")
        return sl
    if form == 4:
        rs, cat = m.fresh("reduce-scatter"), m.fresh("concatenate")
        lines.append(f"%{rs} = f32[4,16]{{1,0}} reduce-scatter(%{x}), channel_id={m.chan()}, "
                     f"replica_groups={group}, use_global_device_ids=true, "
                     f"dimensions={{0}}, to_apply=%add{md}")
        lines.append(f"%{cat} = {_V} concatenate(%{rs}, %{rs}), dimensions={{0}}")
        return cat
    if form == 5:
        a2a = m.fresh("all-to-all")
        lines.append(f"%{a2a} = {_V} all-to-all(%{x}), channel_id={m.chan()}, "
                     f"replica_groups={group}, dimensions={{0}}{md}")
        return a2a
    if form == 6:
        cp = m.fresh("collective-permute")
        lines.append(f"%{cp} = {_V} collective-permute(%{x}), channel_id={m.chan()}, "
                     f"source_target_pairs={{{{0,1}},{{1,2}},{{2,3}},{{3,0}}}}{md}")
        return cp
    if form == 7:
        start, done = m.fresh("cp-start"), m.fresh("cp-done")
        lines.append(f"%{start} = ({_V}, {_V}, u32[], u32[]) collective-permute-start(%{x}), "
                     f"channel_id={m.chan()}, source_target_pairs={{{{0,2}},{{2,0}}}}{md}")
        lines.append(f"%{done} = {_V} collective-permute-done(%{start})")
        return done
    # form 8: a combined all-reduce of seven operands (a long tuple).
    ar, gte = m.fresh("all-reduce"), m.fresh("get-tuple-element")
    shape = "(" + ", ".join([_V] * 7) + ")"
    lines.append(f"%{ar} = {shape} all-reduce({', '.join(['%' + x] * 7)}), "
                 f"channel_id={m.chan()}, replica_groups={group}, "
                 f"use_global_device_ids=true, to_apply=%add{md}")
    lines.append(f"%{gte} = {_V} get-tuple-element(%{ar}), index=3")
    return gte


def _block(m: _Module, block) -> None:
    kind, form, group, meta, known = block
    x = m.value
    if kind == "plain":
        m.value = _collective(m, m.entry, x, form, group, meta)
    elif kind == "fusion":
        comp = m.fresh("fused_computation")
        m.computations.append(
            f"%{comp} (param_0.{comp}: f32[8,16]) -> f32[8,16] {{\n"
            f"  %param_0.{comp} = {_V} parameter(0)\n"
            f"  ROOT %neg.{comp} = {_V} negate(%param_0.{comp}){_meta(meta, 'neg')}"
            f"\n}}\n\n")
        fusion = m.fresh("fusion")
        m.entry.append(f"%{fusion} = {_V} fusion(%{x}), kind=kLoop, calls=%{comp}"
                       f"{_meta(meta, 'fusion')}")
        m.value = _collective(m, m.entry, fusion, form, group, 0)
    elif kind == "call":
        comp = m.fresh("callee")
        body: list[str] = []
        _collective(m, body, "cp0", form, group, meta)   # its last line: the result
        body = [line.replace("%cp0", f"%cp0.{comp}") for line in body]
        m.computations.append(
            f"%{comp} (cp0.{comp}: f32[8,16]) -> f32[8,16] {{\n"
            f"  %cp0.{comp} = {_V} parameter(0)\n"
            + "".join(f"  {line}\n" for line in body[:-1])
            + f"  ROOT {body[-1]}\n}}\n\n")
        call = m.fresh("call")
        m.entry.append(f"%{call} = {_V} call(%{x}), to_apply=%{comp}")
        m.value = call
    else:                                   # a loop, perhaps nested
        nested = kind == "nested"
        cond, body_name = m.fresh("cond"), m.fresh("body")
        tup = f"(s32[], {_V})"
        m.computations.append(
            f"%{cond} (c: {tup}) -> pred[] {{\n  %c.{cond} = {tup} parameter(0)\n"
            f"  %i.{cond} = s32[] get-tuple-element(%c.{cond}), index=0\n"
            f"  %n.{cond} = s32[] constant({3 + form % 3})\n"
            f"  ROOT %lt.{cond} = pred[] compare(%i.{cond}, %n.{cond}), direction=LT\n}}\n\n")
        inner: list[str] = [
            f"%b.{body_name} = {tup} parameter(0)",
            f"%i.{body_name} = s32[] get-tuple-element(%b.{body_name}), index=0",
            f"%one.{body_name} = s32[] constant(1)",
            f"%next.{body_name} = s32[] add(%i.{body_name}, %one.{body_name})",
            f"%v.{body_name} = {_V} get-tuple-element(%b.{body_name}), index=1"]
        value = f"v.{body_name}"
        if nested:
            saved_entry, saved_value = m.entry, m.value
            m.entry, m.value = inner, value
            _block(m, ("loop", form, group, meta, known))
            value = m.value
            m.entry, m.value = saved_entry, saved_value
        else:
            value = _collective(m, inner, value, form, group, meta)
        inner.append(f"ROOT %t.{body_name} = {tup} tuple(%next.{body_name}, %{value})")
        m.computations.append(
            f"%{body_name} (b.{body_name}: {tup}) -> {tup} {{\n"
            + "".join(f"  {line}\n" for line in inner) + "}\n\n")
        zero, init, loop, out = (m.fresh("zero"), m.fresh("init"), m.fresh("while"),
                                 m.fresh("gte"))
        config = (f', backend_config={{"known_trip_count":{{"n":"{3 + form % 3}"}}}}'
                  if known else "")
        m.entry += [f"%{zero} = s32[] constant(0)",
                    f"%{init} = {tup} tuple(%{zero}, %{x})",
                    f"%{loop} = {tup} while(%{init}), condition=%{cond}, "
                    f"body=%{body_name}{config}",
                    f"%{out} = {_V} get-tuple-element(%{loop}), index=1"]
        m.value = out


_BLOCKS = st.tuples(st.sampled_from(["plain", "plain", "fusion", "call", "loop",
                                     "nested"]),
                    st.integers(0, 8), st.sampled_from(_GROUPS),
                    st.integers(0, 3), st.booleans())


def _generate(blocks, scheduled: bool) -> str:
    m = _Module(scheduled)
    for block in blocks:
        _block(m, block)
    return m.text()


def _report(view, mesh):
    return [dataclasses.asdict(c) for c in analysis.collectives(view, mesh, None)]


def _same(text: str) -> None:
    parsed = HloModuleView.from_text(text)
    scanned = hloscan.ScannedModule.from_text(text)
    reprinted = hloscan.ScannedModule.from_text(parsed.module.to_string())
    mesh = MeshSpec((MeshAxis("a", 2), MeshAxis("b", 2)))
    for m in (None, mesh):
        expected = _report(parsed, m)
        assert _report(scanned, m) == expected
        assert _report(reprinted, m) == expected
        # Each collective read on its own, none from one printed alike.
        known = analysis._KNOWN_FORMS
        analysis._KNOWN_FORMS = 0
        try:
            assert _report(hloscan.ScannedModule.from_text(text), m) == expected
        finally:
            analysis._KNOWN_FORMS = known
    assert [(p.name, p.shape, p.attrs.get("sharding"), p.metadata)
            for p in scanned.parameters()] == \
        [(p.name, p.shape, p.attrs.get("sharding"), p.metadata)
         for p in parsed.parameters()]
    assert (scanned.entry, scanned.num_partitions, scanned.num_replicas) == \
        (parsed.entry, parsed.num_partitions, parsed.num_replicas)
    assert dumps._PRINTED_MESH.search(scanned.printed_mesh or "") is None or \
        dumps._PRINTED_MESH.search(scanned.printed_mesh).group(0) == \
        dumps._PRINTED_MESH.search(parsed.text).group(0)


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_BLOCKS, min_size=1, max_size=6), st.booleans())
def test_the_scan_reads_what_xla_parses(blocks, scheduled):
    _same(_generate(blocks, scheduled))


def test_every_form_at_once():
    """One module with each block kind and collective form."""
    blocks = [(kind, form, _GROUPS[form % len(_GROUPS)], form % 4, form % 2 == 0)
              for kind in ("plain", "fusion", "call", "loop", "nested")
              for form in range(9)]
    _same(_generate(blocks, False))
    _same(_generate(blocks, True))


def test_files_of_the_suite(tmp_path):
    """The scan on the module files the suite reads (where it reads them)."""
    with open(os.path.join(DATA, "known_trip_count.hlo")) as f:
        _same(f.read())


def test_generic_async_needs_the_parser():
    """XLA names the instruction an `async-start` wraps as it parses; the
    scan leaves such modules to XLA's parser, and `load_view` falls back."""
    path = os.path.join(DATA, "async_collectives.hlo")
    with pytest.raises(hloscan.NeedsParser, match="async"):
        hloscan.ScannedModule.from_file(path)
    view = dumps.load_view(dumps.FoundModule("m", path, "file"))
    assert isinstance(view, HloModuleView)
    names = [c.name for c in analysis.collectives(view, None, None)]
    assert "reduce-scatter.1" in names


@pytest.mark.parametrize("text, message", [
    ("not a module\n", "no HloModule header"),
    ("HloModule m\n\n%c (a: f32[]) -> f32[] {\n  %a = f32[] parameter(0)\n",
     "is not closed"),
    ("HloModule m\n\n%c (a: f32[]) -> f32[] {\n  ROOT %a = f32[] parameter(0)\n}\n",
     "no ENTRY"),
    ("HloModule m\n\nENTRY %main {\n  ROOT %a = f32[] parameter(0)\n}\n",
     "not a computation"),
    ("HloModule m\n\nENTRY %main (a: f32[]) -> f32[] {\n  this is not one\n"
     "  ROOT %a = f32[] parameter(0)\n}\n", "not an instruction"),
])
def test_what_the_scan_cannot_read_is_left_to_xla(text, message):
    with pytest.raises(hloscan.NeedsParser, match=message):
        hloscan.ScannedModule.from_text(text)


def test_blocks_split_anywhere(monkeypatch, tmp_path):
    """Lines and computations cut by the scan's blocks read the same, from
    text (held as it is where it is ASCII), bytes or a file."""
    ascii_text = _generate([(k, f, _GROUPS[f % 5], f % 4, True)
                            for k in ("plain", "loop", "fusion") for f in range(9)],
                           True)
    other = ascii_text.replace('op_name="', 'op_name="é', 3)
    for text in (ascii_text, other):
        whole = _report(hloscan.ScannedModule.from_text(text), None)
        path = tmp_path / "m.hlo"
        path.write_bytes(text.encode("utf-8"))
        for size in (64, 97, 1000):
            monkeypatch.setattr(blocks, "BLOCK", size)
            for view in (hloscan.ScannedModule.from_text(text),
                         hloscan.ScannedModule.from_bytes(text.encode("utf-8")),
                         hloscan.ScannedModule.from_file(str(path))):
                assert _report(view, None) == whole
        monkeypatch.undo()
    assert hloscan.ScannedModule.from_text(ascii_text)._source.text is ascii_text
    assert hloscan.ScannedModule.from_text(other)._source.text is None


@pytest.mark.parametrize("blocks", [[], [("plain", f, _GROUPS[f % 5], 1 + f % 3, True)
                                        for f in range(9)]])
def test_the_json_written_in_pieces_is_the_whole(tmp_path, blocks):
    """A report's JSON is written collective by collective; it must be the
    JSON of the whole report, byte for byte."""
    from irshard.reporting.writer import dumps_json, render_json_pieces
    path = tmp_path / "m.hlo"
    path.write_text(_generate(blocks, True))
    report = dumps.report(dumps.FoundModule("m", str(path), "file"), str(path), None)
    assert len(report.collectives) == (9 if blocks else 0)
    pieces = list(render_json_pieces(report))
    assert len(pieces) > (9 if blocks else 2)
    assert "".join(pieces) == dumps_json(report.to_json()) + "\n"


@pytest.mark.parametrize("fmt", ["json", "text"])
def test_a_dense_loop_reports_as_before(fmt):
    """A module with two collectives in every nine instructions, half of
    them in a loop body (`benchmarks/large_modules.py --dense`), against
    its report written by the reader before collectives were read back
    from the text one at a time: byte for byte."""
    from tests.conftest import run_irshard
    result = run_irshard("collectives", "dense_loop.hlo", "--mesh", "a=2,b=4",
                         "--format", fmt, cwd=DATA)
    assert result.returncode == 0, result.stderr
    with open(os.path.join(DATA, "golden", f"dense_loop.{fmt}")) as f:
        assert result.stdout == f.read()


def test_packed_collectives_are_collectives():
    """What a report keeps of each of many collectives (its name and
    op_name, the rest shared) is the same value as a `Collective`."""
    import pickle
    from irshard.reporting.packed import PackedCollective
    from irshard.reporting.report import Collective
    view = hloscan.ScannedModule.from_file(os.path.join(DATA, "dense_loop.hlo"))
    found = analysis.collectives(view, None, None)
    assert all(type(c) is PackedCollective for c in found)
    first = found[0]
    plain = Collective(**{f.name: getattr(first, f.name)
                          for f in dataclasses.fields(Collective)})
    assert plain == first and first == plain and hash(plain) == hash(first)
    assert first.name == "all-gather.6" and first.op_name.endswith("layer_6/all_gather")
    assert found[1] != first
    from irshard.reporting.why import Why
    changed = dataclasses.replace(first, why=Why("x"))
    assert type(changed) is Collective and changed.why == Why("x")
    assert changed == first                      # `why` is not compared
    assert pickle.loads(pickle.dumps(first)) == first
    assert dataclasses.asdict(first) == dataclasses.asdict(plain)
    unnamed = PackedCollective.pack("x", None, first._shared)
    assert unnamed.op_name is None and unnamed.name == "x"
    assert PackedCollective.pack("x", "", first._shared).op_name == ""


def test_a_report_keeps_many_collectives_packed(monkeypatch):
    """`PackedCollectives` reads as the tuple of its collectives: indexed
    from either end, sliced, iterated, compared, hashed and pickled as
    that tuple, across the strings its names are kept in, and counted by
    the fields they share."""
    import pickle
    from collections import Counter
    from irshard.reporting.packed import PackedCollective, PackedCollectives
    monkeypatch.setattr(PackedCollectives, "_CHUNK", 3)   # names over strings
    text = _generate([("plain", f % 3, _GROUPS[f % 3], 1, True) for f in range(14)]
                     + [("loop", 2, _GROUPS[2], 1, True)], True)
    found = analysis.collectives(hloscan.ScannedModule.from_text(text), None, None)
    assert isinstance(found, PackedCollectives) and len(found) > 10
    whole = tuple(found[i] for i in range(len(found)))
    assert tuple(found) == whole and found == whole and whole == found
    assert found[-1] == whole[-1] and found[-1].name == whole[-1].name
    assert found[2:7] == whole[2:7] and found[::-4] == whole[::-4]
    assert [c.name for c in found] == [c.name for c in whole]
    assert [c.op_name for c in found] == [c.op_name for c in whole]
    assert len({c.name for c in found}) == len(found)
    assert hash(found) == hash(whole)
    assert pickle.loads(pickle.dumps(found)) == whole
    assert found != whole[:-1] and found != whole[1:] + whole[:1]
    with pytest.raises(IndexError):
        found[len(found)]
    counted = found.counted()
    assert sum(n for _, n in counted) == len(found)
    assert Counter({c._shared: n for c, n in counted}) == \
        Counter(c._shared for c in whole)
    firsts, seen = [], set()
    for c in whole:
        if id(c._shared) not in seen:
            seen.add(id(c._shared))
            firsts.append(c)
    assert [c for c, _ in counted] == firsts and len(firsts) < len(found)
    unnamed = PackedCollectives([("a", None, whole[0]._shared),
                                 ("b", "", whole[0]._shared)])
    assert [(c.name, c.op_name) for c in unnamed] == [("a", None), ("b", "")]
    assert PackedCollectives([]) == () and not PackedCollectives([])
    assert type(unnamed[0]) is PackedCollective


def test_the_collectives_table_streamed_is_the_table():
    """The collectives table made line by line (cells shared by
    collectives alike) is `table()` of every row, including names that
    are all digits (right-aligned) and plain `Collective`s among packed
    ones."""
    from irshard.reporting import text
    view = hloscan.ScannedModule.from_file(os.path.join(DATA, "dense_loop.hlo"))
    found = analysis.collectives(view, None, None)
    for scoped, shown in itertools.product(
            (False, True),
            (found, list(found[:3]) + [dataclasses.replace(found[3])],
             [_renamed(c, str(10 ** i)) for i, c in enumerate(found[:5])])):
        header = ["kind", "name", "shape", "bytes", "wire", "axes", "group",
                  "runs"] + (["scope"] if scoped else []) + ["source"]
        rows = [text._collective_cells(c, False, scoped) for c in shown]
        for row, c in zip(rows, shown):
            row[1] = c.name
            if scoped:
                row[-2] = c.scope or "-"
        assert list(text._collectives_table(header, shown, False, scoped)) == \
            text.table(header, rows)


def _renamed(c, name):
    """`c` under another name (sharing its record)."""
    from irshard.reporting.packed import PackedCollective
    return PackedCollective.pack(name, c.op_name, c._shared)


def test_few_computations_are_held_read_whole(monkeypatch):
    """A step simulated on the scan (every instruction of every computation
    read, some many times) is the one XLA's objects give, also when the
    scan holds no more than the computation in use and the one before it."""
    from irshard.timemodel import schedule
    text = _generate([(kind, form, _GROUPS[form % len(_GROUPS)], form % 4, True)
                      for kind in ("plain", "fusion", "call", "loop", "nested")
                      for form in range(3)], True)
    rates = schedule.Rates(peak_flops=1e12, memory_bandwidth=1e11, overhead_s=1e-6)

    def step(view):
        return schedule.simulate(view, rates,
                                 lambda inst: (1e-5, inst.name)).to_json()

    expected = step(HloModuleView.from_text(text))
    assert expected["compute_s"] > 0 and expected["exposed_comm_s"] > 0
    assert step(hloscan.ScannedModule.from_text(text)) == expected
    monkeypatch.setattr(hloscan, "_LOADED_BYTES", 1)
    view = hloscan.ScannedModule.from_text(text)
    assert step(view) == expected
    assert len(view._loaded) <= 2
    assert _report(view, None) == _report(HloModuleView.from_text(text), None)


_FORMS = """HloModule forms

%copy.1 (p: f32[8,16]) -> f32[8,4] {
  %param_0.11 = f32[8,16]{1,0} parameter(0)
  %param_1.12 = f32[16,4]{1,0} parameter(1)
  ROOT %dot.13 = f32[8,4]{1,0} dot(%param_0.11, %param_1.12), lhs_contracting_dims={1}, rhs_contracting_dims={0}, metadata={op_name="layer0/dot" stack_frame_id=1}
}

%copy.2 (p: f32[8,16]) -> f32[8,4] {
  %param_0.21 = f32[8,16]{1,0} parameter(0)
  %param_1.22 = f32[16,4]{1,0} parameter(1)
  ROOT %dot.23 = f32[8,4]{1,0} dot(%param_0.21, %param_1.22), lhs_contracting_dims={1}, rhs_contracting_dims={0}, metadata={op_name="layer1/dot" stack_frame_id=7}
}

%other_shape (p: f32[8,16]) -> f32[8,2] {
  %param_0.31 = f32[8,16]{1,0} parameter(0)
  %param_1.32 = f32[16,2]{1,0} parameter(1)
  ROOT %dot.33 = f32[8,2]{1,0} dot(%param_0.31, %param_1.32), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}

%twins.1 (p: f32[4,4]) -> f32[4,4] {
  %param_0.41 = f32[4,4]{1,0} parameter(0)
  %n.42 = f32[4,4]{1,0} negate(%param_0.41)
  %n.43 = f32[4,4]{1,0} tanh(%param_0.41)
  ROOT %s.44 = f32[4,4]{1,0} subtract(%n.42, %n.43)
}

%twins.2 (p: f32[4,4]) -> f32[4,4] {
  %param_0.51 = f32[4,4]{1,0} parameter(0)
  %n.52 = f32[4,4]{1,0} negate(%param_0.51)
  %n.53 = f32[4,4]{1,0} tanh(%param_0.51)
  ROOT %s.54 = f32[4,4]{1,0} subtract(%n.52, %n.53), metadata={op_name="x"}
}

%twins_swapped (p: f32[4,4]) -> f32[4,4] {
  %param_0.61 = f32[4,4]{1,0} parameter(0)
  %n.62 = f32[4,4]{1,0} negate(%param_0.61)
  %n.63 = f32[4,4]{1,0} tanh(%param_0.61)
  ROOT %s.64 = f32[4,4]{1,0} subtract(%n.63, %n.62)
}

%caller.1 (p: f32[8,16]) -> f32[8,4] {
  %param_0.71 = f32[8,16]{1,0} parameter(0)
  %param_1.72 = f32[16,4]{1,0} parameter(1)
  ROOT %fusion.73 = f32[8,4]{1,0} fusion(%param_0.71, %param_1.72), kind=kLoop, calls=%copy.1
}

%caller.2 (p: f32[8,16]) -> f32[8,4] {
  %param_0.81 = f32[8,16]{1,0} parameter(0)
  %param_1.82 = f32[16,4]{1,0} parameter(1)
  ROOT %fusion.83 = f32[8,4]{1,0} fusion(%param_0.81, %param_1.82), kind=kLoop, calls=%other_shape
}

ENTRY %main (a: f32[8,16]) -> f32[8,16] {
  ROOT %a = f32[8,16]{1,0} parameter(0)
}
"""


def test_computations_alike_share_a_form():
    """Copies of a computation (an unrolled model's fusions) printed alike
    but for the numbers in their names and their metadata share a form;
    a different shape, instructions told apart only by their numbers used
    in another order, or a call (whose callee the form would not name) do
    not."""
    scan = hloscan.ScannedModule.from_text(_FORMS)
    form = scan.form
    assert form("copy.1") == form("copy.2") != form("other_shape")
    assert form("twins.1") == form("twins.2") != form("twins_swapped")
    assert len({form("copy.1"), form("twins.1"), form("other_shape")}) == 3
    assert (form("caller.1"), form("caller.2")) == ("caller.1", "caller.2")


def test_a_computation_read_whole_reads_as_its_lines_read_one_by_one():
    """`_instructions` (a computation's lines matched in their common form)
    gives what reading each line alone gives, on every printed form, the
    suite's modules, and lines the common form leaves aside."""
    from tests.test_hlo import _PRINTED_FORMS
    lines = list(_PRINTED_FORMS) + [
        "%trailing = f32[4]{0} negate(%a)  ", "ROOT %r.1 = f32[4]{0} add(%a, %b)",
        "plain = f32[4]{0} negate(a)", "%n = f32[4]{0} custom-call((%a)), x=1",
        "%e = (s32[], (f32[2]{0}, f32[2]{0})) tuple(%i, %t)",
        "%g = f32[2]{0} get-tuple-element(%t.1#0), index=0"]
    for name in sorted(os.listdir(DATA)):
        if name.endswith(".hlo"):
            with open(os.path.join(DATA, name)) as f:
                lines += [line.strip() for line in f
                          if line.startswith("  ") and " = " in line]
    text = "\n".join("  " + line for line in lines) + "\n\n"
    whole = [(i.name, i.opcode, i.operands, i.text, i.root)
             for i in hlolines.instructions(text, "c")]
    alone = [(i.name, i.opcode, i.operands, i.text, i.root)
             for i in (hlolines.instruction("  " + line, "c") for line in lines)]
    assert whole == alone and len(whole) > 60


def test_a_long_line_is_read_in_time_proportional_to_it(monkeypatch, tmp_path):
    """A line longer than a block is gathered piece by piece: each byte is
    searched for the line's end once (a one-line file of hundreds of MB
    took quadratic time when the pending piece was searched again with
    every block)."""
    import time
    monkeypatch.setattr(blocks, "BLOCK", 16)
    line = b"x" * 2_000_000
    path = tmp_path / "one-line.hlo"
    path.write_bytes(b"a\n" + line + b"\nb\n" + line)
    for text in (blocks.ModuleText(path=str(path)),
                 blocks.ModuleText(data=path.read_bytes())):
        start = time.perf_counter()
        read = list(text.blocks())
        assert time.perf_counter() - start < 5.0
        joined = b"".join(block for _, block in read)
        assert joined == path.read_bytes() + b"\n"
        offsets = [offset for offset, _ in read]
        assert offsets == sorted(offsets) and all(
            joined[o:o + len(b)] == b for o, b in read)
        assert all(block.endswith(b"\n") for _, block in read)


def test_a_file_that_is_not_text_is_refused_at_its_first_block(tmp_path):
    """A sparse or binary file is no printed HLO: refused by its first NUL
    byte, in one error line, before anything reads it whole."""
    from tests.conftest import run_irshard
    path = tmp_path / "sparse.hlo"
    with open(path, "wb") as f:
        f.write(b"HloModule m\n")
        f.seek(256 << 20)
        f.write(b"\n")
    done = run_irshard("collectives", str(path))
    assert done.returncode == 2
    assert done.stderr == (f"irshard: error: {path} is not HLO text: it holds "
                           f"a NUL byte at byte 12\n")
