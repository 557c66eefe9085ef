"""XLA's HLO objects through jaxlib: a module parsed from text (its
device lists and parameters checked first) or from a serialized proto,
its schedule, opcodes by name."""

from __future__ import annotations

import re
from typing import Any

from irshard.backend.devices import first_line
from irshard.core import syntax


def hlo_module_from_text(text: str):
    """Parses HLO text with XLA's own parser (raises ValueError)."""
    from jaxlib import _hlo
    problem = syntax.device_list_problem(text)
    if problem:
        raise ValueError(f"malformed device list {problem}")
    problem = syntax.parameter_problem(text)
    if problem:
        raise ValueError(problem)
    try:
        return _hlo.hlo_module_from_text(_unscheduled(text))
    except RuntimeError as e:
        raise ValueError(str(e)) from None


_SCHEDULED = re.compile(r"^(HloModule [^\n]*?),?[ \t]*is_scheduled=true")


def _unscheduled(text: str) -> str:
    """`text` with its header's `is_scheduled=true` left out. For a
    scheduled module XLA's parser makes a schedule of the printed order and
    aborts the process (a CHECK, not an error) where that order fails its
    checks, as libtpu's SparseCore offload prints it (a `call-update` that
    gives the offloaded call its operand). Parsed unscheduled, each
    computation keeps its printed order, the order the executable runs."""
    return _SCHEDULED.sub(r"\1", text, count=1)


def hlo_module_from_proto(data: bytes):
    """Parses a serialized HloModuleProto (raises ValueError)."""
    from jaxlib import _hlo
    try:
        return _hlo.HloModule.from_serialized_hlo_module_proto(data)
    except Exception as e:
        raise ValueError(first_line(e)) from None


def hlo_schedule(module) -> Any:
    """The module's instruction schedule, or None when it is not scheduled."""
    try:
        return module.schedule()
    except Exception:
        return None


def scheduled_sequence(schedule, computation) -> list[Any] | None:
    """The instructions of `computation` in scheduled order, or None when
    the schedule has no sequence for it (fused and applied computations)."""
    if schedule is None:
        return None
    try:
        return list(schedule.sequence(computation))
    except Exception:
        return None


def hlo_opcode(name: str) -> Any:
    """XLA's opcode enum member `name`, e.g. `kAsyncStart`."""
    from jaxlib import _hlo
    return getattr(_hlo.HloOpcode, name)


def hlo_opcode_names() -> dict[Any, str]:
    from jaxlib import _hlo
    return {value: name for name, value in _hlo.HloOpcode.__members__.items()}
