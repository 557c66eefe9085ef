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

import dataclasses
import functools
import inspect
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

from irshard.loading import loader
from irshard.core import tree
from irshard.core.errors import InputError, SpecError, UsageError
from irshard.core.specs import (MeshSpec, ShardingSpec, TensorType,
                           check_one_line, check_sharding, check_size,
                           lookup_dtype, parse_sharding, parse_size, parse_type,
                           repeated)


@dataclass(frozen=True)
class Leaf:
    """One input of the program: an array leaf of a parameter."""

    path: str                 # params/layers/0/wq; a plain array: its name
    type: TensorType          # without sharding; a key's data for a key
    sharding: ShardingSpec    # always complete: replicated when none given
    # A typed PRNG key: its dtype's name (key<fry>) and implementation;
    # `type` is then its key data (u32[..., 2]).
    key: str | None = None
    key_impl: str | None = None
    weak: bool = False        # a Python scalar: traced weakly typed, as JAX does
    value: Any = field(default=None, compare=False, repr=False)
    # A `jax.Ref` (a mutable array): the function gets a ref holding the
    # leaf, and the ref's final value is an output the leaf is donated to,
    # as `jax.jit` compiles a ref argument.
    ref: bool = False

    @property
    def name(self) -> str:
        return self.path

    @property
    def parameter(self) -> str:
        return self.path.split("/", 1)[0]


@dataclass(frozen=True)
class Parameter:
    """How one parameter of the user's function is called: bound to a static
    value, or rebuilt from leaves `start:start+count` with `treedef`, its
    non-array leaves (functions, strings: `fixed`, by their position among
    all its leaves) passed through as they are, as `eqx.filter_jit` does."""

    name: str
    kind: str                 # positional-only | positional | keyword-only
    static: bool
    value: Any = None
    treedef: Any = None
    start: int = 0
    count: int = 0
    fixed: tuple[tuple[int, str, Any], ...] = ()   # (position, path, value)


@dataclass(frozen=True)
class Program:
    """A function ready to be traced: `fn` is the user's function, called
    with `parameters`; `flat_fn()` takes exactly `inputs`, in order."""

    source: str
    function: str
    fn: Callable[..., Any]
    mesh: MeshSpec
    inputs: tuple[Leaf, ...]
    parameters: tuple[Parameter, ...] = ()
    out_shardings: tuple[tuple[int, ShardingSpec], ...] = ()
    # Indices of the leaves to differentiate with respect to (--grad), or
    # None for the function itself.
    grad: tuple[int, ...] | None = None
    reference: Callable[..., Any] | None = field(default=None, compare=False)
    user_dir: str | None = None
    # The program module's own values (its globals), where a mesh it built
    # at import may be found.
    namespace: tuple[Any, ...] = field(default=(), compare=False, repr=False)
    # Indices of the leaves donated (--donate, the function's donate_argnums).
    donated: tuple[int, ...] = ()

    @property
    def static(self) -> tuple[tuple[str, Any], ...]:
        return tuple((p.name, p.value) for p in self.parameters if p.static)

    @property
    def fixed_leaves(self) -> tuple[str, ...]:
        """The non-array leaves of traced arguments, each `path (type)`."""
        return tuple(f"{path} ({type(value).__name__})"
                     for p in self.parameters for _, path, value in p.fixed)

    def flat_fn(self, fn: Callable[..., Any] | None = None) -> Callable[..., Any]:
        """`fn` (the program's function by default) as a function of the
        leaves, returning its outputs with typed keys as their key data."""
        return flat_function(fn or self.fn, self.function, self.parameters,
                             self.inputs)


# ---------------------------------------------------------------------------
# Calling a function with leaves


