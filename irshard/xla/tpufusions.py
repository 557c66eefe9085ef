"""libtpu's collective fusions: collectives a TPU executable runs inside a
fusion, read as the collective each performs.

**Asynchronous collective fusions.** A collective overlapped with compute
runs as a chain of fusions, each holding a copy of the same collective
instruction (the same `channel_id`, and a `chain_id` frontend attribute
naming the chain):

    %async-collective-start = (bf16[16,256], bf16[256,256], s32[2], u32[], ...)
        fusion(%copy.12), kind=kCustom, ..., calls=%fused_computation.32
    %fusion.34 = (bf16[4,256], ...) fusion(%get-tuple-element.5, ...),
        kind=kOutput, ..., calls=%async_collective_fusion.34
    %async-collective-done = bf16[256,256] fusion(%get-tuple-element.15, ...),
        kind=kCustom, ..., calls=%fused_computation.34

The start's computation ends in a custom-call `AsyncCollectiveStart` of the
collective; the `async_collective_fusion`s between (none or several) compute
while it runs; the done's computation ends in `AsyncCollectiveDone`. The
chain moves the collective's bytes once: it is counted at its start.

**All-reduce-scatter fusions.** A reduce-scatter (an FSDP step's gradient
reduction) runs as a fusion whose computation all-reduces its input and
keeps this device's slice of the sum:

    %fusion.652 = bf16[16,512,256] fusion(%get-tuple-element.2081),
        kind=kCustom, calls=%all-reduce-scatter.5.clone.1, metadata={...},
        backend_config={..."emitter":"SingleInputAllReduceScatterFusion"...}
    %all-reduce-scatter.5.clone.1 (input.20: bf16[16,512,1024]) -> bf16[16,512,256] {
      %all-reduce.132 = bf16[16,512,1024] all-reduce(%input.20), channel_id=10,
          replica_groups={{0,1,2,3},...}, to_apply=%add.1.clone
      ...
      ROOT %dynamic-slice.635 = bf16[16,512,256] dynamic-slice(%all-reduce.132, ...)
    }

It is one reduce-scatter over the all-reduce's groups, of the fusion's
result: the fusion carries the metadata (the user's line), the all-reduce
inside none.
"""

from __future__ import annotations

import json
import re

START, DONE = "start", "done"

_TARGET = re.compile(r'custom_call_target="(AsyncCollective(?:Start|Done))"')
_ROLES = {"AsyncCollectiveStart": START, "AsyncCollectiveDone": DONE}
# The chain's id, in the collective's frontend attributes (the attributes
# print no nested braces).
_CHAIN = re.compile(r'frontend_attributes=\{[^{}]*?\bchain_id="([^"]*)"')


def role(view, inst) -> str | None:
    """START or DONE for a fusion whose computation ends in libtpu's
    AsyncCollectiveStart or AsyncCollectiveDone custom call, else None."""
    if inst.opcode != "fusion":
        return None
    callee = dict(inst.called_computations()).get("calls")
    root = view.root(callee) if callee else None
    if root is None or root.opcode != "custom-call":
        return None
    m = _TARGET.search(root.text)
    return _ROLES[m.group(1)] if m else None


def chain(inst) -> tuple[str, str] | None:
    """(chain id, channel id) of a collective that is part of an
    asynchronous collective fusion chain, else None."""
    m = _CHAIN.search(inst.text)
    if m is None:
        return None
    channel = re.search(r"\bchannel_id=(\d+)", inst.text)
    return m.group(1), channel.group(1) if channel else ""


def reduce_scatter(view, inst):
    """The all-reduce an all-reduce-scatter fusion `inst` performs (its
    computation's root a slice of the all-reduce's result, or a tuple of
    such slices), else None."""
    if inst.opcode != "fusion":
        return None
    callee = dict(inst.called_computations()).get("calls")
    # A streamed module's fusions are not read unless they hold a collective.
    holds = getattr(view, "holds_collectives", None)
    if not callee or (holds is not None and not holds(callee)):
        return None
    root = view.root(callee)
    if root is None:
        return None
    slices = [view.get(name, callee) for name in root.operands] \
        if root.opcode == "tuple" else [root]
    found = None
    for piece in slices:
        if piece is None or piece.opcode not in ("dynamic-slice", "slice") \
                or not piece.operands:
            return None
        summed = view.get(piece.operands[0], callee)
        if summed is not None and summed.opcode == "get-tuple-element" \
                and summed.operands:
            summed = view.get(summed.operands[0], callee)
        if summed is None or summed.opcode != "all-reduce" \
                or found not in (None, summed.name):
            return None
        found = summed.name
    return view.get(found, callee) if found else None


# libtpu's cost model: the cycles it estimates an instruction takes, in the
# `window_config` of its backend config (a fusion, a copy, a slice of a
# loop's body): `"window_config":{..., "estimated_cycles":"276236", ...}`.
_CYCLES = re.compile(r'"window_config":\{[^{}]*?"estimated_cycles":"(\d+)"')


def estimated_cycles(inst) -> int | None:
    """The cycles libtpu's cost model estimates `inst` takes on one chip,
    the figure its latency-hiding scheduler plans with; None where it gives
    none (or gives 0, its figure for an instruction it did not estimate)."""
    if "estimated_cycles" not in inst.text:
        return None
    m = _CYCLES.search(inst.text)
    return int(m.group(1)) or None if m else None


# A Pallas kernel's declared cost (`pl.CostEstimate`), which the custom
# call keeps in its backend config through compilation:
# `"custom_call_config":{..., "cost_estimate":{"flops":"123","transcendentals":"0",
# "bytes_accessed":"456", ...}, ...}` (numbers quoted once compiled).
_KERNEL_COST = re.compile(r'"cost_estimate":\s*\{([^{}]*)\}')


def kernel_cost(inst) -> tuple[float, float, float] | None:
    """(flops, transcendentals, bytes accessed) a Mosaic kernel's custom
    call declares, else None."""
    if inst.opcode != "custom-call" or "cost_estimate" not in inst.text:
        return None
    m = _KERNEL_COST.search(inst.text)
    if m is None:
        return None
    try:
        declared = json.loads("{" + m.group(1) + "}")
        return tuple(float(declared.get(k, 0)) for k in
                     ("flops", "transcendentals", "bytes_accessed"))
    except (ValueError, TypeError, AttributeError):
        return None


def allocates(inst) -> bool:
    """libtpu's `AllocateBuffer` custom call: a buffer set aside, nothing
    computed or moved."""
    return inst.opcode == "custom-call" and \
        'custom_call_target="AllocateBuffer"' in inst.text
