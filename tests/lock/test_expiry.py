"""Expiry, judged on each client's own monotonic clock (fake clocks, a stepped heartbeat)."""

from __future__ import annotations

import pytest

from prioritylock import FakeClock, Heartbeat, LockLost
from prioritylock.stores import MemoryStore
from prioritylock.testing.faults import FaultyStore
from tests.lock.helpers import Recorder, make

pytestmark = [pytest.mark.timeout(30), pytest.mark.usefixtures("driver")]

LEASE = 10.0
DRIFT = 0.5


def _pair(
    rate_a: float = 1.0, rate_b: float = 1.0
) -> tuple[FakeClock, FakeClock, FakeClock, Heartbeat, Heartbeat, MemoryStore]:
    master = FakeClock()
    clock_a = FakeClock(master=master, rate=rate_a)
    clock_b = FakeClock(master=master, rate=rate_b, start=5000.0)  # unrelated origin
    return (
        master,
        clock_a,
        clock_b,
        Heartbeat(clock_a, threaded=False),
        Heartbeat(clock_b, threaded=False),
        MemoryStore(),
    )


def test_waiter_takes_over_only_after_lease_plus_drift_from_first_sighting() -> None:
    master, clock_a, clock_b, hb_a, hb_b, store = _pair()
    rec = Recorder()
    a = make(store, owner="a", lease_timeout=LEASE, clock=clock_a, heartbeat=hb_a, listener=rec)
    b = make(
        store, owner="b", lease_timeout=LEASE, clock=clock_b, heartbeat=hb_b, max_clock_drift=DRIFT
    )
    assert a.try_lock()
    # a is partitioned from now on: its heartbeat never runs.
    master.advance(3.0)
    assert b.try_lock() is False  # b first sees a's heartbeat now
    master.advance(LEASE - 0.01)
    assert a.is_current_owner() is False  # a gave up at 10 s after its renew started (13 > 10)
    assert b.try_lock() is False  # b has seen it unchanged for 9.99 s < 10.5 s
    master.advance(DRIFT)
    assert b.try_lock() is False  # 10.49 s
    master.advance(0.02)
    assert b.try_lock() is True  # 10.51 s
    assert b.fencing_token == 2
    info = b.info()
    assert info is not None and info.last_event == "expired_takeover"
    hb_a.run_due()
    assert rec.names().count("lost") == 1
    with pytest.raises(LockLost) as caught:
        a.unlock()
    assert caught.value.reason == "expired"


def test_a_renewing_holder_is_never_taken_over() -> None:
    master, clock_a, clock_b, hb_a, hb_b, store = _pair()
    a = make(store, owner="a", lease_timeout=LEASE, clock=clock_a, heartbeat=hb_a)
    b = make(
        store, owner="b", lease_timeout=LEASE, clock=clock_b, heartbeat=hb_b, max_clock_drift=DRIFT
    )
    assert a.try_lock()
    for _ in range(100):
        master.advance(1.0)
        hb_a.run_due()
        assert a.is_current_owner()
        assert b.try_lock() is False
    assert store.stats.replaces >= 24  # renewed every third of the lease (stepped by 1 s)


@pytest.mark.parametrize(("rate_a", "rate_b"), [(1.0, 1.04), (0.96, 1.0), (1.04, 0.96)])
def test_clock_rate_skew_within_the_drift_allowance_keeps_exclusion(
    rate_a: float, rate_b: float
) -> None:
    # The holder's and the waiter's clocks run at different rates; the drift allowance covers it.
    master, clock_a, clock_b, hb_a, hb_b, store = _pair(rate_a, rate_b)
    drift = LEASE * 0.1
    a = make(store, owner="a", lease_timeout=LEASE, clock=clock_a, heartbeat=hb_a)
    b = make(
        store, owner="b", lease_timeout=LEASE, clock=clock_b, heartbeat=hb_b, max_clock_drift=drift
    )
    assert a.try_lock()
    assert b.try_lock() is False
    step = 0.05
    taken = False
    for _ in range(int(3 * LEASE / step)):
        master.advance(step)
        a_believes = a.is_current_owner()
        taken = taken or b.try_lock()
        assert not (a_believes and taken), "two holders at once"
        if taken:
            break
    assert taken


def test_renewal_failing_past_the_deadline_loses_the_lock_and_says_so() -> None:
    master = FakeClock()
    hb = Heartbeat(master, threaded=False)
    inner = MemoryStore()
    store = FaultyStore(inner)
    rec = Recorder()
    a = make(
        store,
        owner="a",
        lease_timeout=LEASE,
        clock=master,
        heartbeat=hb,
        listener=rec,
        store_timeout=1.0,
    )
    assert a.try_lock()
    store.inject("replace", "unavailable", times=10_000)
    store.inject("read", "unavailable", times=10_000)
    for _ in range(30):
        master.advance(0.5)
        hb.run_due()
    assert not a.is_current_owner()
    assert rec.lost.is_set() and rec.names().count("lost") == 1
    with pytest.raises(LockLost):
        a.renew()
