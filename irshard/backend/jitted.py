"""Objects the user jitted or lowered themselves: a jitted callable
(`jax.jit`, `nnx.jit`, `eqx.filter_jit`, a `functools.partial` of one)
lowered by its own `lower`, and a `jax.stages.Lowered`, `Traced` or
`Compiled` read as irshard needs them: each flat input (kept, donated) and
output, the module or executable, and the devices and mesh its shardings
name.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from irshard.backend.devices import _jax
from irshard.backend.lowering import (BadLowering, _exclude_own_frames,
                                     _host_callbacks, entered, shardy_lowering)
from irshard.core import tree
from irshard.core.phases import phase


def jitted_target(fn: Any) -> tuple[Any, tuple[Any, ...], dict[str, Any]] | None:
    """Where `fn` is a jitted callable — `jax.jit`'s, or a wrapper with the
    same `lower` method (`nnx.jit`, `eqx.filter_jit`), or a
    `functools.partial` of one — the object to lower and the arguments the
    partial binds; None for a plain function."""
    import functools
    bound: tuple[Any, ...] = ()
    keywords: dict[str, Any] = {}
    while isinstance(fn, functools.partial):
        bound = tuple(fn.args) + bound
        keywords = dict(fn.keywords) | keywords
        fn = fn.func
    try:
        lower = getattr(fn, "lower", None)
    except Exception as e:
        raise BadLowering(f"looking up its lower raised {type(e).__name__}: "
                          f"{e}") from None
    if not callable(lower) or isinstance(fn, type):
        return None
    return fn, bound, keywords


@dataclass(frozen=True)
class LoweredLeaf:
    """One flat input or output of a jitted object's lowering."""

    path: str                 # the key path in the lowering's own pytree
    shape: tuple[int, ...]
    dtype: str                # NumPy dtype name; a key's: its key data's
    key: str | None = None    # a typed PRNG key's dtype name
    donated: bool = False
    kept: bool = True         # an input jax.jit kept (unused ones are dropped)
    # The first input (flat index) whose sharding the same entry of the
    # jitted function's own `in_shardings` gave (one sharding a prefix gave
    # a whole batch); None where no other input shares its entry.
    sharing: int | None = None


@dataclass(frozen=True)
class JittedLowering:
    """JAX's lowering of a jitted object with the user's arguments: the
    module (its arguments the kept inputs, in order), every flat input and
    output, and what the compile needs."""

    module: Any
    inputs: tuple[LoweredLeaf, ...]
    outputs: tuple[LoweredLeaf, ...]
    callbacks: tuple[tuple[Any, ...], Any]
    out_tree: Any
    # The framework whose wrapper it was ('flax', 'equinox'; 'jax' for
    # jax.jit): flax's outputs hold the arguments' updated state first.
    framework: str
    lowered: Any              # the jax.stages.Lowered
    devices: tuple[Any, ...] | None   # the devices its shardings name
    # The arguments a `functools.partial` binds (not the user's to give):
    # each one's name, its array leaves, and whether it is bound by keyword;
    # the positional ones first, then the keywords by name.
    bound: tuple[tuple[str, tuple[LoweredLeaf, ...], bool], ...] = ()


def _jax_lowered(value):
    """The `jax.stages.Lowered` inside a framework's own `Lowered`."""
    jax = _jax()
    seen = 0
    while not isinstance(value, jax.stages.Lowered) and seen < 8:
        inner = getattr(value, "lowered", None)
        if inner is None:
            inner = getattr(value, "_inner_obj", None)
        if inner is None or inner is value:
            break
        value, seen = inner, seen + 1
    if isinstance(value, jax.stages.Traced):
        value = value.lower()
    if not isinstance(value, jax.stages.Lowered):
        raise BadLowering(f"its lower() returned {_a(type(value).__name__)}, "
                          f"not a lowering (jax.stages.Lowered): give a "
                          f"jitted function (jax.jit, nnx.jit, "
                          f"eqx.filter_jit) whose lower(...) returns one")
    return value


