"""Loading the user's file and choosing the function and its inputs."""

import textwrap

import pytest

from irshard.loading import loader
from irshard.core.errors import InputError, SpecError, UserCodeError
from irshard.loading.fromfile import load_program
from irshard.core.specs import parse_mesh

MESH = parse_mesh("x=4")


def source(text: str) -> str:
    return textwrap.dedent(text).lstrip()


def test_local_imports_work(write):
    write("helpers.py", "SCALE = 3\n")
    path = write("model.py", source("""
        import helpers
        def f(a: "f32[8]"):
            return a * helpers.SCALE
        """))
    program = load_program(path, mesh=MESH)
    assert program.function == "f"
    assert [i.name for i in program.inputs] == ["a"]


def test_the_only_public_function_is_chosen(write):
    path = write("m.py", source("""
        from math import sqrt          # imported: not a candidate
        def _private(a): return a
        def public(a: "f32[4]"): return a
        """))
    assert load_program(path, mesh=MESH).function == "public"


def test_several_functions_need_fn(write):
    path = write("m.py", "def b(a: 'f32[4]'): return a\ndef a(x: 'f32[4]'): return x\n")
    with pytest.raises(InputError, match=r"defines 2 public functions \(a, b\); "
                                         r"choose one with --fn NAME"):
        load_program(path, mesh=MESH)
    assert load_program(path, mesh=MESH, fn_name="b").function == "b"


def test_unknown_fn_lists_candidates(write):
    path = write("m.py", "def b(a: 'f32[4]'): return a\ndef a(x: 'f32[4]'): return x\n")
    with pytest.raises(InputError, match=r"no function 'c' in .*m.py; candidates: a, b"):
        load_program(path, mesh=MESH, fn_name="c")


def test_no_public_function(write):
    path = write("m.py", "X = 1\n")
    with pytest.raises(InputError, match="defines no public function"):
        load_program(path, mesh=MESH)


def test_syntax_error_says_where(write):
    path = write("bad.py", "def f(a):\n    return a +\n")
    with pytest.raises(InputError, match=r"bad.py:2:\d+: syntax error: invalid syntax"):
        loader.load_module(path)


def test_exception_at_import_is_the_users(write):
    path = write("boom.py", "x = 1\nraise ValueError('no config')\n")
    with pytest.raises(UserCodeError, match=r"boom.py:2: in <module>: "
                                            r"ValueError: no config"):
        loader.load_module(path)


@pytest.mark.parametrize("name, message", [
    ("missing.py", "file '{path}' does not exist"),
    ("notes.txt", "is not a Python file"),
])
def test_bad_paths(tmp_path, name, message):
    path = str(tmp_path / name)
    if name.endswith(".txt"):
        open(path, "w").close()
    with pytest.raises(InputError, match=message.format(path=path).replace(".", r"\.")):
        loader.load_module(path)


def test_directory_is_rejected(tmp_path):
    with pytest.raises(InputError, match="is a directory"):
        loader.load_module(str(tmp_path))


def test_future_annotations_are_read(write):
    path = write("m.py", source("""
        from __future__ import annotations
        def f(a: "f32[8@x]", b: "i32[]"):
            return a
        """))
    program = load_program(path, mesh=MESH)
    assert [str(i.type) for i in program.inputs] == ["f32[8]", "i32[]"]
    assert [str(i.sharding) for i in program.inputs] == ["x", ""]


def test_arg_and_shard_override_annotations(write):
    path = write("m.py", "def f(a: 'f32[8@x]', b=3):\n    return a * b\n")
    program = load_program(path, mesh=MESH, args=["a=f32[16]"], shards=["a=_"])
    assert str(program.inputs[0].type) == "f32[16]"
    assert str(program.inputs[0].sharding) == "_"
    assert dict(program.static) == {"b": 3}


def test_static_parameters_are_bound(write):
    path = write("m.py", "def f(a: 'f32[4]', scale=2.0, *, offset=1.0):\n"
                         "    return a * scale + offset\n")
    program = load_program(path, mesh=MESH)
    assert dict(program.static) == {"scale": 2.0, "offset": 1.0}
    assert program.fn(10.0) == 21.0


@pytest.mark.parametrize("kwargs, error, message", [
    (dict(), InputError, "argument 'b' of 'f' has no type; pass --arg b=TYPE"),
    (dict(args=["c=f32[2]"]), InputError, "--arg c: 'f' has no argument 'c'; "
                                          "its arguments are a, b"),
    (dict(args=["b=f32[8]"], shards=["c=x"]), SpecError,
     "--shard c=x: 'c' matches no input; the inputs are a, b"),
    (dict(args=["b=f33[2]"]), SpecError, "unknown dtype 'f33'"),
    (dict(args=["b=f32[6]"], shards=["b=x"]), SpecError,
     "dimension 0 has size 6, which is not divisible by 4"),
    (dict(args=["b=f32[8]"], shards=["b=x,_"]), SpecError, "has 2 entries"),
])
def test_input_errors(write, kwargs, error, message):
    path = write("m.py", "def f(a: 'f32[8]', b):\n    return a\n")
    with pytest.raises(error) as e:
        load_program(path, mesh=MESH, **kwargs)
    assert message in str(e.value)


def test_variadic_parameters_are_rejected(write):
    path = write("m.py", "def f(*xs):\n    return xs\n")
    with pytest.raises(InputError, match=r"takes \*xs"):
        load_program(path, mesh=MESH)


def test_grad_needs_a_float_input(write):
    path = write("m.py", "def f(a: 'i32[4]'):\n    return a.sum()\n")
    with pytest.raises(SpecError, match="no floating-point input"):
        load_program(path, mesh=MESH, grad=True)


def test_a_file_named_like_a_loaded_module(write):
    """A user file called `json.py` must not replace the real module."""
    import json
    path = write("json.py", "def f(a: 'f32[4]'):\n    return a\n")
    program = load_program(path, mesh=MESH)
    assert program.function == "f"
    import sys
    assert sys.modules["json"] is json
