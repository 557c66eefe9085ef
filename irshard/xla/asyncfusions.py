"""libtpu's asynchronous collective fusions.

A TPU executable runs a collective it overlaps with compute as a chain of
fusions, each holding a copy of the same collective instruction (the same
`channel_id`, and a `chain_id` frontend attribute naming the chain):

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
"""

from __future__ import annotations

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
