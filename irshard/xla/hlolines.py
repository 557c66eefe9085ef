"""One printed HLO instruction line read into an `Instruction`: its head
(ROOT, name, opcode), its operands, in the forms XLA prints, without XLA's
parser; the scan (`hloscan`) reads the lines it keeps with these."""

from __future__ import annotations

import re
from typing import Iterator

from irshard.core.syntax import matching_bracket
from irshard.xla.hlo import Instruction, operands_end


class NeedsParser(Exception):
    """The module uses a printed form the scan does not read."""


_NAME = re.compile(r" *(ROOT )?%?([^\s=]+) = ")
_OPCODE = re.compile(r"[a-z][a-z0-9\-]*")
# An operand: an instruction, or one element of a tuple-shaped instruction
# (`%param.1#0`: how jaxlib 0.11 on prints a get-tuple-element folded into
# its user).
OPERAND = re.compile(r"%([\w.\-]+(?:#\d+)?)")


_HEAD = re.compile(r" *(ROOT )?%?([^\s=]+) = (?:\((?:[^()]|\([^()]*\))*\)|\S+)"
                   r" +([a-z][a-z0-9\-]*)")


def head(line: str) -> tuple[bool, str, str, int]:
    """(is_root, name, opcode, position after the opcode) of an
    instruction line."""
    m = _HEAD.match(line)
    if m:
        return bool(m.group(1)), m.group(2), m.group(3), m.end()
    m = _NAME.match(line)
    if not m:
        raise NeedsParser(f"not an instruction: {line[:80]!r}")
    pos = m.end()
    if line.startswith("(", pos):        # a deeply nested tuple shape
        pos = matching_bracket(line, pos) + 1
    else:
        space = line.find(" ", pos)
        pos = space if space >= 0 else len(line)
    while line.startswith(" ", pos):
        pos += 1
    op = _OPCODE.match(line, pos)
    if not op:
        raise NeedsParser(f"no opcode in {line[:80]!r}")
    return bool(m.group(1)), m.group(2), op.group(0), op.end()


# An instruction line's head and flat operand list, in one match.
_LINE = re.compile(_HEAD.pattern + r"(?:\(([^()\"]*)\))?")


def instruction(line: str, computation: str) -> Instruction:
    m = _LINE.match(line)
    if m is not None and (m.group(4) is not None or not line.startswith("(", m.end())):
        operands = m.group(4)
        return Instruction(name=m.group(2), opcode=m.group(3), computation=computation,
                           operands=OPERAND.findall(operands) if operands else [],
                           users=[], text=line.strip(), root=m.group(1) is not None)
    root, name, opcode, pos = head(line)
    close = operands_end(line, pos)
    operands = OPERAND.findall(line, pos, close + 1) if close >= pos else []
    return Instruction(name=name, opcode=opcode, computation=computation,
                       operands=operands, users=[], text=line.strip(),
                       root=root)


# An instruction line in its most common form (an array shape, a flat
# operand list): the line (its indent aside), ROOT, name, opcode, operands.
_PLAIN_LINE = re.compile(r" *((ROOT )?%?([^\s=]+) = [^\s(]\S* ([a-z][a-z0-9\-]*)"
                         r"\(([^()\"]*)\).*)")


def instructions(text: str, computation: str) -> Iterator[Instruction]:
    """The instructions printed on the lines of `text`, in order."""
    match = _PLAIN_LINE.match
    for line in text.split("\n"):
        m = match(line)
        if m is None or line[-1] in " \t\r":
            if line.strip():
                yield instruction(line, computation)
            continue
        whole, root, name, opcode, operands = m.groups()
        yield Instruction(name=name, opcode=opcode, computation=computation,
                          operands=OPERAND.findall(operands) if operands else [],
                          users=[], text=whole, root=root is not None)


def tuple_element(table: dict[str, Instruction], name: str) -> Instruction | None:
    """The get-tuple-element that an operand `%t#i` stands for."""
    base, _, index = name.rpartition("#")
    tuple_inst = table.get(base)
    if tuple_inst is None:
        return None
    shape = tuple_inst.shape
    if not isinstance(shape, tuple) or int(index) >= len(shape):
        return None
    inst = Instruction(name=name, opcode="get-tuple-element",
                       computation=tuple_inst.computation, operands=[base],
                       users=[], text=f"%{name} = get-tuple-element(%{base}), "
                                      f"index={index}")
    inst._parsed = (shape[int(index)], {"index": index})
    return inst
