"""A program from a file, as the command line names it: the function
(`--fn`, or made by `--factory` from its `--knob`s), its arguments
(`--args`, `--arg`, annotations), the rules that shard its inputs
(`--shard`, `--override-shard`), its outputs' shardings (`--out-shard`),
static and donated arguments, `--grad`, `--context`, `--keras-fit`, and
the mesh, which the arguments' own shardings may name. `load_program`
turns them into a `Program`, as `program.program_of` does from Python.
"""

from __future__ import annotations

import os
from typing import Any, Callable, Sequence

from irshard import backend
from irshard.core.errors import InputError, RejectedKnobs, UsageError, UserCodeError
from irshard.core.specs import MeshSpec, ShardingSpec, parse_sharding
from irshard.core.textinput import parse_size
from irshard.loading import loader
from irshard.loading.leaves import (ParameterBinding, Program, apply_shardings,
                                    parse_overrides, parse_rules, split_assignment)
from irshard.loading.loader import describe_user_exception
from irshard.loading.program import (_jitted, _keras_fit, _with_refs, argument_names,
                                     bind, checked_context, donated_leaves,
                                     grad_leaves)


def assignments(items: Sequence[str], option: str,
                value_name: str) -> dict[str, str]:
    """`NAME=VALUE` items as a dict; a name given twice is an error."""
    result: dict[str, str] = {}
    for item in items:
        name, value = split_assignment(item, option, value_name)
        if option == "--knob" and not value:
            example = "32,64" if "," in value_name else "32"
            raise UsageError(f"--knob '{item}': no value; expected "
                             f"{name}={value_name}, e.g. {name}={example} "
                             f"or {name}='' for an empty string")
        if name in result:
            raise UsageError(f"{option} {name} is given twice ('{option} "
                             f"{name}={result[name]}' and '{option} "
                             f"{name}={value}'); give it once")
        result[name] = value
    return result


def parse_out_shardings(items: Sequence[str]) -> tuple[tuple[int, ShardingSpec], ...]:
    """`--out-shard INDEX=SPEC` values."""
    result: dict[int, ShardingSpec] = {}
    for item in items:
        index, spec = split_assignment(item, "--out-shard", "SPEC")
        if parse_size(index) is None:
            raise UsageError(f"--out-shard '{item}': output index '{index}' is "
                             f"not a non-negative integer; expected INDEX=SPEC, "
                             f"e.g. 0=x,_")
        if int(index) in result:
            raise UsageError(f"--out-shard: output {index} is given twice")
        result[int(index)] = parse_sharding(spec)
    return tuple(sorted(result.items()))



def _call_args_function(module, path: str, name: str) -> tuple[Any, ...]:
    """The positional arguments `--args NAME` returns."""
    _, fn = loader.select_function(module, path, name, "--args")
    try:
        value = fn()
    except BaseException as e:
        if not loader.program_failure(e):
            raise
        raise UserCodeError(f"--args {name}: " + describe_user_exception(
            e, os.path.dirname(os.path.abspath(path)))) from None
    if not isinstance(value, (tuple, list)):
        raise InputError(f"--args {name}: it returns a {type(value).__name__}; "
                         f"it must return the positional arguments as a tuple "
                         f"(e.g. `return (params, batch)`)")
    return tuple(value)


# What an invalid knob combination's error line starts with (the decision
# engine lists such a candidate as invalid, not failed).
INVALID_KNOBS = "invalid knobs: "


def _made(module, path: str, factory: str, knobs: Sequence[tuple[str, Any]]):
    """(name, the jitted step, its positional arguments, the maker of the
    context it lowers in or None) that `factory` makes of `knobs`; the
    factory raising is the knobs' fault."""
    from irshard.core.knobs import knob_text
    _, make = loader.select_function(module, path, factory, "--factory")
    called = f"{factory}({', '.join(f'{k}={knob_text(v)}' for k, v in knobs)})"
    try:
        made = make(**dict(knobs))
    except BaseException as e:
        if not loader.program_failure(e):
            raise
        said = f"{called} raised: " + describe_user_exception(
            e, os.path.dirname(os.path.abspath(path)))
        raise RejectedKnobs(INVALID_KNOBS + said, said.splitlines()[0]) from None
    if not (isinstance(made, (tuple, list)) and len(made) in (2, 3)
            and callable(made[0]) and isinstance(made[1], (tuple, list))
            and (len(made) == 2 or callable(made[2]))):
        raise UserCodeError(f"--factory {factory}: it returns "
                            f"{type(made).__name__}; it must return (step, args) "
                            f"or (step, args, context): a jitted function, its "
                            f"positional arguments, and a function returning "
                            f"the context manager it lowers in")
    step, positional = made[:2]
    name = getattr(step, "__name__", None) or factory
    return name, step, tuple(positional), made[2] if len(made) == 3 else None


def _arguments_mesh(fn, positional, name: str) -> MeshSpec:
    """The mesh the arguments' (or the jitted function's own) shardings
    name, where no --mesh was given."""
    from irshard.core.specs import MeshAxis
    found = backend.named_mesh(positional, fn)
    if found is None:
        raise UsageError(f"--mesh is required: the arguments of '{name}' name no "
                         f"mesh of their own (no NamedSharding)")
    types = backend.axis_types_of(found)
    return MeshSpec(tuple(MeshAxis(str(n), int(s), t)
                          for (n, s), t in zip(found.shape.items(), types)))


