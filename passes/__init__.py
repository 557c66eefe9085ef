"""irshard's own passes over StableHLO + Shardy modules, and their registry.

A pass is a frozen dataclass deriving from `ModulePass`: `name` is its
kebab-case pipeline name, its dataclass fields are its options (strings on the
pipeline's command line), `apply(module)` rewrites the module in place, and
the class docstring says what it does and what each option means; its first
line is the summary `--list-passes` prints.

The registry maps names to "module:Class" strings and imports a pass only when
it is used, so the command line starts fast and rejects an unknown name before
anything runs.
"""

from __future__ import annotations

import dataclasses
import importlib
from typing import Any, ClassVar

from irshard.core.errors import PassError

PASSES: dict[str, str] = {
    # Upstream's `inline` cannot work in jaxlib's context (no inliner
    # interface for func): irshard's stands in for it under its name.
    "inline": "irshard.passes.inline:InlinePass",
    "irshard-annotate": "irshard.passes.annotate:AnnotatePass",
    "irshard-collectives": "irshard.passes.collectives:CollectivesPass",
    "irshard-constrain": "irshard.passes.constrain:ConstrainPass",
    "irshard-print-shardings": "irshard.passes.print_shardings:PrintShardingsPass",
    "irshard-strip-shardings": "irshard.passes.strip_shardings:StripShardingsPass",
}


class ModulePass:
    """Base class of irshard's passes."""

    name: ClassVar[str] = ""

    def apply(self, module: Any) -> None:
        raise NotImplementedError

    @classmethod
    def summary(cls) -> str:
        return (cls.__doc__ or "").strip().splitlines()[0]

    @classmethod
    def options(cls) -> list[dataclasses.Field]:
        return list(dataclasses.fields(cls))

    @classmethod
    def from_options(cls, options: dict[str, str]) -> "ModulePass":
        """Builds the pass from `key=value` options (keys in kebab-case)."""
        fields = {f.name.replace("_", "-"): f for f in cls.options()}
        kwargs = {}
        for key, value in options.items():
            if key not in fields:
                known = ", ".join(fields) or "none"
                raise PassError(f"pass '{cls.name}' has no option '{key}'; "
                                f"its options are: {known}")
            field_type = fields[key].type
            if field_type in (bool, "bool"):
                if value not in ("true", "false", "1", "0"):
                    raise PassError(f"pass '{cls.name}': option '{key}' "
                                    f"takes true or false, not '{value}'")
                kwargs[fields[key].name] = value in ("true", "1")
            else:
                kwargs[fields[key].name] = value
        return cls(**kwargs)


def pass_class(name: str) -> type[ModulePass]:
    """The class of the registered pass `name` (imported on first use)."""
    target = PASSES.get(name)
    if target is None:
        raise KeyError(name)
    module_name, class_name = target.split(":")
    return getattr(importlib.import_module(module_name), class_name)