def _a(noun: str) -> str:
    return f"{'an' if noun[:1].lower() in 'aeiou' else 'a'} {noun}"


def _leaf_of(path, info, donated: bool = False, kept: bool = True) -> LoweredLeaf:
    jax = _jax()
    shape, dtype = tuple(info.shape), info.dtype
    key = None
    if jax.dtypes.issubdtype(dtype, jax.dtypes.prng_key):
        data = jax.eval_shape(jax.random.key_data, jax.ShapeDtypeStruct(shape, dtype))
        key, shape, dtype = str(dtype), tuple(data.shape), data.dtype
    import numpy as np
    return LoweredLeaf(tree.path_of("", path), shape, str(np.dtype(dtype)), key,
                       donated, kept)


def _sharing(compile_args: dict, kept: Sequence[int],
             own: Sequence[Any]) -> dict[int, int]:
    """Kept input (flat index) -> the first kept input given the same
    sharding object by the jitted function's own `in_shardings` (`own`:
    their leaves), for the inputs that share one: JAX broadcasts a
    prefix's sharding to every leaf under it (a batch's `data_sharding`),
    so they hold the one object the user wrote once. Shardings the
    arguments carry (`in_shardings` left unspecified) are not grouped:
    one object put on two arrays is two decisions. A lowering JAX had
    cached for an earlier `jax.jit` of the same function holds that one's
    objects, equal to the leaves and not them: they count as its own."""
    shardings = compile_args.get("in_shardings")
    if shardings is None or len(shardings) != len(kept):
        return {}
    ids = {id(s) for s in own}
    try:
        equal = set(own)
    except TypeError:              # a sharding that cannot be hashed
        equal = set()

    def is_own(sharding) -> bool:
        try:
            return id(sharding) in ids or sharding in equal
        except TypeError:
            return False

    first: dict[int, int] = {}
    for i, sharding in zip(kept, shardings):
        if id(sharding) in first or is_own(sharding):
            first.setdefault(id(sharding), i)
    found = {i: first[id(s)] for i, s in zip(kept, shardings) if id(s) in first}
    counts: dict[int, int] = {}
    for group in found.values():
        counts[group] = counts.get(group, 0) + 1
    return {i: group for i, group in found.items() if counts[group] > 1}


def lowered_of(lowered, framework: str = "jax", jitted: Any = None) -> JittedLowering:
    """A `jax.stages.Lowered` (or a framework's, or a `Traced`) as irshard
    reads it; `jitted`, the `jax.jit` object it came from, where known
    (which inputs one of its `in_shardings` entries gave their sharding)."""
    jax = _jax()
    _exclude_own_frames()
    lowered = _jax_lowered(lowered)
    compile_args = getattr(getattr(lowered, "_lowering", None),
                           "compile_args", None) or {}
    kept = compile_args.get("kept_var_idx")
    flat = jax.tree_util.tree_flatten_with_path(lowered.args_info)[0]
    kept = set(range(len(flat))) if kept is None else set(kept)
    jit_info = getattr(jitted, "_jit_info", None)
    own = [s for s in getattr(jit_info, "in_shardings_leaves", None) or ()
           if type(s).__name__ != "UnspecifiedValue"]
    sharing = _sharing(compile_args, sorted(kept), own)
    inputs = tuple(dataclasses.replace(
        _leaf_of(path, info, bool(getattr(info, "donated", False)), i in kept),
        sharing=sharing.get(i)) for i, (path, info) in enumerate(flat))
    outputs = tuple(_leaf_of(path, info) for path, info in
                    jax.tree_util.tree_flatten_with_path(lowered.out_info)[0])
    devices = compile_args.get("device_assignment")
    from irshard.backend import shardy
    # A copy: the module JAX gives is the one it caches for the jitted
    # object and these arguments (and the user's own `Lowered`), which
    # irshard's passes then change in place.
    return JittedLowering(
        module=shardy.clone_module(lowered.compiler_ir("stablehlo")),
        inputs=inputs, outputs=outputs,
        callbacks=_host_callbacks(lowered),
        out_tree=jax.tree_util.tree_structure(lowered.out_info),
        framework=framework, lowered=lowered,
        devices=tuple(devices) if devices else None)


