"""Where a collective comes from, as a model's user reads it: the
innermost line of the model's code (a model library installed from a
package registry included, the frameworks' plumbing and the line that
called irshard never), the scope JAX's name stack records, the rows
summed by line, scope or the caller of a shared helper, and every result
of a combined collective."""

import json
import os
import re
import sys
import textwrap

import pytest

from irshard.core import frames
from irshard.core.frames import Frame, SourceLocation, UserCode, scope_of
from tests.conftest import run_irshard


# ---------------------------------------------------------------------------
# Scopes from op_name, in every form JAX and XLA's combiners print


@pytest.mark.parametrize("op_name, scope", [
    ("jit(f)/jit(main)/transpose(jvp(decoder))/layers/self_attention/out/dot_general",
     "decoder/layers/self_attention/out"),
    ("jit(train_step)/jvp(down)/dot_general", "down"),
    ("jit(train_step)/adam/add", "adam"),
    ("jit(make_step)/transpose(jvp(vmap(eqx.nn.Linear)))/dot_general", "eqx.nn.Linear"),
    # A transformation with nothing named inside, and JAX's own structure.
    ("jit(train_step)/jvp()/dot_general", None),
    ("jit(simulate)/while/body/scatter", None),
    ("jit(step)/jvp()/while/body/eval_jaxpr/checkpoint/rematted_computation/dot_general",
     None),
    ("jit(step)/jvp(model)/while/body/block/cond/branch_1_fun/mlp/add", "model/block/mlp"),
    # A nested jit names a function, not a part; an einsum names its equation.
    ("jit(f)/jit(_inner)/decoder/dot_general", "decoder"),
    ("jit(f)/norm/...k,k->...k/dot_general", "norm"),
    # A combiner's op: each part's scope, once each, in order.
    ("jit(train_step)/(jvp(compile_loss)/mse/reduce_sum:transpose(jvp(up))/dot_general"
     ":transpose(jvp(up))/reduce_sum:transpose(jvp(down))/dot_general)",
     "compile_loss/mse, up, down"),
    ("jit(f)/(transpose(jvp())/reduce_sum:jvp()/reduce_sum)", None),
    ("dot_general", None), ("all-reduce.3", None), ("", None), (None, None),
    # Unbalanced parentheses are read, never raised on.
    ("jit(f/a)(/b/add", None), ("jit(f))/a/b/add", "a/b"),
])
def test_scope_of_an_op_name(op_name, scope):
    assert scope_of(op_name) == scope


# ---------------------------------------------------------------------------
# Whose frames


@pytest.mark.parametrize("path, library", [
    ("/venv/lib/python3.12/site-packages/maxtext/layers/linears.py", False),
    ("/venv/lib/python3.12/site-packages/keras_hub/src/models/gemma/gemma_decoder_block.py",
     False),
    ("/venv/lib/python3.12/site-packages/penzai/models/transformer/model_parts.py", False),
    ("/home/user/model.py", False),
    ("/venv/lib/python3.12/site-packages/flax/nnx/transforms/compilation.py", True),
    ("/venv/lib/python3.12/site-packages/flax/linen/linear.py", True),
    ("/venv/lib/python3.12/site-packages/keras/src/trainers/trainer.py", True),
    ("/venv/lib/python3.12/site-packages/equinox/_jit.py", True),
    ("/venv/lib/python3.12/site-packages/optax/_src/alias.py", True),
    ("/venv/lib/python3.12/site-packages/penzai/core/layer.py", True),
    ("/venv/lib/python3.12/site-packages/penzai/toolshed/basic_training.py", True),
    ("/venv/lib/python3.12/site-packages/jax/_src/pjit.py", True),
    ("/usr/lib/python3.12/functools.py", True),
    ("<frozen runpy>", True),
])
def test_model_code_and_plumbing(path, library):
    assert frames.is_library(path) is library


def test_what_is_installed_in_this_environment_is_not_the_standard_library():
    """In a virtual environment Python's `platstdlib` is the environment's
    `lib/pythonX.Y`, which holds its `site-packages`: a model installed
    there is the user's (MaxText's frames were all dropped)."""
    import sysconfig
    site = sysconfig.get_paths()["purelib"]
    assert not frames.is_library(os.path.join(site, "somemodels", "layers.py"))
    assert frames.is_library(os.path.join(sysconfig.get_paths()["stdlib"], "json",
                                          "decoder.py"))