def flat_function(fn: Callable[..., Any], name: str,
                  parameters: Sequence[Parameter],
                  leaves: Sequence[Leaf]) -> Callable[..., Any]:
    """`fn` taking the leaves positionally (named after their paths, which
    JAX uses for the module's argument names), rebuilding each parameter.

    Its outputs are the function's array outputs (a non-array output leaf
    passes through as static: it is None in the compiled outputs, its path
    in `static_outputs`), then, where leaves are `jax.Ref`s, the refs' final
    values: `(outputs, (ref values...))`."""
    from irshard import backend
    import jax

    def call(*values):
        positional, keywords = [], {}
        refs = []
        for p in parameters:
            if p.static:
                value = p.value
            else:
                parts = []
                for v, leaf in zip(values[p.start:p.start + p.count],
                                   leaves[p.start:p.start + p.count]):
                    if leaf.key_impl:
                        v = backend.wrap_key(v, leaf.key_impl)
                    if leaf.ref:
                        v = backend.new_ref(v)
                        refs.append(v)
                    parts.append(v)
                for position, _, fixed in p.fixed:
                    parts.insert(position, fixed)
                value = jax.tree_util.tree_unflatten(p.treedef, parts)
            # Positionally wherever the signature allows: transformed
            # functions (jax.grad's argnums, shard_map's in_specs, jit's
            # donate_argnums) count their arguments by position.
            if p.kind != "keyword-only":
                positional.append(value)
            else:
                keywords[p.name] = value
        outputs, call.static_outputs = backend.array_outputs(
            fn(*positional, **keywords), refs)
        outputs, call.key_outputs = backend.key_data_outputs(outputs)
        if refs:
            call.key_outputs += [None] * len(refs)
            outputs = (outputs, tuple(backend.ref_value(r) for r in refs))
        return outputs

    try:
        functools.update_wrapper(call, fn)
    except AttributeError:
        pass
    call.__signature__ = inspect.Signature(
        [inspect.Parameter(f"arg{i}", inspect.Parameter.POSITIONAL_ONLY)
         for i in range(len(leaves))])
    call.__name__ = name
    call.key_outputs = []       # filled in when traced
    call.static_outputs = []
    return call


# ---------------------------------------------------------------------------
# Leaves from values


def spec_of(value: Any, rank: int, mesh: MeshSpec, what: str) -> ShardingSpec | None:
    """A sharding given as a spec string (`x,_`), a `PartitionSpec`, a
    `NamedSharding`, or None (none given)."""
    from irshard import backend
    if value is None:
        return None
    if isinstance(value, ShardingSpec):
        return value
    if isinstance(value, str):
        return parse_sharding(value)
    entries = backend.partition_entries(
        value, {a.name: a.size for a in mesh.axes}, what)
    if entries is None:
        raise SpecError(f"{what}: {value!r} is not a sharding; give a spec "
                        f"such as 'x,_', a PartitionSpec or a NamedSharding")
    entries = list(entries) + [("_", False)] * (rank - len(entries))
    if len(entries) > rank:
        raise SpecError(f"{what}: {value} has {len(entries)} entries but the "
                        f"array has rank {rank}")
    return parse_sharding(",".join(("+".join(a) if a else "_") + ("?" if o else "")
                                   for a, o in entries)) if entries \
        else ShardingSpec(())


def leaves_of(name: str, value: Any, mesh: MeshSpec
              ) -> tuple[Any, list[Leaf], list[tuple[int, str, Any]]]:
    """The treedef and array leaves of parameter `name` given `value`, and
    its leaves that are not arrays (JAX cannot trace those): their positions
    among all its leaves, paths and values."""
    from irshard import backend
    import jax
    try:
        flat, treedef = jax.tree_util.tree_flatten_with_path(value)
    except (RecursionError, SystemError) as e:
        if not isinstance(e, RecursionError) and \
                not isinstance(e.__cause__, RecursionError):
            raise
        raise SpecError(f"argument '{name}' contains itself (or nests too "
                        f"deeply to flatten); give it as a finite pytree of "
                        f"arrays") from None
    except (TypeError, ValueError) as e:
        raise SpecError(f"argument '{name}' is not a pytree JAX can flatten: "
                        f"{backend.message(e)} (a dict's keys must all be of "
                        f"one sortable type, e.g. all strings)") from None
    leaves, others, seen = [], [], {}
    for position, (keys, x) in enumerate(flat):
        path = tree.path_of(name, keys)
        if path in seen:
            raise SpecError(
                f"argument '{name}': two leaves have the path '{path}' "
                f"({seen[path]} and {jax.tree_util.keystr(keys)}), so rules "
                f"and reports could not tell them apart; rename a key "
                f"(a '/' inside a key reads as a path separator)")
        seen[path] = jax.tree_util.keystr(keys)
        ref = backend.is_ref(x)
        if ref:
            x = backend.ref_value(x)
        described = backend.describe_leaf(x)
        if described is None:
            others.append((position, path, x))
            continue
        shape, dtype_name, key, key_impl, weak, sharding = described
        dtype = lookup_dtype(dtype_name)
        if dtype is None:
            raise SpecError(f"input '{path}' has dtype {dtype_name}, which "
                            f"irshard cannot make values of")
        check_size(tuple(shape), dtype, f"input '{path}'")
        ttype = TensorType(dtype, tuple(shape))
        spec = spec_of(sharding, len(shape) - (1 if key else 0), mesh,
                       f"input '{path}'") if sharding is not None else None
        if spec is not None and key:
            spec = ShardingSpec(spec.dims + ShardingSpec.replicated(1).dims)
        value = None if backend.is_abstract(x) else \
            backend.key_data(x) if key else x
        leaves.append(Leaf(path, ttype, spec or ShardingSpec.replicated(len(shape)),
                           key=key, key_impl=key_impl, weak=weak, value=value,
                           ref=ref))
    return treedef, leaves, others


