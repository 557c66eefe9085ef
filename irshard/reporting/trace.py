"""The simulated step as a Chrome/Perfetto trace (`--format trace`).

The file is the Trace Event Format's JSON object (`traceEvents`), which
ui.perfetto.dev and chrome://tracing open: one process per device program
(the devices of an SPMD program run the same one, named by their ids), a
thread for compute and one for collectives, each interval an `X` event
named by its HLO instruction, with its kind, bytes, mesh axes, source line
and loop iteration as `args`. A loop's iterations past the drawn ones are
one event, `repeats` of them.
"""

from __future__ import annotations

from typing import Any

from irshard.reporting.report import CollectiveReport
from irshard.reporting.writer import dumps_json

_TRACKS = {"compute": 1, "collectives": 2}


def _us(seconds: float) -> float:
    """Microseconds, as the format counts them, to the nanosecond."""
    return round(seconds * 1e6, 3)


def trace_json(report: CollectiveReport, step, devices: int) -> dict[str, Any]:
    """The trace of `step` (a `schedule.Step`) for `report`'s program."""
    by_name = {c.name: c for c in report.collectives}
    label = ", ".join(str(d) for d in range(min(devices, 8))) + \
        (f", ... ({devices} devices)" if devices > 8 else "")
    events: list[dict[str, Any]] = [
        {"ph": "M", "pid": 0, "name": "process_name",
         "args": {"name": f"{report.function or 'program'}: devices {label}"}},
        {"ph": "M", "pid": 0, "tid": 1, "name": "thread_name",
         "args": {"name": "compute"}},
        {"ph": "M", "pid": 0, "tid": 2, "name": "thread_name",
         "args": {"name": "collectives"}},
    ]
    for e in step.events:
        args: dict[str, Any] = {"opcode": e.opcode}
        if e.iteration:
            args["iteration"] = list(e.iteration)
        if e.repeats > 1:
            args["repeats"] = e.repeats
        c = by_name.get(e.collective) if e.collective else None
        if c is not None:
            args.update(kind=c.kind, bytes=c.bytes,
                        mesh_axes=list(c.mesh_axes or ()))
            if c.source is not None:
                args["source"] = f"{c.source.file}:{c.source.line}"
        elif e.source is not None:
            args["source"] = e.source
        name = e.name if e.repeats == 1 else f"{e.name} x{e.repeats}"
        events.append({"ph": "X", "pid": 0, "tid": _TRACKS[e.track],
                       "name": name, "ts": _us(e.start_s),
                       "dur": _us(e.duration_s), "args": args})
    return {"traceEvents": events, "displayTimeUnit": "ns",
            "otherData": {"source": report.source, "function": report.function,
                          "step": step.to_json(),
                          "dropped_events": step.dropped_events}}


# Events the report page draws, at most; the trace file has them all.
PAGE_EVENTS = 4000


def timeline(report: CollectiveReport, devices: int) -> dict[str, Any] | None:
    """What the report page's timeline draws: the step, its parts, and its
    first `PAGE_EVENTS` events as the trace has them (track, start and
    duration in seconds, instruction, args)."""
    if report.step is None:
        return None
    found = trace_json(report, report.step, devices)
    spans = [e for e in found["traceEvents"] if e["ph"] == "X"]
    return {"step": report.step.to_json(),
            "events": [{"track": "compute" if e["tid"] == 1 else "collectives",
                        "start_s": e["ts"] / 1e6, "duration_s": e["dur"] / 1e6,
                        "name": e["name"], "args": e["args"]}
                       for e in spans[:PAGE_EVENTS]],
            "left_out": max(0, len(spans) - PAGE_EVENTS) + report.step.dropped_events}


def render_trace(report: CollectiveReport, step, devices: int) -> str:
    return dumps_json(trace_json(report, step, devices)) + "\n"
