"""Compiling `irshard suggest`'s candidates: from the program already
traced in this process (its StableHLO with the candidate's shardings and
constraints: JAX does not trace again), or in processes of their own, each
running the command with the candidate's flags appended."""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Sequence

from irshard.core.specs import parse_sharding
from irshard.passes import pass_class


def compile_in_process(lowered) -> Callable[[Any], dict[str, Any]]:
    """A function that compiles a candidate from the traced program: its
    StableHLO with the candidate's shardings and constraints."""
    from irshard.backend import shardy
    from irshard.ir.annotation import annotate
    constrain_pass = pass_class("irshard-constrain")

    def compile_candidate(candidate) -> dict[str, Any]:
        module = shardy.clone_module(lowered.module)
        annotate(module, lowered.info.mesh,
                 {i: parse_sharding(s) for i, s in candidate.inputs},
                 {i: parse_sharding(s) for i, s in candidate.outputs})
        for match, spec in candidate.constraints:
            constrain_pass(match=match, sharding=spec).apply(module)
        stage = dataclasses.replace(lowered, module=module)
        return stage.compile().report().to_json()
    return compile_candidate


def compile_in_processes(argv: Sequence[str], jobs: int
                         ) -> Callable[[Sequence[Any]], list[Any]]:
    """Compiles candidates in `jobs` processes at once, each running
    `irshard compile ARGV FLAGS --format json` (search's `Processes`: one
    that crashes is that candidate's failure; an interruption stops them
    all)."""
    from irshard.strategy.compiling import Processes
    processes = Processes(argv, jobs)

    def run(found: Sequence[Any]) -> list[Any]:
        return processes.compile_all([(c, c.flags) for c in found])
    return run