def _annotated_leaf(name: str, text: str, mesh: MeshSpec) -> tuple[Any, list[Leaf]]:
    import jax
    ttype = parse_type(text)
    sharding = ttype.sharding or ShardingSpec.replicated(ttype.rank)
    _, treedef = jax.tree_util.tree_flatten(0)
    return treedef, [Leaf(name, ttype.with_sharding(None), sharding)]


# ---------------------------------------------------------------------------
# Shardings by rule, prefix, or the leaf's own


def parse_rules(items: Sequence[str], option: str = "--shard") -> list[tree.Rule]:
    """`PATTERN=SPEC` items; the same pattern twice is an error."""
    rules, seen = [], {}
    for item in items:
        pattern, spec = split_assignment(item, option, "SPEC")
        if pattern in seen:
            raise UsageError(f"{option} {pattern} is given twice ('{option} "
                             f"{pattern}={seen[pattern]}' and '{option} "
                             f"{pattern}={spec}'); give it once")
        seen[pattern] = spec
        rules.append(tree.Rule(pattern, parse_sharding(spec), f"{pattern}={spec}"))
    return rules


def parse_overrides(items: Sequence[str]) -> list[tree.Rule]:
    """`--override-shard PATTERN=SPEC` items: rules tried before every
    `--shard` rule, the last given first (so one appended to a command
    wins)."""
    rules, seen = [], set()
    for item in reversed(list(items)):
        pattern, spec = split_assignment(item, "--override-shard", "SPEC")
        if pattern in seen:
            continue
        seen.add(pattern)
        rules.append(tree.Rule(pattern, parse_sharding(spec), f"{pattern}={spec}",
                               "--override-shard"))
    return rules


def replaced_overrides(items: Sequence[str]) -> tuple[str, ...]:
    """A note for each `--override-shard` a later one of the same pattern
    replaces (the last given wins, so that one appended to a command -- a
    suggestion's -- takes over)."""
    notes, last = [], {}
    for item in items:
        pattern, spec = split_assignment(item, "--override-shard", "SPEC")
        if pattern in last and last[pattern] != spec:
            notes.append(f"--override-shard {pattern}={spec} replaces the "
                         f"earlier --override-shard {pattern}={last[pattern]}")
        last[pattern] = spec
    return tuple(notes)


