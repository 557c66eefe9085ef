"""The textual pipeline: parsing, option syntax, and planning."""

import re

import pytest

from irshard import backend
from irshard.core.errors import PassError
from irshard.ir import opt, pipeline


@pytest.mark.parametrize("text, names", [
    ("canonicalize", ["canonicalize"]),
    ("a,b{x=1},c", ["a", "b", "c"]),
    ("builtin.module(a, func.func(b,c))", ["a", "func.func"]),
    (" a , b ", ["a", "b"]),
    ('irshard-annotate{mesh="x=2,y=2" args="0=x,_"}', ["irshard-annotate"]),
])
def test_parse(text, names):
    assert [e.name for e in pipeline.parse(text)] == names


def test_nested_and_options_print_back():
    elements = pipeline.parse("func.func(sdy-insert-explicit-reshards{enable-full-version=true}),cse")
    assert elements[0].text() == "func.func(sdy-insert-explicit-reshards{enable-full-version=true})"
    assert elements[0].nested[0].options == "enable-full-version=true"
    assert elements[1].column == 67


@pytest.mark.parametrize("text, message", [
    ("", "the pipeline is empty"),
    ("a,,b", "expected a pass name, found ',' at column 3"),
    ("a b", "expected ',' or the end, found 'b' at column 3"),
    ("a(b", "expected ',' or ')', found the end at column 4"),
    ("a{x=1", "unclosed '{' of pass options at column 2"),
    ("a,", "expected a pass name, found the end at column 3"),
])
def test_parse_errors(text, message):
    with pytest.raises(PassError) as e:
        pipeline.parse(text)
    assert message in str(e.value)


@pytest.mark.parametrize("text, options", [
    ("", {}),
    ("a=1 b=two", {"a": "1", "b": "two"}),
    ('mesh="x=2,y=2" args="0=x;1=_,y"', {"mesh": "x=2,y=2", "args": "0=x;1=_,y"}),
    ("list={1,2} flag=true", {"list": "1,2", "flag": "true"}),
])
def test_options(text, options):
    assert pipeline.parse_options(text, "p") == options


@pytest.mark.parametrize("text, message", [
    ("=1", "expected KEY=VALUE"),
    ('a="open', "unclosed quote"),
    ("a={1", "unclosed '{'"),
])
def test_option_errors(text, message):
    with pytest.raises(PassError, match=message):
        pipeline.parse_options(text, "p")


def _plan(text, print_after_all=False):
    context = backend.ir_context()
    return pipeline.plan(pipeline.parse(text), text, context,
                         lambda t, c: backend.parse_pipeline(t, c), print_after_all)


def test_plan_groups_registered_passes_between_irshard_passes():
    steps = _plan("canonicalize,cse,irshard-strip-shardings,sdy-insert-explicit-reshards,cse")
    assert [s.label for s in steps] == [
        "canonicalize,cse", "irshard-strip-shardings",
        "sdy-insert-explicit-reshards,cse"]
    # A function pass written at the top level is nested, as mlir-opt users expect.
    assert steps[2].mlir_text == "func.func(sdy-insert-explicit-reshards),cse"
    assert steps[1].irshard_pass.name == "irshard-strip-shardings"


def test_plan_one_step_per_pass_when_printing_after_each():
    steps = _plan("canonicalize,cse,symbol-dce", print_after_all=True)
    assert [s.label for s in steps] == ["canonicalize", "cse", "symbol-dce"]


def test_plan_rejects_bad_options_of_irshard_passes():
    with pytest.raises(PassError, match="option 'keep-meshes' takes true or false"):
        _plan("irshard-strip-shardings{keep-meshes=maybe}")


def test_split_input_file_keeps_line_numbers():
    chunks = opt.split_chunks("a\nb\n// -----\nc\n// ----- x\nd\n", True)
    assert [(c.text.strip(), c.first_line) for c in chunks] == [
        ("a\nb", 1), ("c", 3), ("d", 5)]


WHILE = """
func.func @main(%n: tensor<i32>) -> tensor<i32> {
  %c0 = stablehlo.constant dense<START> : tensor<i32>
  %lim = stablehlo.constant dense<LIMIT> : tensor<i32>
  %one = stablehlo.constant dense<STEP> : tensor<i32>
  %r:2 = stablehlo.while(%i = %c0, %acc = %n) : tensor<i32>, tensor<i32>
   cond {
    %p = stablehlo.compare DIRECTION, LHS, RHS, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
    stablehlo.return %p : tensor<i1>
  } do {
    %next = stablehlo.add %i, %one : tensor<i32>
    %a = stablehlo.add %acc, %acc : tensor<i32>
    stablehlo.return %next, %a : tensor<i32>, tensor<i32>
  }
  return %r#1 : tensor<i32>
}
"""


