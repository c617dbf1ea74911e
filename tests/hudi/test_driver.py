"""Hudi's table lock on the drivers every Lock runs on (issue 28), on both: deadlines whatever the
store does, settling a write given up on, ``with``-blocks that keep their own exception, a holder
forced free that hears it, an asyncio acquire cancelled mid-write, and the builders' twins.

Unreachable stores are real S3Stores aimed at 127.0.0.1 (``tests.lock.test_deadlines``): a closed
port, or a black hole that accepts connections and never answers.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from prioritylock import (
    AsyncHudiTableLock,
    HudiTableBuilder,
    HudiTableLock,
    LockBuilder,
    LockHeld,
    LockLost,
    LockTimeout,
    StoreUnavailable,
    signals,
)
from prioritylock import _hudi as hudi
from prioritylock._hudi_lock import KEY, force_unlock
from prioritylock.stores import MemoryStore, ObjectStore, S3Store
from tests.hudi.drivers import AsyncFace, HudiFace, hudi_lock
from tests.hudi.test_shared import Watched
from tests.lock.drivers import LOOP
from tests.lock.test_deadlines import SLACK, BlackHole, LateCreates, closed_port, s3_at, timed

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(scope="module")
def hole() -> Iterator[BlackHole]:
    black = BlackHole()
    yield black
    black.close()


@pytest.fixture(params=["closed-port", "black-hole"])
def gone(request: pytest.FixtureRequest, hole: BlackHole) -> S3Store:
    return s3_at(closed_port() if request.param == "closed-port" else hole.port)


def doc(store: ObjectStore) -> hudi.HudiLockData:
    seen = store.read(KEY)
    assert seen is not None
    return hudi.decode(seen.data, key=KEY)


def test_lock_timeout_ends_by_the_deadline_when_the_store_is_gone(
    driver: str, gone: S3Store
) -> None:
    """The store timeout (10 s) is longer than the caller's: LockTimeout at about 2 s."""
    lock = hudi_lock(driver, gone, store_timeout=10.0, heartbeat=False)
    raised, took = timed(lambda: lock.lock(timeout=2))
    assert isinstance(raised, LockTimeout), raised
    assert isinstance(raised.__cause__, StoreUnavailable)
    assert 2.0 <= took <= 2.0 + SLACK, took


def test_try_lock_and_info_are_bounded(driver: str, hole: BlackHole) -> None:
    """A store that never answers: try_lock gives a request up at the store timeout, as info."""
    lock = hudi_lock(driver, s3_at(hole.port), store_timeout=1.0, heartbeat=False)
    for call in (lock.try_lock, lock.info):
        raised, took = timed(call)
        assert isinstance(raised, StoreUnavailable), raised
        assert took <= 1.0 + SLACK, took


def test_a_claim_written_after_the_acquire_gave_up_is_taken_back(driver: str) -> None:
    store = LateCreates(MemoryStore())
    lock = hudi_lock(driver, store, store_timeout=10.0, lease_timeout=30.0, renew_interval=3.0)
    raised, took = timed(lambda: lock.lock(timeout=1))
    assert isinstance(raised, LockTimeout), raised
    assert took <= 1.0 + SLACK, took
    store.gate.set()  # the create lands now: Hudi's lock claimed for an acquire that gave up
    assert store.landed.wait(10)
    assert store.settled.wait(10), "the late claim was not taken back"
    assert doc(store.inner).expired and doc(store.inner).owner == lock.owner_id
    assert not lock.is_current_owner()
    other = hudi_lock(driver, store.inner, heartbeat=False)
    assert other.try_lock()
    other.unlock()


def within(lock: HudiFace, inside: Callable[[], None]) -> None:
    """Run ``inside`` in a ``with`` (for the asyncio twin, ``async with``) block of ``lock``."""
    if isinstance(lock, AsyncFace):
        inner = lock.inner

        async def block() -> None:
            async with inner:
                inside()

        LOOP.run(block())
    else:
        assert isinstance(lock, HudiTableLock)
        with lock:
            inside()


class Boom(Exception):
    pass


