"""Why each collective exists (`--explain`).

What a collective does is read from the HLO the report reads: the value it
moves (an input, a loop-carried value, or an op's result, followed through
copies, fusions and loops) and the op that reads its result. What those
values are in the user's terms comes from Shardy's propagated module: the
sharding propagation gave each value, and per mesh axis where it got the
axis from (`sdy.sharding_origins`: an input, a constraint, an output).

From these, per collective:

- `operand`: the value read, its sharding, the user line that made it;
- `needed`: the op that reads the result, its line, and the sharding it
  needs (the operand's, with the collective's axes gathered, moved or
  summed away);
- `origins`: per mesh axis the collective moves, where propagation got it;
- `note`: what kind of communication it is, when XLA made it for its own
  reasons (a halo exchange for a shifted slice, combined collectives), or
  when XLA replicated a whole tensor (an involuntary full
  rematerialization, see findings).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any, Sequence

from irshard.core.frames import Frame, SourceLocation, UserCode

ORIGIN_NAME = "sdy.sharding_origin_name"     # a constraint's origin name

# Instructions that pass a value through unchanged in content.
_PASS_THROUGH = frozenset({
    "copy", "convert", "bitcast", "bitcast-convert", "reshape", "transpose",
    "copy-start", "copy-done", "optimization-barrier", "reduce-precision",
})

# Readers XLA's partitioner cannot run on a dimension sharded where they
# index it: it gathers the dimension for them.
_INDEXED = {
    "scatter": "a scatter (`.at[...].set/add`) writes at positions of a "
               "dimension sharded over {axes} that need not line up with the "
               "shards: XLA gathers the dimension for it",
    "gather": "a gather (indexing, `jnp.take`) reads positions of a dimension "
              "sharded over {axes} that need not line up with the shards: XLA "
              "gathers the dimension for it",
    "dynamic_slice": "a slice at a traced offset of a dimension sharded over "
                     "{axes}: XLA gathers the dimension for it",
    "dynamic_update_slice": "an update at a traced offset of a dimension "
                            "sharded over {axes}: XLA gathers the dimension "
                            "for it",
}

# What changes a value's shape but not the order of its elements.
_RESHAPES = frozenset({"reshape", "bitcast", "copy", "convert"})

# JAX primitive (the last part of an op_name) -> StableHLO op names.
PRIMITIVE_OPS = {
    "select_n": ("select",),
    "convert_element_type": ("convert",),
    "exp": ("exponential",),
    "integer_pow": ("multiply",),
    "scatter-add": ("scatter",),
    "scatter_add": ("scatter",),
    "reduce_sum": ("reduce",),
    "reduce_max": ("reduce",),
    "reduce_min": ("reduce",),
    "reduce_prod": ("reduce",),
    "argmax": ("reduce",),
    "argmin": ("reduce",),
    "cumsum": ("reduce_window",),
    "sharding_constraint": ("sharding_constraint", "reshard"),
    "pjit": ("call",),
    "jit": ("call",),
    "rsqrt": ("rsqrt",),
    "pow": ("power",),
    "dot_general": ("dot_general", "dot"),
    "conv_general_dilated": ("convolution",),
    "squeeze": ("reshape",),
    "expand_dims": ("reshape", "broadcast_in_dim"),
    "rev": ("reverse",),
}


# StableHLO op -> HLO opcode, where the names differ.
_HLO_OPCODES = {"dot_general": "dot", "broadcast_in_dim": "broadcast",
                "convolution": "convolution", "select": "select"}


@dataclass(frozen=True)
class Value:
    """One side of a collective: what it reads, or what reads its result."""

    what: str                                   # "input d", "add", "output 0"
    sharding: tuple[str, ...] | None
    source: SourceLocation | None
    origins: dict[str, dict[str, Any]] = field(default_factory=dict)
    # A partial sum: what the op that made it reads sharded over the axes
    # it sums over.
    sums: tuple["Value", ...] = ()
    # Where every axis of its sharding came from (a collective reading
    # another's result reads these).
    all_origins: dict[str, dict[str, Any]] = field(default_factory=dict, repr=False)

    def to_json(self, key: str) -> dict[str, Any]:
        d = {key: self.what,
             "sharding": list(self.sharding) if self.sharding is not None else None,
             "source": self.source.to_json() if self.source else None,
             "origins": self.origins}
        if self.sums:
            d["sums_over"] = [v.to_json("value") for v in self.sums]
        return d

    def text(self) -> str:
        where = f" at {self.source}" if self.source else ""
        return f"{self.what}{where}"


# ---------------------------------------------------------------------------
# Shardy's propagated module: shardings and origins of the user's values


class _Propagated:
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
        with module.context:
            self._index()

    def _index(self) -> None:
        from jaxlib.mlir import ir
        for fn in self.functions.values():
            for operation in self.shardy.walk(fn.operation):
                if operation.name == "func.call":
                    callee = ir.FlatSymbolRefAttr(operation.attributes["callee"]).value
                    self.calls.setdefault(callee, []).append(operation)
        for fn in self.functions.values():
            for operation in self.shardy.walk(fn.operation):
                if ORIGIN_NAME in operation.attributes:
                    name = ir.StringAttr(operation.attributes[ORIGIN_NAME]).value
                    self.constraints[name] = self.source(operation)
                if operation.name == "sdy.constant" or not len(operation.results):
                    continue
                where = self.source(operation)
                if where is not None:
                    self.sites.setdefault((where.file, where.line), []).append(operation)

    # -- sources --------------------------------------------------------

    def source(self, operation) -> SourceLocation | None:
        """The user's line of an op; in a function JAX outlined from its
        own code (`_roll_static`), the line of the call."""
        for _ in range(32):
            frames = [Frame(f, fn, line) for f, line, fn
                      in self.shardy.location_frames(operation.location)]
            found = self.users.choose(frames)
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

    # -- origins --------------------------------------------------------

    def input_name(self, index: int) -> str:
        inputs = self.info.inputs
        return inputs[index].name if index < len(inputs) else f"argument {index}"

    def output_name(self, index: int) -> str:
        outputs = self.info.outputs
        return outputs[index].name if index < len(outputs) else f"result {index}"

    def constraint(self, name: str) -> dict[str, Any]:
        found = self.constraints.get(name)
        return {"kind": "constraint", "name": name,
                "source": found.to_json() if found else None}

    def origin(self, text: str, here: dict[str, Any] | None) -> dict[str, Any]:
        """An origin string of `sdy.sharding_origins` in the user's terms;
        `self` is the value itself (`here`: an input, an output or a
        constraint)."""
        if text == "self" and here is not None:
            return here
        kind, _, index = text.partition(": ")
        if kind == "input" and index.isdigit():
            return {"kind": "input", "name": self.input_name(int(index))}
        if kind == "output" and index.isdigit():
            return {"kind": "output", "name": self.output_name(int(index))}
        if text.startswith("constraint_"):
            return self.constraint(text)
        if text.startswith("mc_"):
            return {"kind": "shard_map", "name": text}
        return {"kind": "other", "name": text}

    def _origins(self, attr, here) -> dict[str, dict[str, Any]]:
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
        return (_entries(spec) if spec is not None else None), _by_axis(origins)

    def argument(self, index: int):
        """(sharding, origins) of input `index` of the program."""
        if self.main is None:
            return None, {}
        fn = self.main
        shardy = self.shardy
        with self.module.context:
            attrs = shardy.attr_dicts(fn, "arg_attrs", len(fn.type.inputs))
            if index >= len(attrs):
                return None, {}
            attrs = attrs[index]
            spec = shardy.sharding_spec(attrs[shardy.SHARDING])[1] \
                if shardy.SHARDING in attrs else None
            here = {"kind": "input", "name": self.input_name(index)}
            origins = self._origins(attrs[shardy.SHARDING_ORIGINS], here) \
                if shardy.SHARDING_ORIGINS in attrs else {}
        return (_entries(spec) if spec is not None else None), _by_axis(origins)

    def output(self, index: int):
        """(sharding, origins) of output `index` of the program."""
        if self.main is None:
            return None, {}
        fn = self.main
        shardy = self.shardy
        with self.module.context:
            attrs = shardy.attr_dicts(fn, "res_attrs", len(fn.type.results))
            if index >= len(attrs):
                return None, {}
            attrs = attrs[index]
            spec = shardy.sharding_spec(attrs[shardy.SHARDING])[1] \
                if shardy.SHARDING in attrs else None
            here = {"kind": "output", "name": self.output_name(index)}
            origins = self._origins(attrs[shardy.SHARDING_ORIGINS], here) \
                if shardy.SHARDING_ORIGINS in attrs else {}
        return (_entries(spec) if spec is not None else None), _by_axis(origins)

    def op_at(self, source: SourceLocation | None, primitive: str | None,
              local: tuple[int, ...] | None, axes: frozenset[str]):
        """The op at a user line for a JAX primitive. Among several, the one
        whose per-device shape is the HLO's, then one sharded over `axes`."""
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
            uses = any(_uses(spec, a) for a in axes)
            candidates.append((not fits, not same_rank, not uses, len(candidates),
                               operation))
        if not candidates:
            return None
        return min(candidates, key=lambda c: c[:4])[4]

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
            spec = _fit(shardy_spec, self.shardy.tensor_shape(operand.type),
                        local, self.mesh)
            if not any(_uses(spec, a) for a in axes):
                continue
            origins = _agreeing(origins, shardy_spec, spec)
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
                        spec: Sequence[str]) -> dict[str, dict[str, Any]]:
        """Where the axes of a value XLA computed in its operands' sharding
        (not the one propagation gave it) came from: its operands'."""
        origins: dict[str, dict[str, Any]] = {}
        for operand in operation.operands:
            their_spec, theirs = self.value(operand)
            for axis, origin in theirs.items():
                if axis in axes and _uses(their_spec, axis) and _uses(spec, axis):
                    origins.setdefault(axis, origin)
        return origins


