"""The memory peak as text: the report's `memory.peak` (JSON form) folded to
its largest rows, inputs grouped by path prefix and the rest by source
line."""

from __future__ import annotations

from typing import Any

from irshard.core import schema

ROWS = 10
# What a buffer live at the peak holds (DESIGN.md's `memory.peak`).
KINDS = schema.PEAK_KINDS


def _prefix(path: str) -> str:
    """An input's group: its path less the leaf's own two last components
    (`opt_state/mu/layers/0/attn/wq` -> `opt_state/mu/layers/0/*`)."""
    parts = path.split("/")
    return "/".join(parts[:-2] + ["*"]) if len(parts) > 2 else path


def _where(b: dict[str, Any]) -> str:
    source = b.get("source")
    if source:
        where = f"{source['file']}:{source['line']}"
        return f"{where} ({source['function']})" if source.get("function") else where
    return "-"


def rows(peak: dict[str, Any]) -> list[tuple[int, str, str, int, str]]:
    """(bytes, kind, what, buffers, where) per group, largest first."""
    groups: dict[tuple[str, str, str], list[int]] = {}
    for b in peak["buffers"]:
        if "path" in b:
            key = (b["kind"], _prefix(b["path"]), "-")
        elif b.get("instruction"):
            what = f"copy of {b['copy_of']}" if b.get("copy_of") else \
                b.get("scope") or _short_op(b.get("op_name")) or b["instruction"]
            key = (b["kind"], what, _where(b))
        else:
            key = (b["kind"], f"({b.get('note') or 'no value'})", "-")
        found = groups.setdefault(key, [0, 0])
        found[0] += b["bytes"]
        found[1] += 1
    out = [(total, kind, what, n, where)
           for (kind, what, where), (total, n) in groups.items()]
    out.sort(key=lambda r: (-r[0], r[1], r[2], r[4]))
    return out


def _short_op(op_name: str | None) -> str | None:
    """`jit(step)/jvp()/dot_general` -> `jvp()/dot_general`: the op and the
    transformation it is under."""
    if not op_name:
        return None
    if "/(" in op_name:              # a combiner's `prefix/(a:b)`: its parts
        return op_name[op_name.index("/(") + 1:]
    parts = [p for p in op_name.split("/") if not p.startswith("jit(")]
    return "/".join(parts[-2:]) if parts else op_name


def lines(peak: dict[str, Any], human_bytes, fold: bool = True) -> list[str]:
    """The peak's summary line and its table (all rows unless `fold`)."""
    kinds = ", ".join(f"{k} {human_bytes(v)}" for k, v in peak["by_kind"].items())
    at = ""
    if peak.get("instruction"):
        at = f" at {peak['instruction']} (schedule position {peak['schedule_position']})"
    out = [f"memory peak per device {human_bytes(peak['bytes'])}{at}, from XLA's "
           f"buffer assignment: {kinds}"]
    found = rows(peak)
    shown = found[:ROWS] if fold else found
    table = [("bytes", "kind", "what", "buffers", "source")] + [
        (human_bytes(b), kind, what, str(n), where)
        for b, kind, what, n, where in shown]
    widths = [max(len(r[i]) for r in table) for i in range(4)]
    for r in table:
        out.append("  " + "  ".join(c.ljust(w) if i != 3 else c.rjust(w)
                                    for i, (c, w) in enumerate(zip(r, widths)))
                   + "  " + r[4])
    if len(found) > len(shown):
        rest = sum(r[0] for r in found[len(shown):])
        out.append(f"  ... {len(found) - len(shown)} more rows, "
                   f"{human_bytes(rest)} (all of them in the JSON report)")
    return out