def _stack(*where):
    return tuple(Frame(path, function, line) for path, line, function in where)


def test_the_innermost_model_frame_and_each_frame_once():
    """An installed model library's frame is shown even where the user's
    own file calls it; plumbing is skipped; a scanned body's frames, which
    JAX records once per level it passes through, appear once."""
    site = "/venv/lib/python3.12/site-packages"
    stack = _stack((f"{site}/jax/_src/lax/lax.py", 10, "dot_general"),
                   (f"{site}/mymodels/linears.py", 455, "Dense.__call__"),
                   (f"{site}/flax/nnx/module.py", 80, "Module.__call__"),
                   (f"{site}/mymodels/attention.py", 703, "Attention.__call__"),
                   (f"{site}/flax/nnx/transforms/iteration.py", 10, "scan_fn"),
                   (f"{site}/mymodels/decoder.py", 66, "Decoder.layer"),
                   (f"{site}/mymodels/linears.py", 455, "Dense.__call__"),
                   (f"{site}/mymodels/attention.py", 703, "Attention.__call__"),
                   (f"{site}/mymodels/decoder.py", 66, "Decoder.layer"),
                   ("/home/user/train.py", 12, "train_step"))
    found = UserCode().choose(stack)
    assert str(found) == "mymodels/linears.py:455 (Dense.__call__)"
    assert [(s.file, s.line) for s in found.stack] == [
        ("mymodels/linears.py", 455), ("mymodels/attention.py", 703),
        ("mymodels/decoder.py", 66), ("/home/user/train.py", 12)]


def test_only_plumbing_is_no_line():
    site = "/venv/lib/python3.12/site-packages"
    assert UserCode().choose(_stack(
        (f"{site}/keras/src/layers/core/dense.py", 222, "Dense.call"),
        (f"{site}/keras/src/backend/jax/trainer.py", 134, "train_step"))) is None


MODEL = '''\
import jax.numpy as jnp


def layer(w, x):
    return jnp.tanh(x @ w)
'''

STEP = '''\
import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P

import somemodels


def step(w, x):
    with jax.named_scope("decoder"):
        y = somemodels.layer(w, x)
    return jnp.sum(y)


def args():
    return (jax.ShapeDtypeStruct((64, 32), jnp.float32),
            jax.ShapeDtypeStruct((16, 64), jnp.float32))
'''


@pytest.fixture
def installed_model(tmp_path, monkeypatch):
    """A model library in a `site-packages` folder, and a step using it."""
    site = tmp_path / "lib" / "python3.11" / "site-packages"
    (site / "somemodels").mkdir(parents=True)
    (site / "somemodels" / "__init__.py").write_text(MODEL)
    (tmp_path / "step.py").write_text(STEP)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
        [str(site)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep)
                       if p]))
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    for name in ("somemodels", "step"):
        sys.modules.pop(name, None)


def test_an_installed_model_librarys_line_and_scope(installed_model):
    """The command line shows the installed library's own line, with the
    scope the step named, as a column and in JSON."""
    done = run_irshard("compile", "step.py", "--fn", "step", "--args", "args",
                       "--mesh", "x=4", "--shard", "w=x,_", "--format", "json",
                       cwd=str(installed_model))
    assert done.returncode == 0, done.stderr
    rows = json.loads(done.stdout)["collectives"]
    assert rows
    sources = {(c["source"]["file"], c["source"]["line"]) for c in rows
               if c["source"]}
    assert ("somemodels/__init__.py", 5) in sources
    assert {c["scope"] for c in rows} >= {"decoder"}
    text = run_irshard("compile", "step.py", "--fn", "step", "--args", "args",
                       "--mesh", "x=4", "--shard", "w=x,_",
                       cwd=str(installed_model)).stdout
    header = next(line for line in text.splitlines() if line.lstrip().startswith("kind"))
    assert header.split()[-2:] == ["scope", "source"]
    assert "decoder  somemodels/__init__.py:5 (layer)" in text