# ---------------------------------------------------------------------------
# The HLO: what a collective reads and what reads its result


class _Hlo:
    """Follows values through one HLO module's copies, fusions and loops."""

    def __init__(self, view, users: UserCode):
        from irshard.collectives import analysis
        self.analysis = analysis
        self.view = view
        self.users = users
        self.callers: dict[str, list[Any]] = {}
        self.starts: dict[str, Any] = {}      # wrapped collective -> async-start
        for inst in view.instructions.values():
            for _, callee in inst.called_computations():
                self.callers.setdefault(callee, []).append(inst)
            if inst.wrapped:
                self.starts[inst.wrapped] = inst

    def inst(self, name: str):
        return self.view.instructions.get(name)

    def passes_through(self, inst, kinds=None) -> bool:
        """A copy, convert, layout change, or a fusion of nothing else
        (of `kinds`, if given)."""
        kinds = kinds or _PASS_THROUGH
        if inst.opcode in kinds:
            return True
        if inst.opcode != "fusion" or len(inst.operands) != 1:
            return False
        called = dict(inst.called_computations()).get("calls")
        body = self.view.instructions_of(called) if called else []
        return bool(body) and all(i.opcode in kinds or i.opcode == "parameter"
                                  for i in body)

    def producer(self, name: str):
        """What made the value `name`: ("input", index), ("collective",
        inst), ("op", inst) or None."""
        inst = self.inst(name)
        for _ in range(64):
            if inst is None:
                return None
            if self.analysis.collective_kind(inst) is not None \
                    and not inst.opcode.endswith("-done"):
                return "collective", inst
            if inst.opcode.endswith("-done") and inst.operands:
                start = self.inst(inst.operands[0])
                if start is not None and start.wrapped:
                    wrapped = self.inst(start.wrapped)
                    if wrapped is not None:
                        return "collective", wrapped
                if start is not None and self.analysis.collective_kind(start):
                    return "collective", start
                inst = start
                continue
            if self.passes_through(inst) and inst.operands:
                inst = self.inst(inst.operands[0])
                continue
            if inst.opcode == "get-tuple-element" and inst.operands:
                inst = self._tuple_element(inst)
                continue
            if inst.opcode == "parameter":
                number = _parameter_number(inst)
                if inst.computation == self.view.entry:
                    return ("input", number) if number is not None else None
                callers = self.callers.get(inst.computation, ())
                caller = callers[0] if callers else None
                if caller is None or caller.opcode == "while" or number is None \
                        or number >= len(caller.operands):
                    return None
                inst = self.inst(caller.operands[number])
                continue
            return "op", inst
        return None

    def _tuple_element(self, gte):
        """The instruction a `get-tuple-element` reads, through tuples and
        loops (a loop body's parameter is the value carried in)."""
        index = _tuple_index(gte)
        source = self.inst(gte.operands[0])
        for _ in range(16):
            if source is None or index is None:
                return None
            if source.opcode == "tuple":
                return self.inst(source.operands[index]) \
                    if index < len(source.operands) else None
            if source.opcode == "parameter" and source.computation != self.view.entry:
                loops = [c for c in self.callers.get(source.computation, ())
                         if c.opcode == "while"]
                if not loops or not loops[0].operands:
                    return None
                source = self.inst(loops[0].operands[0])
                continue
            if source.opcode == "while" and source.operands:
                source = self.inst(source.operands[0])
                continue
            if source.opcode in _PASS_THROUGH and source.operands:
                source = self.inst(source.operands[0])
                continue
            return source   # a multi-output fusion or the like
        return None

    def reader(self, inst):
        """What reads a collective's result: ("output", index), ("op",
        inst) or None; past copies, tuples and the rest of an async
        collective."""
        frontier = [self._result_of(inst)]
        seen = set()
        for _ in range(8):
            nxt = []
            for current in frontier:
                if current is None:
                    continue
                for name in current.users:
                    if name in seen:
                        continue
                    seen.add(name)
                    user = self.inst(name)
                    if user is None:
                        continue
                    if user.opcode == "tuple" and user.is_root \
                            and user.computation == self.view.entry:
                        return "output", user.operands.index(current.name)
                    if self.analysis.collective_kind(user) is not None \
                            and not user.opcode.endswith("-done"):
                        return "collective", user
                    if self.passes_through(user) or user.opcode in (
                            "tuple", "get-tuple-element") \
                            or user.opcode.endswith("-done"):
                        nxt.append(user)
                        continue
                    return "op", user
            frontier = nxt
        return None

    def _result_of(self, inst):
        """The instruction holding a collective's result: its `-done`, or
        the async-done of the async-start running it."""
        inst = self.starts.get(inst.name, inst)
        if inst.opcode.endswith("-start"):
            for name in inst.users:
                done = self.inst(name)
                if done is not None and done.opcode.endswith("-done"):
                    return done
        return inst

    def local_shape(self, name: str, shape) -> tuple[int, ...] | None:
        """The per-device shape XLA gives a value of global `shape`: the
        instruction's, or before the reshapes XLA added (a dot flattens its
        batch dimensions), through fusion parameters."""
        if shape is None:
            return None
        inst = self.inst(name)
        for _ in range(16):
            if inst is None:
                return None
            dims = _array_dims(inst.shape)
            if dims is not None and len(dims) == len(shape):
                return dims
            if (inst.opcode in _RESHAPES or self.passes_through(inst, _RESHAPES)) \
                    and inst.operands:
                inst = self.inst(inst.operands[0])
                continue
            if inst.opcode == "parameter" and inst.computation != self.view.entry:
                number = _parameter_number(inst)
                callers = [c for c in self.callers.get(inst.computation, ())
                           if c.opcode == "fusion"]
                if not callers or number is None or number >= len(callers[0].operands):
                    return None
                inst = self.inst(callers[0].operands[number])
                continue
            return None
        return None

    def matching(self, inst, mlir_name: str):
        """The instruction that is a StableHLO op: `inst`, or in a fusion
        the fused instruction of that op (the one with the fusion's op
        name first). Its operands' shapes are per device, like all."""
        opcode = _HLO_OPCODES.get(_op_name(mlir_name), _op_name(mlir_name).replace("_", "-"))
        if inst.opcode == opcode:
            return inst
        if inst.opcode != "fusion":
            return None
        called = dict(inst.called_computations()).get("calls")
        body = [i for i in self.view.instructions_of(called or "") if i.opcode == opcode]
        if not body:
            return None
        op_name = inst.metadata.get("op_name")
        return next((i for i in body if i.metadata.get("op_name") == op_name), body[0])

    def source(self, inst) -> tuple[SourceLocation | None, str | None]:
        """The user's line of an instruction and its JAX primitive."""
        source, _, op_name = self.analysis.attribute(self.view, inst, self.users)
        return source, _primitive(op_name)


