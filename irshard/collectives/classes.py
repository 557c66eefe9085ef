"""The decisions that shard one dimension along one axis: where a
collective stays without each decision named for it, the others that
shard what they shard (`--verify` removes them all at once).

A batch sharded by `in_shardings` and again by every layer's activation
constraint is one dimension, tied through the ops by Shardy's sharding
rules (`backend.dimensions`): Shardy records one of the decisions as the
origin, and the weights' gradients stay partial sums over the batch's
axis while any of them is left.
"""

from __future__ import annotations

from typing import Iterable, Sequence

from irshard.collectives.origins import PropagationSites
from irshard.collectives.values import _axes
from irshard.core.frames import UserCode
from irshard.reporting.why import Origin


class Decisions:
    """Each decision of a traced module (an input's, a constraint's, a
    shard_map's spec or an output's sharding) with the dimensions it shards
    and along which axes, and the classes of tied dimensions they fall in."""

    def __init__(self, lowered, users: UserCode):
        from irshard.backend import dimensions, shardy
        module = shardy.clone_module(lowered.module)
        self.tied = dimensions.tied_dimensions(module)
        sites = PropagationSites(module.operation.opview, lowered.info, users)
        # (decision, (value, dimension), the axes it shards that dimension
        # along), in the program's order: inputs, constraints and
        # shard_maps, outputs.
        self.entries: list[tuple[Origin, tuple, frozenset[str]]] = []
        with module.context:
            self._read(sites, shardy)

    def _read(self, sites: PropagationSites, shardy) -> None:
        from irshard.backend.edits import CONSTRAINTS
        main = sites.main
        if main is not None:
            arguments = list(main.body.blocks[0].arguments)
            for i, attrs in enumerate(shardy.attr_dicts(main, "arg_attrs",
                                                        len(arguments))):
                if shardy.SHARDING in attrs:
                    self._add(sites.input_origin(i), arguments[i],
                              shardy.sharding_spec(attrs[shardy.SHARDING])[1])
        for fn in sites.functions.values():
            for op in shardy.walk(fn.operation):
                if op.name in CONSTRAINTS and "sharding" in op.attributes:
                    source = sites.constraint_source(op)
                    if source is not None:
                        self._add(Origin("constraint", "", source), op.results[0],
                                  shardy.sharding_spec(op.attributes["sharding"])[1])
                elif op.name == "sdy.manual_computation":
                    self._manual(op, sites, shardy)
        if main is not None:
            returned = list(main.body.blocks[0].operations)[-1].operation
            values = list(returned.operands)
            for i, attrs in enumerate(shardy.attr_dicts(main, "res_attrs",
                                                        len(values))):
                if shardy.SHARDING in attrs:
                    self._add(Origin("output", sites.output_name(i)), values[i],
                              shardy.sharding_spec(attrs[shardy.SHARDING])[1])

    def _manual(self, op, sites: PropagationSites, shardy) -> None:
        """A shard_map's specs: each operand and result it shards is a
        decision of the shard_map at its line (as Shardy names them,
        `in_specs[i]`)."""
        source = sites.constraint_source(op)
        if source is None:
            return
        for key, side, values in (("in_shardings", "input", op.operands),
                                  ("out_shardings", "output", op.results)):
            specs = shardy.sharding_specs(op.attributes[key])
            for i, (value, spec) in enumerate(zip(values, specs)):
                self._add(Origin("shard_map", f"mc_{side}: {i}", source), value, spec)

    def _add(self, origin: Origin, value, spec) -> None:
        for d, dim in enumerate(spec.dims):
            axes = _axes(dim.axes)
            if axes:
                self.entries.append((origin, (value, d), axes))

    def sharing(self, decisions: Iterable[Origin], axes: Sequence[str]
                ) -> tuple[Origin, ...]:
        """The decisions other than `decisions` that shard a dimension tied
        to one that `decisions` shard along one of `axes`."""
        keys = {d.key() for d in decisions}
        along = _axes(axes)
        find = self.tied.find
        seeds = {find(node) for origin, node, on in self.entries
                 if origin.key() in keys and on & along}
        found: dict[str, Origin] = {}
        for origin, node, on in self.entries:
            if origin.key() not in keys and on & along and find(node) in seeds:
                found.setdefault(origin.key(), origin)
        return tuple(found.values())
