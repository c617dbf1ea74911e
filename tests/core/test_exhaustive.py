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
from tests.core._explore import (
    HINT_SCENARIOS,
    SCENARIOS,
    Bounds,
    Client,
    Patched,
    Scenario,
    World,
    explore,
    format_result,
)

#: Depth (choices after the start state) per scenario in CI: a few seconds each.
CI_DEPTH = {
    "takeover": 7,
    "lost_release": 8,
    "handover": 6,
    "forceful": 6,
    "override": 6,
    "force_unlock": 6,
    "hinted_race": 5,
    "hinted_window": 5,  # depth 7 reaches B's forceful takeover: 105 s, no violation
    "line_three": 5,
    "line_head_dies": 5,
    "line_barging": 5,
    "line_higher": 5,
    "line_release_race": 6,
    "line_join_race": 5,  # depth 4: 760 states since an acquire reads the clock once too
}


def _bounds(scenario: Scenario) -> Bounds:
    depth = os.environ.get("PRIORITYLOCK_EXPLORE_DEPTH")
    faults = int(os.environ.get("PRIORITYLOCK_EXPLORE_FAULTS", "1"))
    return Bounds(depth=int(depth) if depth else CI_DEPTH[scenario.name], max_faults=faults)


@pytest.mark.timeout(0 if os.environ.get("PRIORITYLOCK_EXPLORE_DEPTH") else 120)
@pytest.mark.parametrize(
    "scenario", [*SCENARIOS, *HINT_SCENARIOS], ids=[s.name for s in (*SCENARIOS, *HINT_SCENARIOS)]
)
def test_no_interleaving_breaks_the_core(scenario: Scenario) -> None:
    bounds = _bounds(scenario)
    result = explore(scenario, bounds)
    report = format_result(result, bounds)
    print(report)
    assert result.violation is None, report
    # It did explore: thousands of states at the CI bound, and past the start state's events.
    if bounds.depth >= CI_DEPTH[scenario.name]:
        # (The hint scenarios start later: at the CI bound, within the holding.)
        assert result.states > 1000 and len(result.kinds) >= (
            1 if scenario in HINT_SCENARIOS else 2
        )


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


@pytest.mark.timeout(30)
@pytest.mark.parametrize("hinted", [True, False])
def test_a_hinted_holder_gets_its_whole_window(hinted: bool) -> None:
    """The issue's case, on the real flows: lease 60 s, cleanup 20 s, watch 30 s; a request
    lands 15 s after the holder's last read. Hinted (the early hint, then the request's), the
    holder is told with its whole window but the gap and the drift allowance left; without
    hints (told at once all the same, as on one machine), with under 5 s."""
    b = Bounds(
        lease_timeout=60.0,
        renew_interval=20.0,
        watch_interval=30.0,
        cleanup_timeout=20.0,
        waiting_timeout=20.0,
        drift=0.5,
        store_timeout=5.0,
    )
    clients = (
        Client("A", ("try_lock",), priority=1, hinted=hinted),
        Client("B", ("try_lock",), priority=5, hinted=hinted),
    )
    with Patched():  # renewals at the renew interval, not drawn earlier (the ticks assume it)
        _hinted_holders_window(hinted, clients, b)


def _hinted_holders_window(hinted: bool, clients: tuple[Client, ...], b: Bounds) -> None:
    world = World(Scenario("window", clients), b, (1.0, 1.0))
    for choice in [("run", 0), ("tick", 15.0), ("run_until_blocked", 1)]:
        world.apply(choice)  # A holds (its last read at 0); 15 s on, B asks
    a, b_ = world.procs
    if hinted:
        assert a.poked, "the early hint reached A before B's request was written"
        world.apply(("run_beat", 0))  # A's early read: no request yet
        world.apply(("tick", 0.01))  # B's gap
        while b_.until is None or b_.mono(world.t) >= b_.until:
            world.apply(("step", 1, "ok"))  # B's request lands, hinted; B pauses
    assert world.lease is not None and world.lease.requestor is not None
    holding = a.st.holding
    assert holding is not None
    holding.poked = True  # without hints, as a notice of one machine would (the old rule)
    world.apply(("run_beat", 0))  # A reads the request
    assert holding.told is not None
    left = holding.told.deadline - a.mono(world.t)
    if hinted:
        assert left >= 19.0, left  # 20 s less the drift allowance and the gap
    else:
        assert left < 5.0, left