# ---------------------------------------------------------------------------
# Explanations


@dataclass(frozen=True)
class _Step:
    """One collective of the partitioned HLO: what it reads, what reads
    its result, and the sharding it makes."""

    collective: Any
    reads: tuple[Value, ...]
    reader: Value
    origins: dict[str, dict[str, Any]]


class _Explainer:
    """Explains the collectives of the partitioned HLO, in program order
    (a collective that reads another's result reads the sharding it made)."""

    def __init__(self, report, hlo: _Hlo, prop: _Propagated, collectives):
        self.report = report
        self.hlo = hlo
        self.prop = prop
        self.mesh = report.mesh
        self.by_name = {c.name: c for c in collectives}
        # collective -> (the sharding it makes, its operand's origins)
        self.results: dict[str, tuple[Any, dict[str, Any]]] = {}
        self.steps = {c.name: self.step(c) for c in collectives}

    def value(self, produced, axes: frozenset[str],
              reduction: bool = False) -> Value:
        """A value the HLO reads, in the user's terms; for a `reduction`,
        with what its op sums over."""
        if produced is None:
            return Value("a value", None, None)
        kind, what = produced
        if kind == "input":
            spec, origins = self.prop.argument(what)
            if what < len(self.report.inputs):
                spec = self.report.inputs[what].sharding or spec
            return Value(f"input {self.prop.input_name(what)}", spec, None,
                         _only(origins, axes, spec), all_origins=origins)
        if kind == "collective":
            spec, origins = self.results.get(what.name, (None, {}))
            source, _ = self.hlo.source(what)
            return Value(f"the result of {_label(self.by_name.get(what.name), what)}",
                         spec, source, _only(origins, axes, spec), all_origins=origins)
        source, primitive = self.hlo.source(what)
        local = _array_dims(what.shape)
        operation = self.prop.op_at(source, primitive, local, axes)
        if operation is None:
            return Value(primitive or what.opcode, None, source)
        spec, origins = self.prop.result(operation)
        shape = self.prop.shardy.tensor_shape(operation.results[0].type)
        fitted = _fit(spec, shape, local, self.mesh)
        if fitted is not None and fitted != spec:
            # XLA computed it in another sharding than propagation gave it:
            # what it reads is that sharding; an axis propagation put
            # elsewhere came from the op's operands.
            kept = _agreeing(origins, spec, fitted)
            spec = fitted
            every = frozenset(self.mesh.names) if self.mesh else axes
            origins = dict(self.prop.operand_origins(operation, every, spec), **kept)
        sums = ()
        if reduction:
            op = self.hlo.matching(what, operation.name)
            locals_ = [self.hlo.local_shape(o, self.prop.shardy.tensor_shape(v.type))
                       for o, v in zip(op.operands, operation.operands)] \
                if op is not None and len(op.operands) == len(operation.operands) \
                else []
            sums = self.prop.operands_over(operation, axes, locals_)
            for v in sums:
                for axis, origin in v.origins.items():
                    origins.setdefault(axis, origin)
        return Value(primitive or what.opcode, spec, source,
                     _only(origins, axes, spec) if not reduction
                     else {a: o for a, o in origins.items() if a in axes}, sums,
                     all_origins=origins)

    def reader(self, inst, needed, axes) -> Value:
        found = self.hlo.reader(inst)
        if found is None:
            return Value("its reader", needed, None)
        kind, what = found
        if kind == "output":
            spec, origins = self.prop.output(what)
            return Value(f"output {self.prop.output_name(what)}", needed, None,
                         _only(origins, axes, needed))
        if kind == "collective":
            wrapped = (self.hlo.inst(what.wrapped) if what.wrapped else None) or what
            source, _ = self.hlo.source(wrapped)
            return Value(_label(self.by_name.get(wrapped.name), wrapped),
                         needed, source)
        source, primitive = self.hlo.source(what)
        operation = self.prop.op_at(source, primitive, None, axes)
        origins = self.prop.result(operation)[1] if operation is not None else {}
        return Value(primitive or what.opcode, needed, source,
                     _only(origins, axes, needed))

    def step(self, c) -> _Step:
        inst = self.hlo.inst(c.name)
        axes = _axes(c.mesh_axes)
        reduction = c.kind in ("all-reduce", "reduce-scatter")
        reads = tuple(self.value(self.hlo.producer(o), axes, reduction)
                      for o in inst.operands if not _is_token(self.hlo.inst(o))) \
            or (Value("a value", None, None),)
        first = reads[0]
        needed = _needed(c.kind, first.sharding, axes, inst, self.mesh)
        self.results[c.name] = (needed, first.all_origins)
        reader = self.reader(inst, needed, axes)
        origins: dict[str, dict[str, Any]] = {}
        for axis in sorted(axes):
            origin = reader.origins.get(axis) if c.kind == "all-to-all" else None
            origin = origin or first.origins.get(axis) or reader.origins.get(axis)
            if origin is not None:
                origins[axis] = origin
        return _Step(c, reads, reader, origins)

    def why(self, c, steps: Sequence[_Step]) -> dict[str, Any]:
        """The `why` of a report's collective: the partitioned
        collective(s) it is (several when XLA combined them)."""
        if not steps:
            note = ("made by XLA after partitioning (a pass that combines, "
                    "decomposes or pipelines collectives): the partitioner "
                    "inserted no collective like it")
            return {"made_by": "xla", "note": note, "text": note}
        reads = [v for step in steps for v in step.reads]
        first = steps[0]
        why: dict[str, Any] = {
            "operand": reads[0].to_json("value"),
            "needed": first.reader.to_json("op"),
            "origins": first.origins,
        }
        if len(reads) > 1:
            why["combined"] = [r.to_json("value") for r in reads]
        note = self.note(c, reads[0], first.reader)
        if note:
            why["note"] = note
        why["text"] = _text(c, reads, first.reader, first.origins, note)
        return why

    def note(self, c, first: Value, reader: Value) -> str | None:
        axes = ",".join(c.mesh_axes or ()) or "the mesh"
        notes = []
        if c.kind == "collective-permute":
            notes.append(_permute_note(c, first, axes))
        if c.kind == "all-gather" and reader.what in _INDEXED:
            notes.append(_INDEXED[reader.what].format(axes=axes))
        if c.operands > 1:
            notes.append(f"XLA combined {c.operands} {c.kind}s into one")
        remat = [f for f in self.report.findings if f.kind == "involuntary-remat"
                 and f.source is not None and c.source is not None
                 and (f.source.file, f.source.line) == (c.source.file, c.source.line)]
        if remat and c.kind == "all-gather":
            notes.append(f"XLA could not reshard {remat[0].op or 'the value'} "
                         f"from {remat[0].from_sharding} to "
                         f"{remat[0].to_sharding} directly and replicates the "
                         f"whole tensor (an involuntary full rematerialization, "
                         f"see findings)")
        return "; ".join(notes) or None


