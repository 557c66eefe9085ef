"""A structured view of an XLA HLO module.

Structure comes from XLA's own objects (`HloModule.computations()`,
`HloInstruction.name/opcode/operands/users`). What those objects do not
expose — an instruction's result shape and attributes (replica groups,
metadata, backend config, called computations) and the module's source tables
— is read from the text the same module prints, one instruction at a time.
Because every module is printed by the jaxlib in use (text files are first
parsed by XLA's own parser), there is one printed form to read per attribute;
where XLA prints an attribute several ways (replica groups), each is handled.
"""

from __future__ import annotations

import json
import re
from typing import Any

from irshard import backend
from irshard.core.schema import COLLECTIVE_KINDS
from irshard.core.syntax import (attribute_pairs, matching_bracket, split_top_level,
                                 unquote)
from irshard.xla.shapes import INDEX_COMMENT, Scanner, Shape, parse_shape
from irshard.xla.stackframes import StackFrameTable

_METADATA_ITEM = re.compile(r'([a-z_]+)=("(?:[^"\\]|\\.)*"|\S+)')


# The form JAX's modules print most: an op name without escapes and a stack
# frame.
_COMMON_METADATA = re.compile(r'\{op_name="([^"\\]*)" stack_frame_id=(\d+)\}')


_FIRST_METADATA = re.compile(', metadata=' + _COMMON_METADATA.pattern)


def parse_metadata(text: str) -> dict[str, str]:
    """`{op_name="jit(f)/dot" stack_frame_id=2}` -> {"op_name": ..., ...}."""
    m = _COMMON_METADATA.fullmatch(text)
    if m is not None:
        return {"op_name": m.group(1), "stack_frame_id": m.group(2)}
    body = text.strip()
    if body.startswith("{"):
        body = body[1:-1]
    result: dict[str, str] = {}
    for m in _METADATA_ITEM.finditer(body):
        value = m.group(2)
        if value.startswith('"'):
            value = unquote(value)
        result[m.group(1)] = value
    return result


_CALLED_KEYS = ("calls", "to_apply", "body", "condition", "branch_computations",
                "true_computation", "false_computation", "called_computations")
_CALLS_SOMETHING = re.compile("(?:" + "|".join(_CALLED_KEYS) + ")=")


def printed_calls(text: str) -> list[tuple[str, str]] | None:
    """`Instruction.called_computations` of a printed instruction, read
    without parsing every attribute where the calls are printed before any
    string (which could hold anything); None where one may follow a string
    (the attributes are then to be parsed)."""
    quote = text.find('"')
    end = quote if quote >= 0 else len(text)
    if _CALLS_SOMETHING.search(text, end) is not None:
        return None
    return _calls_in({m.group(1): m.group(2)
                      for m in _CALL_ATTRIBUTE.finditer(text, 0, end)})


def _calls_in(attrs: dict[str, str]) -> list[tuple[str, str]]:
    """(attribute, computation) pairs of attributes, in printed order."""
    return [(key, name) for key in _CALLED_KEYS if key in attrs
            for name in _CALLEE.findall(attrs[key])]


_CALL_ATTRIBUTE = re.compile(r"(?:, |\)\s*)(" + "|".join(_CALLED_KEYS)
                             + r")=(\{[^}\"]*\}|%?[\w.\-]+)")
_CALLEE = re.compile(r"%?([\w.\-]+)")
_FUSION_CALL = re.compile(r", kind=k\w+, calls=%?([\w.\-]+)")


