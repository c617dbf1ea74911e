"""Request budget (PROTOCOL.md): acquire <= 2 (1 when the state is known), renew 1, release 1."""

from __future__ import annotations

import pytest

from tests.conftest import StoreFactory
from tests.lock.helpers import make

pytestmark = pytest.mark.timeout(60)


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