def apply_shardings(leaves: list[Leaf], mesh: MeshSpec,
                    rules: Sequence[tree.Rule] = (),
                    prefixes: Mapping[str, Any] | None = None,
                    option: str = "--shard") -> list[Leaf]:
    """Each leaf with its sharding (see the module docstring), checked
    against its shape and the mesh; errors name the leaf and the rule."""
    paths = [leaf.path for leaf in leaves]
    for rule in tree.unmatched(rules, paths):
        raise SpecError(f"{rule.option or option} {rule.text}: "
                        f"'{rule.pattern}' matches no input; the inputs are "
                        f"{tree.listing(paths)}")
    result = []
    for leaf in leaves:
        rank = leaf.type.rank - (1 if leaf.key else 0)
        rule = tree.first_match(rules, leaf.path)
        sharding, subject = leaf.sharding, f"input '{leaf.path}'"
        if rule is not None:
            subject = (f"input '{leaf.path}' (rule {rule.option or option} "
                       f"{rule.text})")
            sharding = spec_of(rule.value, rank, mesh, subject)
        elif prefixes:
            found = tree.prefix_value(dict(prefixes), leaf.path)
            if found is not None and found[1] is not None:
                sharding = spec_of(found[1], rank, mesh,
                                   f"shardings['{found[0]}']")
                subject = f"input '{leaf.path}' (shardings['{found[0]}'])"
        if leaf.key and sharding.rank == rank:
            sharding = ShardingSpec(sharding.dims + ShardingSpec.replicated(1).dims)
        check_sharding(sharding, leaf.type.shape, mesh, subject)
        result.append(dataclasses.replace(leaf, sharding=sharding))
    return result


# ---------------------------------------------------------------------------
# Binding a function's parameters


def bind(fn: Callable[..., Any], fn_name: str, mesh: MeshSpec,
         positional: Sequence[Any] = (), static: Sequence[str] = (),
         types: Mapping[str, str] | None = None,
         what_args: str = "arguments") -> tuple[list[Parameter], list[Leaf]]:
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
    bound: list[Parameter] = []
    leaves: list[Leaf] = []
    for p in params:
        if p.name in given and p.name not in types:
            value = given[p.name]
            if p.name in static:
                bound.append(Parameter(p.name, p.kind, True, value))
                continue
            treedef, found, others = leaves_of(p.name, value, mesh)
            if others and not found:
                # Nothing JAX can trace: the argument is static (a config).
                bound.append(Parameter(p.name, p.kind, True, value))
                continue
        else:
            others = []
            text = types.get(p.name, p.annotation)
            if p.name in static or text is None:
                if p.has_default:
                    bound.append(Parameter(p.name, p.kind, True, p.default))
                    continue
                raise InputError(
                    f"argument '{p.name}' of '{fn_name}' has no type; pass "
                    f"--arg {p.name}=TYPE (e.g. --arg {p.name}=f32[1024]), "
                    f"annotate it: def {fn_name}({p.name}: \"f32[1024]\"), or "
                    f"give the arguments with --args NAME")
            treedef, found = _annotated_leaf(p.name, text, mesh)
        bound.append(Parameter(p.name, p.kind, False, None, treedef,
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
                   parameters: Sequence[Parameter], signature: Sequence[str],
                   fn_name: str) -> tuple[int, ...]:
    """The leaves `--donate` items pick: an argument's number or name (all
    its leaves) or a path pattern (`state/opt/**`)."""
    chosen: set[int] = set()
    static = {p.name for p in parameters if p.static}
    paths = [leaf.path for leaf in leaves]
    for item in items:
        named = argument_names([item], signature, fn_name, "--donate") \
            if item.isdigit() else (item,)
        pattern = named[0]
        if pattern in static:
            raise InputError(f"--donate {item}: '{pattern}' is a static "
                             f"argument of '{fn_name}'; only traced arrays "
                             f"are donated")
        found = [i for i, path in enumerate(paths)
                 if tree.matches(pattern, path)
                 or tree.matches(pattern + "/**", path)]
        if not found:
            raise InputError(f"--donate {item}: '{pattern}' matches no input; "
                             f"the inputs are {tree.listing(paths)}")
        chosen.update(found)
    return tuple(sorted(chosen))


def _with_refs(donated: Sequence[int], leaves: Sequence[Leaf]) -> tuple[int, ...]:
    """`donated` and every `jax.Ref` leaf: a ref's buffer becomes its final
    value, as `jax.jit` aliases a ref argument to an output."""
    return tuple(sorted(set(donated)
                        | {i for i, leaf in enumerate(leaves) if leaf.ref}))


def grad_leaves(grad: bool | Sequence[str] | None, leaves: Sequence[Leaf],
                parameters: Sequence[Parameter], fn_name: str) -> tuple[int, ...] | None:
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


# ---------------------------------------------------------------------------
# The command line


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


def _call_args_function(module, path: str, name: str) -> tuple[Any, ...]:
    """The positional arguments `--args NAME` returns."""
    from irshard.core.errors import UserCodeError
    from irshard.loading.loader import describe_user_exception
    import os
    _, fn = loader.select_function(module, path, name, "--args")
    try:
        value = fn()
    except (Exception, SystemExit) as e:
        raise UserCodeError(f"--args {name}: " + describe_user_exception(
            e, os.path.dirname(os.path.abspath(path)))) from None
    if not isinstance(value, (tuple, list)):
        raise InputError(f"--args {name}: it returns a {type(value).__name__}; "
                         f"it must return the positional arguments as a tuple "
                         f"(e.g. `return (params, batch)`)")
    return tuple(value)


def load_program(path: str, *, mesh: MeshSpec, fn_name: str | None = None,
                 args: Sequence[str] = (), shards: Sequence[str] = (),
                 overrides: Sequence[str] = (),
                 out_shards: Sequence[str] = (),
                 grad: bool | Sequence[str] | None = None,
                 reference: str | None = None, args_fn: str | None = None,
                 static: Sequence[str] = (), donate: Sequence[str] = ()) -> Program:
    """Loads `path`, picks the function and resolves every input leaf's type
    and sharding from `--args`, `--arg`, annotations and `--shard` rules
    (`--override-shard` rules first)."""
    import os

    from irshard import backend
    out_shardings = parse_out_shardings(out_shards)
    arg_types = assignments(args, "--arg", "TYPE")
    rules = parse_overrides(overrides) + parse_rules(shards)

    module = loader.load_module(path)
    name, fn = loader.select_function(module, path, fn_name)
    positional = _call_args_function(module, path, args_fn) if args_fn else ()
    # The function's own jax.jit options count as the flags would.
    own = backend.jit_options(fn)
    signature = [p.name for p in loader.parameters(fn, name)]
    static = argument_names(list(static) + [str(i) for i in own["static_argnums"]]
                            + list(own["static_argnames"]), signature, name,
                            "--static")
    parameters, leaves = bind(fn, name, mesh, positional, static, arg_types,
                              f"--args {args_fn}")
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
                   namespace=tuple(vars(module).values()), donated=donated)