# Primitives whose sharded form exchanges the edges of neighbouring shards.
_HALO_PRIMITIVES = frozenset({
    "pad", "slice", "concatenate", "dynamic_slice", "dynamic_update_slice",
    "rev", "conv_general_dilated", "reduce_window", "reduce_window_sum",
    "select_and_scatter_add", "cumsum", "cumprod", "cummax", "cummin",
    "cumlogsumexp"})


def _permute_note(c, first: Value, axes: str) -> str:
    """What a collective-permute is for: the program's own ppermute, a
    halo exchange for a shifted slice, or whole shards moved to other
    devices (the same axes laid over the devices in another order)."""
    primitive = _primitive(c.op_name)
    if primitive == "ppermute" or (
            primitive is None and c.name.startswith("ppermute")):
        return (f"the program's own ppermute: each device sends its block "
                f"to the device the permutation names, along {axes}")
    if primitive in _HALO_PRIMITIVES:
        what = first.what if first.what.startswith("the ") else f"the {first.what}"
        return (f"a halo exchange: neighbours along {axes} swap the edges of "
                f"their shards, for a shift, slice or pad of a dimension "
                f"sharded over {axes} ({what if first.source else 'a shifted slice'})")
    return (f"whole shards move to other devices: the value keeps its shape "
            f"per device, laid over the devices along {axes} in another order "
            f"(a reshard between two orders of the same axes, e.g. x+y to y+x, "
            f"or to a mesh with another device order)")


