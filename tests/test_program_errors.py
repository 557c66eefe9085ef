"""Errors that name the right party: what the user's program does wrong
(its own `BaseException`, a `lower()` or `--context` that is not what it
claims) is the program's error, exit 2, naming the user's object; the
Python API raises one `UsageError` where the command line prints its line."""

import pytest

from irshard import cli
from tests.conftest import run_irshard

PROGRAM = '''
import contextlib
import jax
import jax.numpy as jnp


class Stop(BaseException):
    pass


def traced(x: "f32[8]"):
    raise Stop("stopped while tracing")


class Jitted:
    def __call__(self, x):
        return x


class LowerRaises(Jitted):
    def lower(self, *args, **kwargs):
        raise Stop("stopped in lower")


class LowerReturns42(Jitted):
    def lower(self, *args, **kwargs):
        return 42


class LowerReturnsCompiled(Jitted):
    def lower(self, *args, **kwargs):
        return jax.jit(lambda x: x).lower(*args).compile()


class LowerProperty(Jitted):
    @property
    def lower(self):
        raise RuntimeError("no lower here")


lower_raises = LowerRaises()
lower_42 = LowerReturns42()
lower_compiled = LowerReturnsCompiled()
lower_property = LowerProperty()


def args():
    return (jax.ShapeDtypeStruct((8,), jnp.float32),)


def context_int():
    return 5


def context_generator():
    yield 1


def context_arguments(a, b):
    return contextlib.nullcontext()


@contextlib.contextmanager
def context_swallows():
    try:
        yield
    except Exception:
        pass


def fails(x: "f32[8]"):
    raise ValueError("the program's own error")
'''

CASES = [
    (["--fn", "traced"], "program.py:12: in traced: Stop: stopped while tracing"),
    (["--fn", "lower_raises", "--args", "args"],
     "program.py:22: in lower: Stop: stopped in lower"),
    (["--fn", "lower_42", "--args", "args"],
     "cannot lower 'lower_42': its lower() returned an int, not a lowering"),
    (["--fn", "lower_compiled", "--args", "args"],
     "cannot lower 'lower_compiled': its lower() returned a Compiled"),
    (["--fn", "lower_property", "--args", "args"],
     "cannot lower 'lower_property': looking up its lower raised "
     "RuntimeError: no lower here"),
    (["--fn", "fails", "--context", "context_int"],
     "--context context_int returned 'int', not a context manager"),
    (["--fn", "fails", "--context", "context_generator"],
     "--context context_generator returned 'generator', not a context manager"),
    (["--fn", "fails", "--context", "context_arguments"],
     "--context context_arguments takes arguments (a, b); it must take none"),
    (["--fn", "fails", "--context", "context_swallows"],
     "--context context_swallows: its context manager swallowed the error "
     "tracing 'fails' raised"),
]


@pytest.fixture
def program(write):
    return write("program.py", PROGRAM)


@pytest.mark.parametrize("argv, message", CASES,
                         ids=[c[0][1] + "-" + c[0][-1] for c in CASES])
def test_the_programs_mistakes_are_its_errors(program, tmp_path, capsys, argv,
                                              message):
    """Once a traceback and exit 1 (a `BaseException` of the program's), or
    exit 3 as irshard's own failure ("JAX could not trace", "internal
    error")."""
    output = tmp_path / "out.txt"
    code = cli.main(["compile", program, "--mesh", "x=2", *argv,
                     "-o", str(output)])
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.startswith("irshard: error: ") and "Traceback" not in err
    assert message in err.splitlines()[0]
    assert not output.exists()


def test_a_swallowed_error_is_shown_under_the_line(program, capsys):
    assert cli.main(["compile", program, "--mesh", "x=2", "--fn", "fails",
                     "--context", "context_swallows"]) == 2
    assert "ValueError: the program's own error" in capsys.readouterr().err


def test_a_base_exception_from_a_separate_process(program):
    done = run_irshard("compile", program, "--mesh", "x=2", "--fn", "traced")
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        f"irshard: error: {program}:12: in traced: Stop: stopped while tracing"]


# ---------------------------------------------------------------------------
# The Python API


def _f(x, s=None):
    return x * 2


def _x():
    import jax
    return jax.ShapeDtypeStruct((8, 4), jax.numpy.float32)


def test_api_mistakes_are_one_usage_error():
    """Each was a bare TypeError or a BackendError."""
    import jax
    from jax.sharding import PartitionSpec as P

    import irshard
    irshard.configure(devices=2)
    cases = [
        (lambda: irshard.compile(jax.jit(_f, in_shardings=P("y")), _x(), mesh="x=2"),
         "Resource axis: y of P('y',) is not found in mesh"),
        (lambda: irshard.compile(jax.jit(_f, static_argnums=1), _x(), [1, 2],
                                 mesh="x=2"),
         "Non-hashable static arguments"),
        (lambda: irshard.compile(_f, _x(), mesh="x=2", bogus=1),
         "compile(): got an unexpected keyword argument 'bogus'; it takes fn, "
         "args, mesh, rules"),
        (lambda: irshard.run(_f, _x(), mesh="x=2", bogus=1),
         "run(): got an unexpected keyword argument 'bogus'"),
        (lambda: irshard.report(), "report(): missing a required argument"),
        (lambda: irshard.compile(_f, _x(), mesh="x=2").check_budget(5),
         "budget 5: a budget is a string, not int"),
        (lambda: irshard.compile(_f, _x()),
         "mesh: give the device mesh (a spec such as 'dp=2,tp=4', or a "
         "jax.sharding.Mesh)"),
    ]
    for call, message in cases:
        with pytest.raises(irshard.UsageError) as raised:
            call()
        assert message in str(raised.value)


