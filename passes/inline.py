"""inline: MLIR's `inline` for StableHLO modules, written over the Python
bindings (jaxlib's MLIR context has no inliner interface for the func
dialect, so the registered pass leaves every call in place)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from jaxlib.mlir import ir

from irshard import backend
from irshard.core.errors import PassError
from irshard.passes import ModulePass


@dataclass(frozen=True)
class InlinePass(ModulePass):
    """Inline function calls, as mlir-opt's `inline` does.

    Every `func.call` to a function with a single-block body is replaced by
    that body, its arguments by the call's operands and the call's results by
    what the body returns; the inlined operations are located at the callee's
    location called from the call's (`callsite(...)`), so their source lines
    stay theirs. Calls within a recursive cycle and calls to declarations
    stay. A private function no longer referenced is erased. Then the
    default pipeline runs on the module.

    Options:
      default-pipeline  the pipeline run after inlining (default
                        canonicalize; empty for none).
      only-private      inline calls of private functions only (default
                        false), as XLA inlines a JAX module's outlined
                        functions before Shardy propagates.
    """

    name: ClassVar[str] = "inline"
    default_pipeline: str = "canonicalize"
    only_private: bool = False

    def apply(self, module: ir.Module) -> None:
        operation = module.operation          # a module, or its operation
        with operation.context, ir.Location.unknown(operation.context):
            functions = {ir.StringAttr(op.operation.attributes["sym_name"]).value:
                         op.operation
                         for op in operation.regions[0].blocks[0].operations
                         if op.operation.name == "func.func"}
            # Calls of these stay: functions on a cycle of calls, and with
            # only-private the public ones.
            kept = _recursive(functions)
            if self.only_private:
                kept |= {name for name, fn in functions.items()
                         if not _private(fn)}
            while True:
                site = next((c for c in _calls(operation)
                             if _inlinable(c, functions, kept)), None)
                if site is None:
                    break
                _inline(site, functions[_callee(site)])
            _erase_dead(operation, functions)
        if self.default_pipeline.strip():
            try:
                backend.run_pipeline(operation,
                                      f"builtin.module({self.default_pipeline})")
            except Exception as e:
                raise PassError(f"pass 'inline': its default pipeline "
                                f"'{self.default_pipeline}' failed: {e}") from None


def _callee(call) -> str:
    return ir.FlatSymbolRefAttr(call.attributes["callee"]).value


def _walk(operation) -> Any:
    for region in operation.regions:
        for block in region.blocks:
            for op in block.operations:
                yield op.operation
                yield from _walk(op.operation)


def _calls(operation) -> list:
    return [op for op in _walk(operation) if op.name == "func.call"]


def _body(function):
    blocks = list(function.regions[0].blocks) if function.regions else []
    return blocks[0] if len(blocks) == 1 else None


def _recursive(functions: dict[str, Any]) -> set[str]:
    """Functions on a cycle of calls (never inlined into themselves)."""
    edges = {name: {_callee(c) for c in _calls(fn)} & set(functions)
             for name, fn in functions.items()}
    found = set()
    for start in functions:
        seen, todo = set(), list(edges[start])
        while todo:
            name = todo.pop()
            if name == start:
                found.add(start)
                break
            if name not in seen:
                seen.add(name)
                todo.extend(edges[name])
    return found


def _inlinable(call, functions: dict[str, Any], kept: set[str]) -> bool:
    name = _callee(call)
    return name in functions and name not in kept \
        and _body(functions[name]) is not None


def _inline(call, function) -> None:
    block = _body(function)
    mapping = {arg: value for arg, value in zip(block.arguments, call.operands)}
    where = ir.InsertionPoint(call)
    returned = None
    for op in block.operations:
        op = op.operation
        if op.name == "func.return":
            returned = op
            break
        new = op.clone(ip=where).operation
        _remap(new, mapping, call.location)
        mapping.update(zip(op.results, new.results))
    for result, value in zip(call.results, returned.operands if returned else ()):
        result.replace_all_uses_with(mapping.get(value, value))
    call.erase()


def _remap(operation, mapping: dict, call_location) -> None:
    """The clone's operands (and those of the ops in its regions) that were
    the callee's values become the caller's; its location is called from
    the call's."""
    for i, value in enumerate(operation.operands):
        if value in mapping:
            operation.operands[i] = mapping[value]
    operation.location = ir.Location.callsite(operation.location, [call_location])
    for region in operation.regions:
        for block in region.blocks:
            for op in block.operations:
                _remap(op.operation, mapping, call_location)


def _erase_dead(operation, functions: dict[str, Any]) -> None:
    """Private functions no symbol reference names any more."""
    while True:
        used = set()
        for op in _walk(operation):
            attributes = op.attributes
            for i in range(len(attributes)):
                used.update(_symbols(attributes[i].attr))
        dead = [name for name, fn in functions.items()
                if name not in used and _private(fn)]
        if not dead:
            return
        for name in dead:
            functions.pop(name).erase()


def _private(function) -> bool:
    visibility = function.attributes["sym_visibility"] \
        if "sym_visibility" in function.attributes else None
    return visibility is not None and ir.StringAttr(visibility).value == "private"


def _symbols(attribute) -> set[str]:
    """The symbols an attribute refers to (`@f`, also inside arrays and
    dictionaries)."""
    attribute = _typed(attribute)
    if isinstance(attribute, ir.FlatSymbolRefAttr):
        return {attribute.value}
    if hasattr(ir, "SymbolRefAttr") and isinstance(attribute, ir.SymbolRefAttr):
        return {str(attribute).split("::")[0].lstrip("@").strip('"')}
    if isinstance(attribute, ir.ArrayAttr):
        return set().union(*(_symbols(a) for a in attribute))
    if isinstance(attribute, ir.DictAttr):
        return set().union(*(_symbols(attribute[i].attr)
                             for i in range(len(attribute))))
    return set()


def _typed(attribute):
    """The attribute as its own class (older bindings hand out plain
    `Attribute`s)."""
    downcast = getattr(attribute, "maybe_downcast", None)
    return downcast() if downcast is not None else attribute
