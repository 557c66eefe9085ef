"""From a function to MLIR: the MLIR context with Shardy's passes, lowering
with `jax.jit`, pytree leaves (arrays, abstract arrays, typed PRNG keys,
refs) and gradients. Registered passes run in `passrunner`.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Sequence

from irshard.backend.devices import _jax, partition_spec
from irshard.core import tree
from irshard.core.errors import SpecError
from irshard.core.phases import phase


# ---------------------------------------------------------------------------
# MLIR


def ir_context():
    """An MLIR context with the StableHLO, CHLO and Shardy dialects loaded and
    Shardy's passes registered (as JAX makes it for its own lowering)."""
    from jax._src.interpreters import mlir as jax_mlir
    return jax_mlir.make_ir_context()


@dataclass(frozen=True)
class LoweredFunction:
    """The StableHLO module of a traced function, and its flattened outputs."""

    module: Any                           # jaxlib.mlir.ir.Module
    out_shapes: tuple[tuple[int, ...], ...]
    out_dtypes: tuple[str, ...]           # NumPy dtype names
    out_names: tuple[tuple[Any, ...], ...]   # each output's key path
    # Python callbacks the program calls (jax.debug.print, pure_callback):
    # the executable must be compiled with them and keep them alive.
    callbacks: tuple[tuple[Any, ...], Any] = ((), None)
    out_tree: Any = None                  # the outputs' pytree structure


class BadOutput(TypeError):
    """The traced function returned something that is not an array."""


class BadLowering(TypeError):
    """The user's jitted object does not lower as JAX's do: its `lower`
    raised on being looked up, or returned something other than a
    lowering."""


class ContextSwallowed(Exception):
    """The user's context manager's `__exit__` swallowed the exception that
    tracing raised inside it (`error`), so there is nothing to report."""

    def __init__(self, error: BaseException):
        super().__init__(f"{type(error).__name__}: {error}")
        self.error = error


@contextlib.contextmanager
def shardy_lowering() -> Iterator[None]:
    """JAX lowers for Shardy's propagation in the block, whatever
    `jax_use_shardy_partitioner` says: irshard propagates and partitions
    with Shardy, and a lowering for GSPMD's carries its shardings as
    `mhlo.sharding`, which Shardy's partitioner reads differently (a
    replicated input left open)."""
    from jax._src import config
    with config.use_shardy_partitioner(True):
        yield


def gspmd_configured() -> bool:
    """Whether JAX is set to GSPMD's propagation
    (`jax_use_shardy_partitioner=False`)."""
    from jax._src import config
    return not config.use_shardy_partitioner.value


@contextlib.contextmanager
def entered(context: Callable[[], Any] | None) -> Iterator[None]:
    """`context()` entered around the block (nothing where None); where its
    `__exit__` swallows an exception the block raised, `ContextSwallowed`
    is raised instead of going on as if the block had finished."""
    if context is None:
        yield
        return
    raised: list[BaseException] = []
    with context():
        try:
            yield
        except BaseException as e:
            raised.append(e)
            raise
    if raised:
        raise ContextSwallowed(raised[0])


def array_outputs(outputs, refs: Sequence[Any] = ()) -> tuple[Any, list[str]]:
    """`outputs` with every leaf that is not an array or number replaced by
    None (passed through as static, as `eqx.filter_jit` does), and those
    leaves' names. Outputs with no array at all (and no `refs` written)
    are refused: JAX's own error about a string output names no line of the
    user's."""
    import numpy as np
    jax = _jax()
    flat, treedef = jax.tree_util.tree_flatten_with_path(outputs)
    arrays = (jax.Array, np.ndarray, np.generic, bool, int, float, complex)
    kept = [leaf if isinstance(leaf, arrays) else None for _, leaf in flat]
    static = [(path, leaf) for (path, leaf), k in zip(flat, kept) if k is None]
    if not static:
        return outputs, []
    if len(static) == len(flat) and not refs:
        path, leaf = static[0]
        where = f" (output {tree.output_path(path)})" if path else ""
        raise BadOutput(f"it returns a {type(leaf).__name__}{where} and no "
                        f"array; irshard compiles functions that return "
                        f"arrays (or pytrees of arrays)")
    return (jax.tree_util.tree_unflatten(treedef, kept),
            [f"{tree.output_path(path)} ({type(leaf).__name__})"
             for path, leaf in static])


def is_ref(x) -> bool:
    """A `jax.Ref` (a mutable array)."""
    ref = getattr(_jax(), "Ref", None)
    return ref is not None and isinstance(x, ref)


def new_ref(value):
    return _jax().new_ref(value)


def ref_value(ref):
    """The array a `jax.Ref` holds (inside a trace: its current value)."""
    return ref[...]