def test_the_line_that_called_irshard_is_never_the_model(installed_model):
    """Through the API the caller's frames (this test's line) sit at the
    outer end of every stack JAX records: they are cut off."""
    import irshard
    import step as program
    report = irshard.compile(program.step, *program.args(), mesh="x=4",
                             rules=[("w", "x,_")])
    this_file = os.path.basename(__file__)
    assert report.collectives
    for c in report.collectives:
        assert c.source is not None
        assert all(this_file not in s.file for s in c.source.stack), c.source.stack
    assert report.collectives[0].source.stack[-1].function == "step"


def test_a_lambda_on_the_line_that_called_irshard_is_the_model():
    """Only the calling function's frame is cut: a lambda written on the
    same line is the model."""
    import irshard
    import jax
    import jax.numpy as jnp
    w = jax.ShapeDtypeStruct((64, 32), jnp.float32)
    report = irshard.compile(lambda w: jnp.sum(w), w, mesh="x=4", rules=[("w", "x,_")])  # noqa: E731
    assert report.collectives
    line = report.collectives[0].source
    assert line is not None and line.function == "test_a_lambda_on_the_line_that_called_irshard_is_the_model.<locals>.<lambda>"


# ---------------------------------------------------------------------------
# Grouping


def _located(*where):
    chain = tuple(SourceLocation(f, line, fn) for f, line, fn in where)
    return SourceLocation(chain[0].file, chain[0].line, chain[0].function, chain)


def test_rows_summed_by_the_caller_of_a_shared_helper():
    """A dense layer's kernel and `__call__` are reached along several
    paths: rows are summed under the attention lines that project; a line
    reached along one path is its own group; a row with no source is `-`."""
    from dataclasses import replace

    from irshard.reporting import grouping
    from irshard.reporting.report import Collective
    kernel, call = ("linears.py", 162, "kernel"), ("linears.py", 476, "Dense.__call__")
    query = _located(kernel, call, ("attentions.py", 703, "query"),
                     ("attentions.py", 1260, "Attention.__call__"))
    key = _located(kernel, call, ("attentions.py", 756, "kv"),
                   ("attentions.py", 1260, "Attention.__call__"))
    loss = _located(("train.py", 271, "loss_fn"))
    base = Collective("ar", "all-reduce", "f32", (4,), 16, 24, ("x",), 4, None,
                      "metadata", "jit(f)/decoder/mlp/add", ())
    rows = [replace(base, source=s) for s in (query, key, query, loss, None)]
    assert grouping.keys(rows, "caller") == [
        "attentions.py:703 (query)", "attentions.py:756 (kv)",
        "attentions.py:703 (query)", "train.py:271 (loss_fn)", "-"]
    assert grouping.keys(rows, "line") == ["linears.py:162 (kernel)"] * 3 + [
        "train.py:271 (loss_fn)", "-"]
    assert grouping.keys(rows, "scope") == ["decoder/mlp"] * 5


def test_group_by_on_the_command_line(write):
    path = write("grouped.py", textwrap.dedent('''\
        import jax
        import jax.numpy as jnp


        def dense(w, x):
            return x @ w


        def f(w1: "f32[64@x,64]", w2: "f32[64@x,64]", x: "f32[16,64]"):
            with jax.named_scope("up"):
                h = dense(w1, x)
            with jax.named_scope("down"):
                return dense(w2, h)
        '''))
    by = {}
    for key in ("line", "scope", "caller"):
        done = run_irshard("compile", path, "--fn", "f", "--mesh", "x=4",
                           "--group-by", key)
        assert done.returncode == 0, done.stderr
        table = done.stdout.split(f"\nby ", 1)[1].split("\n\n")[0].splitlines()
        by[key] = [line.split("  ")[1].strip() for line in table[2:]]
    assert by["line"] == ["grouped.py:6 (dense)"]
    assert sorted(by["scope"]) == ["down", "up"]
    assert sorted(by["caller"]) == ["grouped.py:11 (f)", "grouped.py:13 (f)"]
    bad = run_irshard("compile", path, "--fn", "f", "--mesh", "x=4",
                      "--group-by", "file")
    assert bad.returncode == 2
    assert bad.stderr.startswith("irshard: error: argument --group-by: invalid choice: 'file'")
    # Newer Pythons' argparse lists the choices without quotes.
    assert re.search(r"\(choose from '?line'?, '?scope'?, '?caller'?, '?cause'?\)", bad.stderr)
    assert bad.stderr.count("\n") == 1


