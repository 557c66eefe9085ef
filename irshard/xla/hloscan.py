"""The part of a printed HLO module a collective report reads, in one pass.

A report needs few of a module's instructions: its collectives, the
instructions that call other computations (loops, calls, branches), the
entry's parameters, and, on demand, the neighbours of a collective or the
loop pattern of a `while`. `ScannedModule` finds those with a streaming
scan of the text (bytes regexes over blocks of lines, so Python only sees
the lines that matter), remembers where each computation lies, and reads a
computation whole only when a question needs it. It answers the questions
`HloModuleView` answers for `irshard.collectives.analysis`, on the same
printed forms, faster than XLA's parser reads the text and in memory far
below its size.

Printed forms the scan does not read (generic asynchronous instructions,
whose wrapped instruction XLA names as it parses) raise `NeedsParser`; the
caller then uses XLA's own parser.
"""

from __future__ import annotations

import re
from array import array
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, TypeVar

from irshard.xla import forms
from irshard.xla.blocks import ModuleText
from irshard.xla.hlo import (COLLECTIVE_OPCODES, Instruction, operands_end,
                             printed_calls, root_of)
from irshard.xla.hlolines import (OPERAND, NeedsParser, head, instruction,
                                  instructions, tuple_element)
from irshard.xla.scanhits import COLLECTIVE_LINE, FUSED, check_lines, hits
from irshard.xla.stackframes import StackFrameTable

T = TypeVar("T")
_COMPUTATION = re.compile(r"(ENTRY )?%?([\w.\-]+) \(.*\) -> .+ \{\s*$")

# `-start`/`-done` opcodes of their own (not generic async sugar).
_OWN_ASYNC = {"all-gather-start", "all-gather-done", "all-reduce-start",
              "all-reduce-done", "collective-permute-start",
              "collective-permute-done", "copy-start", "copy-done",
              "send-done", "recv-done"}
_COLLECTIVES = set(COLLECTIVE_OPCODES)
_FORM_BYTES = 1 << 20     # of distinct forms kept
# The text of computations held read whole at once (their instructions take
# a few times as much).
_LOADED_BYTES = 2 << 20


def read(scan: Callable[[], Any], parse: Callable[[], Any],
         use: Callable[[Any], T]) -> T:
    """`use` of a module as the report reads it: scanned (`scan()`), or
    XLA's objects (`parse()`) where the scan meets a form it does not read,
    at once or lazily while `use` reads it. XLA's parser reads every form
    XLA prints, or says what is wrong with the module."""
    try:
        view = scan()
    except (NeedsParser, ValueError):
        return use(parse())
    try:
        return use(view)
    except (NeedsParser, ValueError):
        return use(parse())


@dataclass(frozen=True)
class _Call:
    """An instruction that only calls computations (a fusion, a reduce):
    what visiting the module in program order needs of it."""

    name: str
    opcode: str
    callees: tuple[tuple[str, str], ...]
    wrapped: None = None
    text: str = ""

    def called_computations(self) -> list[tuple[str, str]]:
        return list(self.callees)


@dataclass
class _Computation:
    name: str
    start: int                       # byte offsets of its lines in the text
    end: int = -1
    entry: bool = False
    # What the report visits, in program order: collectives (a code >= 0,
    # the collective's number in `ScannedModule._spans`) and loops, calls,
    # fusions that hold collectives (code -1 - i: `calls[i]`). A collective
    # is read back from the text when visited: a module of a hundred
    # thousand collectives keeps 40 bytes of each.
    codes: array = field(default_factory=lambda: array("q"))
    calls: list = field(default_factory=list)
    parameters: list = field(default_factory=list)
    has_sites: bool = False          # collectives here or in what it calls