def jit_options(fn: Callable[..., Any]) -> dict[str, tuple[Any, ...]]:
    """What a `jax.jit`-wrapped function (or a `functools.partial` of one,
    counted from the first argument it leaves to the caller) was told about
    its arguments: `static_argnums`, `static_argnames`, `donate_argnums`,
    `donate_argnames` (empty for any other callable)."""
    import functools
    bound, keywords = 0, set()
    while isinstance(fn, functools.partial):
        # A partial's own arguments are not the caller's: numbers shift.
        bound += len(fn.args)
        keywords |= set(fn.keywords)
        fn = fn.func
    info = getattr(fn, "_jit_info", None)
    found = {name: tuple(getattr(info, name, None) or ())
             for name in ("static_argnums", "static_argnames",
                          "donate_argnums", "donate_argnames")}
    if bound:
        import inspect
        try:
            keywords |= {p.name for p in list(
                inspect.signature(fn).parameters.values())[:bound]}
        except (TypeError, ValueError):
            pass
    for name in ("static_argnums", "donate_argnums"):
        found[name] = tuple(i - bound for i in found[name] if i >= bound)
    for name in ("static_argnames", "donate_argnames"):
        found[name] = tuple(n for n in found[name] if n not in keywords)
    return found


def lower(fn: Callable[..., Any], shapes: Sequence[tuple[int, ...]],
          dtypes: Sequence[str], mesh,
          weak: Sequence[bool] | None = None,
          shardings: Sequence[Sequence[Sequence[str]]] | None = None,
          donated: Sequence[int] = (),
          context: Callable[[], Any] | None = None,
          ) -> LoweredFunction:
    """Traces `fn` on abstract inputs and lowers it to StableHLO.

    The mesh is set as JAX's context mesh while tracing, so the function may
    use `with_sharding_constraint(x, P(...))` or `shard_map` without naming a
    mesh. On a mesh of Auto axes the inputs carry no sharding (the annotate
    pass attaches it); with Explicit axes each input is traced with its
    sharding (`shardings[i]`: each dimension's axes; given only then) in its
    type, as
    `jax.jit` sees a sharded array, so `reshard` and sharding-in-types rules
    apply. Unused inputs are kept (`jax.jit` drops them by default), so
    argument i of the module is always input i. Inputs `donated` are
    donated (`donate_argnums`): XLA may reuse their buffers for outputs.
    `context()`, where given, is entered around tracing (inside the mesh).
    """
    jax = _jax()
    _exclude_own_frames()
    weak = weak or [False] * len(shapes)
    placed = [jax.sharding.NamedSharding(mesh, partition_spec(entries))
              for entries in shardings] if shardings is not None \
        else [None] * len(shapes)
    avals = [jax.ShapeDtypeStruct(tuple(s), d, weak_type=w, sharding=p)
             for s, d, w, p in zip(shapes, dtypes, weak, placed)]
    with jax.set_mesh(mesh), entered(context), shardy_lowering(), \
            phase("JAX trace and lower"):
        lowered = jax.jit(fn, keep_unused=True,
                          donate_argnums=tuple(donated)).lower(*avals)
        module = lowered.compiler_ir("stablehlo")
    leaves = jax.tree_util.tree_flatten_with_path(lowered.out_info)[0]
    return LoweredFunction(
        module=module,
        out_shapes=tuple(tuple(leaf.shape) for _, leaf in leaves),
        out_dtypes=tuple(str(leaf.dtype) for _, leaf in leaves),
        out_names=tuple(tuple(path) for path, _ in leaves),
        callbacks=_host_callbacks(lowered),
        out_tree=jax.tree_util.tree_structure(lowered.out_info))


def _exclude_own_frames() -> None:
    """irshard's own frames (the wrappers that call the user's function)
    are left out of the locations JAX writes into the IR, as JAX leaves out
    its own: the IR names the user's lines only, and does not change when
    irshard's code does."""
    import sys

    from jax._src import source_info_util
    # Python's frozen modules (`<frozen runpy>` of `python -m irshard`)
    # are the standard library's too.
    own = [os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep,
           "<frozen "]
    # The `irshard` console script, where it is the program that runs.
    main = sys.modules.get("__main__")
    entry = getattr(getattr(main, "main", None), "__module__", None)
    if entry in ("irshard.cli", "irshard.__main__") \
            and getattr(main, "__file__", None):
        own.append(os.path.abspath(main.__file__))
    for path in own:
        if path not in source_info_util._exclude_paths:
            source_info_util.register_exclusion(path)


def _host_callbacks(lowered) -> tuple[tuple[Any, ...], Any]:
    """The callbacks a lowering registered, and what keeps them alive."""
    lowering = getattr(lowered, "_lowering", None)
    compile_args = getattr(lowering, "compile_args", None) or {}
    return (tuple(compile_args.get("host_callbacks", ()) or ()),
            compile_args.get("keepalive"))


# ---------------------------------------------------------------------------
# Pytree leaves: arrays, abstract arrays, scalars, typed PRNG keys