def test_group_by_through_the_api():
    import irshard
    from irshard.core.errors import UsageError
    from tests.conftest import EXAMPLES
    sys.path.insert(0, EXAMPLES)
    try:
        import mlp
    finally:
        sys.path.remove(EXAMPLES)
    import jax
    import jax.numpy as jnp
    args = [jax.ShapeDtypeStruct(shape, jnp.float32)
            for shape in ((64, 256), (256, 64), (32, 64), (32, 64))]
    report = irshard.compile(mlp.loss, *args, mesh="dp=2,tp=2",
                             rules=[("w1", "_,tp"), ("w2", "tp,_"), ("x", "dp,_"),
                                    ("y", "dp,_")])
    assert "\nby source line (" in report.to_text(group_by="line")
    with pytest.raises(UsageError, match="group_by is one of line, scope, caller"):
        report.to_text(group_by="file")


# ---------------------------------------------------------------------------
# Combined collectives


def test_a_combined_collective_lists_every_result(write):
    path = write("combined.py", textwrap.dedent('''\
        import jax.numpy as jnp


        def f(a: "f32[8,64@x]", b: "f32[8,32@x]", c: "f32[8,16@x]", d: "f32[8,8@x]"):
            return (jnp.sum(a, axis=1), jnp.sum(b, axis=1), jnp.sum(c, axis=1),
                    jnp.sum(d, axis=1), jnp.sum(a))
        '''))
    done = run_irshard("compile", path, "--mesh", "x=4", "--format", "json")
    assert done.returncode == 0, done.stderr
    rows = json.loads(done.stdout)["collectives"]
    combined = [c for c in rows if c["operands"] > 1]
    assert combined, rows
    for c in combined:
        assert len(c["shapes"]) == c["operands"]
        assert c["shapes"][0] == {"dtype": c["dtype"], "shape": c["shape"]}
        sizes = sum(4 * max(1, __import__("math").prod(s["shape"])) for s in c["shapes"])
        assert sizes == c["bytes"]
    assert all("shapes" not in c for c in rows if c["operands"] == 1)
    text = run_irshard("compile", path, "--mesh", "x=4").stdout
    for c in combined:
        n = c["operands"]
        assert f"{c['kind']} ({n} combined)" in text
        shown = f"({n} arrays)" if n > 3 else "(" + ", ".join(
            f"f32[{','.join(map(str, s['shape']))}]" for s in c["shapes"]) + ")"
        assert shown in text


def test_group_by_on_an_hlo_file():
    """`irshard collectives` sums a dumped module's table as `compile` does:
    by the scopes its op_names record."""
    data = os.path.join(os.path.dirname(__file__), "data")
    done = run_irshard("collectives", "dense_loop.hlo", "--mesh", "a=2,b=4",
                       "--group-by", "scope", cwd=data)
    assert done.returncode == 0, done.stderr
    table = done.stdout.split("\nby scope (", 1)[1].split("\n\n")[0].splitlines()[2:]
    rows = {line.split()[0]: int(line.split()[1]) for line in table}
    report = json.loads(run_irshard("collectives", "dense_loop.hlo", "--mesh", "a=2,b=4",
                                    "--format", "json", cwd=data).stdout)
    counted = {}
    for c in report["collectives"]:
        counted[c["scope"] or "-"] = counted.get(c["scope"] or "-", 0) + 1
    assert rows == counted and len(rows) > 1


def test_the_html_page_shows_an_installed_models_source(installed_model):
    """A file shown by its import path is found under the import roots for
    the page's source view (only files the compile ran are read)."""
    done = run_irshard("compile", "step.py", "--fn", "step", "--args", "args",
                       "--mesh", "x=4", "--shard", "w=x,_", "--format", "html",
                       "-o", "page.html", cwd=str(installed_model))
    assert done.returncode == 0, done.stderr
    page = (installed_model / "page.html").read_text()
    assert '"somemodels/__init__.py"' in page
    assert "jnp.tanh(x @ w)" in page
