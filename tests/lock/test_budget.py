"""Request budget (docs/protocol.md): acquire <= 2 (1 when the state is known), renew 1, release 1,
watch 1 (a 304 without a body where the store can read conditionally)."""

from __future__ import annotations

import pytest

from prioritylock import FakeClock, Heartbeat
from prioritylock import _flows as flows
from prioritylock.stores import ConditionalReader
from tests.conftest import StoreFactory
from tests.lock.helpers import make

pytestmark = [pytest.mark.timeout(60), pytest.mark.usefixtures("driver")]


def test_request_budget(store_factory: StoreFactory) -> None:
    store = store_factory()
    stats = store.stats
    lock = make(store, lease_timeout=60)

    stats.reset()
    assert lock.try_lock()  # absent document, nothing known: read + create
    assert stats.total <= 2 and stats.creates == 1
    stats.reset()
    lock.renew()
    assert stats.snapshot() == {
        **dict.fromkeys(["reads", "creates", "deletes", "lists"], 0),
        "replaces": 1,
        "total": 1,
    }
    stats.reset()
    lock.unlock()
    assert stats.total == 1 and stats.replaces == 1

    stats.reset()
    assert lock.try_lock()  # version known from our own release
    assert stats.total == 1
    lock.unlock()

    fresh = make(store_factory(), owner="fresh")
    fresh_stats = fresh.config.store.stats
    fresh_stats.reset()
    assert fresh.try_lock()  # existing free document, version unknown: read + replace
    assert fresh_stats.total == 2 and fresh_stats.reads == 1
    fresh.unlock()


def test_absent_document_known_from_info_costs_one_request(store_factory: StoreFactory) -> None:
    lock = make(store_factory(), path="jobs/new-one")
    assert lock.info() is None
    stats = lock.config.store.stats
    stats.reset()
    assert lock.try_lock()
    assert stats.total == 1 and stats.creates == 1
    lock.unlock()


def test_refusal_costs_one_read(store_factory: StoreFactory) -> None:
    a = make(store_factory(), owner="a")
    b = make(store_factory(), owner="b")
    assert a.try_lock()
    stats = b.config.store.stats
    stats.reset()
    assert b.try_lock() is False
    assert stats.total == 1 and stats.reads == 1
    a.unlock()


def test_a_watch_is_one_read_and_unchanged_on_conditional_stores(
    store_factory: StoreFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Renewals at the full renew interval, not spread earlier (``_protocol.next_renewal``):
    # the script counts the watches in between.
    monkeypatch.setattr(flows, "spread_draw", lambda: 0.0)
    clock = FakeClock()
    heartbeat = Heartbeat(clock, threaded=False)
    store = store_factory()
    stats = store.stats
    lock = make(
        store,
        clock=clock,
        heartbeat=heartbeat,
        lease_timeout=60,
        renew_interval=20,
        watch_interval=5,
    )
    assert lock.try_lock()
    unchanged = 1 if isinstance(store, ConditionalReader) else 0
    nothing = dict.fromkeys(["reads", "creates", "replaces", "deletes", "lists"], 0)
    for beat in range(1, 6):  # every 5.1 s a watch; the 4th beat renews instead (due at 20 s)
        stats.reset()
        clock.advance(5.1)
        heartbeat.run_due()
        if beat == 4:
            assert stats.snapshot() == {**nothing, "replaces": 1, "total": 1}, repr(stats)
            continue
        assert stats.snapshot() == {**nothing, "reads": 1, "total": 1}, f"watch {beat}: {stats!r}"
        assert stats.not_modified == unchanged, f"watch {beat}, nothing changed: {stats!r}"
    assert lock.is_current_owner()
    lock.unlock()
