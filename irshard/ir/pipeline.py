"""Pass pipelines in MLIR's textual syntax, mixing irshard's passes with the
passes MLIR has registered (Shardy's, upstream's).

    pipeline := element (',' element)*
    element  := NAME ['{' options '}'] | NAME '(' pipeline ')'
    options  := (KEY '=' VALUE)*          VALUE: bare, "quoted" or {braced}

`builtin.module(...)` around the whole pipeline is accepted and dropped.
Parsing points at the offending column; every pass is checked — irshard's
against the registry, the others with MLIR's own pipeline parser — before
anything runs. Running groups consecutive registered passes into one MLIR
pass manager and applies irshard's passes, which work on the whole module,
in between.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable

from irshard.core.errors import PassError
from irshard.core.syntax import matching_bracket
from irshard.passes import PASSES, pass_class

_NAME = re.compile(r"[A-Za-z0-9_.\-]+")
IRSHARD_PREFIX = "irshard-"
# Upstream passes irshard runs its own version of (see irshard.passes).
STAND_INS = ("inline",)


@dataclass(frozen=True)
class Element:
    """One pipeline element: a pass with options, or an anchored pipeline."""

    name: str
    column: int                       # 1-based, in the pipeline text
    options: str = ""                 # raw text between the braces
    nested: tuple["Element", ...] | None = None

    @property
    def is_irshard(self) -> bool:
        return self.nested is None and (self.name.startswith(IRSHARD_PREFIX)
                                        or self.name in STAND_INS)

    def text(self) -> str:
        if self.nested is not None:
            return f"{self.name}({','.join(e.text() for e in self.nested)})"
        return self.name + (f"{{{self.options}}}" if self.options else "")


# How mlir-opt and sdy_opt take passes on the command line: one flag each,
# `-sdy-propagation-pipeline='keep-sharding-rules=true'`, single-dash long
# options (`-split-input-file`) as well as double-dash ones.
_FLAG = re.compile(r"--([A-Za-z][A-Za-z0-9_.\-]*)(?:=(.*))?\Z", re.S)


def long_options(argv: list[str], options: set[str], valued: set[str]) -> list[str]:
    """`argv` with mlir-opt's single-dash long options (`-split-input-file`,
    a pass `-canonicalize`) written with two dashes; `options` are the
    tool's own (`--pipeline`, ...), `valued` those that take the next
    argument as their value, which is left as it is."""
    out: list[str] = []
    value_next = False
    for arg in argv:
        if value_next:
            out.append(arg)
            value_next = False
            continue
        name = arg[1:].partition("=")[0]
        # `-ofile` and `-pcse` stay short options with their values.
        short = f"-{name[:1]}" in options and "-" not in name
        if len(arg) > 2 and arg[0] == "-" and arg[1] != "-" and \
                (f"--{name}" in options or not short):
            arg = "-" + arg
        out.append(arg)
        value_next = arg in valued
    return out


def from_flags(flags: list[str]) -> str:
    """The pipeline that pass flags (`--canonicalize`, `--sdy-foo=a=1 b=2`)
    name, in their order."""
    elements = []
    for flag in flags:
        m = _FLAG.match(flag)
        if m is None:
            raise PassError(f"unrecognized argument '{flag}'; irshard opt takes "
                            f"the options in its --help, and passes as flags "
                            f"(--sdy-propagation-pipeline, "
                            f"--canonicalize='max-iterations=2') or as -p PIPELINE")
        name, options = m.group(1), m.group(2)
        elements.append(name + (f"{{{options}}}" if options else ""))
    return ",".join(elements)


def _error(text: str, column: int, message: str) -> PassError:
    return PassError(f"pipeline '{text}': {message} at column {column}")


class _Parser:
    def __init__(self, text: str):
        self.text = text
        self.pos = 0

    def skip(self) -> None:
        while self.pos < len(self.text) and self.text[self.pos].isspace():
            self.pos += 1

    def peek(self) -> str:
        self.skip()
        return self.text[self.pos] if self.pos < len(self.text) else ""

    def elements(self, closing: str) -> list[Element]:
        result = [self.element()]
        while self.peek() == ",":
            self.pos += 1
            result.append(self.element())
        if self.peek() != closing:
            found = repr(self.peek()) if self.peek() else "the end"
            want = "',' or the end" if not closing else f"',' or '{closing}'"
            raise _error(self.text, self.pos + 1, f"expected {want}, found {found}")
        return result

    def element(self) -> Element:
        self.skip()
        m = _NAME.match(self.text, self.pos)
        if not m:
            found = repr(self.text[self.pos]) if self.pos < len(self.text) else "the end"
            raise _error(self.text, self.pos + 1,
                         f"expected a pass name, found {found}")
        column = self.pos + 1
        self.pos = m.end()
        if self.peek() == "(":
            self.pos += 1
            nested = self.elements(")")
            self.pos += 1
            return Element(m.group(0), column, nested=tuple(nested))
        options = ""
        if self.peek() == "{":
            start = self.pos
            end = _matching_brace(self.text, start)
            if end < 0:
                raise _error(self.text, start + 1, "unclosed '{' of pass options")
            options = self.text[start + 1:end].strip()
            self.pos = end + 1
        return Element(m.group(0), column, options)


def _matching_brace(text: str, start: int) -> int:
    try:
        return matching_bracket(text, start, "{")
    except ValueError:
        return -1


def parse(text: str) -> list[Element]:
    """Parses a pipeline; `builtin.module(...)` around it is dropped."""
    if not text.strip():
        raise PassError("the pipeline is empty; give passes like "
                        "'sdy-propagation-pipeline,irshard-print-shardings'")
    parser = _Parser(text)
    elements = parser.elements("")
    if len(elements) == 1 and elements[0].name == "builtin.module" \
            and elements[0].nested is not None:
        return list(elements[0].nested)
    return elements


def parse_options(text: str, pass_name: str) -> dict[str, str]:
    """`key=value key2="a b" key3={x,y}` -> {key: value, ...}."""
    options: dict[str, str] = {}
    i = 0
    while i < len(text):
        if text[i].isspace():
            i += 1
            continue
        m = re.compile(r"([A-Za-z0-9_\-]+)\s*=\s*").match(text, i)
        if not m:
            raise PassError(f"pass '{pass_name}': cannot read its options "
                            f"'{text}' at column {i + 1}; expected KEY=VALUE")
        i = m.end()
        if i < len(text) and text[i] == '"':
            end = text.find('"', i + 1)
            if end < 0:
                raise PassError(f"pass '{pass_name}': unclosed quote in its "
                                f"options '{text}'")
            value, i = text[i + 1:end], end + 1
        elif i < len(text) and text[i] == "{":
            end = _matching_brace(text, i)
            if end < 0:
                raise PassError(f"pass '{pass_name}': unclosed '{{' in its "
                                f"options '{text}'")
            value, i = text[i + 1:end], end + 1
        else:
            end = i
            while end < len(text) and not text[end].isspace():
                end += 1
            value, i = text[i:end], end
        options[m.group(1)] = value
    return options


# ---------------------------------------------------------------------------


@dataclass
class PassStep:
    """What runs: an irshard pass, or a group of registered passes."""

    label: str                         # for --print-ir-after-all
    irshard_pass: Any = None
    mlir_text: str | None = None       # anchored on builtin.module


def _registered_text(element: Element, context, check) -> str:
    """The element as MLIR parses it, nesting function passes under
    `func.func(...)` the way `mlir-opt` users expect."""
    text = element.text()
    try:
        check(f"builtin.module({text})", context)
        return text
    except ValueError as e:
        message = str(e)
        if element.nested is None and "did you intend to nest" in message:
            nested = f"func.func({text})"
            check(f"builtin.module({nested})", context)
            return nested
        raise


def plan(elements: list[Element], pipeline_text: str, context,
         check: Callable[[str, Any], Any], print_after_all: bool) -> list[PassStep]:
    """Checks every element and groups them into steps."""
    steps: list[PassStep] = []
    pending: list[tuple[Element, str]] = []

    def flush():
        if pending:
            steps.append(PassStep(",".join(e.name for e, _ in pending),
                                  mlir_text=",".join(t for _, t in pending)))
            pending.clear()

    for element in elements:
        if element.nested is not None and any(_has_irshard(e) for e in element.nested):
            raise _error(pipeline_text, element.column,
                         f"irshard's passes work on the whole module; put them "
                         f"outside '{element.name}(...)'")
        if element.is_irshard:
            if element.name not in PASSES:
                known = ", ".join(sorted(PASSES))
                raise _error(pipeline_text, element.column,
                             f"unknown pass '{element.name}' (irshard's passes: "
                             f"{known})")
            cls = pass_class(element.name)
            instance = cls.from_options(parse_options(element.options, element.name))
            flush()
            steps.append(PassStep(element.name, irshard_pass=instance))
            continue
        try:
            text = _registered_text(element, context, check)
        except ValueError as e:
            raise _mlir_error(pipeline_text, element, str(e)) from None
        pending.append((element, text))
        if print_after_all:
            flush()
    flush()
    return steps


def _has_irshard(element: Element) -> bool:
    if element.nested is None:
        return element.is_irshard
    return any(_has_irshard(e) for e in element.nested)


def _mlir_error(pipeline_text: str, element: Element, message: str) -> PassError:
    unknown = re.search(r"'([^']+)' does not refer to a registered pass", message)
    if unknown:
        return _error(pipeline_text, element.column,
                      f"unknown pass '{unknown.group(1)}' (see "
                      f"'irshard opt --list-passes')")
    option = re.search(r"no such option (\S+)", message)
    if option:
        return _error(pipeline_text, element.column,
                      f"pass '{element.name}' has no option '{option.group(1)}'")
    first = next((line.strip() for line in message.splitlines() if line.strip()),
                 message)
    return _error(pipeline_text, element.column,
                  f"MLIR rejects '{element.text()}': {first}")
