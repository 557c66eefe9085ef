"""A program without one of the decisions `--explain` names: the traced
module edited so that the decision is removed or relaxed, as a stage to
compile (`collectives.causes` says what each kind of decision becomes)."""

from __future__ import annotations

import dataclasses

from irshard.collectives import mirrors
from irshard.collectives.mirrors import same_path_end
from irshard.core.frames import UserCode
from irshard.reporting.why import Origin

# Why a decision was not recompiled: the program has none of it to remove
# (for an op: none whose results have operands of their types).
NOTHING = "the program has nothing of it to remove"
# An op's primitive as the StableHLO ops it lowers to, where the names differ.
_OP_FORMS = {"pure_callback": ("custom_call",), "io_callback": ("custom_call",)}


def counterfactual(lowered, decision: Origin, users: UserCode):
    """The traced module (`lowered`, the StableHLO stage) without
    `decision` (each of its parts, for `together`), as a stage to compile,
    and the decision as removed (under explicit axes, the first constraint
    of the chain that made the sharding: the `reshard`; for `together`,
    the parts there were to remove: a shard_map whose specs shard an axis
    has nothing a recompile can take out); None where it has nothing to
    remove."""
    from irshard.backend import shardy
    from irshard.collectives.origins import PropagationSites
    module = shardy.clone_module(lowered.module)
    # Which line made each constraint is read once, from the program as it
    # was: with some of them dropped, a helper the rest share would be
    # reached along fewer paths, and another line would be named.
    sites = PropagationSites(module.operation.opview, lowered.info, users)
    sites.constraint_paths()
    removed = []
    for part in decision.parts or (decision,):
        done = _remove(module, part, lowered.info, sites)
        if done is not None:
            removed.append(done)
        elif not decision.parts:
            return None
    if not removed:
        return None
    if decision.parts:
        decision = dataclasses.replace(decision, parts=tuple(removed))
    else:
        decision = removed[0]
    return dataclasses.replace(lowered, module=module), decision


def _remove(module, decision: Origin, info, sites) -> Origin | None:
    """Removes or relaxes `decision` in `module` (see the module
    docstring); the decision as removed, or None where there is nothing
    of it."""
    from irshard.backend import edits
    if decision.kind == "constraint":
        if decision.source is None:
            return None
        explicit = info.mesh is not None and bool(info.mesh.explicit)
        dropped = edits.drop_constraints(module, _made_at(sites, decision.source),
                                         upstream=explicit)
        if not dropped:
            return None
        if explicit:
            # Under explicit axes the shardings are in the types: the
            # outputs' follow the constraint, and are left to XLA.
            for index in range(len(info.outputs)):
                edits.open_boundary(module, "output", index)
            from irshard.backend import locations
            first = sites.called_at(sites.users.choose(locations.frames(dropped[-1][1])))
            if first is not None and first != decision.source:
                decision = dataclasses.replace(decision, source=first)
        return decision
    edit = {"op": _bypass, "shard_map": _inline}.get(decision.kind)
    if edit is not None:
        return decision if edit(module, decision, sites) else None
    kind = decision.kind
    decls = info.inputs if kind == "input" else info.outputs
    names = [t.name for t in decls]
    if decision.name not in names:
        return None
    chosen = {decision.name}
    if kind == "input":
        # An input's rule is one decision: every input it gave its sharding;
        # and an input no rule sharded is one with those that mirror it,
        # and those that mirror them (Adam's `nu` mirrors the parameter
        # that `mu` mirrors: its path ends alike, `mu`'s does not), and
        # with those one entry of the jitted step's `in_shardings` gave
        # theirs (a batch's).
        own = decls[names.index(decision.name)]
        if own.rule is not None:
            chosen |= {t.name for t in decls if t.rule == own.rule}
        else:
            chosen |= {decls[i].name for i in
                       mirrors.decision_group(decls, names.index(own.name))}
    returned = _carried_back(module, info, chosen) \
        if kind == "input" and own.rule is None else []
    for name in sorted(chosen):
        if not edits.open_boundary(module, kind, names.index(name)) \
                and name == decision.name:
            return None
    for index in returned:
        edits.open_boundary(module, "output", index)
    return decision


def _bypass(module, decision: Origin, sites) -> bool:
    """The op a decision names (its primitive at its line) removed, each
    result replaced by the operand of its type: whether there was one. A
    grouped convolution is not removed but made ungrouped (the same result
    from a block-diagonal kernel): what its grouping forces is what goes."""
    from irshard.backend import edits
    from irshard.collectives.values import PRIMITIVE_OPS, _op_name
    if decision.source is None:
        return False
    primitive = decision.name.partition(" ")[0]
    names = _OP_FORMS.get(primitive) or PRIMITIVE_OPS.get(primitive, (primitive,))
    line = (decision.source.file, decision.source.line)

    def there(operation) -> bool:
        if _op_name(operation.name) not in names:
            return False
        found = sites.source(operation)
        return found is not None and (found.file, found.line) == line

    if primitive == "conv_general_dilated" and edits.ungroup_convolutions(module, there):
        return True
    return bool(edits.bypass_ops(module, there))


def _inline(module, decision: Origin, sites) -> bool:
    """The shard_map a decision names (at its line) replaced by its body,
    where its specs shard nothing and its body talks to no other device
    (the same computation on the whole arrays): whether there was one."""
    from irshard.backend import edits
    if decision.source is None:
        return False
    return bool(edits.inline_manual_computations(
        module, _made_at(sites, decision.source)))


def _made_at(sites, source):
    """Whether an op (a constraint, a shard_map) is a decision made at
    `source`'s line: the line that called the helpers they all share."""
    line = (source.file, source.line)

    def there(operation) -> bool:
        found = sites.constraint_source(operation)
        return found is not None and (found.file, found.line) == line

    return there


def _carried_back(module, info, chosen: set[str]) -> list[int]:
    """The outputs that hand back inputs `chosen` (which no rule of
    irshard's sharded: a jitted step's own `in_shardings`) with the same
    sharding: the one an input is donated into, or one of the same shape
    whose path ends as the input's does (`result/0/params/w` for
    `state/params/w`), as a training step returns its state. The step's
    `out_shardings` repeat the decision its `in_shardings` made; an input
    left open would take its sharding back from them."""
    from irshard.backend import edits
    names = [t.name for t in info.inputs]
    given = {name: edits.boundary_sharding(module, "input", names.index(name))
             for name in chosen}
    donated = {edits.aliased_output(module, names.index(name)): name
               for name in chosen}
    found = []
    for index, out in enumerate(info.outputs):
        sharding = edits.boundary_sharding(module, "output", index)
        if sharding is None:
            continue
        if index in donated and given[donated[index]] == sharding:
            found.append(index)
            continue
        for name in chosen:
            decl = info.inputs[names.index(name)]
            if decl.shape == out.shape and given[name] == sharding and \
                    same_path_end(decl.name, out.name):
                found.append(index)
                break
    return found