@pytest.mark.parametrize("start, limit, step, direction, lhs, rhs, trips", [
    (0, 5, 1, "LT", "%i", "%lim", 5),
    (0, 5, 1, "LE", "%i", "%lim", 6),
    (2, 11, 3, "LT", "%i", "%lim", 3),
    (0, 5, 1, "GT", "%lim", "%i", 5),
    (7, 5, 1, "LT", "%i", "%lim", 0),
    (0, 5, 1, "NE", "%i", "%lim", None),
    (0, 5, 1, "LT", "%i", "%acc", None),
    (0, 5, 0, "LT", "%i", "%lim", None),
])
def test_a_stablehlo_while_counts_its_trips(start, limit, step, direction, lhs,
                                            rhs, trips):
    """The StableHLO reader of `for (i = c0; i < N; i += step)` agrees with
    the counting HLO's reader uses; what is not that pattern is no count."""
    from irshard import backend
    from irshard.xla import loops
    from jaxlib.mlir import ir
    text = (WHILE.replace("START", str(start)).replace("LIMIT", str(limit))
            .replace("STEP", str(step)).replace("DIRECTION", direction)
            .replace("LHS", lhs).replace("RHS", rhs))
    with backend.ir_context():
        module = ir.Module.parse(text)
        loop = next(op for op in module.body.operations[0].regions[0].blocks[0]
                    .operations if op.operation.name == "stablehlo.while")
        assert loops.while_trip_count(loop.operation) == trips
    if trips is not None:
        flipped = {"GT": "LT"}.get(direction, direction)
        assert loops.trips(start, limit, step, flipped) == trips


def test_memory_stats_worked_out_beside_the_report():
    """`memory_stats_later`: XLA's figures, or its error, once asked for."""
    from types import SimpleNamespace

    from irshard.backend.compiling import CompiledExecutable

    class Executable:
        def __init__(self, fails):
            self.fails = fails

        def get_compiled_memory_stats(self):
            if self.fails:
                raise RuntimeError("no stats")
            return SimpleNamespace(argument_size_in_bytes=1, output_size_in_bytes=2,
                                   alias_size_in_bytes=3, temp_size_in_bytes=4)

    ok = CompiledExecutable(Executable(False), (), None)
    assert ok.memory_stats_later()() == ok.memory_stats() == {
        "argument_bytes": 1, "output_bytes": 2, "alias_bytes": 3, "temp_bytes": 4}
    later = CompiledExecutable(Executable(True), (), None).memory_stats_later()
    with pytest.raises(RuntimeError, match="no stats"):
        later()


def test_the_propagated_stage_runs_shardys_own_registered_pipeline():
    """The propagated stage's passes are this jaxlib's registered
    `sdy-propagation-pipeline` as the registry expands it, in its order, up
    to where Shardy dumps `after_propagation` (its module dumps left out,
    its last pass's drop of sharding rules kept), recording origins."""
    from jaxlib.mlir import passmanager

    from irshard.backend import shardy
    from irshard.backend.lowering import ir_context
    from irshard.core.syntax import split_top_level
    with ir_context():
        expanded = str(passmanager.PassManager.parse(
            "builtin.module(sdy-propagation-pipeline)"))
    upstream = split_top_level(expanded[expanded.index("(") + 1:-1])
    ours = split_top_level(shardy.propagation_pipeline())
    plain = split_top_level(shardy.propagation_pipeline(origins=False))
    no_dumps = [p for p in upstream if p != "sdy-save-module"]
    cut = [p.split("{")[0] for p in no_dumps].index("sdy-close-shardings") + 1
    assert plain == no_dumps[:cut] + [p for p in no_dumps[cut:]
                                      if "sdy-drop-sharding-rules" in p]
    assert "sdy-user-priority-propagate" in "".join(plain)
    # Origins recorded where propagation decides, and only that changed.
    recorded = [re.sub(r"debug-sharding-origins=true", "debug-sharding-origins=false", p)
                for p in ours]
    assert recorded == plain
    assert sum("debug-sharding-origins=true" in p for p in ours) == 3
