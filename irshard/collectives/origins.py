"""Shardy's propagated module read for `--explain`: the sharding and the
origins (`sdy.sharding_origins`) of each of the user's values, found by
source line and primitive.
"""

from __future__ import annotations

import re
from typing import Any, Sequence

from irshard.collectives import mirrors
from irshard.collectives.values import (ORIGIN_NAME, PRIMITIVE_OPS, _dict,
                                        _entries, _local_shape, _only, _op_name, _uses,
                                        agreeing, by_axis, fit)
from irshard.core.frames import (SourceLocation, UserCode, called_once, chain_of,
                                  frame_paths)
from irshard.reporting.why import Origin, Value


# ---------------------------------------------------------------------------
# Shardy's propagated module: shardings and origins of the user's values


def _callers(paths) -> int:
    """How many ways a frame is reached: its outer paths, a path that
    another only continues (a stack JAX cut short, as it does in a
    checkpoint's recomputation) not counted apart."""
    # Sorted, a path comes just before the paths that continue it.
    paths = sorted(p for p in paths if p)
    return sum(1 for p, after in zip(paths, paths[1:] + [()])
               if after[:len(p)] != p)


def _chain(source: SourceLocation) -> tuple[tuple[str, int], ...]:
    """A user line's stack as (file, line) pairs, innermost first."""
    return tuple((f.file, f.line) for f in source.stack or ()) or \
        ((source.file, source.line),)


