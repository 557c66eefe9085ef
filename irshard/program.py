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
from irshard.specs import (MeshSpec, ShardingSpec, TensorType, check_sharding,
                           parse_sharding, parse_type)


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


def split_assignment(text: str, option: str, value_name: str) -> tuple[str, str]:
    """`NAME=VALUE` -> (NAME, VALUE)."""
    name, eq, value = text.partition("=")
    if not eq or not name.strip():
        raise UsageError(f"{option} '{text}': expected NAME={value_name}")
    return name.strip(), value.strip()


def parse_out_shardings(items: Sequence[str]) -> tuple[tuple[int, ShardingSpec], ...]:
    """`--out-shard INDEX=SPEC` values."""
    result: dict[int, ShardingSpec] = {}
    for item in items:
        index, spec = split_assignment(item, "--out-shard", "SPEC")
        if not index.isdigit():
            raise UsageError(f"--out-shard '{item}': output index '{index}' is "
                             f"not a non-negative integer; expected INDEX=SPEC, "
                             f"e.g. 0=x,_")
        if int(index) in result:
            raise UsageError(f"--out-shard: output {index} is given twice")
        result[int(index)] = parse_sharding(spec)
    return tuple(sorted(result.items()))


def _bind_static(fn: Callable[..., Any], name: str, input_names: list[str],
                 static: dict[str, Any]) -> Callable[..., Any]:
    """`fn` with the static parameters bound, taking the inputs positionally
    under their own names (JAX names the IR's arguments after them)."""
    if not static:
        return fn

    @functools.wraps(fn)
    def bound(*args):
        return fn(**dict(zip(input_names, args)), **static)

    bound.__signature__ = inspect.Signature(
        [inspect.Parameter(n, inspect.Parameter.POSITIONAL_ONLY)
         for n in input_names])
    bound.__name__ = name
    return bound


def load_program(path: str, *, mesh: MeshSpec, fn_name: str | None = None,
                 args: Sequence[str] = (), shards: Sequence[str] = (),
                 out_shards: Sequence[str] = (), grad: bool = False) -> Program:
    """Loads `path`, picks the function and resolves every input's type and
    sharding from `--arg NAME=TYPE`, `--shard NAME=SPEC` and annotations."""
    out_shardings = parse_out_shardings(out_shards)
    arg_types: dict[str, str] = {}
    for item in args:
        name, value = split_assignment(item, "--arg", "TYPE")
        arg_types[name] = value
    arg_shards: dict[str, str] = {}
    for item in shards:
        name, value = split_assignment(item, "--shard", "SPEC")
        arg_shards[name] = value

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
    bound = _bind_static(fn, name, [i.name for i in inputs], static)
    return Program(source=path, function=name, fn=bound, mesh=mesh,
                   inputs=tuple(inputs), out_shardings=out_shardings,
                   grad=grad, static=tuple(static.items()))
