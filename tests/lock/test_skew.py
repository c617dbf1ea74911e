"""Clock-rate skew: where mutual exclusion breaks, measured on the real lock with injected clocks.

Each client gets its own :class:`~prioritylock.FakeClock`, all driven by one master clock (real
time) at their own rates. The worst case for exclusion: holder H takes the lock at master time 0
and is then cut off from the store (its heartbeat never runs), and waiter W first sees H's lease
at that same instant and polls it from then on. H stops believing it holds the lock when its
own clock has counted ``lease_timeout`` (master time ``L / r_H``); W takes over when its clock has
counted ``lease_timeout + max_clock_drift`` with the lease unchanged (``(L + D) / r_W``).
Exclusion holds while H's belief ends first, that is while

    r_W / r_H  <=  1 + D / L

(W's clock running fast against H's is the danger; W's first sighting of a heartbeat in real
life comes after H started that renewal, which only adds margin). The test measures where the
real code breaks, by bisection on the rate ratio, for a few lease and drift settings, prints the
table (``pytest -s``: it is the table in ``docs/reliability.md``), and asserts exclusion holds
just inside the bound and breaks just outside it.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from prioritylock import FakeClock, Heartbeat, Lock
from prioritylock.stores import MemoryStore
from tests.lock.helpers import make

pytestmark = pytest.mark.timeout(60)

#: (lease_timeout, max_clock_drift) settings: the default, and shorter leases.
SETTINGS = [(30.0, 0.5), (10.0, 0.5), (5.0, 0.5), (1.0, 0.25)]
#: Checks per lease on the coarse grid, and per coarse step on the fine one.
COARSE = 200
FINE = 100


def _scenario(
    lease: float, drift: float, rate_holder: float, rate_waiter: float
) -> tuple[FakeClock, Lock, Lock]:
    master = FakeClock()
    holder_clock = FakeClock(master=master, rate=rate_holder, start=100.0)
    waiter_clock = FakeClock(master=master, rate=rate_waiter, start=7000.0)
    store = MemoryStore()
    holder = make(
        store,
        owner="holder",
        lease_timeout=lease,
        clock=holder_clock,
        heartbeat=Heartbeat(holder_clock, threaded=False),  # never run: cut off from the store
    )
    waiter = make(
        store,
        owner="waiter",
        lease_timeout=lease,
        max_clock_drift=drift,
        clock=waiter_clock,
        heartbeat=Heartbeat(waiter_clock, threaded=False),
    )
    assert holder.try_lock()
    assert waiter.try_lock() is False  # first sighting, at the holder's acquire
    return master, holder, waiter


def _run(
    lease: float, drift: float, rate_holder: float, rate_waiter: float, times: list[float]
) -> tuple[float, float]:
    """Master times at which the holder first stopped believing and the waiter first took over,
    checked at ``times`` (sorted); ``inf`` if not by the last."""
    master, holder, waiter = _scenario(lease, drift, rate_holder, rate_waiter)
    believed_until = taken_at = float("inf")
    now = 0.0
    for at in times:
        master.advance(at - now)
        now = at
        if believed_until == float("inf") and not holder.is_current_owner():
            believed_until = at
        if taken_at == float("inf") and waiter.try_lock():
            taken_at = at
        if believed_until < float("inf") and taken_at < float("inf"):
            break
    return believed_until, taken_at


def margin(lease: float, drift: float, rate_holder: float, rate_waiter: float) -> float:
    """Master seconds from the holder's last belief to the waiter's takeover (negative: two
    holders at once), to within ``(lease + drift) / (COARSE * FINE)``."""
    horizon = 3 * (lease + drift) / min(rate_holder, rate_waiter)
    coarse = (lease + drift) / COARSE
    grid = [coarse * i for i in range(1, int(horizon / coarse) + 2)]
    first = _run(lease, drift, rate_holder, rate_waiter, grid)
    assert all(t < float("inf") for t in first), f"no takeover within {horizon} s: {first}"
    fine = coarse / FINE
    points = set(grid)
    for t in first:
        points.update(t - coarse + fine * i for i in range(1, FINE + 2))  # past t: rounding
    believed_until, taken_at = _run(lease, drift, rate_holder, rate_waiter, sorted(points))
    return taken_at - believed_until


def breaking_ratio(
    lease: float, drift: float, skew: Callable[[float], tuple[float, float]]
) -> float:
    """The smallest rate ratio (waiter's over holder's) at which the real code lets two clients
    hold the lock at once, by bisection to 1e-5."""
    low, high = 1.0, 1.0 + 4 * drift / lease
    assert margin(lease, drift, *skew(low)) > 0
    assert margin(lease, drift, *skew(high)) < 0
    while high - low > 1e-5:
        mid = (low + high) / 2
        if margin(lease, drift, *skew(mid)) < 0:
            high = mid
        else:
            low = mid
    return high


def _waiter_fast(ratio: float) -> tuple[float, float]:
    return 1.0, ratio


def _holder_slow(ratio: float) -> tuple[float, float]:
    return 1.0 / ratio, 1.0


@pytest.mark.parametrize(("lease", "drift"), SETTINGS)
def test_exclusion_holds_inside_the_rate_bound_and_breaks_outside(
    lease: float, drift: float
) -> None:
    bound = 1 + drift / lease
    for skew in (_waiter_fast, _holder_slow):
        inside = margin(lease, drift, *skew(bound * 0.995))
        outside = margin(lease, drift, *skew(bound * 1.005))
        assert inside > 0, f"{skew.__name__}: two holders at {bound * 0.995:.4f} x (inside)"
        assert outside < 0, f"{skew.__name__}: still exclusive at {bound * 1.005:.4f} x"
    # Equal rates: the whole drift allowance is the margin.
    assert margin(lease, drift, 1.0, 1.0) == pytest.approx(drift, abs=lease / 1000)


@pytest.mark.slow
def test_the_measured_table() -> None:
    """Where exclusion breaks, measured, against 1 + D/L; printed for docs/reliability.md."""
    rows = []
    for lease, drift in SETTINGS:
        bound = 1 + drift / lease
        measured = breaking_ratio(lease, drift, _waiter_fast)
        measured_slow = breaking_ratio(lease, drift, _holder_slow)
        resolution = 2 * (lease + drift) / (COARSE * FINE) / lease + 2e-5
        assert measured == pytest.approx(bound, abs=resolution)
        assert measured_slow == pytest.approx(bound, abs=resolution)
        rows.append(
            f"| {lease:g} s | {drift:g} s | {(bound - 1) * 100:.3f} % | "
            f"{(measured - 1) * 100:.3f} % | {(measured_slow - 1) * 100:.3f} % |"
        )
    print(
        "\n| lease | drift | bound D/L | breaks at (waiter fast) | breaks at (holder slow) |"
        "\n|---|---|---|---|---|\n" + "\n".join(rows)
    )