class ScannedModule:
    """A module's header, source tables, computations and the instructions
    a report reads; anything else is read from the text when asked for."""

    def __init__(self, source: ModuleText):
        self._source = source
        self.computations: dict[str, _Computation] = {}
        self._named: dict[str, Instruction] = {}        # loops and calls
        # Each collective's line (start, end); an async one's `-done`'s by
        # its number.
        self._spans = array("q")
        self._dones: dict[int, tuple[int, int]] = {}
        self._pending: dict[bytes, int] = {}            # `-start`s not done
        # Computations read whole, most recently used last, and the bytes
        # of their text.
        self._loaded: dict[str, dict[str, Instruction]] = {}
        self._order: dict[str, list[Instruction]] = {}
        self._loaded_bytes = 0
        self._users_known: set[str] = set()
        # Computations' `form`s, and each distinct form once.
        self._forms: dict[str, str] = {}
        self._keys: dict[str, str] = {}
        self._keys_bytes = 0
        self.header = ""
        self.printed_mesh: str | None = None
        self.entry = ""
        self._scan()
        self.stack_frames = StackFrameTable.parse(self._prelude)
        del self._prelude
        m = re.search(r"num_partitions=(\d+)", self.header)
        self.num_partitions = int(m.group(1)) if m else 1
        m = re.search(r"replica_count=(\d+)", self.header)
        self.num_replicas = int(m.group(1)) if m else 1
        m = re.match(r"HloModule ([^\s,]+)", self.header)
        self.name = m.group(1) if m else ""

    @classmethod
    def from_file(cls, path: str) -> "ScannedModule":
        return cls(ModuleText(path=path))

    @classmethod
    def from_text(cls, text: str) -> "ScannedModule":
        """The module printed as `text`, held as it is where it is ASCII
        (as XLA prints nearly every module), else encoded."""
        if text.isascii():
            return cls(ModuleText(text=text))
        return cls.from_bytes(text.encode("utf-8"))

    @classmethod
    def from_bytes(cls, data: bytes) -> "ScannedModule":
        """The module printed as UTF-8 `data` (which the caller may hold
        alone, its text let go)."""
        return cls(ModuleText(data=data))

    # -- the scan ----------------------------------------------------------

    def _scan(self) -> None:
        prelude: list[str] = []
        current: _Computation | None = None
        first = True
        match, spans = COLLECTIVE_LINE.match, self._spans
        for offset, block in self._source.blocks():
            if first:
                first = False
                self._read_header(block)
            if current is None and not self.computations:
                prelude.append(block.decode("utf-8", "replace"))
            # A block starts at a line start: a top-level line there has no
            # newline before it for the literals to find.
            done = 0
            if block[:1] not in (b" ", b"\n", b""):
                stop = block.find(b"\n")
                current = self._top_level(block[:stop].decode("utf-8", "replace"),
                                          offset, offset + stop, current)
                done = stop
            check_lines(block)
            found, meshes = hits(block, current is not None and current.entry)
            for hit in found:
                if hit < done:
                    continue                  # on a line already read
                if block[hit] == 10:          # a top-level line
                    start = hit + 1
                else:
                    start = block.rfind(b"\n", 0, hit) + 1
                stop = block.find(b"\n", hit + 1)
                if stop < 0:
                    stop = len(block)
                if block[hit - 5:hit] == b"calls" and self._plain_call(block, start, hit):
                    continue
                done = stop
                if block[start] != 32:             # not indented
                    line = block[start:stop].decode("utf-8", "replace")
                    current = self._top_level(line, offset + start, offset + stop,
                                              current)
                elif current is not None:
                    m = match(block, start)
                    if m is None or m.end() > stop:
                        self._keep(block[start:stop].decode("utf-8", "replace"),
                                   current, offset + start, offset + stop)
                    elif meshes or m.group(2).endswith(b"-start"):
                        self._collective(current, m, offset + start, offset + stop,
                                         block.find(b"mesh[", start, stop) >= 0)
                    else:                      # the most common line, at once
                        current.codes.append(len(spans) >> 1)
                        current.has_sites = True
                        spans.append(offset + start)
                        spans.append(offset + stop)
        if current is not None:
            raise NeedsParser(f"computation {current.name} is not closed")
        if not self.entry:
            raise NeedsParser("no ENTRY computation")
        self._prelude = "".join(prelude).split("\n%", 1)[0].split("\nENTRY", 1)[0]

    def _plain_call(self, block: bytes, start: int, hit: int) -> bool:
        """Whether the `calls=` at `hit` is a fusion's call of a computation
        read already with no collective in it: nothing on the line to keep
        (most lines of a dense module)."""
        fused = FUSED.match(block, hit + 1)
        if fused is None or block.find(b'"', start, hit) >= 0 \
                or block.find(b" fusion(", start, hit) < 0:
            return False
        callee = self.computations.get(fused.group(1).decode("utf-8", "replace"))
        return callee is not None and callee.end >= 0 and not callee.has_sites

    def _read_header(self, block: bytes) -> None:
        self.header = block[:block.find(b"\n")].decode("utf-8", "replace")
        if not self.header.startswith("HloModule"):
            raise NeedsParser("no HloModule header")

    def _top_level(self, line: str, start: int, stop: int,
                   current: _Computation | None) -> _Computation | None:
        if line.rstrip() == "}":
            if current is not None:
                current.end = start
            return None
        if line.rstrip().endswith("{") and current is None \
                and not line.startswith("HloModule"):
            m = _COMPUTATION.match(line)
            if m is None:
                raise NeedsParser(f"not a computation: {line[:80]!r}")
            comp = _Computation(m.group(2), stop + 1, entry=bool(m.group(1)))
            if comp.name in self.computations:
                raise NeedsParser(f"computation {comp.name} printed twice")
            self.computations[comp.name] = comp
            if comp.entry:
                self.entry = comp.name
            return comp
        if "mesh[" in line and self.printed_mesh is None:
            self.printed_mesh = line
        return current

    def _collective(self, comp: _Computation, m: re.Match, start: int,
                    stop: int, mesh: bool) -> None:
        if mesh and self.printed_mesh is None:
            self.printed_mesh = self._line(start, stop)
        self._record(comp, start, stop,
                     m.group(1) if m.group(2).endswith(b"-start") else None)

    def _record(self, comp: _Computation, start: int, stop: int,
                pending: bytes | None) -> None:
        """A collective's line; `pending`: the name its `-done` will take."""
        number = len(self._spans) >> 1
        self._spans.extend((start, stop))
        comp.codes.append(number)
        comp.has_sites = True
        if pending is not None:
            self._pending[pending] = number

    def _keep(self, line: str, comp: _Computation, start: int, stop: int) -> None:
        if "mesh[" in line and self.printed_mesh is None:
            self.printed_mesh = line
        _, name, opcode, pos = head(line)
        if opcode.endswith(("-start", "-done", "-update")) and opcode not in \
                _OWN_ASYNC and opcode not in _COLLECTIVES \
                or opcode in ("async-start", "async-update", "async-done"):
            raise NeedsParser(f"asynchronous {opcode}")
        if opcode.endswith("-done"):
            close = operands_end(line, pos)
            operands = OPERAND.findall(line, pos, close + 1)
            number = self._pending.pop(operands[0].encode(), None) \
                if operands else None
            if number is not None:
                self._dones[number] = (start, stop)
            return
        if opcode == "parameter":
            if comp.entry:
                comp.parameters.append(instruction(line, comp.name))
            return
        collective = opcode in _COLLECTIVES or (
            opcode == "send" and "_xla_megascale" in line)
        if collective:
            self._record(comp, start, stop, name.encode() if opcode.endswith(
                "-start") or opcode == "send" else None)
            return
        callees = printed_calls(line)
        if callees is None:
            callees = instruction(line, comp.name).called_computations()
        if not callees:
            return
        if opcode in ("while", "conditional", "call"):
            inst = instruction(line, comp.name)
            self._named[name] = inst
            self._call(comp, inst)
            comp.has_sites = comp.has_sites or any(
                self.holds_collectives(c) for _, c in callees)
            return
        # A fusion, reduce, sort...: visited only where its computations
        # hold collectives (callees are printed before their callers; one
        # not yet seen is kept).
        if any(self.holds_collectives(c) for _, c in callees):
            self._call(comp, _Call(name, opcode, tuple(callees)))
            comp.has_sites = True

    @staticmethod
    def _call(comp: _Computation, visit) -> None:
        comp.codes.append(-1 - len(comp.calls))
        comp.calls.append(visit)

    def holds_collectives(self, name: str) -> bool:
        """Whether computation `name` may run a collective (itself or in
        what it calls; one not yet scanned may)."""
        comp = self.computations.get(name)
        return comp is None or comp.end < 0 or comp.has_sites

    # -- what analysis asks --------------------------------------------------

    def visits(self, computation: str) -> Iterator:
        """The instructions of `computation` a program-order walk needs,
        each collective read from the text as it comes."""
        comp = self.computations.get(computation)
        if comp is None:
            return
        spans, dones = self._spans, self._dones
        for code in comp.codes:
            if code < 0:
                yield comp.calls[-1 - code]
                continue
            inst = instruction(self._line(spans[2 * code], spans[2 * code + 1]),
                                computation)
            if dones and code in dones:
                inst.done = instruction(self._line(*dones[code]), computation)
            yield inst

    def form(self, computation: str) -> str:
        """`forms.form` of `computation`, or its name where that gives none;
        one object for each distinct key, within `_FORM_BYTES`."""
        key = self._forms.get(computation)
        if key is not None:
            return key
        comp = self.computations.get(computation)
        found = forms.form(self._line(comp.start, comp.end), self._keys) \
            if comp is not None and comp.end >= comp.start else None
        if found is None:
            key = computation
        elif found in self._keys:
            key = self._keys[found]
        elif self._keys_bytes + len(found) <= _FORM_BYTES:
            key = self._keys[found] = found
            self._keys_bytes += len(found)
        else:
            key = computation
        self._forms[computation] = key
        return key

    def _line(self, start: int, stop: int) -> str:
        return self._source.decoded(start, stop)

    def instructions_of(self, computation: str) -> list[Instruction]:
        """Every instruction of `computation`, read from the text."""
        self._load(computation)
        return self._order.get(computation, [])

    def parameters(self) -> list[Instruction]:
        return self.computations[self.entry].parameters

    def get(self, name: str, computation: str) -> Instruction | None:
        inst = self._named.get(name)
        if inst is not None and inst.computation == computation:
            return inst
        found = self._load(computation).get(name)
        if found is None and "#" in name:            # a tuple's element
            found = self._linked(computation).get(name)
        return found

    def users(self, inst: Instruction) -> list[Instruction]:
        table = self._linked(inst.computation)
        full = table.get(inst.name)
        return [table[u] for u in full.users] if full is not None else []

    def release(self, inst: Instruction) -> None:
        """Forgets what was parsed of `inst` (read again if asked): a report
        of thousands of collectives need not hold them all parsed."""
        inst.forget()

    def async_done(self, inst: Instruction) -> Instruction | None:
        return inst.done

    def root(self, computation: str) -> Instruction | None:
        return root_of(self.instructions_of(computation))

    def _load(self, computation: str) -> dict[str, Instruction]:
        table = self._loaded.get(computation)
        if table is not None:
            if next(reversed(self._loaded)) != computation:
                del self._loaded[computation]          # now the most recent
                self._loaded[computation] = table
            return table
        comp = self.computations.get(computation)
        table, order = {}, []
        if comp is not None and comp.end >= comp.start:
            text = self._source.decoded(comp.start, comp.end)
            for inst in instructions(text, computation):
                table[inst.name] = inst
                order.append(inst)
        # Memory stays bounded: the least recently used go first, never the
        # one in use before this (a loop body being walked, whose
        # instructions this one's caller asks about next).
        size = comp.end - comp.start if comp is not None else 0
        while self._loaded_bytes + size > _LOADED_BYTES and len(self._loaded) > 1:
            oldest = next(iter(self._loaded))
            self._forget(oldest)
        self._loaded[computation] = table
        self._order[computation] = order
        self._loaded_bytes += size
        return table

    def _linked(self, computation: str) -> dict[str, Instruction]:
        """`_load`, with each instruction's users, and the elements of
        tuples that operands name (`%t#1`) as instructions: made when first
        asked for (a walk in program order needs neither)."""
        table = self._load(computation)
        if computation in self._users_known:
            return table
        for inst in self._order[computation]:
            for operand in inst.operands:
                if "#" in operand and operand not in table:
                    element = tuple_element(table, operand)
                    if element is not None:
                        table[operand] = element
                        table[element.operands[0]].users.append(operand)
            for operand in dict.fromkeys(inst.operands):
                if operand in table:
                    table[operand].users.append(inst.name)
        self._users_known.add(computation)
        return table

    def _forget(self, computation: str) -> None:
        self._users_known.discard(computation)
        del self._loaded[computation]
        del self._order[computation]
        comp = self.computations.get(computation)
        if comp is not None:
            self._loaded_bytes -= comp.end - comp.start