def _match(report_collectives, partitioned, optimized_view) -> dict[str, list[Any]]:
    """The partitioned collectives each of the report's is: itself when the
    report reads the partitioned HLO, else by kind, mesh axes and shape
    (each of a combined collective's results), the same op first."""
    if optimized_view is None:
        by_name = {p.name: p for p in partitioned}
        return {c.name: [by_name[c.name]] if c.name in by_name else []
                for c in report_collectives}
    from irshard.xla import hlo as hlo_text
    left = list(partitioned)
    result = {}
    for c in report_collectives:
        inst = optimized_view.instructions.get(c.name)
        shapes = [tuple(leaf.dims) for leaf in hlo_text.shape_leaves(inst.shape)] \
            if inst is not None else [tuple(c.shape)]
        if c.is_async and inst is not None and inst.opcode.endswith("-start") \
                and len(shapes) > c.operands:
            shapes = shapes[len(shapes) - c.operands:]
        taken = []
        for shape in shapes[:max(1, c.operands)]:
            fits = [p for p in left if p.kind == c.kind
                    and _axes(p.mesh_axes) == _axes(c.mesh_axes)
                    and tuple(p.shape) == shape]
            if not fits:
                fits = [p for p in left if p.kind == c.kind
                        and _axes(p.mesh_axes) == _axes(c.mesh_axes)]
            if not fits:
                continue
            best = next((p for p in fits if p.op_name == c.op_name
                         and p.source == c.source), fits[0])
            left.remove(best)
            taken.append(best)
        result[c.name] = taken
    return result


