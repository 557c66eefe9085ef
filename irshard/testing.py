"""Collective budgets in a model's own test suite.

    import irshard
    from irshard.testing import assert_budget

    def test_fsdp_step_stays_within_budget():
        report = irshard.compile(train_step, *example_args(), mesh="fsdp=8",
                                 rules=FSDP_RULES)
        assert_budget(report, "all-gather@fsdp<=14", "bytes<=8MiB")

A breach fails the test with every exceeded budget listed; a budget that
holds passes silently.
"""

from __future__ import annotations

from irshard import budget


def assert_budget(report, *budgets: str) -> None:
    """Fails (AssertionError) listing every budget `report` exceeds."""
    outcomes = budget.evaluate(report, budgets)
    failed = [o for o in outcomes if not o.passed]
    if failed:
        lines = [f"{len(failed)} of {len(outcomes)} collective budgets exceeded:"]
        lines += [f"  {o.describe()}" for o in failed]
        raise AssertionError("\n".join(lines))