def _same_parameters(fn: Callable[..., Any], name: str,
                     parameters: Sequence[Parameter]) -> Callable[..., Any]:
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


# ---------------------------------------------------------------------------
# Python


def _is_spec(x: Any) -> bool:
    from irshard import backend
    return x is None or isinstance(x, (str, ShardingSpec)) or backend.is_sharding(x)


def prefixes_of(shardings: Any, parameters: Sequence[Parameter]) -> dict[str, Any]:
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
               out_shardings: Mapping[int, str] | None = None,
               reference: Callable[..., Any] | None = None) -> Program:
    """The program of `fn(*args)` (the Python API)."""
    import os
    name = getattr(fn, "__name__", type(fn).__name__)
    try:
        source = inspect.getsourcefile(fn) or "<python>"
    except TypeError:
        source = "<python>"
    params = loader.parameters(fn, name)
    positional = [p.name for p in params if p.kind != "keyword-only"]
    for i in static_argnums:
        if not 0 <= i < len(positional):
            raise UsageError(f"static_argnums: {i} is not a positional "
                             f"argument of '{name}' (it takes {len(positional)})")
    static = [positional[i] for i in static_argnums]
    parameters, leaves = bind(fn, name, mesh, args, static, None, "args")
    rule_list = [tree.Rule(pattern, spec, f"{pattern}={spec}")
                 for pattern, spec in rules]
    prefixes = prefixes_of(shardings, parameters) if shardings is not None else None
    leaves = apply_shardings(leaves, mesh, rule_list, prefixes, "rules")
    if isinstance(grad, str):
        grad = parse_names(grad, "grad")
    out = tuple(sorted((int(i), parse_sharding(spec) if isinstance(spec, str)
                        else spec) for i, spec in (out_shardings or {}).items()))
    return Program(source=source, function=name, fn=fn, mesh=mesh,
                   inputs=tuple(leaves), parameters=tuple(parameters),
                   out_shardings=out,
                   grad=grad_leaves(grad, leaves, parameters, name),
                   reference=reference, donated=_with_refs((), leaves),
                   user_dir=os.path.dirname(os.path.abspath(source))
                   if source != "<python>" else None)