class PropagationSites:
    """Sites of the propagated module by user line and op, with what
    propagation decided for them."""

    def __init__(self, module, info, users: UserCode):
        from irshard.backend import shardy
        self.shardy = shardy
        self.module = module
        self.info = info
        self.users = users
        self.mesh = info.mesh
        self.functions = {fn.sym_name.value: fn for fn in shardy.functions(module)}
        self.calls: dict[str, list[Any]] = {}
        self.constraints: dict[str, SourceLocation | None] = {}
        # (file, line) -> the ops there.
        self.sites: dict[tuple[str, int], list[Any]] = {}
        self.main = next((fn for fn in self.functions.values()
                          if shardy.is_public(fn)), None)
        self._paths: dict[tuple[str, int], set] | None = None
        self._mirrored: dict[int, int] = {}
        with module.context:
            self._index()

    def _index(self) -> None:
        from jaxlib.mlir import ir
        self.calls = self.shardy.calls_by_callee(self.module)
        for fn in self.functions.values():
            for operation in self.shardy.walk(fn.operation):
                if ORIGIN_NAME in operation.attributes:
                    name = ir.StringAttr(operation.attributes[ORIGIN_NAME]).value
                    self.constraints[name] = self.constraint_source(operation)
                if operation.name == "sdy.constant" or not len(operation.results):
                    continue
                where = self.source(operation)
                if where is not None:
                    self.sites.setdefault((where.file, where.line), []).append(operation)

    # -- sources --------------------------------------------------------

    def source(self, operation) -> SourceLocation | None:
        """The user's line of an op; in a function JAX outlined from its
        own code (`_roll_static`), the line of the call."""
        from irshard.backend import locations
        for _ in range(32):
            found = self.users.choose(locations.frames(operation.location))
            if found is not None:
                return found
            fn = operation.parent
            while fn is not None and fn.name != "func.func":
                fn = fn.parent
            if fn is None or self.shardy.is_public(fn.opview):
                return None
            calls = self.calls.get(fn.opview.sym_name.value)
            if not calls:
                return None
            operation = calls[0]
        return None

    def constraint_source(self, operation) -> SourceLocation | None:
        """A constraint's line as a decision: the first frame of its stack,
        from the innermost outwards, that only one path reaches among the
        module's constraints. A helper every constraint goes through (a
        model's `shard(x, names)`, MaxText's shim around
        `with_sharding_constraint`) is not the decision; the line that
        called it is, so each call can be dropped alone."""
        return self.called_at(self.source(operation))

    def called_at(self, found: SourceLocation | None) -> SourceLocation | None:
        """`found`, a constraint's innermost user line, as a decision: the
        line that called the helpers every constraint shares."""
        if found is None or not found.stack:
            return found
        chain = found.stack
        at = called_once(chain, self.constraint_paths(), _callers)
        if at == 0:
            return found
        return SourceLocation(chain[at].file, chain[at].line,
                              chain[at].function, chain[at:])

    def constraint_paths(self) -> dict[tuple[str, int], set]:
        """Each frame of the constraints' stacks: the frames outside it,
        as each stack has them."""
        if self._paths is None:
            from irshard.backend.edits import CONSTRAINTS
            self._paths = frame_paths(
                chain_of(self.source(operation))
                for fn in self.functions.values()
                for operation in self.shardy.walk(fn.operation)
                if operation.name in CONSTRAINTS)
        return self._paths

    # -- origins --------------------------------------------------------

    def input_name(self, index: int) -> str:
        inputs = self.info.inputs
        return inputs[index].name if index < len(inputs) else f"argument {index}"

    def input_origin(self, index: int) -> Origin:
        """Input `index` as a decision: its name, and the rule that gave
        its sharding where one did. An input no rule of irshard's sharded
        is named by the parameter among those that mirror it (not its
        optimizer state: Shardy records any of them as the origin of what
        they decide together), and an input one `in_shardings` entry
        sharded with others (a batch's) by the shortest path among them."""
        inputs = self.info.inputs
        rule = getattr(inputs[index], "rule", None) if index < len(inputs) else None
        if rule is None and index < len(inputs):
            if index not in self._mirrored:
                self._mirrored[index] = mirrors.group_name(
                    inputs, mirrors.decision_group(inputs, index))
            index = self._mirrored[index]
        return Origin("input", self.input_name(index), rule=rule)

    def output_name(self, index: int) -> str:
        outputs = self.info.outputs
        return outputs[index].name if index < len(outputs) else f"result {index}"

    def constraint(self, name: str) -> Origin:
        return Origin("constraint", name, self.constraints.get(name))

    def origin(self, text: str, here: Origin | None) -> Origin:
        """An origin string of `sdy.sharding_origins` in the user's terms;
        `self` is the value itself (`here`: an input, an output or a
        constraint)."""
        if text == "self" and here is not None:
            return here
        kind, _, index = text.partition(": ")
        if kind == "input" and index.isdigit():
            return self.input_origin(int(index))
        if kind == "output" and index.isdigit():
            return Origin("output", self.output_name(int(index)))
        if text.startswith("constraint_"):
            return self.constraint(text)
        if text.startswith("mc_"):
            # `mc_0_input: 1`: the manual computation `mc_0`'s operand 1.
            computation = re.split(r"_(?:input|output): ", text)[0]
            return Origin("shard_map", text, self.constraints.get(computation))
        return Origin("other", text)

    def _origins(self, attr, here) -> dict[str, Origin]:
        return {axis: self.origin(text, here) for axis, text in _dict(attr).items()}

    def result(self, operation, index: int = 0):
        """(sharding, origins) propagation gave result `index` of an op."""
        from jaxlib.mlir import ir
        spec = self.shardy.value_sharding(operation.results[index]) \
            if index < len(operation.results) else None
        attrs = operation.attributes
        here = self.constraint(ir.StringAttr(attrs[ORIGIN_NAME]).value) \
            if ORIGIN_NAME in attrs else None
        origins = {}
        if self.shardy.SHARDING_ORIGINS in attrs:
            found = attrs[self.shardy.SHARDING_ORIGINS]
            if isinstance(found, ir.ArrayAttr):
                found = found[index] if index < len(found) else None
            if found is not None:
                origins = self._origins(found, here)
        if operation.name in ("sdy.sharding_constraint", "sdy.reshard"):
            spec = self.shardy.sharding_spec(attrs["sharding"])[1] \
                if "sharding" in attrs else spec
        return (_entries(spec) if spec is not None else None), by_axis(origins)

    def argument(self, index: int):
        """(sharding, origins) of input `index` of the program."""
        return self._boundary("arg_attrs", "input", index)

    def output(self, index: int):
        """(sharding, origins) of output `index` of the program."""
        return self._boundary("res_attrs", "output", index)

    def _boundary(self, which: str, kind: str, index: int):
        """(sharding, origins) of the entry function's argument or result
        `index` (`which`: `arg_attrs` or `res_attrs`)."""
        if self.main is None:
            return None, {}
        fn, shardy = self.main, self.shardy
        with self.module.context:
            count = len(fn.type.inputs if kind == "input" else fn.type.results)
            attrs = shardy.attr_dicts(fn, which, count)
            if index >= len(attrs):
                return None, {}
            attrs = attrs[index]
            spec = shardy.sharding_spec(attrs[shardy.SHARDING])[1] \
                if shardy.SHARDING in attrs else None
            name = self.input_name(index) if kind == "input" \
                else self.output_name(index)
            here = self.input_origin(index) if kind == "input" else Origin(kind, name)
            origins = self._origins(attrs[shardy.SHARDING_ORIGINS], here) \
                if shardy.SHARDING_ORIGINS in attrs else {}
        return (_entries(spec) if spec is not None else None), by_axis(origins)

    def op_at(self, source: SourceLocation | None, primitive: str | None,
              local: tuple[int, ...] | None, axes: frozenset[str],
              op_name: str | None = None):
        """The op at a user line for a JAX primitive. Among several, the one
        whose per-device shape is the HLO's, then one reached along the
        same user stack (the final norm's `_norm` line, not a layer's),
        then one JAX named as XLA's op is named (`op_name`: the forward
        pass's `jvp()/dot_general`, not the backward's
        `transpose(jvp())/dot_general` of the same line), then one sharded
        over `axes`."""
        from irshard.backend import locations
        if source is None or primitive is None:
            return None
        names = PRIMITIVE_OPS.get(primitive, (primitive,))
        candidates = []
        for operation in self.sites.get((source.file, source.line), ()):
            if _op_name(operation.name) not in names:
                continue
            spec, _ = self.result(operation)
            shape = self.shardy.tensor_shape(operation.results[0].type)
            fits = (local is not None and spec is not None and shape is not None
                    and _local_shape(shape, spec, self.mesh) == local)
            same_rank = local is not None and shape is not None \
                and len(shape) == len(local)
            own = self.source(operation)
            along = own is not None and _chain(own) == _chain(source)
            named = op_name is not None and \
                locations.location_name(operation.location) == op_name
            uses = any(_uses(spec, a) for a in axes)
            candidates.append((not fits, not same_rank, not along, not named,
                               not uses, len(candidates), operation))
        if not candidates:
            return None
        return min(candidates, key=lambda c: c[:6])[6]

    def value(self, value, depth: int = 0):
        """(sharding, origins) of an MLIR value: an op's result, an input,
        a private function's argument (followed to its call) or a value a
        loop carries (followed to the loop's operand)."""
        from jaxlib.mlir import ir
        if not isinstance(value.owner, ir.Block):
            owner = getattr(value.owner, "operation", value.owner)
            return self.result(owner, ir.OpResult(value).result_number)
        argument = ir.BlockArgument(value)
        parent = argument.owner.owner
        parent = getattr(parent, "operation", parent)
        index = argument.arg_number
        if depth > 32:
            return None, {}
        if parent.name == "func.func":
            fn = parent.opview
            if self.shardy.is_public(fn):
                return self.argument(index)
            calls = self.calls.get(fn.sym_name.value, [])
            if calls and index < len(calls[0].operands):
                return self.value(calls[0].operands[index], depth + 1)
            return None, {}
        operands = list(parent.operands)
        offset = len(operands) - len(argument.owner.arguments)
        if offset >= 0 and offset + index < len(operands):
            return self.value(operands[offset + index], depth + 1)
        return None, {}

    def operands_over(self, operation, axes: frozenset[str],
                      locals_: Sequence[tuple[int, ...] | None] = ()
                      ) -> tuple[Value, ...]:
        """The operands of an op that are sharded over `axes`: what a
        partial sum sums over. `locals_`: the per-device shapes XLA gave
        the operands, where known (each operand's sharding is fitted to
        them)."""
        from jaxlib.mlir import ir
        found = []
        for i, operand in enumerate(operation.operands):
            shardy_spec, origins = self.value(operand)
            local = locals_[i] if i < len(locals_) else None
            spec = fit(shardy_spec, self.shardy.tensor_shape(operand.type),
                        local, self.mesh)
            if not any(_uses(spec, a) for a in axes):
                continue
            origins = agreeing(origins, shardy_spec, spec)
            name, source = "a value", None
            owner = operand.owner
            if isinstance(owner, ir.Block):
                parent = owner.owner
                parent = getattr(parent, "operation", parent)
                if parent.name == "func.func" and self.shardy.is_public(parent.opview):
                    name = f"input {self.input_name(ir.BlockArgument(operand).arg_number)}"
            else:
                owner = getattr(owner, "operation", owner)
                name, source = _op_name(owner.name), self.source(owner)
            found.append(Value(name, spec, source, _only(origins, axes, spec)))
        return tuple(found)

    def operand_origins(self, operation, axes: frozenset[str],
                        spec: Sequence[str]) -> dict[str, Origin]:
        """Where the axes of a value XLA computed in its operands' sharding
        (not the one propagation gave it) came from: its operands'."""
        origins: dict[str, Origin] = {}
        for operand in operation.operands:
            their_spec, theirs = self.value(operand)
            for axis, origin in theirs.items():
                if axis in axes and _uses(their_spec, axis) and _uses(spec, axis):
                    origins.setdefault(axis, origin)
        return origins