def _arguments_mesh(values, mesh):
    """The `jax.sharding.Mesh` of the first `NamedSharding` among the leaves
    of `values` with `mesh`'s axis names and sizes, or None."""
    jax = _jax()
    for leaf in jax.tree_util.tree_leaves(values):
        sharding = getattr(leaf, "_sharding", None) \
            if isinstance(leaf, jax.ShapeDtypeStruct) else getattr(leaf, "sharding", None)
        own = getattr(sharding, "mesh", None) \
            if isinstance(sharding, jax.sharding.NamedSharding) else None
        if isinstance(own, jax.sharding.Mesh) and own.shape == mesh.shape \
                and tuple(own.axis_names) == tuple(mesh.axis_names):
            return own
    return None


def named_mesh(values: Any, fn: Any = None):
    """The `jax.sharding.Mesh` the first `NamedSharding` names among the
    leaves of `values` (arrays, `ShapeDtypeStruct`s, shardings) and, for a
    jitted `fn`, its own in and out shardings; None where none does."""
    jax = _jax()
    own: list[Any] = []
    target = jitted_target(fn) if fn is not None else None
    if target is not None:
        info = getattr(target[0], "_jit_info", None)
        own = [*(getattr(info, "in_shardings_leaves", None) or ()),
               *(getattr(info, "out_shardings_leaves", None) or ())]
    for leaf in [*jax.tree_util.tree_leaves(values), *own]:
        if isinstance(leaf, jax.ShapeDtypeStruct):
            sharding = getattr(leaf, "sharding", None)
        elif isinstance(leaf, jax.sharding.Sharding):
            sharding = leaf
        else:
            sharding = getattr(leaf, "sharding", None)
        found = getattr(sharding, "mesh", None) \
            if isinstance(sharding, jax.sharding.NamedSharding) else None
        if isinstance(found, jax.sharding.Mesh):
            return found
    return None


def lower_jitted(fn: Any, args: Sequence[Any], kwargs: dict[str, Any], mesh,
                 context: Callable[[], Any] | None = None) -> JittedLowering:
    """JAX's lowering of the jitted object `fn` (see `jitted_target`) with
    `args` and `kwargs`, as `fn.lower(*args, **kwargs)` gives it: its own
    in/out shardings, donation, static arguments and the outputs its
    wrapper adds. `mesh` is the context mesh while it traces, inside
    `context()` where given (a `jax.set_mesh`, logical axis rules)."""
    import contextlib
    jax = _jax()
    _exclude_own_frames()
    target, bound, keywords = jitted_target(fn)
    if mesh is not None:
        # The arguments' own mesh of the same axes (built on a TPU slice's
        # described devices, as MaxText's train_compile.py builds it) is the
        # context mesh: another of the same devices would be incompatible.
        mesh = _arguments_mesh((bound, args, keywords, kwargs), mesh) or mesh
    with (jax.set_mesh(mesh) if mesh is not None else contextlib.nullcontext()), \
            entered(context), shardy_lowering(), phase("JAX trace and lower"):
        lowered = target.lower(*bound, *args, **(keywords | dict(kwargs)))
    # The wrapper's own `Lowered` says whose it is (flax's, equinox's).
    framework = (type(lowered).__module__ or "jax").split(".")[0]
    framework = {"jaxlib": "jax"}.get(framework, framework)
    return dataclasses.replace(lowered_of(lowered, framework, target),
                               bound=_bound_leaves(target, bound, keywords))


