"""Unknown outcomes and transient failures, injected at the store seam (FaultyStore)."""

from __future__ import annotations

import pytest

from prioritylock import FakeClock, Heartbeat, StoreUnavailable
from prioritylock.stores import MemoryStore
from prioritylock.testing.faults import FaultyStore
from tests.lock.helpers import make

pytestmark = [pytest.mark.timeout(30), pytest.mark.usefixtures("driver")]


def _setup() -> tuple[FakeClock, Heartbeat, MemoryStore, FaultyStore]:
    clock = FakeClock()
    inner = MemoryStore()
    return clock, Heartbeat(clock, threaded=False), inner, FaultyStore(inner)


@pytest.mark.parametrize("fault", ["lost_response", "precondition_after_success"])
def test_acquire_whose_write_landed_unseen_is_recognised_by_its_nonce(fault: str) -> None:
    clock, hb, inner, store = _setup()
    lock = make(store, clock=clock, heartbeat=hb)
    store.inject("create", fault)
    assert lock.try_lock() is True
    assert lock.is_current_owner()
    assert inner.stats.creates == 1  # exactly one write landed; no second attempt needed
    other = make(inner, owner="other", clock=clock, heartbeat=hb)
    assert other.try_lock() is False


@pytest.mark.parametrize("fault", ["lost_response", "precondition_after_success"])
def test_takeover_and_renew_and_release_reconcile(fault: str) -> None:
    clock, hb, inner, store = _setup()
    first = make(inner, owner="first", clock=clock, heartbeat=hb)
    assert first.try_lock()
    first.unlock()
    lock = make(store, clock=clock, heartbeat=hb)
    store.inject("replace", fault)
    assert lock.try_lock()
    store.inject("replace", fault)
    lock.renew()
    assert lock.is_current_owner()
    store.inject("replace", fault)
    lock.unlock()
    info = lock.info()
    assert info is not None and not info.held and info.last_event == "released"


def test_throttled_requests_are_retried_with_backoff() -> None:
    clock, hb, inner, store = _setup()
    lock = make(store, clock=clock, heartbeat=hb, store_timeout=5.0)
    store.inject("read", "unavailable", times=3)
    store.inject("create", "unavailable", times=2)
    start = clock.monotonic()
    assert lock.try_lock()
    assert store.injected["unavailable"] == 5
    assert 0 < clock.monotonic() - start < 5.0  # backed off, within the store timeout
    assert inner.stats.creates == 1


def test_store_unavailable_past_the_store_timeout_is_raised() -> None:
    clock, hb, _, store = _setup()
    lock = make(store, clock=clock, heartbeat=hb, store_timeout=2.0)
    store.inject("read", "unavailable", times=10_000)
    with pytest.raises(StoreUnavailable):
        lock.try_lock()
    assert clock.monotonic() - 1000.0 >= 2.0


def test_a_release_that_cannot_land_is_retried_in_the_background() -> None:
    clock, hb, inner, store = _setup()
    lock = make(store, clock=clock, heartbeat=hb, store_timeout=1.0, lease_timeout=60)
    assert lock.try_lock()
    store.inject("replace", "unavailable", times=10_000)
    store.inject("read", "unavailable", times=10_000)
    with pytest.raises(StoreUnavailable):
        lock.unlock()
    assert not lock.is_current_owner()  # we no longer claim it
    found = inner.read(lock.key)
    assert found is not None and b'"holder":null' not in found.data  # not yet released
    # The store recovers; the background retry lands the release.
    store.clear()
    for _ in range(5):
        clock.advance(1.0)
        hb.run_due()
    found = inner.read(lock.key)
    assert found is not None and b'"holder":null' in found.data
    other = make(inner, owner="other", clock=clock, heartbeat=hb)
    assert other.try_lock() and other.fencing_token == 2