class Instruction:
    """One HLO instruction: structure from XLA, attributes from its text.

    The text is parsed on first use: a report reads the attributes of a few
    instructions (collectives, loops and their neighbours), not of all.
    """

    __slots__ = ("name", "opcode", "computation", "operands", "users", "text",
                 "wrapped", "root", "done", "_parsed", "_metadata", "_shape")

    def __init__(self, name: str, opcode: str, computation: str,
                 operands: list[str], users: list[str], text: str,
                 wrapped: str | None = None, root: bool | None = None):
        self.name = name
        self.opcode = opcode
        self.computation = computation
        self.operands = operands
        self.users = users
        self.text = text
        # For `async-start`: the instruction it runs asynchronously (XLA
        # prints the pair as e.g. `reduce-scatter-start`, without the call).
        self.wrapped = wrapped
        # Whether it is its computation's root (XLA's own objects do not
        # say, and an instruction printed alone drops the `ROOT`).
        self.root = root
        # For an asynchronous `-start`: its `-done`, where the reader paired
        # them (`ScannedModule`; XLA's objects give it as a user).
        self.done: "Instruction | None" = None
        self._parsed: tuple[Shape, dict[str, str]] | None = None
        self._metadata: dict[str, str] | None = None
        self._shape: Shape | None = None

    def _parse(self) -> tuple[Shape, dict[str, str]]:
        if self._parsed is None:
            _, shape, _, attrs = parse_instruction_text(self.text)
            self._parsed = (shape, attrs)
        return self._parsed

    def forget(self) -> None:
        """Drops the parsed attributes (they are parsed again on use)."""
        self._parsed = None
        self._metadata = None

    @property
    def shape(self) -> Shape:
        if self._shape is not None:
            return self._shape
        if self._parsed is None and "/*" not in self.text:
            # Its head alone, where that reads (most of what a walk asks).
            m = _HEAD.match(self.text)
            if m is not None:
                self._shape = shape_of_text(m.group(2))
                return self._shape
        return self._parse()[0]

    @property
    def attrs(self) -> dict[str, str]:
        return self._parse()[1]

    @property
    def is_root(self) -> bool:
        if self.root is not None:
            return self.root
        return self.text.lstrip().startswith("ROOT ")

    @property
    def metadata(self) -> dict[str, str]:
        if self._metadata is None:
            text = self.text
            if "metadata=" not in text:
                self._metadata = {}
                return self._metadata
            # The common form, where nothing before it is a string (which
            # could hold anything): read without parsing every attribute.
            at = text.find('"') - len(', metadata={op_name=')
            m = _FIRST_METADATA.match(text, at) if at > 0 else None
            if m is not None:
                self._metadata = {"op_name": m.group(1),
                                  "stack_frame_id": m.group(2)}
            else:
                raw = self.attrs.get("metadata")
                self._metadata = parse_metadata(raw) if raw else {}
        return self._metadata

    @property
    def backend_config(self) -> dict[str, Any]:
        raw = self.attrs.get("backend_config")
        if not raw:
            return {}
        try:
            value = json.loads(raw)
        except ValueError:
            return {}
        return value if isinstance(value, dict) else {}

    def called_computations(self) -> list[tuple[str, str]]:
        """(attribute, computation) pairs, in printed order."""
        if self.opcode == "fusion" and self._parsed is None:
            # A fusion's one call, where nothing quoted comes before it.
            m = _FUSION_CALL.search(self.text)
            if m is not None and self.text.find('"', 0, m.start()) < 0:
                return [("calls", m.group(1))]
        if _CALLS_SOMETHING.search(self.text) is None:
            return []
        if self._parsed is None:
            found = printed_calls(self.text)
            if found:
                return found
        return _calls_in(self.attrs)

    def __repr__(self) -> str:
        return f"Instruction({self.text!r})"


# The collectives a report counts, by printed opcode, and the report's kind
# of each: every kind of `schema.COLLECTIVE_KINDS`, and the `-start` half of
# those XLA prints as their own async pair (their `-done` is not counted
# again).
ASYNC_COLLECTIVES = ("all-reduce", "all-gather", "collective-permute")
COLLECTIVE_OPCODES = {**{kind: kind for kind in COLLECTIVE_KINDS},
                      **{f"{kind}-start": kind for kind in ASYNC_COLLECTIVES}}


# Collectives between TPU slices, which the megascale runtime carries over the
# data-center network: a `send` to the host with these transfer types.
_MEGASCALE = re.compile(r'_xla_megascale_transfer_type="([A-Z_]+)"')
MEGASCALE_KINDS = {"ALL_REDUCE": "all-reduce", "ALL_GATHER": "all-gather",
                   "REDUCE_SCATTER": "reduce-scatter", "ALL_TO_ALL": "all-to-all"}


