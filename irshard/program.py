"""What to compile: a function, its input types and shardings, and a mesh.

`load_program` turns the command line's strings into a `Program`, checking
each spec against the function's parameters and the mesh. It imports the
user's file (and so JAX): call `backend.configure` first.
"""

from __future__ import annotations

import functools
import inspect
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from irshard import loader
from irshard.errors import InputError, SpecError, UsageError
from irshard.specs import (MeshSpec, ShardingSpec, TensorType, check_one_line,
                           check_sharding, parse_sharding, parse_size,
                           parse_type)


@dataclass(frozen=True)
class InputSpec:
    """One input of the program: its name, type and sharding."""

    name: str
    type: TensorType          # without sharding
    sharding: ShardingSpec    # always complete: replicated when none given


@dataclass(frozen=True)
class Program:
    """A function ready to be traced: `fn` takes exactly `inputs`, in order
    (parameters with defaults and no type are bound to their defaults)."""

    source: str
    function: str
    fn: Callable[..., Any]
    mesh: MeshSpec
    inputs: tuple[InputSpec, ...]
    out_shardings: tuple[tuple[int, ShardingSpec], ...] = ()
    grad: bool = False
    static: tuple[tuple[str, Any], ...] = field(default=(), compare=False)
    # `--reference NAME`: what `run --check` compares with instead of the
    # function itself on one device; it takes the same inputs.
    reference: Callable[..., Any] | None = field(default=None, compare=False)


def split_assignment(text: str, option: str, value_name: str) -> tuple[str, str]:
    """`NAME=VALUE` -> (NAME, VALUE)."""
    check_one_line(text, option)
    name, eq, value = text.partition("=")
    if not eq or not name.strip():
        raise UsageError(f"{option} '{text}': expected NAME={value_name}")
    return name.strip(), value.strip()


def assignments(items: Sequence[str], option: str,
                value_name: str) -> dict[str, str]:
    """`NAME=VALUE` items as a dict; a name given twice is an error."""
    result: dict[str, str] = {}
    for item in items:
        name, value = split_assignment(item, option, value_name)
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


def _bind(fn: Callable[..., Any], name: str, params: Sequence[loader.Parameter],
          input_names: list[str], static: dict[str, Any]) -> Callable[..., Any]:
    """`fn` taking exactly the inputs, positionally and under their own names
    (JAX names the IR's arguments after them), with the static parameters
    bound; positional-only parameters are passed by position, the others by
    keyword (so keyword-only parameters work)."""
    if not static and all(p.kind == "positional" for p in params):
        return fn

    @functools.wraps(fn)
    def bound(*values):
        given = dict(zip(input_names, values))
        given.update(static)
        positional = [given[p.name] for p in params
                      if p.kind == "positional-only" and p.name in given]
        keywords = {p.name: given[p.name] for p in params
                    if p.kind != "positional-only" and p.name in given}
        return fn(*positional, **keywords)

    bound.__signature__ = inspect.Signature(
        [inspect.Parameter(n, inspect.Parameter.POSITIONAL_ONLY)
         for n in input_names])
    bound.__name__ = name
    return bound


def load_program(path: str, *, mesh: MeshSpec, fn_name: str | None = None,
                 args: Sequence[str] = (), shards: Sequence[str] = (),
                 out_shards: Sequence[str] = (), grad: bool = False,
                 reference: str | None = None) -> Program:
    """Loads `path`, picks the function and resolves every input's type and
    sharding from `--arg NAME=TYPE`, `--shard NAME=SPEC` and annotations."""
    out_shardings = parse_out_shardings(out_shards)
    arg_types = assignments(args, "--arg", "TYPE")
    arg_shards = assignments(shards, "--shard", "SPEC")

    module = loader.load_module(path)
    name, fn = loader.select_function(module, path, fn_name)
    params = loader.parameters(fn, name)
    param_names = [p.name for p in params]
    listed = ", ".join(param_names) or "none"
    for option, given in (("--arg", arg_types), ("--shard", arg_shards)):
        for arg in given:
            if arg not in param_names:
                raise InputError(f"{option} {arg}: '{name}' has no argument "
                                 f"'{arg}'; its arguments are {listed}")

    inputs: list[InputSpec] = []
    static: dict[str, Any] = {}
    for p in params:
        text = arg_types.get(p.name, p.annotation)
        if text is None:
            if p.has_default and p.name not in arg_shards:
                static[p.name] = p.default
                continue
            raise InputError(
                f"argument '{p.name}' of '{name}' has no type; pass --arg "
                f"{p.name}=TYPE (e.g. --arg {p.name}=f32[1024]) or annotate "
                f"it: def {name}({p.name}: \"f32[1024]\")")
        ttype = parse_type(text)
        if p.name in arg_shards:
            sharding = parse_sharding(arg_shards[p.name])
        else:
            sharding = ttype.sharding or ShardingSpec.replicated(ttype.rank)
        check_sharding(sharding, ttype.shape, mesh, f"argument '{p.name}'")
        inputs.append(InputSpec(p.name, ttype.with_sharding(None), sharding))

    if grad and not any(i.type.dtype.is_float for i in inputs):
        raise SpecError(f"--grad: '{name}' has no floating-point input to "
                        f"differentiate with respect to")
    input_names = [i.name for i in inputs]
    bound = _bind(fn, name, params, input_names, static)
    reference_fn = None
    if reference is not None:
        reference_name, reference_fn = loader.select_function(
            module, path, reference, "--reference")
        reference_fn = _bind_reference(reference_fn, reference_name,
                                       input_names, static)
    return Program(source=path, function=name, fn=bound, mesh=mesh,
                   inputs=tuple(inputs), out_shardings=out_shardings,
                   grad=grad, static=tuple(static.items()),
                   reference=reference_fn)


def _bind_reference(fn: Callable[..., Any], name: str, input_names: list[str],
                    static: dict[str, Any]) -> Callable[..., Any]:
    """The reference function called like the compiled one: its parameters
    are matched by name (the static ones included), else by position."""
    params = loader.parameters(fn, name)
    names = [p.name for p in params]
    if set(input_names) <= set(names):
        return _bind(fn, name, params, input_names,
                     {k: v for k, v in static.items() if k in names})
    required = [p for p in params if not p.has_default]
    if len(required) <= len(input_names) <= len(params):
        return fn
    takes = ", ".join(names) or "no arguments"
    raise InputError(f"--reference {name}: it takes {takes}; it must take the "
                     f"compiled function's inputs ({', '.join(input_names)}), "
                     f"by name or in order")