def _read_text(c, value: Value) -> str:
    if value.sums:
        over = "; ".join(f"{v.text()} {_sharded(v.sharding)}"
                         for v in value.sums)
        return f"a partial sum from {value.text()}, which reads {over}"
    if c.kind in ("all-reduce", "reduce-scatter"):
        return f"a partial sum from {value.text()}"
    return f"{value.text()} {_sharded(value.sharding)}"


def _text(c, reads: list[Value], reader: Value, origins, note) -> str:
    first = reads[0]
    verb = "needs the total" if c.kind in ("all-reduce", "reduce-scatter") \
        else "needs it"
    need = f"{reader.text()} {verb} {_sharding_text(reader.sharding)}" \
        if reader.sharding is not None else \
        f"{reader.text()} {verb.replace(' the total', '')} (its sharding not recorded)"
    if len(reads) > 1:
        counts: dict[str, int] = {}
        for r in reads:
            line = _read_text(c, r)
            counts[line] = counts.get(line, 0) + 1
        lines = [f"reads {len(reads)} values; {need}"]
        lines += [f"  {n}x {line}" if n > 1 else f"  {line}"
                  for line, n in counts.items()]
    else:
        lines = [f"reads {_read_text(c, first)}; {need}"]
    parts = []
    for axis, origin in origins.items():
        have = first.origins.get(axis)
        need_origin = reader.origins.get(axis)
        if have and need_origin and have != need_origin:
            parts.append(f"{axis}: {_origin_text(have)} -> {_origin_text(need_origin)}")
        else:
            parts.append(f"{axis} from {_origin_text(origin)}")
    if parts:
        lines.append("; ".join(parts))
    if note:
        lines.append(note)
    return "\n".join(lines)


