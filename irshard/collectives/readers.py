"""The partitioned and optimized HLO read for `--explain`: the value a
collective reads, the instructions that read its result, through
pass-through instructions, tuples, calls and loops.
"""

from __future__ import annotations

from typing import Any

from irshard.collectives import analysis
from irshard.collectives.values import (HLO_OPCODES, PASS_THROUGH, RESHAPES, _op_name,
                                        _primitive, array_dims, parameter_number)
from irshard.core.frames import SourceLocation, UserCode
from irshard.xla.hlo import collective_kind
from irshard.xla.loops import tuple_index


# ---------------------------------------------------------------------------
# The HLO: what a collective reads and what reads its result


class Hlo:
    """Follows values through one HLO module's copies, fusions and loops."""

    def __init__(self, view, users: UserCode):
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
        kinds = kinds or PASS_THROUGH
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
            if collective_kind(inst) is not None \
                    and not inst.opcode.endswith("-done"):
                return "collective", inst
            if inst.opcode.endswith("-done") and inst.operands:
                start = self.inst(inst.operands[0])
                if start is not None and start.wrapped:
                    wrapped = self.inst(start.wrapped)
                    if wrapped is not None:
                        return "collective", wrapped
                if start is not None and collective_kind(start):
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
                number = parameter_number(inst)
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
        index = tuple_index(gte)
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
            if source.opcode in PASS_THROUGH and source.operands:
                source = self.inst(source.operands[0])
                continue
            return source   # a multi-output fusion or the like
        return None

    def reader(self, inst):
        """What reads a collective's result: ("output", index), ("op",
        inst, the operand it reads it as), ("collective", inst) or None;
        past copies, tuples and the rest of an async collective."""
        frontier = [self._result_of(inst)]
        seen = set()
        for _ in range(8):
            nxt = []
            for current in frontier:
                if current is None:
                    continue
                if current.is_root and current.computation == self.view.entry \
                        and current.opcode != "tuple":
                    return "output", 0          # the program's only result
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
                    if collective_kind(user) is not None \
                            and not user.opcode.endswith("-done"):
                        return "collective", user
                    if self.passes_through(user) or user.opcode in (
                            "tuple", "get-tuple-element") \
                            or user.opcode.endswith("-done"):
                        nxt.append(user)
                        continue
                    return "op", user, user.operands.index(current.name)
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
            dims = array_dims(inst.shape)
            if dims is not None and len(dims) == len(shape):
                return dims
            if (inst.opcode in RESHAPES or self.passes_through(inst, RESHAPES)) \
                    and inst.operands:
                inst = self.inst(inst.operands[0])
                continue
            if inst.opcode == "parameter" and inst.computation != self.view.entry:
                number = parameter_number(inst)
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
        opcode = HLO_OPCODES.get(_op_name(mlir_name), _op_name(mlir_name).replace("_", "-"))
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
        source, primitive, _ = self.site(inst)
        return source, primitive

    def site(self, inst) -> tuple[SourceLocation | None, str | None, str | None]:
        """The user's line of an instruction, its JAX primitive and its op
        name (`jit(step)/transpose(jvp())/dot_general`: which pass of the
        program made it, forward or backward)."""
        source, _, op_name = self.analysis.attribute(self.view, inst, self.users)
        return source, _primitive(op_name), op_name
