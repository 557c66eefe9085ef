"""Collective budgets in a model's own test suite.

    import irshard
    from irshard.testing import assert_budget

    def test_fsdp_step_stays_within_budget():
        report = irshard.compile(train_step, *example_args(), mesh="fsdp=8",
                                 rules=FSDP_RULES)
        assert_budget(report, "all-gather@fsdp<=14", "bytes<=8MiB")

A breach fails the test with every exceeded budget listed, each with the
source lines its value comes from; a budget that holds passes silently.
The pytest plugin (`@pytest.mark.collective_budget(...)`) does the same
for a test that returns or compiles a report.
"""

from __future__ import annotations

from irshard.reporting import budget


def assert_budget(report, *budgets: str) -> None:
    """Fails (AssertionError) listing every budget `report` exceeds."""
    outcomes = budget.evaluate(report, budgets)
    if any(not o.passed for o in outcomes):
        raise AssertionError("\n".join(budget.breach_lines(report, outcomes)))
