"""A program's inputs as pytree leaves: each leaf's path, type and sharding
(`Leaf`), a function's parameters (`ParameterBinding`) and the program they make
(`Program`); calling a function with flat leaves, leaves from values, and
shardings given by rule, by prefix or by the leaf itself.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

from irshard import backend
from irshard.core import tree
from irshard.core.errors import SpecError, UsageError
from irshard.core.dtypes import lookup_dtype
from irshard.core.specs import (MeshSpec, ShardingSpec, TensorType, check_sharding,
                                check_size, parse_sharding, parse_type)
from irshard.core.textinput import shown, split_assignment


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
    # Its sharding was given by a rule or a `shardings` prefix (not the
    # leaf's own, not the replicated default): a jitted object's lowering
    # has it put on top of its own.
    given: bool = False
    # What gave it: `--shard PATTERN=SPEC` (the rule), `shardings['PATH']`.
    rule: str | None = None

    @property
    def name(self) -> str:
        return self.path

    @property
    def parameter(self) -> str:
        return self.path.split("/", 1)[0]


@dataclass(frozen=True)
class ParameterBinding:
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
    parameters: tuple[ParameterBinding, ...] = ()
    out_shardings: tuple[tuple[int, ShardingSpec], ...] = ()
    # `out_shardings` as `jax.jit` takes them: a pytree prefix of the
    # outputs whose leaves are specs, resolved once the outputs are known.
    out_prefix: Any = field(default=None, compare=False, repr=False)
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
    # A function the user jitted (`jax.jit`, `nnx.jit`, `eqx.filter_jit`):
    # traced as JAX lowers that object, called with `call` (positional
    # values and keywords, as the user gave them); `context` returns a
    # context manager entered around its tracing.
    jitted: Any = field(default=None, compare=False, repr=False)
    call: tuple[tuple[Any, ...], dict[str, Any]] = field(
        default=((), {}), compare=False, repr=False)
    context: Callable[[], Any] | None = field(default=None, compare=False,
                                              repr=False)
    # Renames a jitted object's outputs (Keras fit's state after the
    # variables it updates).
    output_names: Callable[[Sequence[str]], Sequence[str]] | None = field(
        default=None, compare=False, repr=False)

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
                  parameters: Sequence[ParameterBinding],
                  leaves: Sequence[Leaf]) -> Callable[..., Any]:
    """`fn` taking the leaves positionally (named after their paths, which
    JAX uses for the module's argument names), rebuilding each parameter.

    Its outputs are the function's array outputs (a non-array output leaf
    passes through as static: it is None in the compiled outputs, its path
    in `static_outputs`), then, where leaves are `jax.Ref`s, the refs' final
    values: `(outputs, (ref values...))`."""
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
    # Read as a spec is: the axis names are checked as the grammar's.
    return parse_sharding(",".join(("+".join(a) if a else "_") + ("?" if o else "")
                                   for a, o in entries)) if entries \
        else ShardingSpec(())


def leaves_of(name: str, value: Any, mesh: MeshSpec
              ) -> tuple[Any, list[Leaf], list[tuple[int, str, Any]]]:
    """The treedef and array leaves of parameter `name` given `value`, and
    its leaves that are not arrays (JAX cannot trace those): their positions
    among all its leaves, paths and values."""
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
        _check_dimensions(shape, f"input '{path}'")
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


def annotated_leaf(name: str, text: str, mesh: MeshSpec) -> tuple[Any, list[Leaf]]:
    import jax
    ttype = parse_type(text)
    sharding = ttype.sharding or ShardingSpec.replicated(ttype.rank)
    _, treedef = jax.tree_util.tree_flatten(0)
    # A type's `@x` is a sharding the user gave, as a rule's is.
    return treedef, [Leaf(name, ttype.with_sharding(None), sharding,
                          given=ttype.sharding is not None)]


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
        given, given_by = leaf.given, leaf.rule
        if rule is not None:
            given, given_by = True, f"{rule.option or option} {rule.text}"
            subject = f"input '{leaf.path}' (rule {given_by})"
            sharding = spec_of(rule.value, rank, mesh, subject)
        elif prefixes:
            found = tree.prefix_value(dict(prefixes), leaf.path)
            if found is not None and found[1] is not None:
                sharding = spec_of(found[1], rank, mesh,
                                   f"shardings['{found[0]}']")
                given, given_by = True, f"shardings['{found[0]}']"
                subject = f"input '{leaf.path}' ({given_by})"
        if leaf.key and sharding.rank == rank:
            sharding = ShardingSpec(sharding.dims + ShardingSpec.replicated(1).dims)
        check_sharding(sharding, leaf.type.shape, mesh, subject)
        result.append(dataclasses.replace(leaf, sharding=sharding, given=given,
                                          rule=given_by))
    return result


def _check_dimensions(shape, context: str) -> None:
    """A leaf's dimensions are non-negative integers: a program's
    `jax.ShapeDtypeStruct` takes any shape (a factory's knob given as text
    ends up in one)."""
    import numbers
    for index, size in enumerate(shape):
        if isinstance(size, bool) or not isinstance(size, numbers.Integral) \
                or size < 0:
            raise SpecError(
                f"{context}: dimension {index} of its shape is "
                f"{shown(str(size))} ({type(size).__name__}); dimensions are "
                f"non-negative integers")