def collective_kind(inst: Instruction) -> str | None:
    """The report kind of a collective instruction, or None."""
    if inst.opcode in COLLECTIVE_OPCODES:
        return COLLECTIVE_OPCODES[inst.opcode]
    if inst.opcode == "send" and "_xla_megascale" in inst.text:
        m = _MEGASCALE.search(inst.text)
        return MEGASCALE_KINDS.get(m.group(1), "collective-permute") if m \
            else "collective-permute"
    return None


# Long tuples are printed with `/*index=5*/` markers between elements.


_HEAD = re.compile(r"(?:ROOT )?%?([^\s=]+) = ([^\s(]\S*) ([a-z][a-z0-9\-]*)")
_FLAT_OPERANDS = re.compile(r"\([^()\"]*\)")


def operands_end(line: str, pos: int) -> int:
    """Where the operand list that opens at `pos` closes (`pos - 1` where
    none opens there)."""
    if not line.startswith("(", pos):
        return pos - 1
    m = _FLAT_OPERANDS.match(line, pos)
    return m.end() - 1 if m else matching_bracket(line, pos)
# Printed shapes by their text: a module repeats a few shapes many times.
_SHAPES: dict[str, Shape] = {}


def parse_instruction_text(text: str) -> tuple[str, Shape, str, dict[str, str]]:
    """`%n = f32[4]{0} all-gather(%a), channel_id=1, ...` ->
    (name, shape, opcode, attributes)."""
    line = text.strip()
    m = _HEAD.match(line) if "/*" not in line else None
    if m is not None:
        shape = shape_of_text(m.group(2))
        pos = m.end()
        pos = operands_end(line, pos) + 1
        attrs = attribute_pairs(line, pos) if line.startswith(", ", pos) \
            or pos == len(line) else None
        if attrs is not None and "device_ids" not in attrs:
            return m.group(1), shape, m.group(3), attrs
    return _parse_instruction_slowly(text)


# An instruction in the form JAX's modules print most, split into what
# differs between instructions alike (name, operands, channel id, op_name)
# and everything else, which decides what a report reads of it: the shape,
# the opcode, the other attributes as printed, the rest of the metadata.
# No quote before the metadata (where a frontend attribute's string could
# hold anything) and none in the op_name (no escapes to read).
_ALIKE = re.compile(
    r'(?:ROOT )?%?[^\s=]+ = (\((?:[^()]|\([^()]*\))*\)|[^\s(]\S*) '
    r'([a-z][a-z0-9\-]*)\([^()"]*\)'
    r'(?:, channel_id=(\d+))?((?:, [^"]*)?), metadata=\{op_name="([^"\\]*)"'
    r'((?: [^{}]*)?)\}(.*)')


def alike(text: str) -> tuple[tuple[str, ...], str, str] | None:
    """(key, op_name, channel id or "") of a printed instruction, where
    instructions of one key differ only in what a report takes from each
    (name, op_name, channel id) and in their operands; None for a form
    read otherwise."""
    m = _ALIKE.fullmatch(text)
    if m is None:
        return None
    shape, opcode, channel, rest, op_name, meta, tail = m.groups()
    return (shape, opcode, rest, meta, tail), op_name, channel or ""


def shape_of_text(text: str) -> Shape:
    """`parse_shape`, once per distinct printed shape."""
    shape = _SHAPES.get(text)
    if shape is None:
        shape = parse_shape(text)
        if len(_SHAPES) < 4096:
            _SHAPES[text] = shape
    return shape


def _parse_instruction_slowly(text: str) -> tuple[str, Shape, str, dict[str, str]]:
    line = INDEX_COMMENT.sub("", text.strip())
    if line.startswith("ROOT "):
        line = line[5:]
    name, _, rest = line.partition(" = ")
    s = Scanner(rest)
    if s.peek() == "(":
        shape_text = s.balanced()
    else:
        m = re.compile(r"\S+").match(rest, s.pos)
        shape_text = m.group(0)
        s.pos = m.end()
    s.skip_spaces()
    m = re.compile(r"[a-z][a-z0-9\-]*").match(rest, s.pos)
    if not m:
        raise ValueError(f"no opcode in {text!r}")
    opcode = m.group(0)
    s.pos = m.end()
    if s.peek() == "(":
        s.balanced()
    attrs: dict[str, str] = {}
    tail = rest[s.pos:].lstrip(", ")
    previous = None
    for part in split_top_level(tail):
        key, eq, value = part.partition("=")
        key = key.strip()
        if key == "device_ids" and previous == "replica_groups":
            # `replica_groups=mesh[...], device_ids=(...) {...}` is one value.
            attrs[previous] += ", " + part.strip()
        elif eq:
            attrs[key] = value.strip()
            previous = key
    return name.lstrip("%"), parse_shape(shape_text), opcode, attrs


