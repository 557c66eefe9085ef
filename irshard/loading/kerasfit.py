"""The train step Keras' `fit` runs, for a Keras 3 model on JAX.

`model.fit` jits `train_step(state, data)` once per model
(`make_train_function`), where `state` is the model's variables as four
lists — trainable, non-trainable, the optimizer's, the metrics' — and
`data` one batch `(x, y, sample_weight)`, laid out as the model's
distribution lays batches (`keras.distribution`). This finds that jitted
object, builds its arguments from the model's own variables and a batch,
and names each input by its Keras variable path (`sequential/dense/kernel`,
`adam/sequential_dense_kernel_momentum`; the batch's `x`, `y`), so rules can
name them.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

from irshard.core.errors import InputError, UserCodeError


def is_model(obj: Any) -> bool:
    """A Keras 3 model trained by the JAX backend."""
    return all(hasattr(obj, name) for name in
               ("make_train_function", "_get_jax_state", "trainable_variables",
                "_symbolic_build"))


def _jitted_in(fn: Callable[..., Any], depth: int = 0) -> Any:
    """The jitted object inside `fit`'s step function (its closures)."""
    for cell in getattr(fn, "__closure__", None) or ():
        try:
            value = cell.cell_contents
        except ValueError:          # an empty cell
            continue
        if callable(value) and callable(getattr(value, "lower", None)):
            return value
        if callable(value) and depth < 3:
            found = _jitted_in(value, depth + 1)
            if found is not None:
                return found
    return None


def train_step(model: Any, name: str, batch: Sequence[Any]
               ) -> tuple[Any, tuple[Any, Any], list[str]]:
    """`fit`'s jitted train step of `model`, its arguments `(state, data)`
    for one `batch` (`(x, y)` or `(x, y, sample_weight)`), and the name of
    each of their array leaves, in order."""
    if not is_model(model):
        raise InputError(f"--keras-fit: '{name}' is a {type(model).__name__}, "
                         f"not a Keras model; name a model built and "
                         f"compiled (model.compile(...)) with the JAX backend")
    if getattr(model, "optimizer", None) is None or \
            getattr(model, "compiled_loss", None) is None and \
            getattr(model, "_compile_loss", None) is None:
        raise InputError(f"--keras-fit: '{name}' is not compiled; call "
                         f"{name}.compile(optimizer=..., loss=...) in the file")
    if not isinstance(batch, (tuple, list)) or not 2 <= len(batch) <= 3:
        raise InputError(f"--keras-fit: the arguments are one batch, "
                         f"(x, y) or (x, y, sample_weight), not "
                         f"{len(batch) if isinstance(batch, (tuple, list)) else 1} "
                         f"values")
    from keras.src.backend.jax import trainer
    x, y, weight = (tuple(batch) + (None,))[:3]
    try:
        data = trainer._distribute_data((x, y, weight))
        model._symbolic_build(data_batch=data)
        model.make_train_function(force=True)
        state = model._get_jax_state(
            trainable_variables=True, non_trainable_variables=True,
            optimizer_variables=True, metrics_variables=True,
            purge_model_variables=False)
    except Exception as e:
        raise UserCodeError(f"--keras-fit: Keras could not build the train "
                            f"step of '{name}': {type(e).__name__}: {e}") from None
    jitted = _jitted_in(model.train_function)
    if jitted is None:
        raise InputError(f"--keras-fit: '{name}' does not jit its train step "
                         f"(run_eagerly or jit_compile=False); compile it "
                         f"with jit_compile=True")
    return jitted, (state, data), [[v.path for v in group] for group in (
        model.trainable_variables, model.non_trainable_variables,
        model.optimizer.variables, model.metrics_variables)]


def renamed(path: str, variables: Sequence[Sequence[str]]) -> str:
    """The name of `fit`'s input leaf `path` (`state/2/5`, `data/0/...`):
    the Keras variable's path (`state/G/I` is variable I of group G:
    trainable, non-trainable, optimizer, metrics), or the batch's `x`, `y`,
    `sample_weight`."""
    head, _, rest = path.partition("/")
    if head == "state":
        return _variable(rest, variables) or path
    if head == "data":
        part, _, below = rest.partition("/")
        name = {"0": "x", "1": "y", "2": "sample_weight"}.get(part, part)
        return f"{name}/{below}" if below else name
    return path


def _variable(rest: str, variables: Sequence[Sequence[str]]) -> str | None:
    group, _, item = rest.partition("/")
    if group.isdigit() and item.isdigit() and int(group) < len(variables) \
            and int(item) < len(variables[int(group)]):
        return variables[int(group)][int(item)]
    return None


def output_name(name: str, variables: Sequence[Sequence[str]]) -> str:
    """The name of `fit`'s output `name` (`result/0/loss`, `result/1/G/I`):
    the logs by their key (`logs/loss`), the new state after the variable
    it updates (`updated(sequential)/up/kernel`)."""
    from irshard.core import tree
    head, _, rest = name.partition("/")
    part, _, below = rest.partition("/")
    if head != "result":
        return name
    if part == "0":
        return f"logs/{below}" if below else "logs"
    found = _variable(below, variables) if part == "1" else None
    return tree.updated_path(found) if found else name