def test_the_mesh_comes_from_the_arguments_shardings():
    """`irshard.compile(jitted_step, *args)` with `NamedSharding`s on the
    arguments, or the object's own `in_shardings`, and no `mesh=` raised a
    bare TypeError; the mesh they name is the mesh."""
    import jax
    from jax.sharding import AxisType, NamedSharding, PartitionSpec as P

    import irshard
    irshard.configure(devices=2)
    mesh = jax.make_mesh((2,), ("x",), axis_types=(AxisType.Auto,))
    sharded = jax.ShapeDtypeStruct((8, 4), jax.numpy.float32,
                                   sharding=NamedSharding(mesh, P("x")))
    by_argument = irshard.compile(jax.jit(_f), sharded)
    own = irshard.compile(jax.jit(_f, in_shardings=NamedSharding(mesh, P("x"))),
                          _x())
    for report in (by_argument, own):
        assert report.mesh.axes[0].name == "x" and report.mesh.num_devices == 2
        assert report.inputs[0].sharding == ("x", "_")


# ---------------------------------------------------------------------------
# The program the user described: a partial's bound arguments are not the
# caller's, and leaves the lowering cannot tell apart are said to be so.

PARTIAL = '''
import functools
import jax
import jax.numpy as jnp


def f(x, y, *, scale):
    return x * scale + y


step = functools.partial(jax.jit(f, donate_argnums=1), jnp.ones(64), scale=2.0)
static = functools.partial(jax.jit(lambda n, x, y: x * n + y, static_argnums=0), 3)


def args():
    return (jax.ShapeDtypeStruct((64,), jnp.float32),)


def two():
    return (jax.ShapeDtypeStruct((64,), jnp.float32),) * 2
'''


def test_a_partials_bound_argument_is_not_the_callers(write):
    """`functools.partial(jax.jit(f, donate_argnums=1), jnp.ones(64))` with
    the remaining `y` also f32[64]: irshard gave the bound constant `y`'s
    name and its rule, and called the real `y` `args/1 (donated)`."""
    import json
    path = write("partial.py", PARTIAL)
    done = run_irshard("compile", path, "--fn", "step", "--args", "args",
                       "--mesh", "x=2", "--shard", "y=x", "--format", "json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    inputs = {t["name"]: t for t in report["inputs"]}
    assert set(inputs) == {"x (bound)", "scale (bound)", "y"}
    assert inputs["y"]["donated"] and inputs["y"]["sharding"] == ["x"]
    assert not inputs["x (bound)"].get("donated")
    assert any("scale, x are bound by functools.partial" in n for n in report["notes"])


def test_a_partial_shifts_the_jitted_functions_own_argument_numbers(write):
    """`static_argnums=0` of the jitted function is the partial's bound
    argument, not the caller's first."""
    import json
    path = write("partial.py", PARTIAL)
    done = run_irshard("compile", path, "--fn", "static", "--args", "two",
                       "--mesh", "x=2", "--shard", "x=x", "--format", "json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert [t["name"] for t in report["inputs"]] == ["x", "y"]
    assert report["inputs"][0]["sharding"] == ["x"]
    assert not report.get("notes")


EQUINOX = '''
import equinox as eqx
import jax.numpy as jnp


def f(a, b):
    return a * 2 + b


step = eqx.filter_jit(f, donate="all-except-first")


def args():
    return (jnp.zeros((8, 4)), jnp.ones((8, 4)))
'''


def test_leaves_a_wrapper_may_reorder_are_not_guessed(write):
    """`eqx.filter_jit(donate="all-except-first")` puts `b` first: with `a`
    of the same shape, the lowering cannot tell them apart. Different
    shardings for them are an error; the same ones apply, and the inputs
    keep the wrapper's names, with a note."""
    import json
    pytest.importorskip("equinox")
    path = write("eqx_step.py", EQUINOX)
    done = run_irshard("compile", path, "--fn", "step", "--args", "args",
                       "--mesh", "x=2", "--shard", "a=x,_")
    assert done.returncode == 2
    assert "a, b have the same shapes and dtypes, and eqx.filter_jit may " \
        "reorder arguments" in done.stderr
    done = run_irshard("compile", path, "--fn", "step", "--args", "args",
                       "--mesh", "x=2", "--shard", "*=x,_", "--format", "json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert [t["name"] for t in report["inputs"]] == ["args/0/rest/0", "args/1/first/0"]
    assert all(t["sharding"] == ["x", "_"] for t in report["inputs"])
    assert any("irshard cannot tell which input" in n for n in report["notes"])