def _bound_leaves(target: Any, bound: Sequence[Any], keywords: dict[str, Any]
                  ) -> tuple[tuple[str, tuple[LoweredLeaf, ...], bool], ...]:
    """What a partial binds, as `JittedLowering.bound` holds it: each
    argument named by the jitted function's parameter it fills (`partial/I`
    where that cannot be read), its static ones left out."""
    import inspect
    info = getattr(target, "_jit_info", None)
    static = set(getattr(info, "static_argnums", None) or ())
    static_names = set(getattr(info, "static_argnames", None) or ())
    try:
        names = [p.name for p in inspect.signature(target).parameters.values()
                 if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        names = []
    found = []
    for i, value in enumerate(bound):
        name = names[i] if i < len(names) else f"partial/{i}"
        if i not in static and name not in static_names:
            found.append((name, _leaves_of(value), False))
    for name in sorted(keywords):
        if name not in static_names:
            found.append((name, _leaves_of(keywords[name]), True))
    return tuple(entry for entry in found if entry[1])


def _leaves_of(value: Any) -> tuple[LoweredLeaf, ...]:
    """The array leaves of a bound argument, typed as JAX traces them (a
    Python float is a weak f32[])."""
    jax = _jax()
    leaves = []
    for path, leaf in jax.tree_util.tree_flatten_with_path(value)[0]:
        try:
            aval = jax.typeof(leaf)
        except TypeError:
            continue            # not an array: static to JAX too
        leaves.append(_leaf_of(path, aval))
    return tuple(leaves)


@dataclass(frozen=True)
class CompiledStep:
    """A `jax.stages.Compiled` the user already has, as irshard reads it:
    its executable, every flat input (the ones XLA kept) and output, and
    the devices and mesh its shardings name."""

    executable: Any
    inputs: tuple[LoweredLeaf, ...]
    outputs: tuple[LoweredLeaf, ...]
    mesh: Any                 # the jax.sharding.Mesh of its shardings, or None
    devices: tuple[Any, ...]


def compiled_of(compiled) -> CompiledStep:
    """A `jax.stages.Compiled` (or a framework's wrapping one) as irshard
    reads it: nothing compiled again."""
    jax = _jax()
    seen = 0
    while not isinstance(compiled, jax.stages.Compiled) and seen < 8:
        inner = getattr(compiled, "compiled", None)
        if inner is None or inner is compiled:
            break
        compiled, seen = inner, seen + 1
    if not isinstance(compiled, jax.stages.Compiled):
        raise TypeError(f"not JAX's Compiled: {type(compiled).__name__}")
    executable = compiled.runtime_executable()
    if executable is None:
        raise TypeError("its executable is not available")
    flat = jax.tree_util.tree_flatten_with_path(compiled.args_info)[0]
    shardings = jax.tree_util.tree_leaves(
        compiled.input_shardings, is_leaf=lambda x: x is None)
    kept = [s is not None for s in shardings] \
        if len(shardings) == len(flat) else [True] * len(flat)
    inputs = tuple(_leaf_of(path, info, bool(getattr(info, "donated", False)), k)
                   for (path, info), k in zip(flat, kept))
    outputs = tuple(_leaf_of(path, info) for path, info in
                    jax.tree_util.tree_flatten_with_path(compiled.out_info)[0])
    mesh = None
    for sharding in [*shardings, *jax.tree_util.tree_leaves(compiled.output_shardings)]:
        if isinstance(sharding, jax.sharding.NamedSharding) and \
                isinstance(sharding.mesh, jax.sharding.Mesh):
            mesh = sharding.mesh
            break
    if mesh is not None:
        devices = tuple(mesh.devices.flat)
    else:
        found = next((s for s in shardings if s is not None), None)
        devices = tuple(sorted(found.device_set, key=lambda d: d.id)) \
            if found is not None else tuple(executable.local_devices())
    return CompiledStep(executable, inputs, outputs, mesh, devices)
