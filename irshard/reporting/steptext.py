"""The simulated step in the text report: what it is made of, where
communication hides, the model's assumptions and its error band, and the
one-line verdict (what bounds the step)."""

from __future__ import annotations

from irshard.reporting.cells import human_bytes, human_time
from irshard.reporting.report import CollectiveReport


def step_lines(report: CollectiveReport) -> list[str]:
    """`step: 41.7 ms simulated = compute 38.0 ms + exposed communication
    3.7 ms`, and what the simulation could not time."""
    if report.step is None:
        return []
    s = report.step.to_json()
    launch = f"launch {human_time(s['launch_s'])} + " if s.get("launch_s") else ""
    lines = [f"step: {human_time(s['step_s'])} simulated = {launch}compute "
             f"{human_time(s['compute_s'])} + exposed communication "
             f"{human_time(s['exposed_comm_s'])}"
             + (f" ({human_time(s['overlapped_comm_s'])} more overlapped "
                f"with compute)" if s["overlapped_comm_s"] else "")]
    lines += _made_of(s, report.target.clock_hz if report.target else None)
    lines += _communication_line(report, s)
    lines += _model_line(s)
    untimed = s.get("untimed")
    if untimed:
        ops = ", ".join(f"{n} {op}{'' if n == 1 else 's'}"
                        for op, n in untimed["instructions"].items())
        lines.append(f"  not timed: {ops}, counted by their memory traffic "
                     f"alone ({human_time(untimed['min_s'])}, a lower bound)")
    if s.get("unknown_trip_counts"):
        n = s["unknown_trip_counts"]
        lines.append(f"  {n} loop{'' if n == 1 else 's'} whose trip count is "
                     f"not known counted once: the step is a lower bound")
    return lines


def _communication_line(report: CollectiveReport, s: dict) -> list[str]:
    """Where the step's communication is more than the collectives' own
    times (the totals' `time per run`): what the rest is."""
    own = report.totals().get("time_s")
    comm = s["exposed_comm_s"] + s["overlapped_comm_s"]
    if not own or comm <= own * 1.01:
        return []
    host = report.target is None or report.target.kind == "cpu"
    why = ("the devices' rendezvous on this host: an execution's first "
           "collective, and the wait for the devices its scheduler ran last"
           if host else "what the schedule adds around them")
    return [f"  communication: {human_time(comm)} in the step, of which the "
            f"collectives' own {human_time(own)} (the table's time per run) "
            f"and {human_time(comm - own)} {why}"]


def _model_line(s: dict) -> list[str]:
    """`model: 8 simulated devices on 2 cores, at the rates measured with 8
    running at once; error band ±22%`: what the time model assumed of the
    target, and how far it was off where it was checked."""
    said = [s["assumes"]] if s.get("assumes") else []
    if s.get("error_band"):
        said.append(f"error band ±{s['error_band']:.0%}")
    return ["  model: " + "; ".join(said)] if said else []


# What timed the step's compute, as the text says it (`schedule`'s sources).
_SOURCES = {"libtpu-estimate": "libtpu's estimated cycles",
            "kernel-estimate": "kernels' declared costs", "roofline": "roofline", "traffic-only": "memory traffic only",
            "loop-trips": "loop trips"}


def _made_of(s: dict, clock: float | None) -> list[str]:
    """`compute: 2.1 ms libtpu's estimated cycles at 1.75 GHz, 31 us
    roofline; kOutput fusion 1.6 ms, ...` and `communication by axes: fsdp
    231 us exposed, 1.2 ms overlapped; tensor ...`: why the step is what
    it is."""
    compute = s.get("compute") or {}
    sources, kinds = compute.get("by_source") or {}, compute.get("by_kind") or {}
    lines = []
    if sources:
        said = []
        for source, seconds in sources.items():
            what = _SOURCES.get(source, source)
            if source == "libtpu-estimate" and clock:
                what += f" at {clock / 1e9:.3g} GHz"
            said.append(f"{human_time(seconds)} {what}")
        top = list(kinds.items())[:4]
        rest = sum(list(kinds.values())[4:])
        by_kind = ", ".join(f"{k} {human_time(v)}" for k, v in top) \
            + (f", other {human_time(rest)}" if rest else "")
        lines.append(f"  compute: {', '.join(said)}; {by_kind}")
    axes = s.get("comm_by_axes")
    if axes:
        lines.append("  communication by axes: " + "; ".join(
            f"{k} {human_time(v['exposed_s'])} exposed"
            + (f", {human_time(v['overlapped_s'])} overlapped"
               if v["overlapped_s"] else "") for k, v in axes.items()))
    return lines


def verdict_line(report: CollectiveReport) -> str | None:
    """`fits in 16 GiB HBM: 11.2 GiB; the step is compute-bound` (as the
    step line above it says; the roofline's figures where no step was
    simulated)."""
    m = report.memory
    parts = []
    if m is not None and m.capacity_bytes:
        fits = "fits in" if m.fits else "does not fit in"
        parts.append(f"{fits} {human_bytes(m.capacity_bytes)} HBM: "
                     f"{human_bytes(m.in_use)}"
                     + (f", {human_bytes(m.over_bytes)} over"
                        if m.over_bytes else ""))
    r, step = report.roofline, report.step
    if step is not None:
        # One time story: the simulated step's, as the step line says it.
        bound = "communication" if step.exposed_comm_s > step.compute_s else "compute"
        parts.append(f"the step is {bound}-bound")
    elif r:
        parts.append(f"roofline: comm {human_time(r.comm_s)} vs compute "
                     f"{human_time(r.compute_s)} (memory "
                     f"{human_time(r.memory_s)}) per step, {r.bound}-bound")
    return "; ".join(parts) if parts else None
