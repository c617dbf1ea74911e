"""The exhaustive check of the protocol core (see ``_explore``): every interleaving of 2 and 3
clients running the real flows, up to a bound, with faults, pauses and skewed clocks.

CI runs a small bound; ``PRIORITYLOCK_EXPLORE_DEPTH=N`` runs every scenario to depth N (and
``PRIORITYLOCK_EXPLORE_FAULTS=K`` allows K faults per path), e.g.
``PRIORITYLOCK_EXPLORE_DEPTH=10 pytest tests/core/test_exhaustive.py -s``.
"""

from __future__ import annotations

import os

import pytest

from prioritylock import _protocol as proto
from prioritylock._lease import Lease
from tests.core._explore import SCENARIOS, Bounds, Scenario, explore, format_result

#: Depth (choices after the start state) per scenario in CI: a few seconds each.
CI_DEPTH = {
    "takeover": 7,
    "lost_release": 8,
    "handover": 6,
    "forceful": 6,
    "override": 6,
    "force_unlock": 6,
    "line_three": 5,
    "line_head_dies": 5,
    "line_barging": 5,
    "line_higher": 5,
    "line_release_race": 6,
}


def _bounds(scenario: Scenario) -> Bounds:
    depth = os.environ.get("PRIORITYLOCK_EXPLORE_DEPTH")
    faults = int(os.environ.get("PRIORITYLOCK_EXPLORE_FAULTS", "1"))
    return Bounds(depth=int(depth) if depth else CI_DEPTH[scenario.name], max_faults=faults)


@pytest.mark.timeout(0 if os.environ.get("PRIORITYLOCK_EXPLORE_DEPTH") else 120)
@pytest.mark.parametrize("scenario", SCENARIOS, ids=[s.name for s in SCENARIOS])
def test_no_interleaving_breaks_the_core(scenario: Scenario) -> None:
    bounds = _bounds(scenario)
    result = explore(scenario, bounds)
    report = format_result(result, bounds)
    print(report)
    assert result.violation is None, report
    # It did explore: thousands of states at the CI bound, and past the start state's events.
    if bounds.depth >= CI_DEPTH[scenario.name]:
        assert result.states > 1000 and len(result.kinds) >= 2


@pytest.mark.timeout(60)
def test_dropping_the_drift_allowance_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """A waiter that counts only the lease timeout takes over while a slow-clocked holder still
    believes it holds the lock: the checker finds it and prints the trace."""

    def no_drift(lease: Lease, seen: proto.Sighting, drift: float) -> float:
        assert lease.holder is not None
        return seen.since + lease.holder.lease_timeout

    monkeypatch.setattr(proto, "expires_at", no_drift)
    scenario = SCENARIOS[0]
    result = explore(scenario, Bounds(depth=6))
    assert result.violation is not None and "both believe" in result.violation
    trace = "\n".join(result.trace)
    print(trace)
    assert "expired_takeover" in trace and trace.startswith("clock rates: {'A': 0.9, 'B': 1.1}")


@pytest.mark.timeout(60)
def test_a_repeated_fence_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """A next holder given the same fence is found on the first takeover."""
    monkeypatch.setattr(proto, "next_fence", lambda lease, boot: lease.fence)
    result = explore(SCENARIOS[0], Bounds(depth=8, max_faults=0))
    assert result.violation is not None and "not above" in result.violation, result.violation
    print("\n".join(result.trace))


@pytest.mark.timeout(60)
def test_a_release_proven_landed_is_not_a_loss(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without ``release_landed``, a release whose answer was lost, the lock then taken by the
    waiter, makes ``unlock()`` raise ``LockLost``: the checker finds it."""
    monkeypatch.setattr(proto, "release_landed", lambda current, ours: False)
    lost = next(s for s in SCENARIOS if s.name == "lost_release")
    result = explore(lost, Bounds(depth=10))
    assert result.violation is not None and "after its release landed" in result.violation
    print("\n".join(result.trace))


@pytest.mark.timeout(60)
def test_clock_rates_beyond_the_bound_break_exclusion() -> None:
    """The time model is sharp: with lease 4 s and drift 1 s, exclusion holds for clock rates
    1 +- d only while (4 + 1) / (1 + d) >= 4 / (1 - d), i.e. d <= 1/9. At +-0.15 a fast waiter
    takes over from a slow holder that still believes; at +-0.1 (the other tests) it can't."""
    result = explore(SCENARIOS[0], Bounds(depth=7, rates=(0.85, 1.15)))
    assert result.violation is not None and "both believe" in result.violation
    assert result.trace[0] == "clock rates: {'A': 0.85, 'B': 1.15}"
