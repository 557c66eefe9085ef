"""A function the user jitted, lowered as JAX lowers it.

`jax.jit`, `nnx.jit`, `eqx.filter_jit` (or a `functools.partial` of one)
are lowered with the user's arguments by the object's own `lower`, so the
program keeps its in/out shardings, donation, static arguments and the
outputs the wrapper adds (`nnx.jit`'s updated state); rules put input
shardings on top. A lowering the user already has (`irshard.report`) takes
the same path. The module's arguments are the inputs JAX kept, named by
the user's leaves they are.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any, Sequence

from irshard import backend
from irshard.core import tree
from irshard.core.errors import (BackendError, IrshardError, SpecError, UsageError,
                                 UserCodeError)
from irshard.core.dtypes import lookup_dtype
from irshard.core.specs import MeshSpec, ShardingSpec, TensorType
from irshard.loading.jittedleaves import matched_leaves
from irshard.loading.leaves import Leaf, Program
from irshard.loading.loader import (describe_user_exception, program_failure,
                                    raised_by_user_code)


@dataclass(frozen=True)
class JittedProgram:
    """What a jitted object's lowering gives the StableHLO stage: the
    annotated module, its arguments as leaves (and which are donated), its
    outputs (name, dtype, shape, key dtype), notes, and the devices its
    shardings name."""

    module: Any
    leaves: tuple[Leaf, ...]
    donated: tuple[bool, ...]
    outputs: tuple[tuple[str, Any, tuple[int, ...], str | None], ...]
    notes: tuple[str, ...]
    devices: tuple[Any, ...] | None
    callbacks: Any
    out_tree: Any
    # Each leaf's first leaf (index) given the same entry of the jitted
    # function's own `in_shardings` (a prefix's, for a whole batch), where
    # several share one and no rule replaced it; else None.
    sharing: tuple[int | None, ...] = ()


@contextlib.contextmanager
def tracing_errors(program: Program, mesh: MeshSpec, user_dir: str):
    """Errors while tracing the user's function, in the user's terms."""
    try:
        yield
    except IrshardError:
        raise
    except backend.BadOutput as e:
        raise UserCodeError(f"cannot compile '{program.function}': {e}") from None
    except backend.BadLowering as e:
        raise UserCodeError(f"cannot lower '{program.function}': {e}") from None
    except backend.ContextSwallowed as e:
        raise UserCodeError(
            f"{getattr(program.context, 'what', 'the context')}: its context "
            f"manager swallowed the error tracing "
            f"'{program.function}' raised, so there is no program to "
            f"compile; let its __exit__ return False: "
            f"{_hinted(describe_user_exception(e.error, user_dir), e.error, mesh)}"
        ) from None
    except BaseException as e:
        if not program_failure(e):
            raise
        if raised_by_user_code(e):
            raise UserCodeError(_hinted(describe_user_exception(e, user_dir),
                                        e, mesh)) from None
        if program.grad is not None and ("scalar" in str(e)
                                         or "real-valued" in str(e)
                                         or "float0" in str(e)):
            raise UserCodeError(
                f"--grad needs '{program.function}' to return a real "
                f"floating-point scalar: "
                f"{backend.message(e)}") from None
        if any(said in str(e) for said in _ARGUMENT_ERRORS):
            raise UsageError(f"cannot lower '{program.function}' with the "
                             f"arguments given: {backend.message(e)}") from None
        raise BackendError(f"JAX could not trace '{program.function}': "
                           f"{type(e).__name__}: {backend.message(e)}") from None


# What JAX says when an argument the user gave cannot be used: a static
# argument that cannot be hashed, a sharding that names an axis the mesh
# does not have. The user's to fix, not a failure of JAX.
_ARGUMENT_ERRORS = ("Non-hashable static arguments", "is not found in mesh")


def result_shardings(program: Program, out_tree: Any,
                      ranks: Sequence[int]) -> dict[int, ShardingSpec]:
    """The outputs' shardings given by index (`--out-shard`) and by a
    pytree prefix of the outputs (the API's `out_shardings`)."""
    from irshard.loading.program import out_prefix_shardings
    given = dict(program.out_shardings)
    if program.out_prefix is not None:
        given |= out_prefix_shardings(program.out_prefix, out_tree, ranks,
                                      program.mesh)
    return given


def _hinted(text: str, error: BaseException, mesh: MeshSpec) -> str:
    """A tracing error of the user's code with what irshard knows about it:
    JAX's sharding-in-types errors keep their first sentence on the error
    line and their advice under it; errors that come from the mesh's axis
    types say which `--axis-types` would do."""
    if type(error).__name__ == "ShardingTypeError" and "\n" not in text:
        head, sep, rest = text.partition(". ")
        if sep and rest:
            text = f"{head}.\n{rest}"
    types = mesh.types_text() or "auto"
    if "should match the mesh passed to shard_map" in text:
        text += (f"\nhint: irshard traces under the mesh --mesh {mesh} makes "
                 f"(axis types: {types}); build the shard_map's mesh with the "
                 f"same axis types, or take it from the context "
                 f"(jax.sharding.get_abstract_mesh())")
    elif "of type Auto" in text:
        text += ("\nhint: the program shards in its types (reshard, "
                 "auto_axes, sharded types), which needs explicit mesh axes: "
                 "give --axis-types explicit (or per axis, e.g. "
                 f"--axis-types {mesh.names[0]}=explicit)")
    return text


def _dtype(name: str, what: str):
    """The dtype JAX names `name`; one irshard does not know is an error,
    never counted as another type's bytes."""
    found = lookup_dtype(name)
    if found is None:
        raise SpecError(f"{what} has dtype {name}, which irshard cannot "
                        f"report")
    return found


class Prelowered:
    """A lowering the user already has, lowered again as itself."""

    def __init__(self, lowered):
        self.lowered = lowered

    def lower(self):
        return self.lowered


def lower_jitted_program(program: Program, jax_mesh: Any,
                         user_dir: str) -> JittedProgram:
    """JAX's lowering of `program.jitted` with the user's arguments, its
    inputs named by the user's leaves and the rules' shardings put on top
    (see the module docstring)."""
    from irshard.ir.annotation import annotate
    mesh = program.mesh
    args, kwargs = program.call
    with tracing_errors(program, mesh, user_dir):
        lowered = backend.lower_jitted(
            program.jitted, args, kwargs,
            jax_mesh if program.context is None else None, program.context)
    matching = matched_leaves(program.inputs, program.parameters, lowered.inputs,
                              lowered.bound, lowered.framework in ("jax", "flax"))
    notes = _ambiguity(program, matching.ambiguous, lowered.framework)
    bound = {name for name, *_ in lowered.bound}
    matched = [m if isinstance(m, Leaf) else None for m in matching.leaves]
    index = {leaf.path: i for i, leaf in enumerate(program.inputs)}
    leaves: list[Leaf] = []
    donated: list[bool] = []
    extra_donors: list[int] = []
    unused: list[str] = []      # inputs jax.jit leaves out
    position: dict[int, int] = {}   # flat input -> its leaf
    for flat, (found, user, mark) in enumerate(
            zip(lowered.inputs, matched, matching.leaves)):
        name = user.path if user is not None \
            and user.path not in matching.ambiguous else \
            f"{mark} (bound)" if isinstance(mark, str) \
            else lowered_input_name(found.path)
        if not found.kept:
            unused.append(name)
            continue
        dtype = _dtype(found.dtype, f"input '{name}'")
        given = user is not None and user.given
        position[flat] = len(leaves)
        leaves.append(Leaf(name, TensorType(dtype, found.shape),
                           user.sharding if given
                           else ShardingSpec.replicated(len(found.shape)),
                           key=found.key, value=None if user is None else user.value,
                           given=given, rule=user.rule if given else None))
        by_user = user is not None and index.get(user.path) in program.donated
        if by_user and not found.donated:
            extra_donors.append(len(leaves) - 1)
        donated.append(found.donated or by_user)
    notes += _naming_notes(program, bound, any(matched), unused)
    given = {i: leaf.sharding for i, leaf in enumerate(leaves) if leaf.given}
    annotate(lowered.module, mesh, given, result_shardings(
        program, lowered.out_tree, [len(o.shape) for o in lowered.outputs]))
    _mark_donors(lowered.module, leaves, donated, extra_donors)
    names = _jitted_output_names(lowered, matched)
    if program.output_names is not None:
        names = list(program.output_names(names))
    outputs = tuple((n, _dtype(o.dtype, f"output '{n}'"), o.shape, o.key)
                    for n, o in zip(names, lowered.outputs))
    return JittedProgram(lowered.module, tuple(leaves), tuple(donated), outputs,
                         notes, lowered.devices, lowered.callbacks,
                         lowered.out_tree, _sharing(lowered.inputs, leaves, position))


def _sharing(inputs, leaves: Sequence[Leaf], position: dict[int, int]
             ) -> tuple[int | None, ...]:
    """`JittedProgram.sharing`: the lowering's groups of inputs given one
    `in_shardings` entry, by leaf, less those a rule sharded on top."""
    groups: dict[int, list[int]] = {}
    for flat, found in enumerate(inputs):
        if found.sharing is not None and flat in position \
                and not leaves[position[flat]].given:
            groups.setdefault(found.sharing, []).append(position[flat])
    sharing: list[int | None] = [None] * len(leaves)
    for members in groups.values():
        if len(members) > 1:
            for member in members:
                sharing[member] = members[0]
    return tuple(sharing)


def _mark_donors(module, leaves: Sequence[Leaf], donated: Sequence[bool],
                 extra: Sequence[int]) -> None:
    """Marks the inputs the user donated that JAX did not (`extra`), and
    unpins the donated inputs whose sharding a rule changed: no longer the
    size of the output they were aliased to, they are donors XLA may pair
    with any output."""
    from irshard.backend import shardy
    if extra:
        shardy.mark_buffer_donors(module, list(extra))
    resharded = [i for i, leaf in enumerate(leaves) if leaf.given and donated[i]]
    if resharded:
        shardy.mark_buffer_donors(module, resharded, unpin=True)


def _naming_notes(program: Program, bound: set[str], matched: bool,
                  unused: Sequence[str]) -> tuple[str, ...]:
    """What the report says about how a jitted object's inputs are named:
    the arguments a partial binds, inputs not matched to the user's
    leaves, inputs left out unused."""
    notes: tuple[str, ...] = ()
    if bound:
        one = len(bound) == 1
        notes += (f"{tree.listing(sorted(bound), 4)} "
                  f"{'is' if one else 'are'} bound by functools.partial: "
                  f"{'not an argument' if one else 'not arguments'} of "
                  f"'{program.function}', and no rule applies to "
                  f"{'it' if one else 'them'}",)
    if not matched and program.inputs:
        notes += (f"the inputs are named as '{program.function}' flattens its "
                  f"arguments (args/...): irshard could not match them to "
                  f"the arguments' leaves",)
    if unused:
        notes += (f"inputs the jitted function does not use are left out of "
                  f"the compiled program, as jax.jit leaves them: "
                  f"{tree.listing(unused, 4)}",)
    return notes


def _ambiguity(program: Program, names: Sequence[str], framework: str
               ) -> tuple[str, ...]:
    """What irshard says where the lowering cannot tell the user's leaves
    apart: a note; an error where they were given different shardings,
    since irshard cannot know which input each applies to."""
    if not names:
        return ()
    given = {leaf.path: (leaf.given, leaf.sharding, i in program.donated)
             for i, leaf in enumerate(program.inputs) if leaf.path in names}
    wrapper = {"equinox": "eqx.filter_jit"}.get(framework, f"{framework}'s jit")
    if len(set(given.values())) > 1:
        raise SpecError(
            f"{tree.listing(list(names), 4)} have the same shapes and dtypes, "
            f"and {wrapper} may reorder arguments: irshard cannot tell which "
            f"input of the compiled program each is, so it cannot apply "
            f"their different shardings (or donation); give them the same, "
            f"or make them one argument (a tuple or dict)")
    return (f"{tree.listing(list(names), 4)} have the same shapes and "
            f"dtypes, and {wrapper} may reorder arguments: irshard cannot tell "
            f"which input of the compiled program each is, so those inputs "
            f"keep the names {wrapper} gives them",)


def lowered_input_name(path: str) -> str:
    """An input of a lowering no argument's leaf is known for, by its path
    in the lowering's `(args, kwargs)`: `args/1/w`, or a keyword's name."""
    head, _, rest = path.partition("/")
    if head == "0":
        return "args/" + rest if rest else "args"
    return rest or path


def _jitted_output_names(lowered, matched) -> list[str]:
    """Outputs named by their path (`result/1/m`); the updated state
    `nnx.jit` returns for each argument it was given, after that input
    (`updated(model)/l1/kernel`)."""
    by_path = {found.path: user.path
               for found, user in zip(lowered.inputs, matched) if user is not None}
    names = []
    for out in lowered.outputs:
        head, _, rest = out.path.partition("/")
        if lowered.framework == "flax" and head in ("0", "1") \
                and out.path in by_path:
            names.append(tree.updated_path(by_path[out.path]))
        elif lowered.framework == "flax" and head == "2":
            names.append(tree.path_of("result", [rest] if rest else []))
        else:
            names.append(tree.path_of("result", [out.path] if out.path else []))
    return names
