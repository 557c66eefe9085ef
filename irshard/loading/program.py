"""What to compile: a function, its inputs and their shardings, and a mesh.

A function's parameters may be arrays or pytrees of them (dicts, lists,
tuples, dataclasses, optimizer states, typed PRNG keys, Python scalars); each
array is one input leaf, named by its path (`irshard.core.tree`). Parameters that
are not traced are static: bound to their value. The traced program is the
function as a flat function of its leaves, so that argument i of the module
is leaf i whatever the structure.

Two ways in, one `Program`:

- `load_program`: the command line's strings — a file, `--fn`, `--args NAME`
  (a function of the file returning the positional arguments), `--arg` and
  string annotations for plain arrays, `--shard` rules, `--grad [NAMES]`,
  `--static NAMES`;
- `program_of`: a Python function and its arguments (the API), with rules
  and a pytree prefix of shardings.

A leaf's sharding is the first of: the first `--shard` rule matching its
path; its entry in `shardings`; its own (a `ShapeDtypeStruct`'s or an
array's `NamedSharding`, a type's `@x`); replicated.
"""

from __future__ import annotations

import inspect
import os
from typing import Any, Callable, Mapping, Sequence

from irshard import backend
from irshard.core import tree
from irshard.core.errors import InputError, SpecError, UsageError, UserCodeError
from irshard.core.specs import MeshSpec, ShardingSpec, parse_sharding
from irshard.core.textinput import repeated
from irshard.loading import loader
from irshard.loading.leaves import (Leaf, ParameterBinding, Program, annotated_leaf,
                                    apply_shardings, spec_of, leaves_of)
from irshard.loading.loader import describe_user_exception


# ---------------------------------------------------------------------------
# Binding a function's parameters


def bind(fn: Callable[..., Any], fn_name: str, mesh: MeshSpec,
         positional: Sequence[Any] = (), static: Sequence[str] = (),
         types: Mapping[str, str] | None = None,
         what_args: str = "arguments") -> tuple[list[ParameterBinding], list[Leaf]]:
    """The parameters of `fn` bound to `positional` values (pytrees of
    arrays, `ShapeDtypeStruct`s, scalars), then to `types` (`--arg` and
    string annotations, for plain arrays), then to their defaults (static).
    Parameters named in `static` are static whatever their value."""
    types = dict(types or {})
    params = loader.parameters(fn, fn_name)
    names = [p.name for p in params]
    for name in list(static) + list(types):
        if name not in names:
            option = "--arg" if name in types else "static"
            raise InputError(f"{option} {name}: '{fn_name}' has no argument "
                             f"'{name}'; its arguments are "
                             f"{', '.join(names) or 'none'}")
    positional_params = [p for p in params if p.kind != "keyword-only"]
    if len(positional) > len(positional_params):
        raise InputError(f"{what_args}: {len(positional)} positional values "
                         f"for '{fn_name}', which takes "
                         f"{len(positional_params)} ({', '.join(names) or 'none'})")
    given = dict(zip((p.name for p in positional_params), positional))
    bound: list[ParameterBinding] = []
    leaves: list[Leaf] = []
    for p in params:
        if p.name in given and p.name not in types:
            value = given[p.name]
            if p.name in static:
                bound.append(ParameterBinding(p.name, p.kind, True, value))
                continue
            treedef, found, others = leaves_of(p.name, value, mesh)
            if others and not found:
                # Nothing JAX can trace: the argument is static (a config).
                bound.append(ParameterBinding(p.name, p.kind, True, value))
                continue
        else:
            others = []
            text = types.get(p.name, p.annotation)
            if p.name in static or text is None:
                if p.has_default:
                    bound.append(ParameterBinding(p.name, p.kind, True, p.default))
                    continue
                raise InputError(
                    f"argument '{p.name}' of '{fn_name}' has no type; pass "
                    f"--arg {p.name}=TYPE (e.g. --arg {p.name}=f32[1024]), "
                    f"annotate it: def {fn_name}({p.name}: \"f32[1024]\"), or "
                    f"give the arguments with --args NAME")
            treedef, found = annotated_leaf(p.name, text, mesh)
        bound.append(ParameterBinding(p.name, p.kind, False, None, treedef,
                                      len(leaves), len(found), tuple(others)))
        leaves.extend(found)
    return bound, leaves