def test_a_with_block_keeps_its_own_exception_when_the_unlock_fails(driver: str) -> None:
    store = MemoryStore()
    lock = hudi_lock(driver, store, heartbeat=False)

    def force() -> None:
        seen = doc(store)
        force_unlock(store, if_owner=seen.owner, if_valid_until_ms=seen.valid_until_ms)

    def force_then_fail() -> None:  # the block's own failure, after its lock was forced free
        force()
        raise Boom("the work failed")

    with pytest.raises(Boom):
        within(lock, force_then_fail)
    assert not lock.is_current_owner()
    # A block that ends well: its exit says the lock was lost.
    with pytest.raises(LockLost):
        within(lock, force)


def test_a_holder_forced_free_hears_it_at_once_by_its_notice(driver: str) -> None:
    """A force unlock in the process is a notice: the holder reads at once (not at its next
    renewal, 30 s away), says it no longer holds the lock, tells lock_lost, and unlock() raises."""
    store = MemoryStore()
    told: list[str] = []
    heard = threading.Event()

    def on_lost(sender: Any, reason: str, info: Any) -> None:
        if sender is holder or (isinstance(holder, AsyncFace) and sender is holder.inner):
            told.append(reason)
            heard.set()

    signals.lock_lost.connect(on_lost, weak=False)
    holder = hudi_lock(driver, store)
    try:
        assert holder.try_lock()
        seen = doc(store)
        force_unlock(store, if_owner=seen.owner, if_valid_until_ms=seen.valid_until_ms)
        assert heard.wait(10), "the holder never heard"
        assert told == ["forced"] and not holder.is_current_owner()
        with pytest.raises(LockLost):
            holder.unlock()
    finally:
        signals.lock_lost.disconnect(on_lost)
        holder.close()


def test_an_asyncio_acquire_cancelled_mid_write_takes_its_claim_back() -> None:
    store = LateCreates(MemoryStore())
    lock = AsyncHudiTableLock(store, store_timeout=10.0)

    async def cancel_mid_create() -> None:
        task = asyncio.ensure_future(lock.lock())
        # The create is on its way (not the read before it: cancelling during that read, as a
        # wait on ``_inflight`` alone did under load, leaves no claim to take back).
        while not store.creating.is_set() and not task.done():
            await asyncio.sleep(0.005)
        assert not task.done()
        task.cancel()
        store.gate.set()  # the create lands after the cancel
        with pytest.raises(asyncio.CancelledError):
            await task

    LOOP.run(cancel_mid_create())
    assert store.landed.is_set() and store.settled.is_set()
    assert doc(store.inner).expired and not lock.is_current_owner()


def test_the_builders_make_both_twins() -> None:
    store = MemoryStore()
    assert isinstance(LockBuilder.hudi_table(store).build(), HudiTableLock)
    assert isinstance(LockBuilder.hudi_table(store).build_async(), AsyncHudiTableLock)
    props = {
        "hoodie.base.path": "/tmp/prioritylock-test-table",
        "hoodie.write.lock.provider": "org.apache.hudi.client.transaction.lock."
        "StorageBasedLockProvider",
        "prioritylock.owner": "etl",
    }
    builder = HudiTableBuilder.from_properties(props)
    lock = builder.build_async()
    assert isinstance(lock, AsyncHudiTableLock) and lock.name == "etl"
    assert isinstance(LockBuilder.from_properties(props), HudiTableBuilder)


def test_one_object_is_one_client_a_second_acquire_with_it_is_refused(driver: str) -> None:
    store = MemoryStore()
    holder = hudi_lock(driver, store, heartbeat=False)
    read = threading.Event()
    watched = Watched(store, lambda op, key: read.set() if op == "read" else None)
    waiter = hudi_lock(driver, watched, heartbeat=False, poll_interval=0.05)
    assert holder.try_lock()
    errors: list[BaseException] = []

    def wait() -> None:
        try:
            waiter.lock(timeout=20)
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=wait, daemon=True)
    thread.start()
    try:
        assert read.wait(10)  # the first wait has begun
        with pytest.raises(LockHeld, match="acquiring with this lock object"):
            waiter.lock(timeout=0.01)
    finally:
        holder.unlock()
        thread.join(20)
    assert not errors and waiter.is_current_owner()
    waiter.unlock()