def opcode_name(enum_name: str) -> str:
    """`kAllGatherStart` -> `all-gather-start` (HLO's printed opcode)."""
    body = enum_name[1:] if enum_name.startswith("k") else enum_name
    return re.sub(r"(?<!^)(?=[A-Z])", "-", body).lower()


def root_of(body: list[Instruction]) -> Instruction | None:
    """A computation's root: the one marked ROOT, else its last."""
    for inst in body:
        if inst.is_root:
            return inst
    return body[-1] if body else None


class HloModuleView:
    """Computations and instructions of one HLO module, with the call graph."""

    def __init__(self, module: Any, text: str | None = None):
        self.module = module
        self.text = text if text is not None else module.to_string()
        self.name = module.name
        opcodes = {value: opcode_name(name)
                   for value, name in backend.hlo_opcode_names().items()}
        async_start = backend.hlo_opcode("kAsyncStart")
        schedule = backend.hlo_schedule(module)
        roots = set(re.findall(r"^\s*ROOT %?([^\s=]+) = ", self.text, re.M))
        self.computations: dict[str, list[Instruction]] = {}
        self.instructions: dict[str, Instruction] = {}
        for comp in module.computations():
            body = []
            # Program order: the schedule of a scheduled module (what the
            # executable runs, in order), else XLA's instruction order.
            ordered = backend.scheduled_sequence(schedule, comp)
            for hi in ordered if ordered is not None else comp.instructions():
                inst = Instruction(
                    name=hi.name, opcode=opcodes[hi.opcode],
                    computation=comp.name,
                    operands=[o.name for o in hi.operands()],
                    users=[u.name for u in hi.users()],
                    text=hi.to_string(),
                    wrapped=(hi.async_wrapped_root().name
                             if hi.opcode == async_start else None),
                    root=hi.name in roots)
                body.append(inst)
                self.instructions[inst.name] = inst
            self.computations[comp.name] = body
        m = re.search(r"^ENTRY %?([\w.\-]+)", self.text, re.M)
        self.entry = m.group(1) if m else list(self.computations)[-1]
        self.stack_frames = StackFrameTable.parse(self.text)
        header = self.text.split("\n", 1)[0]
        m = re.search(r"num_partitions=(\d+)", header)
        self.num_partitions = int(m.group(1)) if m else 1
        m = re.search(r"replica_count=(\d+)", header)
        self.num_replicas = int(m.group(1)) if m else 1

    @classmethod
    def from_text(cls, text: str) -> "HloModuleView":
        return cls(backend.hlo_module_from_text(text))

    def instructions_of(self, computation: str) -> list[Instruction]:
        return self.computations.get(computation, [])

    # The questions `irshard.collectives.analysis` asks, as `hloscan.ScannedModule`
    # answers them too.

    def visits(self, computation: str) -> list[Instruction]:
        return self.instructions_of(computation)

    def get(self, name: str, computation: str) -> Instruction | None:
        return self.instructions.get(name)

    def users(self, inst: Instruction) -> list[Instruction]:
        return [self.instructions[u] for u in inst.users if u in self.instructions]

    def async_done(self, inst: Instruction) -> Instruction | None:
        for user in self.users(inst):
            if user.opcode.endswith("-done"):
                return user
        return None

    def root(self, computation: str) -> Instruction | None:
        return root_of(self.instructions_of(computation))

    def parameters(self) -> list[Instruction]:
        return [inst for inst in self.instructions_of(self.entry)
                if inst.opcode == "parameter"]

    @property
    def header(self) -> str:
        return self.text.split("\n", 1)[0]

    @property
    def printed_mesh(self) -> str | None:
        m = re.search(r"mesh\[[^\]]*\]", self.text)
        return m.group(0) if m else None