def argument_names(items: Sequence[str], signature: Sequence[str],
                   fn_name: str, option: str) -> tuple[str, ...]:
    """Arguments named or counted (`0` is the first, as jit's argnums),
    as names, each once."""
    result: list[str] = []
    for item in items:
        if item.isdigit():
            if int(item) >= len(signature):
                raise InputError(
                    f"{option} {item}: '{fn_name}' takes {len(signature)} "
                    f"arguments ({', '.join(signature) or 'none'}); argument "
                    f"numbers count from 0")
            item = signature[int(item)]
        if item not in result:
            result.append(item)
    return tuple(result)


def donated_leaves(items: Sequence[str], leaves: Sequence[Leaf],
                   parameters: Sequence[ParameterBinding], signature: Sequence[str],
                   fn_name: str, option: str = "--donate") -> tuple[int, ...]:
    """The leaves `--donate` items pick: an argument's number or name (all
    its leaves; an argument with no array leaf, such as an empty tuple,
    donates nothing, as `jax.jit` does) or a path pattern (`state/opt/**`)."""
    chosen: set[int] = set()
    static = {p.name for p in parameters if p.static}
    paths = [leaf.path for leaf in leaves]
    for item in items:
        named = argument_names([item], signature, fn_name, option) \
            if item.isdigit() else (item,)
        pattern = named[0]
        if pattern in static:
            raise InputError(f"{option} {item}: '{pattern}' is a static "
                             f"argument of '{fn_name}'; only traced arrays "
                             f"are donated")
        found = [i for i, path in enumerate(paths)
                 if tree.matches(pattern, path)
                 or tree.matches(pattern + "/**", path)]
        if not found and pattern not in signature:
            raise InputError(f"{option} {item}: '{pattern}' matches no input; "
                             f"the inputs are {tree.listing(paths)}")
        chosen.update(found)
    return tuple(sorted(chosen))


def _with_refs(donated: Sequence[int], leaves: Sequence[Leaf]) -> tuple[int, ...]:
    """`donated` and every `jax.Ref` leaf: a ref's buffer becomes its final
    value, as `jax.jit` aliases a ref argument to an output."""
    return tuple(sorted(set(donated)
                        | {i for i, leaf in enumerate(leaves) if leaf.ref}))


def grad_leaves(grad: bool | Sequence[str] | None, leaves: Sequence[Leaf],
                parameters: Sequence[ParameterBinding], fn_name: str
                ) -> tuple[int, ...] | None:
    """The leaves `--grad` differentiates with respect to: the floating
    leaves of the named parameters (of every parameter with `True`)."""
    if not grad:
        return None
    refs = [leaf.path for leaf in leaves if leaf.ref]
    if refs:
        raise SpecError(f"--grad: '{fn_name}' takes jax.Ref arguments "
                        f"({tree.listing(refs, 3)}), which it may write; "
                        f"differentiate inside the function (jax.grad of a "
                        f"function of the refs' values) instead")
    traced = [p.name for p in parameters if not p.static]
    names = traced if grad is True else list(grad)
    for name in names:
        if name not in traced:
            what = "is static" if name in [p.name for p in parameters] \
                else "is not an argument"
            raise SpecError(f"--grad {name}: '{name}' {what} of '{fn_name}'; "
                            f"its traced arguments are {', '.join(traced) or 'none'}")
    chosen = tuple(i for i, leaf in enumerate(leaves)
                   if leaf.parameter in names and leaf.type.dtype.is_float
                   and not leaf.key)
    if not chosen:
        subject = "has no floating-point input" if grad is True else \
            f"has no floating-point leaf in {', '.join(names)}"
        raise SpecError(f"--grad: '{fn_name}' {subject} to differentiate "
                        f"with respect to")
    return chosen