def load_program(path: str, *, mesh: MeshSpec | None, fn_name: str | None = None,
                 args: Sequence[str] = (), shards: Sequence[str] = (),
                 overrides: Sequence[str] = (),
                 out_shards: Sequence[str] = (),
                 grad: bool | Sequence[str] | None = None,
                 reference: str | None = None, args_fn: str | None = None,
                 static: Sequence[str] = (), donate: Sequence[str] = (),
                 context_fn: str | None = None, keras_fit: bool = False,
                 factory: str | None = None,
                 knobs: Sequence[tuple[str, Any]] = ()) -> Program:
    """Loads `path`, picks the function (or makes it: `--factory` with its
    knobs) and resolves every input leaf's type and sharding from `--args`,
    `--arg`, annotations and `--shard` rules (`--override-shard` rules
    first). Without `mesh`, the mesh is the one the arguments' shardings
    name."""

    out_shardings = parse_out_shardings(out_shards)
    arg_types = assignments(args, "--arg", "TYPE")
    rules = parse_overrides(overrides) + parse_rules(shards)

    module = loader.load_module(path)
    name, fn, positional, mesh, context = _function(
        module, path, fn_name, args_fn, context_fn, factory, knobs, mesh)
    if factory is not None:
        args_fn = factory
    rename = output_names = None
    if keras_fit:
        if not args_fn:
            raise UsageError("--keras-fit needs one batch: give --args NAME, a "
                             "function returning (x, y)")
        fn, positional, rename, output_names = _keras_fit(fn, name, positional)
    # The function's own jax.jit options count as the flags would.
    own = backend.jit_options(fn)
    signature = [p.name for p in loader.parameters(fn, name)]
    static = argument_names(list(static) + [str(i) for i in own["static_argnums"]]
                            + list(own["static_argnames"]), signature, name,
                            "--static")
    parameters, leaves = bind(fn, name, mesh, positional, static, arg_types,
                              f"--args {args_fn}")
    if rename is not None:
        leaves = rename(leaves)
    leaves = apply_shardings(leaves, mesh, rules)
    donated = donated_leaves(
        list(donate) + [str(i) for i in own["donate_argnums"]]
        + list(own["donate_argnames"]), leaves, parameters, signature, name)
    donated = _with_refs(donated, leaves)
    grads = grad_leaves(grad, leaves, parameters, name)
    reference_fn = None
    if reference is not None:
        _, reference_fn = loader.select_function(module, path, reference,
                                                 "--reference")
        reference_fn = _same_parameters(reference_fn, reference, parameters)
    return Program(source=path, function=name, fn=fn, mesh=mesh,
                   inputs=tuple(leaves), parameters=tuple(parameters),
                   out_shardings=out_shardings, grad=grads,
                   reference=reference_fn,
                   user_dir=os.path.dirname(os.path.abspath(path)),
                   namespace=tuple(vars(module).values()), donated=donated,
                   output_names=output_names,
                   **_jitted(fn, name, parameters, leaves, positional, grads, context))



def _function(module, path: str, fn_name: str | None, args_fn: str | None,
              context_fn: str | None, factory: str | None,
              knobs: Sequence[tuple[str, Any]], mesh: MeshSpec | None):
    """The step of a loaded file: its name, the function, its positional
    arguments (from `--args`, or as `--factory` made them), its mesh
    (`mesh`, or the one its arguments' shardings name) and the context it
    lowers in (`--context`'s, or the factory's), checked."""
    here = os.path.dirname(os.path.abspath(path))
    if factory is not None:
        if fn_name is not None or args_fn is not None:
            raise UsageError("--factory makes the program and its arguments: "
                             "give it instead of --fn and --args")
        name, fn, positional, made_context = _made(module, path, factory, knobs)
        if made_context is not None and context_fn is not None:
            raise UsageError(f"--factory {factory} returns the context its step "
                             f"lowers in: give no --context")
    else:
        if knobs:
            raise UsageError("--knob gives --factory its keywords: give --factory "
                             "NAME too")
        name, fn = loader.select_function(module, path, fn_name)
        positional = _call_args_function(module, path, args_fn) if args_fn else ()
        made_context = None
    if mesh is None:
        mesh = _arguments_mesh(fn, positional, name)
    context = None
    if made_context is not None:
        context = checked_context(made_context, f"--factory {factory}'s context",
                                  here)
    if context_fn is not None:
        _, context = loader.select_function(module, path, context_fn, "--context")
        context = checked_context(context, f"--context {context_fn}", here)
    return name, fn, positional, mesh, context


def _same_parameters(fn: Callable[..., Any], name: str,
                     parameters: Sequence[ParameterBinding]) -> Callable[..., Any]:
    """The reference function called as the compiled one is: its parameters
    matched by name, else by position."""
    params = loader.parameters(fn, name)
    names = [p.name for p in params]
    wanted = [p.name for p in parameters]
    if set(wanted) <= set(names):
        kinds = {p.name: p.kind for p in params}

        def by_name(*positional, **keywords):
            values = dict(zip([p.name for p in parameters
                               if p.kind != "keyword-only"], positional))
            values.update(keywords)
            return fn(*[values[n] for n in names if kinds[n] == "positional-only"],
                      **{n: values[n] for n in names
                         if kinds[n] != "positional-only" and n in values})

        return by_name
    required = [p for p in params if not p.has_default]
    if len(required) <= len(wanted) <= len(params):
        def by_position(*positional, **keywords):
            values = dict(zip([p.name for p in parameters
                               if p.kind != "keyword-only"], positional))
            values.update(keywords)
            return fn(*[values[n] for n in wanted])

        return by_position
    takes = ", ".join(names) or "no arguments"
    raise InputError(f"--reference {name}: it takes {takes}; it must take the "
                     f"compiled function's arguments ({', '.join(wanted)}), "
                     f"by name or in order")