def describe_leaf(x) -> tuple | None:
    """(shape, dtype name, key dtype name, key implementation, weak type,
    sharding) of an array-like leaf, as `jax.jit` would see it (dtypes
    canonical: 64-bit only with jax_enable_x64); None for anything else.
    A typed PRNG key is described by its key data (u32[..., 2])."""
    import numpy as np
    jax = _jax()
    sharding, weak = None, False
    if isinstance(x, jax.ShapeDtypeStruct):
        shape, dtype, weak = x.shape, x.dtype, x.weak_type
        # A bare PartitionSpec stands for the context mesh, which is --mesh
        # here; reading `.sharding` would look for a `jax.set_mesh` context.
        sharding = getattr(x, "_sharding", None)
        if not isinstance(sharding, jax.sharding.PartitionSpec):
            sharding = x.sharding
    elif isinstance(x, jax.Array):
        shape, dtype, sharding = x.shape, x.dtype, x.sharding
        weak = bool(getattr(x, "weak_type", False))
    elif isinstance(x, (np.ndarray, np.generic)):
        shape, dtype = x.shape, x.dtype
    elif isinstance(x, (bool, int, float, complex)) and not isinstance(x, np.generic):
        shape, weak = (), True
        dtype = jax.numpy.asarray(x).dtype
    else:
        return None
    if not isinstance(sharding, (jax.sharding.NamedSharding,
                                 jax.sharding.PartitionSpec)):
        sharding = None
    if jax.dtypes.issubdtype(dtype, jax.dtypes.prng_key):
        data = jax.eval_shape(jax.random.key_data,
                              jax.ShapeDtypeStruct(shape, dtype))
        return (tuple(data.shape), str(data.dtype), str(dtype),
                dtype._impl.name, False, sharding)
    dtype = jax.dtypes.canonicalize_dtype(dtype)
    return tuple(shape), str(np.dtype(dtype)), None, None, weak, sharding


def is_sharding(x) -> bool:
    """A `PartitionSpec` or `NamedSharding`."""
    from jax.sharding import NamedSharding, PartitionSpec
    return isinstance(x, (NamedSharding, PartitionSpec))


def is_abstract(x) -> bool:
    return isinstance(x, _jax().ShapeDtypeStruct)


def key_data(key):
    """A typed PRNG key array's key data."""
    return _jax().random.key_data(key)


def wrap_key(data, impl: str):
    """A typed PRNG key array from its key data."""
    return _jax().random.wrap_key_data(data, impl=impl)


def key_data_outputs(outputs) -> tuple[Any, list[str | None]]:
    """`outputs` with every typed PRNG key replaced by its key data, and for
    each output leaf its key dtype's name (None for other arrays)."""
    jax = _jax()
    keys: list[str | None] = []

    def unwrap(x):
        dtype = getattr(x, "dtype", None)
        if dtype is not None and jax.dtypes.issubdtype(dtype, jax.dtypes.prng_key):
            keys.append(str(dtype))
            return jax.random.key_data(x)
        keys.append(None)
        return x

    return jax.tree_util.tree_map(unwrap, outputs), keys


def partition_entries(value, mesh_axes: dict[str, int], what: str):
    """[(axes, open), ...] of a PartitionSpec or NamedSharding; None for
    anything else. A NamedSharding's mesh must have the program's axes, each
    of the size `mesh_axes` gives it."""
    jax = _jax()
    from jax.sharding import NamedSharding, PartitionSpec
    if isinstance(value, NamedSharding):
        sizes = dict(value.mesh.shape)
        names = tuple(value.mesh.axis_names)
        mesh_names = list(mesh_axes)
        if not set(names) <= set(mesh_names):
            raise SpecError(f"{what}: its sharding's mesh has axes "
                            f"{', '.join(names)}, but --mesh has "
                            f"{', '.join(mesh_names)}")
        differ = [n for n in names if sizes[n] != mesh_axes[n]]
        if differ:
            raise SpecError(
                f"{what}: its sharding's mesh has "
                + ", ".join(f"{n}={sizes[n]}" for n in differ)
                + ", but --mesh has "
                + ", ".join(f"{n}={mesh_axes[n]}" for n in differ)
                + "; make them agree")
        value = value.spec
    if not isinstance(value, PartitionSpec):
        return None
    entries = []
    for entry in value:
        if entry is None:
            entries.append(((), False))
        elif entry is PartitionSpec.UNCONSTRAINED:
            entries.append(((), True))
        elif isinstance(entry, str):
            entries.append(((entry,), False))
        else:
            entries.append((tuple(entry), False))
    del jax
    return entries


def enable_x64() -> None:
    """64-bit types for the rest of the process (jax_enable_x64): without it
    JAX silently makes i64/f64 values 32-bit."""
    _jax().config.update("jax_enable_x64", True)


@contextlib.contextmanager
def x64_kept():
    """Puts JAX's 64-bit mode back as it was on leaving: what irshard turns
    on for a program's 64-bit inputs stays out of the caller's process (a
    notebook, a test suite)."""
    jax = _jax()
    was = bool(jax.config.jax_enable_x64)
    try:
        yield
    finally:
        if bool(jax.config.jax_enable_x64) != was:
            jax.config.update("jax_enable_x64", was)


def gradient(fn: Callable[..., Any], argnums: Sequence[int]) -> Callable[..., Any]:
    """The reverse-mode gradient of scalar-valued `fn` w.r.t. `argnums`."""
    jax = _jax()
    grad_fn = jax.grad(fn, argnums=tuple(argnums))
    grad_fn.__name__ = f"grad_{getattr(fn, '__name__', 'fn')}"
    return grad_fn