def call_values(parameters: Sequence[ParameterBinding], leaves: Sequence[Leaf],
                positional: Sequence[Any]) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The arguments to lower a jitted object with: the `positional` values
    the user gave, as they are; an array typed by `--arg` or an annotation
    as a `jax.ShapeDtypeStruct`; a default only where a later argument
    follows it."""
    ordered = [p for p in parameters if p.kind != "keyword-only"]
    values: list[tuple[ParameterBinding, Any]] = []
    for i, p in enumerate(ordered):
        if i < len(positional):
            values.append((p, positional[i]))
        elif not p.static:
            values.append((p, _abstract(leaves[p.start])))
        else:
            values.append((p, _DEFAULT))
    while values and values[-1][1] is _DEFAULT:
        values.pop()
    keywords = {p.name: _abstract(leaves[p.start]) for p in parameters
                if p.kind == "keyword-only" and not p.static}
    return tuple(p.value if v is _DEFAULT else v for p, v in values), keywords


_DEFAULT = object()


def _abstract(leaf: Leaf) -> Any:
    import jax
    return jax.ShapeDtypeStruct(leaf.type.shape, leaf.type.dtype.numpy)


def parse_names(text: str | None, option: str,
                numbers: bool = False) -> tuple[str, ...]:
    """`a,b` -> ("a", "b"); with `numbers`, argument numbers (`0,2`) too."""
    if text is None:
        return ()
    names = tuple(n.strip() for n in text.split(","))
    if not all(n.isidentifier() or (numbers and n.isdigit()) for n in names):
        what = "argument names or numbers" if numbers else "argument names"
        raise UsageError(f"{option} {text!r}: expected {what}, comma "
                         f"separated, e.g. params,opt_state")
    twice = repeated(names)
    if twice:
        raise UsageError(f"{option} {text!r}: {', '.join(twice)} is named "
                         f"twice; name each argument once")
    return names


def _keras_fit(model: Any, name: str, batch: Sequence[Any]):
    """`fit`'s jitted train step of a Keras model, its arguments for one
    batch, and what names its input leaves by Keras' variable paths."""
    import dataclasses

    from irshard.loading import kerasfit
    step, call, variables = kerasfit.train_step(model, name, batch)

    def rename(leaves: Sequence[Leaf]) -> list[Leaf]:
        return [dataclasses.replace(
            leaf, path=kerasfit.renamed(leaf.path, variables))
            for leaf in leaves]

    def outputs(names: Sequence[str]) -> list[str]:
        return [kerasfit.output_name(n, variables) for n in names]

    return step, call, rename, outputs


def checked_context(fn: Callable[[], Any], what: str,
                    user_dir: str | None = None) -> Callable[[], Any]:
    """`fn` (`--context NAME`, the API's `context=`), called as a context
    manager's maker is: one that takes arguments is refused here; what it
    raises, or returns that is not a context manager, is the program's
    error, naming it."""
    try:
        inspect.signature(fn).bind()
    except TypeError:
        raise UsageError(f"{what} takes arguments "
                         f"({', '.join(inspect.signature(fn).parameters)}); it "
                         f"must take none and return a context manager "
                         f"(e.g. jax.set_mesh(mesh))") from None
    except ValueError:
        pass                    # no signature to read (a builtin): called

    def make() -> Any:
        try:
            value = fn()
        except BaseException as e:
            if not loader.program_failure(e):
                raise
            raise UserCodeError(f"{what}: " + describe_user_exception(
                e, user_dir or os.getcwd())) from None
        kind = type(value)
        if not (hasattr(kind, "__enter__") and hasattr(kind, "__exit__")):
            raise UserCodeError(f"{what} returned {kind.__name__!r}, not a "
                                f"context manager; return one (e.g. "
                                f"jax.set_mesh(mesh), or a function decorated "
                                f"with @contextlib.contextmanager)")
        return value
    make.what = what            # type: ignore[attr-defined]
    return make


