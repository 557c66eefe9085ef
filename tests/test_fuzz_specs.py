"""Property tests of the spec grammar and of `NAME=VALUE` splitting: whatever
the text, the result is a parse or irshard's own usage error, and the error
is one line."""

import string

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from irshard.running import execution
from irshard.loading import fromfile as program
from irshard.core.errors import IrshardError, UsageError
from irshard.core import textinput
from irshard.core.specs import (MeshSpec, MeshAxis, check_sharding, parse_mesh,
                           parse_sharding, parse_type)

# Text from the grammar's own alphabet (so that parses happen often), mixed
# with anything at all: control characters, line separators, other digits.
GRAMMAR = "xyz_dp=,[]@+?0123456789 f3i2b16ucpred"
texts = st.one_of(
    st.text(alphabet=GRAMMAR, max_size=30),
    st.text(max_size=30),
    st.text(alphabet=string.printable, max_size=30),
    st.sampled_from(["x=2\ny=2", "\u2028", "x=\u00b2", "\u0663", "f32[\u0663]",
                     "x=" + "9" * 5000, "f32[" + "9" * 5000 + "]",
                     "f32[1152921504606846976,4]", "_?" * 10, "x+", "+x",
                     "f32[8@x+y?]", "0=_", "²=x"]),
)

SETTINGS = settings(max_examples=400, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])


def one_line_error(fn, *args):
    """`fn(*args)` returns, or raises an IrshardError of one line."""
    try:
        return fn(*args)
    except IrshardError as e:
        message = str(e)
        assert message and len(message.splitlines()) == 1, repr(message)
        assert message == message.strip()
        return None


@SETTINGS
@given(texts)
def test_mesh(text):
    mesh = one_line_error(parse_mesh, text)
    if mesh is not None:
        assert all(a.size > 0 for a in mesh.axes)
        assert parse_mesh(str(mesh)) == mesh


@SETTINGS
@given(texts)
def test_type(text):
    ttype = one_line_error(parse_type, text)
    if ttype is not None:
        assert all(n >= 0 for n in ttype.shape)
        assert parse_type(str(ttype)).shape == ttype.shape


@SETTINGS
@given(texts, st.lists(st.integers(0, 64), max_size=3))
def test_sharding(text, shape):
    spec = one_line_error(parse_sharding, text)
    if spec is not None:
        assert parse_sharding(str(spec)) == spec
        mesh = MeshSpec((MeshAxis("x", 2), MeshAxis("y", 4)))
        one_line_error(check_sharding, spec, tuple(shape), mesh, "argument 'a'")


@SETTINGS
@given(texts, st.sampled_from(["--arg", "--shard", "--input", "--range"]))
def test_name_value(text, option):
    pair = one_line_error(textinput.split_assignment, text, option, "VALUE")
    if pair is not None:
        name, value = pair
        assert name and "=" not in name


@SETTINGS
@given(st.lists(texts, max_size=4))
def test_assignments(items):
    one_line_error(program.assignments, items, "--shard", "SPEC")
    one_line_error(program.parse_out_shardings, items)


@SETTINGS
@given(texts)
def test_range(text):
    parsed = one_line_error(execution.parse_range, "x=" + text)
    if parsed is not None:
        low, high = parsed[1]
        assert low < high


def test_a_name_given_twice_is_an_error():
    try:
        program.assignments(["a=x", "a=y"], "--shard", "SPEC")
    except UsageError as e:
        assert "--shard a is given twice" in str(e)
    else:
        raise AssertionError("no error")


def _reference_match(pattern, path):
    """The glob semantics written the slow, obvious way: try every split."""
    import fnmatch
    if not pattern:
        return not path
    head, rest = pattern[0], pattern[1:]
    if head == "**":
        return any(_reference_match(rest, path[i:]) for i in range(len(path) + 1))
    return bool(path) and fnmatch.fnmatchcase(path[0], head) \
        and _reference_match(rest, path[1:])


segments = st.sampled_from(["a", "b", "ab", "0"])
pattern_segments = st.sampled_from(["a", "b", "*", "?", "a*", "[ab]", "**", "**"])


@SETTINGS
@given(st.lists(pattern_segments, min_size=1, max_size=7),
       st.lists(segments, min_size=1, max_size=7))
def test_glob_matches_as_the_obvious_backtracking_does(pattern, path):
    from irshard.core import tree
    assert tree.matches("/".join(pattern), "/".join(path)) == \
        _reference_match(pattern, path)


def test_glob_of_many_double_stars_does_not_backtrack():
    # With backtracking this is exponential in the number of '**' segments
    # and never returns; matched position by position it is immediate.
    from irshard.core import tree
    pattern = "/".join(["**"] * 400 + ["x"])
    assert not tree.matches(pattern, "/".join(["a"] * 400 + ["y"]))
    assert tree.matches(pattern, "/".join(["a"] * 400 + ["x"]))
    rule = tree.Rule("/".join(["**"] * 60 + ["w"]), "x")
    assert tree.unmatched([rule], ["params/" + "/".join(["l"] * 60) + "/b"]) == [rule]
