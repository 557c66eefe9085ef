"""The GPT training step under two sharding strategies: irshard's report
counts what plain `jax.jit(..., in_shardings=...)` compiles, and a budget
pins each strategy down as a model's own tests would."""

import os
import sys
from collections import Counter

import jax
import pytest
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P

import irshard
from irshard.collectives import analysis
from irshard.core import tree
from irshard.xla.hlo import HloModuleView
from irshard.core.specs import parse_mesh, parse_sharding
from irshard.testing import assert_budget
from tests.conftest import EXAMPLES

sys.path.insert(0, EXAMPLES)
import gpt  # noqa: E402

STRATEGIES = {
    # Fully sharded data parallelism: weights, their moments and the batch
    # split over one axis.
    "fsdp": ("fsdp=8", [("**/embed", "fsdp,_"), ("**/w*", "fsdp,_"),
                        ("batch/*", "fsdp,_")]),
    # FSDP and Megatron tensor parallelism: attention and MLP weights split by
    # columns then rows over tp, everything over fsdp.
    "fsdp+tp": ("fsdp=4,tp=2", [("**/embed", "fsdp,tp"),
                                ("**/attn/w[qkv]", "fsdp,tp"),
                                ("**/attn/wo", "tp,fsdp"),
                                ("**/mlp/w_in", "fsdp,tp"),
                                ("**/mlp/w_out", "tp,fsdp"),
                                ("batch/*", "fsdp,_")]),
}
ARGUMENTS = ("params", "opt_state", "batch")


def _jax_jit_collectives(mesh_text, rules):
    """What jax.jit compiles for the same step and shardings."""
    spec = parse_mesh(mesh_text)
    mesh = jax.make_mesh(spec.shape, spec.names,
                         axis_types=(AxisType.Auto,) * len(spec.names))
    compiled_rules = [tree.Rule(pattern, parse_sharding(s)) for pattern, s in rules]

    def sharding(name):
        def of(keys, leaf):
            rule = tree.first_match(compiled_rules, tree.path_of(name, keys))
            if rule is None:
                return NamedSharding(mesh, P())
            return NamedSharding(mesh, P(*[d.axes[0] if len(d.axes) == 1
                                           else (tuple(d.axes) or None)
                                           for d in rule.value.dims]))
        return of

    args = gpt.example_args()
    in_shardings = tuple(jax.tree_util.tree_map_with_path(sharding(name), arg)
                         for name, arg in zip(ARGUMENTS, args))
    text = jax.jit(gpt.train_step, in_shardings=in_shardings).lower(*args) \
        .compile().as_text()
    return analysis.collectives(HloModuleView.from_text(text), spec, None)


@pytest.mark.slow
@pytest.mark.parametrize("strategy", sorted(STRATEGIES))
def test_counts_and_bytes_equal_plain_jax_jit(strategy):
    mesh, rules = STRATEGIES[strategy]
    report = irshard.compile(gpt.train_step, *gpt.example_args(), mesh=mesh,
                             rules=rules)
    reference = _jax_jit_collectives(mesh, rules)
    assert report.collectives
    assert Counter(c.kind for c in report.collectives) == \
        Counter(c.kind for c in reference)
    assert report.totals()["bytes_per_run"] == \
        sum(c.bytes * c.executions for c in reference)
    # Paths name every leaf, and the model's own lines the collectives.
    names = [t.name for t in report.inputs]
    assert "params/layers/1/mlp/w_in" in names and "opt_state/nu/embed" in names
    assert {os.path.basename(c.source.file) for c in report.collectives} == {"gpt.py"}


@pytest.mark.slow
def test_budgets_hold_each_strategy_to_its_collectives():
    """What a model's CI would pin: FSDP gathers each weight matrix once per
    step (the embedding twice: it is also the output projection); with half
    the devices on tp, less moves over fsdp."""
    from irshard.reporting import budget
    mesh, rules = STRATEGIES["fsdp"]
    fsdp = irshard.compile(gpt.train_step, *gpt.example_args(), mesh=mesh,
                           rules=rules)
    weights = 1 + 6 * gpt.LAYERS            # the embedding, six per layer
    assert_budget(fsdp, f"all-gather@fsdp=={weights + 1}", "all-reduce<=1",
                  "bytes<=8MiB", "memory<=16MiB")
    with pytest.raises(AssertionError, match="all-gather@fsdp<=2: 14 all-gathers"):
        assert_budget(fsdp, "all-gather@fsdp<=2")
    mesh, rules = STRATEGIES["fsdp+tp"]
    both = irshard.compile(gpt.train_step, *gpt.example_args(), mesh=mesh,
                           rules=rules)
    over_fsdp = budget.measure(fsdp, budget.parse_budget("bytes@fsdp<=0"))
    assert_budget(both, f"bytes@fsdp<{over_fsdp}", "bytes<=8MiB")


WRAPPER = """\
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "model"))
import gpt_model  # noqa: E402


def train_step(params, opt_state, batch):
    return gpt_model.train_step(params, opt_state, batch)


example_args = gpt_model.example_args
"""


def test_a_wrapper_in_another_directory_shows_the_models_lines(tmp_path):
    """The model lives in one directory, the step irshard compiles in
    another: every collective points at the model's own lines, and its
    stack goes on to the wrapper."""
    import json
    import shutil

    from tests.conftest import run_irshard
    (tmp_path / "model").mkdir()
    (tmp_path / "wrapper").mkdir()
    shutil.copy(os.path.join(EXAMPLES, "gpt.py"), tmp_path / "model" / "gpt_model.py")
    (tmp_path / "wrapper" / "step.py").write_text(WRAPPER)
    result = run_irshard("compile", "wrapper/step.py", "--fn", "train_step",
                         "--args", "example_args", "--mesh", "fsdp=4,tp=2",
                         "--shard", "params/**/w_in=fsdp,tp",
                         "--shard", "batch/*=fsdp,_", "--format", "json",
                         cwd=str(tmp_path))
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert "params/layers/0/mlp/w_in" in [t["name"] for t in report["inputs"]]
    sources = [c["source"] for c in report["collectives"]]
    assert sources and {s["file"] for s in sources} == {"model/gpt_model.py"}
    # Files below the compiled file's directory are shown relative to it.
    assert all(s["stack"][-1]["file"] == "step.py" for s in sources)