def _jitted(fn: Callable[..., Any], name: str,
            parameters: Sequence[ParameterBinding],
            leaves: Sequence[Leaf], positional: Sequence[Any],
            grad: tuple[int, ...] | None,
            context: Callable[[], Any] | None) -> dict[str, Any]:
    """The Program fields of a jitted object, lowered as JAX lowers it
    (nothing for a plain function, or one differentiated by --grad,
    which irshard wraps itself, or one taking `jax.Ref`s, whose buffers
    irshard lays onto the mesh itself)."""
    try:
        target = backend.jitted_target(fn)
    except backend.BadLowering as e:
        raise UserCodeError(f"cannot lower '{name}': {e}") from None
    if grad is not None or any(leaf.ref for leaf in leaves) or target is None:
        return {"context": context}
    return {"jitted": fn, "call": call_values(parameters, leaves, positional),
            "context": context}


# ---------------------------------------------------------------------------
# Python


def _is_spec(x: Any) -> bool:
    return x is None or isinstance(x, (str, ShardingSpec)) or backend.is_sharding(x)


def prefixes_of(shardings: Any, parameters: Sequence[ParameterBinding]) -> dict[str, Any]:
    """`shardings` — one entry per positional argument, each a pytree prefix
    of it whose leaves are specs, as `jax.jit`'s `in_shardings` — as a map
    from path prefixes to specs."""
    import jax
    traced = [p for p in parameters if p.kind != "keyword-only"]
    if not isinstance(shardings, (tuple, list)):
        shardings = (shardings,) * len(traced)
    if len(shardings) > len(traced):
        raise SpecError(f"shardings has {len(shardings)} entries for "
                        f"{len(traced)} positional arguments")
    result: dict[str, Any] = {}
    for param, prefix in zip(traced, shardings):
        flat = jax.tree_util.tree_flatten_with_path(prefix, is_leaf=_is_spec)[0]
        for keys, spec in flat:
            result[tree.path_of(param.name, keys)] = spec
    return result


def program_of(fn: Callable[..., Any], args: Sequence[Any], *, mesh: MeshSpec,
               rules: Sequence[tuple[str, Any]] = (), shardings: Any = None,
               static_argnums: Sequence[int] = (),
               grad: bool | Sequence[str] | str | None = None,
               out_shardings: Any = None,
               reference: Callable[..., Any] | None = None,
               static_argnames: Sequence[str] = (),
               donate_argnums: Sequence[int] = (),
               donate_argnames: Sequence[str] = (),
               context: Callable[[], Any] | None = None,
               keras_fit: bool = False) -> Program:
    """The program of `fn(*args)` (the Python API); with `keras_fit`, of
    the train step Keras model `fn`'s `fit` runs on the batch `args`."""
    name = getattr(fn, "__name__", type(fn).__name__)
    try:
        source = inspect.getsourcefile(fn) or "<python>"
    except TypeError:
        source = "<python>"
    output_names = None
    if keras_fit:
        name = getattr(fn, "name", None) or name
        fn, args, rename, output_names = _keras_fit(fn, name, args)
    params = loader.parameters(fn, name)
    positional = [p.name for p in params if p.kind != "keyword-only"]
    for i in static_argnums:
        if not 0 <= i < len(positional):
            raise UsageError(f"static_argnums: {i} is not a positional "
                             f"argument of '{name}' (it takes {len(positional)})")
    own = backend.jit_options(fn)
    signature = [p.name for p in params]
    static = list(argument_names(
        [positional[i] for i in static_argnums] + list(static_argnames)
        + [str(i) for i in own["static_argnums"]] + list(own["static_argnames"]),
        signature, name, "static_argnames"))
    parameters, leaves = bind(fn, name, mesh, args, static, None, "args")
    if keras_fit:
        leaves = rename(leaves)
    rule_list = [tree.Rule(pattern, spec, f"{pattern}={spec}")
                 for pattern, spec in rules]
    prefixes = prefixes_of(shardings, parameters) if shardings is not None else None
    leaves = apply_shardings(leaves, mesh, rule_list, prefixes, "rules")
    if isinstance(grad, str):
        grad = parse_names(grad, "grad")
    out, out_prefix = _out_shardings(out_shardings, mesh)
    donated = donated_leaves(
        [str(i) for i in donate_argnums] + list(donate_argnames)
        + [str(i) for i in own["donate_argnums"]] + list(own["donate_argnames"]),
        leaves, parameters, signature, name, "donate_argnames")
    grads = grad_leaves(grad, leaves, parameters, name)
    return Program(source=source, function=name, fn=fn, mesh=mesh,
                   inputs=tuple(leaves), parameters=tuple(parameters),
                   out_shardings=out, out_prefix=out_prefix, grad=grads,
                   reference=reference, donated=_with_refs(donated, leaves),
                   user_dir=os.path.dirname(os.path.abspath(source))
                   if source != "<python>" else None, output_names=output_names,
                   **_jitted(fn, name, parameters, leaves, args, grads, context))


