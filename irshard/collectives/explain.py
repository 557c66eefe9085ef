"""Why each collective exists (`--explain`).

What a collective does is read from the HLO the report reads: the value it
moves (an input, a loop-carried value, or an op's result, followed through
copies, fusions and loops) and the op that reads its result. What those
values are in the user's terms comes from Shardy's propagated module: the
sharding propagation gave each value, and per mesh axis where it got the
axis from (`sdy.sharding_origins`: an input, a constraint, an output).

From these, per collective:

- `operand`: the value read, its sharding, the user line that made it;
- `needed`: the op that reads the result, its line, and the sharding it
  needs (the operand's, with the collective's axes gathered, moved or
  summed away);
- `origins`: per mesh axis the collective moves, where propagation got it;
- `note`: what kind of communication it is, when XLA made it for its own
  reasons (a halo exchange for a shifted slice, combined collectives), or
  when XLA replicated a whole tensor (an involuntary full
  rematerialization, see findings).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Sequence

from irshard.collectives import analysis
from irshard.collectives.origins import PropagationSites
from irshard.collectives.readers import Hlo
from irshard.collectives.values import (FORCING, HALO_PRIMITIVES, INDEXED, UPDATES,
                                        _axes, _only, _primitive, _sharded,
                                        agreeing, array_dims, fit, forcing, is_token,
                                        sharding_text)
from irshard.core.frames import UserCode, chain_of
from irshard.core.specs import ShardingSpec
from irshard.reporting.why import Cause, Origin, Value, Why
from irshard.xla.shapes import shape_leaves

# ---------------------------------------------------------------------------
# Explanations


@dataclass(frozen=True)
class _Step:
    """One collective of the partitioned HLO: what it reads, what reads
    its result, and the sharding it makes."""

    collective: Any
    reads: tuple[Value, ...]
    reader: Value
    origins: dict[str, Origin]
    causes: tuple[Cause, ...]
    # The collective reading its result, where one does (a reshard XLA
    # makes in steps): what demands that one's layout demands this one's.
    then: str | None = None


class _Explainer:
    """Explains the collectives of the partitioned HLO, in program order
    (a collective that reads another's result reads the sharding it made)."""

    def __init__(self, report, hlo: Hlo, prop: PropagationSites, collectives,
                 free_outputs: Sequence[bool] = ()):
        self.report = report
        self.hlo = hlo
        self.prop = prop
        self.mesh = report.mesh
        self.by_name = {c.name: c for c in collectives}
        # collective -> (the sharding it makes, its operand's origins)
        self.results: dict[str, tuple[Any, dict[str, Any]]] = {}
        # The outputs whose sharding the program fixes (not left to XLA).
        self.fixed_outputs = frozenset(
            i for i, free in enumerate(free_outputs) if not free)
        self.steps = {c.name: self.step(c) for c in collectives}

    def value(self, produced, axes: frozenset[str],
              reduction: bool = False) -> Value:
        """A value the HLO reads, in the user's terms; for a `reduction`,
        with what its op sums over."""
        if produced is None:
            return Value("a value", None, None)
        kind, what = produced
        if kind == "input":
            spec, origins = self.prop.argument(what)
            if what < len(self.report.inputs):
                spec = self.report.inputs[what].sharding or spec
            return Value(f"input {self.prop.input_name(what)}", spec, None,
                         _only(origins, axes, spec), all_origins=origins)
        if kind == "collective":
            spec, origins = self.results.get(what.name, (None, {}))
            source, _ = self.hlo.source(what)
            return Value(f"the result of {_label(self.by_name.get(what.name), what)}",
                         spec, source, _only(origins, axes, spec), all_origins=origins)
        source, primitive, op_name = self.hlo.site(what)
        local = array_dims(what.shape)
        operation = self.prop.op_at(source, primitive, local, axes, op_name)
        if operation is None:
            return Value(primitive or what.opcode, None, source)
        spec, origins = self.prop.result(operation)
        shape = self.prop.shardy.tensor_shape(operation.results[0].type)
        fitted = fit(spec, shape, local, self.mesh)
        if fitted is not None and fitted != spec:
            # XLA computed it in another sharding than propagation gave it:
            # what it reads is that sharding; an axis propagation put
            # elsewhere came from the op's operands.
            kept = agreeing(origins, spec, fitted)
            spec = fitted
            every = frozenset(self.mesh.names) if self.mesh else axes
            origins = dict(self.prop.operand_origins(operation, every, spec), **kept)
        sums = ()
        if reduction:
            op = self.hlo.matching(what, operation.name)
            locals_ = [self.hlo.local_shape(o, self.prop.shardy.tensor_shape(v.type))
                       for o, v in zip(op.operands, operation.operands)] \
                if op is not None and len(op.operands) == len(operation.operands) \
                else []
            sums = self.prop.operands_over(operation, axes, locals_)
            for v in sums:
                for axis, origin in v.origins.items():
                    origins.setdefault(axis, origin)
        return Value(primitive or what.opcode, spec, source,
                     _only(origins, axes, spec) if not reduction
                     else {a: o for a, o in origins.items() if a in axes}, sums,
                     all_origins=origins)

    def reader(self, found, needed, axes) -> tuple[Value, tuple[Cause, ...]]:
        """What reads the collective's result, with the sharding it gets and
        where its own result's sharding got the collective's axes (what
        demands the layout: a constraint the result carries, an output);
        and the decisions its kind adds (an output's sharding, an op that
        cannot be partitioned along a dimension). `found`: what
        `Hlo.reader` found reading it."""
        if found is None:
            return Value("its reader", needed, None), ()
        kind, what = found[:2]
        if kind == "output":
            spec, origins = self.prop.output(what)
            name = self.prop.output_name(what)
            fixed = (Cause(Origin("output", name), "needed"),) \
                if spec is not None and what in self.fixed_outputs else ()
            return Value(f"output {name}", needed, None,
                         _moved(origins, axes)), fixed
        if kind == "collective":
            wrapped = (self.hlo.inst(what.wrapped) if what.wrapped else None) or what
            source, _ = self.hlo.source(wrapped)
            return Value(_label(self.by_name.get(wrapped.name), wrapped),
                         needed, source), ()
        source, primitive, op_name = self.hlo.site(what)
        operation = self.prop.op_at(source, primitive, None, axes, op_name)
        origins = self.prop.result(operation)[1] if operation is not None else {}
        forced = ()
        # An update's array passes through it; where the collective makes
        # what is written (a scan's gradient stacked into its layer), the
        # update's kind does not force it, and a recompile without the
        # update would drop the collective's whole computation.
        written = primitive in UPDATES and found[2] != 0
        if (primitive in INDEXED or primitive in FORCING) and not written:
            prop = forcing(primitive, operation, axes)
            forced = (Cause(Origin("op", f"{primitive} {prop}", source), "needed"),)
        return Value(primitive or what.opcode, needed, source,
                     _moved(origins, axes)), forced

    def step(self, c) -> _Step:
        inst = self.hlo.inst(c.name)
        axes = _axes(c.mesh_axes)
        reduction = c.kind in ("all-reduce", "reduce-scatter")
        reads = tuple(self.value(self.hlo.producer(o), axes, reduction)
                      for o in inst.operands if not is_token(self.hlo.inst(o))) \
            or (Value("a value", None, None),)
        first = reads[0]
        needed = _needed(c.kind, first.sharding, axes, inst, self.mesh)
        self.results[c.name] = (needed, first.all_origins)
        found = self.hlo.reader(inst)
        reader, forced = self.reader(found, needed, axes)
        if _primitive(c.op_name) == "reshape":
            # XLA gathers for the reshape itself (the collective's own op):
            # the shards of the dimension it merges or splits would not
            # stay contiguous.
            forced = (Cause(Origin("op", "reshape merges or splits a dimension "
                                   f"sharded over {','.join(sorted(axes))}",
                                   c.source), "needed"), *forced)
        origins: dict[str, Origin] = {}
        for axis in sorted(axes):
            origin = reader.origins.get(axis) if c.kind == "all-to-all" else None
            origin = origin or first.origins.get(axis) or reader.origins.get(axis)
            if origin is not None:
                origins[axis] = origin
        then = found[1].name if found is not None and found[0] == "collective" else None
        return _Step(c, reads, reader, origins,
                     _candidates(reads, reader, axes, forced), then)

    def why(self, c, steps: Sequence[_Step]) -> Why:
        """The `why` of a report's collective: the partitioned
        collective(s) it is (several when XLA combined them)."""
        if not steps:
            note = ("made by XLA after partitioning (a pass that combines, "
                    "decomposes or pipelines collectives): the partitioner "
                    "inserted no collective like it")
            return Why(note, note=note, made_by="xla")
        reads = [v for step in steps for v in step.reads]
        first = steps[0]
        note = self.note(c, reads[0], first.reader)
        causes = _unique(cause for step in steps
                         for cause in (*self.demands(step), *step.causes))
        return Why(_text(c, reads, first.reader, first.origins, note),
                   reads[0], first.reader, dict(first.origins),
                   tuple(reads) if len(reads) > 1 else (), note or None,
                   causes=causes)

    def demands(self, step: _Step) -> list[Cause]:
        """What demands the layout of the collectives that read `step`'s
        result, in turn (XLA reshards in steps: all-gather, then another)."""
        found, seen = [], {step.collective.name}
        while step.then is not None and step.then not in seen:
            seen.add(step.then)
            step = self.steps.get(step.then)
            if step is None:
                break
            found += [c for c in step.causes if c.side == "needed"]
        return found

    def note(self, c, first: Value, reader: Value) -> str | None:
        axes = ",".join(c.mesh_axes or ()) or "the mesh"
        notes = []
        if c.kind == "collective-permute":
            notes.append(_permute_note(c, first, axes))
        if c.kind == "all-gather" and reader.what in INDEXED:
            notes.append(INDEXED[reader.what].format(axes=axes))
        if c.operands > 1:
            notes.append(f"XLA combined {c.operands} {c.kind}s into one")
        remat = [f for f in self.report.findings if f.kind == "involuntary-remat"
                 and f.source is not None and c.source is not None
                 and (f.source.file, f.source.line) == (c.source.file, c.source.line)]
        if remat and c.kind == "all-gather":
            notes.append(f"XLA could not reshard {remat[0].op or 'the value'} "
                         f"from {remat[0].from_sharding} to "
                         f"{remat[0].to_sharding} directly and replicates the "
                         f"whole tensor (an involuntary full rematerialization, "
                         f"see findings)")
        return "; ".join(notes) or None


def _permute_note(c, first: Value, axes: str) -> str:
    """What a collective-permute is for: the program's own ppermute, a
    halo exchange for a shifted slice, or whole shards moved to other
    devices (the same axes laid over the devices in another order)."""
    primitive = _primitive(c.op_name)
    if primitive == "ppermute" or (
            primitive is None and c.name.startswith("ppermute")):
        return (f"the program's own ppermute: each device sends its block "
                f"to the device the permutation names, along {axes}")
    if primitive in HALO_PRIMITIVES:
        what = first.what if first.what.startswith("the ") else f"the {first.what}"
        return (f"a halo exchange: neighbours along {axes} swap the edges of "
                f"their shards, for a shift, slice or pad of a dimension "
                f"sharded over {axes} ({what if first.source else 'a shifted slice'})")
    return (f"whole shards move to other devices: the value keeps its shape "
            f"per device, laid over the devices along {axes} in another order "
            f"(a reshard between two orders of the same axes, e.g. x+y to y+x, "
            f"or to a mesh with another device order)")


def _match(report_collectives, partitioned, optimized_view) -> dict[str, list[Any]]:
    """The partitioned collectives each of the report's is: itself when the
    report reads the partitioned HLO, else by kind, mesh axes and shape
    (each of a combined collective's results), the same op first."""
    if optimized_view is None:
        by_name = {p.name: p for p in partitioned}
        return {c.name: [by_name[c.name]] if c.name in by_name else []
                for c in report_collectives}
    left = list(partitioned)
    result = {}
    for c in report_collectives:
        inst = optimized_view.instructions.get(c.name)
        shapes = [tuple(leaf.dims) for leaf in shape_leaves(inst.shape)] \
            if inst is not None else [tuple(c.shape)]
        if c.is_async and inst is not None and inst.opcode.endswith("-start") \
                and len(shapes) > c.operands:
            shapes = shapes[len(shapes) - c.operands:]
        taken = []
        for shape in shapes[:max(1, c.operands)]:
            fits = [p for p in left if p.kind == c.kind
                    and _axes(p.mesh_axes) == _axes(c.mesh_axes)
                    and tuple(p.shape) == shape]
            if not fits:
                fits = [p for p in left if p.kind == c.kind
                        and _axes(p.mesh_axes) == _axes(c.mesh_axes)]
            if not fits:
                continue
            # The same op at the same line, and called along the same stack
            # (a helper's line is every caller's: a dense layer's kernel
            # serves every projection, and their collectives' shapes agree).
            same = [p for p in fits if p.op_name == c.op_name and p.source == c.source]
            best = next((p for p in same if _stack(p) == _stack(c)),
                        same[0] if same else fits[0])
            left.remove(best)
            taken.append(best)
        result[c.name] = taken
    return result


def _stack(c) -> tuple[tuple[str, int], ...]:
    """The lines of a collective's user stack, innermost first."""
    return tuple((f.file, f.line) for f in chain_of(c.source))


def _read_text(c, value: Value) -> str:
    if value.sums:
        over = "; ".join(f"{v.text()} {_sharded(v.sharding)}"
                         for v in value.sums)
        return f"a partial sum from {value.text()}, which reads {over}"
    if c.kind in ("all-reduce", "reduce-scatter"):
        return f"a partial sum from {value.text()}"
    return f"{value.text()} {_sharded(value.sharding)}"


def _text(c, reads: list[Value], reader: Value, origins, note) -> str:
    first = reads[0]
    verb = "gets the total" if c.kind in ("all-reduce", "reduce-scatter") \
        else "gets it"
    need = f"{reader.text()} {verb} {sharding_text(reader.sharding)}" \
        if reader.sharding is not None else \
        f"{reader.text()} {verb.replace(' the total', '')} (its sharding not recorded)"
    if len(reads) > 1:
        counts: dict[str, int] = {}
        for r in reads:
            line = _read_text(c, r)
            counts[line] = counts.get(line, 0) + 1
        lines = [f"reads {len(reads)} values; {need}"]
        lines += [f"  {n}x {line}" if n > 1 else f"  {line}"
                  for line, n in counts.items()]
    else:
        lines = [f"reads {_read_text(c, first)}; {need}"]
    parts = []
    for axis, origin in origins.items():
        have = first.origins.get(axis)
        need_origin = reader.origins.get(axis)
        if have and need_origin and have != need_origin:
            parts.append(f"{axis}: {have.text()} -> {need_origin.text()}")
        else:
            parts.append(f"{axis} from {origin.text()}")
    if parts:
        lines.append("; ".join(parts))
    if note:
        lines.append(note)
    return "\n".join(lines)


def _moved(origins: dict[str, Origin], axes: frozenset[str]) -> dict[str, Origin]:
    """The origins of the axes a collective moves."""
    return {a: o for a, o in sorted(origins.items()) if a in axes}


def _unique(causes) -> tuple[Cause, ...]:
    seen, found = set(), []
    for cause in causes:
        key = cause.decision.key()
        if key not in seen:
            seen.add(key)
            found.append(cause)
    return tuple(found)


def _candidates(reads: Sequence[Value], reader: Value, axes: frozenset[str],
                forced: tuple[Cause, ...]) -> tuple[Cause, ...]:
    """The decisions that may have made a collective, most likely first:
    what gave the reader's result an axis in another place than the value
    read has it (a constraint, an output), what the reader's kind forces,
    then what gave the value read its axes (an input's sharding)."""
    first = reads[0]
    needed = [Cause(o, "needed") for a, o in sorted(reader.origins.items())
              if a in axes and o != first.origins.get(a) and o.kind != "other"]
    operand = [Cause(o, "operand") for v in reads
               for s in (v, *v.sums) for a, o in sorted(s.origins.items())
               if a in axes and o.kind != "other"]
    return _unique([*needed, *forced, *operand])


def _label(collective, inst) -> str:
    """`all-gather.1`, with its kind when the name does not say it."""
    name = inst.name
    kind = collective.kind if collective is not None else None
    return name if kind is None or name.startswith(kind) else f"{name} ({kind})"


def _needed(kind: str, spec, axes: frozenset[str], inst, mesh):
    """The sharding the reader gets: the operand's with the collective's
    axes gathered or summed away, or moved (to the dimension an all-to-all
    or reduce-scatter splits)."""
    if spec is None:
        return None
    if kind in ("collective-permute",):
        return tuple(spec)
    kept = ShardingSpec.of_entries(spec).without(axes)
    if kind in ("all-to-all", "reduce-scatter"):
        m = re.search(r"\d+", inst.attrs.get("dimensions", ""))
        dim = int(m.group(0)) if m else None
        if dim is not None and dim < kept.rank:
            kept = kept.with_axes(dim, sorted(axes))
    return kept.entries()


def explained(report, lowered, stage):
    """The report with a `why` on every collective; `stage` is the
    compiled stage (optimized or partitioned) the report read. Both read
    the partitioned HLO: collectives as the partitioner inserted them, on
    values it has not yet fused."""
    import dataclasses

    partitioned = stage if stage.name == "partitioned" else stage.partitioned()
    view = partitioned.view()
    users = UserCode(lowered.info.user_dir)
    inserted = analysis.collectives(view, report.mesh, lowered.info.user_dir)
    matches = _match(report.collectives, inserted,
                     None if stage.name == "partitioned" else stage.view())
    propagated = lowered.propagate()
    prop = PropagationSites(propagated.operation, lowered.info, users)
    collectives = []
    from irshard.backend import shardy
    _, free_outputs = shardy.propagation_freedom(lowered.module)
    with prop.module.context:
        explainer = _Explainer(report, Hlo(view, users), prop, inserted,
                               free_outputs)
        for c in report.collectives:
            steps = [explainer.steps[p.name] for p in matches[c.name]]
            collectives.append(dataclasses.replace(c, why=explainer.why(c, steps)))
    from irshard.collectives.findings import findings_caused
    return findings_caused(dataclasses.replace(
        report, collectives=tuple(collectives), notes=report.notes + propagated.notes))