def _label(collective, inst) -> str:
    """`all-gather.1`, with its kind when the name does not say it."""
    name = inst.name
    kind = collective.kind if collective is not None else None
    return name if kind is None or name.startswith(kind) else f"{name} ({kind})"


def _fit(spec, shape, local, mesh):
    """The sharding of a tensor of global `shape` whose per-device shape is
    `local`: `spec` when it fits, else the mesh axes whose sizes divide each
    dimension as the shapes do (mesh order, `spec`'s axes first)."""
    if shape is None or local is None or mesh is None or len(shape) != len(local):
        return spec
    if spec is not None and _local_shape(shape, spec, mesh) == local:
        return spec
    factors = []
    for g, n in zip(shape, local):
        if n <= 0 or g % n:
            return spec
        factors.append(g // n)
    preferred = [a for entry in spec or () for a in entry.split("+") if a != "_"]
    names = [a for a in preferred if ":" not in a and a in mesh.names]
    names += [a for a in mesh.names if a not in names]

    def assign(dim, free):
        if dim == len(factors):
            return []
        for combo in _products(factors[dim], free, mesh):
            rest = assign(dim + 1, [a for a in free if a not in combo])
            if rest is not None:
                return ["+".join(combo) or "_"] + rest
        return None

    found = assign(0, names)
    return tuple(found) if found is not None else spec


def _products(target: int, free: list[str], mesh) -> list[tuple[str, ...]]:
    """Ordered choices of distinct axes from `free` whose sizes multiply to
    `target` (shortest first; mesh order within a choice)."""
    import itertools
    if target == 1:
        return [()]
    found = []
    for r in range(1, len(free) + 1):
        for combo in itertools.combinations(free, r):
            if math.prod(mesh.size_of(a) for a in combo) == target:
                found.append(tuple(sorted(combo, key=mesh.names.index)))
    return found


def _needed(kind: str, spec, axes: frozenset[str], inst, mesh):
    """The sharding the reader gets: the operand's with the collective's
    axes gathered or summed away, or moved (to the dimension an all-to-all
    or reduce-scatter splits)."""
    if spec is None:
        return None
    if kind in ("collective-permute",):
        return tuple(spec)
    kept = []
    for entry in spec:
        parts = [p for p in entry.split("+") if p != "_"
                 and p.split(":")[0] not in axes]
        kept.append("+".join(parts) or "_")
    if kind in ("all-to-all", "reduce-scatter"):
        m = re.search(r"\d+", inst.attrs.get("dimensions", ""))
        dim = int(m.group(0)) if m else None
        if dim is not None and dim < len(kept):
            moved = [a for a in sorted(axes)]
            kept[dim] = "+".join(([] if kept[dim] == "_" else [kept[dim]]) + moved)
    return tuple(kept)


# ---------------------------------------------------------------------------
# Helpers


def _dict(attr) -> dict[str, str]:
    from jaxlib.mlir import ir
    d = ir.DictAttr(attr)
    return {d[i].name: ir.StringAttr(d[i].attr).value for i in range(len(d))}


def _entries(spec) -> tuple[str, ...]:
    return tuple(str(d).rstrip("?") for d in spec.dims)


def _by_axis(origins: dict[str, Any]) -> dict[str, Any]:
    """Origins keyed by whole axis (`x:(1)2` -> `x`), the first kept."""
    result: dict[str, Any] = {}
    for key, value in origins.items():
        result.setdefault(key.split(":")[0], value)
    return result


def _agreeing(origins, theirs, ours) -> dict[str, Any]:
    """The origins (recorded for sharding `theirs`) of the axes that
    sharding `ours` places on the same dimension."""
    if theirs is None or ours is None or len(theirs) != len(ours):
        return {}
    kept = {}
    for axis, origin in origins.items():
        dims = [i for i, entry in enumerate(theirs) if _uses((entry,), axis)]
        if dims and _uses((ours[dims[0]],), axis):
            kept[axis] = origin
    return kept


def _only(origins, axes, spec) -> dict[str, Any]:
    """The origins of the axes a collective moves that `spec` uses."""
    return {a: o for a, o in sorted(origins.items()) if a in axes and _uses(spec, a)}


def _uses(entries: Sequence[str] | None, axis: str) -> bool:
    return any(axis == part.split(":")[0]
               for entry in entries or () for part in entry.split("+"))


def _axes(names) -> frozenset[str]:
    return frozenset(a.split(":")[0] for a in names or ())


def _axis_size(name: str, mesh) -> int:
    """A mesh axis's size, or a sub-axis's (`x:(1)4` -> 4)."""
    if ":" in name:
        return int(name.rsplit(")", 1)[1])
    return mesh.size_of(name)


def _local_shape(shape, entries: Sequence[str], mesh) -> tuple[int, ...] | None:
    """Per-device shape of a tensor of `shape` sharded as `entries`."""
    if mesh is None or len(shape) != len(entries):
        return None
    result = []
    for dim, entry in zip(shape, entries):
        div = 1
        for part in entry.split("+"):
            if part != "_":
                div *= _axis_size(part, mesh)
        result.append(-(-dim // div))
    return tuple(result)


def _array_dims(shape) -> tuple[int, ...] | None:
    dims = getattr(shape, "dims", None)
    return tuple(dims) if dims is not None else None


def _op_name(name: str) -> str:
    """`stablehlo.dot_general` -> `dot_general`."""
    return name.split(".", 1)[1] if name.startswith(("stablehlo.", "sdy.", "func.")) \
        else name


def _primitive(op_name: str | None) -> str | None:
    """The JAX primitive of an op name (`jit(f)/while/body/slice` -> slice)."""
    if not op_name:
        return None
    last = op_name.rsplit("/", 1)[-1]
    last = re.sub(r"\[.*$", "", last)
    return last if re.fullmatch(r"[A-Za-z_][\w-]*", last) else None


def _parameter_number(inst) -> int | None:
    m = re.search(r"parameter\((\d+)\)", inst.text)
    return int(m.group(1)) if m else None


def _tuple_index(inst) -> int | None:
    m = re.search(r"\d+", inst.attrs.get("index", ""))
    return int(m.group(0)) if m else None


def _is_token(inst) -> bool:
    return inst is not None and str(inst.shape).startswith("token")


def _sharded(entries: Sequence[str] | None) -> str:
    """`sharded x,_`, or what is known where propagation recorded no
    sharding (a value in a manual or auto_axes region)."""
    if entries is None:
        return "(its sharding not recorded)"
    return f"sharded {_sharding_text(entries)}"


def _sharding_text(entries: Sequence[str] | None) -> str:
    if entries is None:
        return "?"
    if all(e == "_" for e in entries):
        return "replicated"
    return ",".join(entries)


def _origin_text(origin: dict[str, Any]) -> str:
    kind = origin["kind"]
    if kind in ("input", "output"):
        return f"{kind} {origin['name']}"
    if kind == "constraint":
        where = origin.get("source")
        return f"the constraint at {where['file']}:{where['line']}" if where \
            else "a sharding constraint"
    if kind == "shard_map":
        return "a shard_map"
    return origin.get("name") or kind


def explained(report, lowered, stage):
    """The report with a `why` on every collective; `stage` is the
    compiled stage (optimized or partitioned) the report read. Both read
    the partitioned HLO: collectives as the partitioner inserted them, on
    values it has not yet fused."""
    import dataclasses

    from irshard.collectives import analysis
    partitioned = stage if stage.name == "partitioned" else stage.partitioned()
    view = partitioned.view()
    users = UserCode(lowered.info.user_dir)
    inserted = analysis.collectives(view, report.mesh, lowered.info.user_dir)
    matches = _match(report.collectives, inserted,
                     None if stage.name == "partitioned" else stage.view())
    propagated = lowered.propagate()
    prop = _Propagated(propagated.operation, lowered.info, users)
    collectives = []
    with prop.module.context:
        explainer = _Explainer(report, _Hlo(view, users), prop, inserted)
        for c in report.collectives:
            steps = [explainer.steps[p.name] for p in matches[c.name]]
            collectives.append(dataclasses.replace(c, why=explainer.why(c, steps)))
    return dataclasses.replace(report, collectives=tuple(collectives),
                               notes=report.notes + propagated.notes)