def _short(value: Any, limit: int = 60) -> str:
    shown = repr(value)
    return shown if len(shown) <= limit else shown[:limit - 3] + "..."


def _out_shardings(value: Any, mesh: MeshSpec
                   ) -> tuple[tuple[tuple[int, ShardingSpec], ...], Any]:
    """`out_shardings` as the API takes it: a mapping of output index to
    spec (`{0: '_,tp'}`), or, as `jax.jit` takes it, a pytree prefix of
    the outputs whose leaves are specs (kept to be resolved once the
    outputs are known)."""
    if value is None:
        return (), None
    if isinstance(value, Mapping) and value and all(
            isinstance(k, int) and not isinstance(k, bool) for k in value):
        pairs = []
        for index, spec in sorted(value.items()):
            if not _is_spec(spec):
                raise SpecError(f"out_shardings[{index}]: {_short(spec)} is not "
                                f"a sharding; give a spec such as '_,tp', a "
                                f"PartitionSpec or a NamedSharding")
            if index < 0:
                raise SpecError(f"out_shardings[{index}]: output indices count "
                                f"from 0")
            pairs.append((index, parse_sharding(spec) if isinstance(spec, str)
                          else spec))
        return tuple(pairs), None
    return (), value


def out_prefix_shardings(prefix: Any, out_tree: Any, ranks: Sequence[int],
                         mesh: MeshSpec) -> dict[int, ShardingSpec]:
    """The flat outputs' shardings a pytree prefix `prefix` of the outputs
    (`out_tree`, each leaf of rank `ranks[i]`) gives, as `jax.jit`'s
    `out_shardings`; None leaves give none."""
    import jax
    full = jax.tree_util.tree_unflatten(out_tree, list(range(len(ranks))))
    found: dict[int, Any] = {}

    def spread(spec, sub):
        for i in jax.tree_util.tree_leaves(sub):
            found[i] = spec

    try:
        jax.tree_util.tree_map(spread, prefix, full, is_leaf=_is_spec)
    except (ValueError, TypeError) as e:
        first = backend.first_line(e)
        raise SpecError(f"out_shardings: not a pytree prefix of the outputs "
                        f"({out_tree.num_leaves} arrays): "
                        f"{first[:120]}") from None
    result = {}
    for i, spec in sorted(found.items()):
        if spec is None:
            continue
        if not _is_spec(spec):
            raise SpecError(f"out_shardings: output {i} gets {_short(spec)}, "
                            f"which is not a sharding; give specs such as "
                            f"'_,tp', PartitionSpecs or NamedShardings")
        result[i] = spec_of(spec, ranks[i], mesh, f"out_shardings (output {i})")
    return result
