"""HudiTableLock on the process's shared machinery: the scheduler renews every held lock (no
thread per lock), and the notices board wakes a waiter when the lock is released in this process
or (LocalStore) by another store object on the same directory. Real clock, real threads."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from prioritylock import FakeClock, HudiTableLock, LockBuilder, LockCancelled
from prioritylock import _hudi as hudi
from prioritylock._hudi_lock import KEY
from prioritylock._scheduler import Scheduler, default_scheduler
from prioritylock._wake import NOTICES
from prioritylock.stores import LocalStore, MemoryStore, ObjectStore
from prioritylock.testing import DelegatingStore
from prioritylock.testing.faults import FaultyStore

pytestmark = pytest.mark.timeout(30)


class Watched(DelegatingStore):
    """Calls ``on(op, key)`` after each request."""

    def __init__(self, inner: ObjectStore, on: Callable[[str, str], None]) -> None:
        super().__init__(inner)
        self.on = on

    def _forward(self, op: str, key: str, call: Callable[[], object]) -> object:  # type: ignore[override]
        result = call()
        self.on(op, key)
        return result


def test_fifty_held_locks_are_renewed_by_the_shared_scheduler_not_fifty_threads() -> None:
    default_scheduler()  # its threads, if not started yet, are counted below as growth
    tables = [f"t{i}/{KEY}" for i in range(50)]
    renewed: set[str] = set()
    all_renewed = threading.Event()
    guard = threading.Lock()

    def on(op: str, key: str) -> None:
        if op == "replace":
            with guard:
                renewed.add(key)
                if len(renewed) == len(tables):
                    all_renewed.set()

    store = Watched(MemoryStore(), on)
    before = threading.active_count()
    locks = [
        HudiTableLock(store, key=k, lease_timeout=3.0, renew_interval=0.1, max_clock_drift=0.5)
        for k in tables
    ]
    try:
        for lock in locks:
            assert lock.try_lock()
        first = {k: hudi.decode(store.inner.read(k).data, key=k) for k in tables}  # type: ignore[union-attr]
        assert all_renewed.wait(10), f"{len(tables) - len(renewed)} locks were never renewed"
        grown = threading.active_count() - before
        # The scheduler's loop (the memory store's renewals run on it), its notifier, one spare;
        # at most its pool for a network store. Not one per lock.
        assert grown <= 3, f"{grown} threads for 50 held locks"
        for k in tables:
            now = hudi.decode(store.inner.read(k).data, key=k)  # type: ignore[union-attr]
            assert now.valid_until_ms > first[k].valid_until_ms and not now.expired
        assert all(lock.is_current_owner() for lock in locks)
    finally:
        for lock in locks:
            lock.close()
    for k in tables:
        assert hudi.decode(store.inner.read(k).data, key=k).expired  # type: ignore[union-attr]


@pytest.fixture(params=["memory", "local"])
def two_stores(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[ObjectStore, ...]]:
    """Two store objects on one table: one MemoryStore twice, or two LocalStores on a directory
    (the waiter is then also woken by the file-system notification)."""
    if request.param == "memory":
        one = MemoryStore()
        yield one, one
    else:
        a, b = LocalStore(tmp_path / "table"), LocalStore(tmp_path / "table")
        yield a, b
        a.close()
        b.close()


@pytest.fixture
def no_notices() -> Iterator[None]:
    """Every notice dropped, as across hosts (``PRIORITYLOCK_NOTICES=off``)."""
    NOTICES.enabled = False
    try:
        yield
    finally:
        NOTICES.enabled = True


def handover(holder: HudiTableLock, waiter_store: Watched, waiter: HudiTableLock) -> float:
    """Seconds from the holder's unlock() to the waiter's lock() returning, the waiter having
    found the lock held first (so it was pausing, or about to, when the release landed)."""
    read = threading.Event()
    waiter_store.on = lambda op, key: read.set() if op == "read" else None
    got = threading.Event()
    errors: list[BaseException] = []

    def wait() -> None:
        try:
            waiter.lock(timeout=20)
            got.set()
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=wait, daemon=True)
    thread.start()
    try:
        assert read.wait(10)
        released = time.monotonic()
        holder.unlock()
        assert got.wait(15), errors
        took = time.monotonic() - released
        assert waiter.is_current_owner()
        return took
    finally:
        waiter.close()
        thread.join(5)


def test_a_waiter_takes_a_released_lock_at_the_speed_of_notices(
    two_stores: tuple[ObjectStore, ObjectStore],
) -> None:
    if not NOTICES.enabled or NOTICES.faults is not None:
        pytest.skip("notices are dropped or faulty (PRIORITYLOCK_NOTICES)")
    holder_store, waiter_store = two_stores
    watched = Watched(waiter_store, lambda op, key: None)
    a = HudiTableLock(holder_store, poll_interval=5.0)
    b = HudiTableLock(watched, poll_interval=5.0)  # a pause: 2.5-7.5 s without a notice
    assert a.try_lock()
    took = handover(a, watched, b)
    assert took < 1.0, f"the waiter took the lock {took:.2f} s after the release"


def test_without_notices_a_waiter_still_takes_the_lock_at_its_next_poll(no_notices: None) -> None:
    store = MemoryStore()
    a = HudiTableLock(store, poll_interval=0.2)
    watched = Watched(store, lambda op, key: None)
    b = HudiTableLock(watched, poll_interval=0.2)
    assert a.try_lock()
    assert handover(a, watched, b) < 5.0  # a pause is 0.1-0.3 s


def test_the_builders_scheduler_renews_a_hudi_lock() -> None:
    clock = FakeClock()
    manual = Scheduler(clock, threaded=False)
    store = MemoryStore()
    lock = LockBuilder.hudi_table(store).clock(clock).scheduler(manual).build()
    assert lock.try_lock()  # a HudiTableLock, as the builder types it
    before = store.read(KEY).version  # type: ignore[union-attr]
    clock.advance(30.0)
    manual.run_due()
    assert store.read(KEY).version != before  # type: ignore[union-attr]
    lock.unlock()
    assert manual.pending == 0


def test_close_ends_a_wait_at_once() -> None:
    store = MemoryStore()
    a, b = HudiTableLock(store), HudiTableLock(store, poll_interval=60.0)
    assert a.try_lock()
    ended = threading.Event()
    errors: list[BaseException] = []

    def wait() -> None:
        try:
            b.lock()
        except BaseException as exc:
            errors.append(exc)
        ended.set()

    waiter = threading.Thread(target=wait, daemon=True)
    waiter.start()
    try:
        b.close()
        assert ended.wait(5)
        assert len(errors) == 1 and isinstance(errors[0], LockCancelled)
    finally:
        a.close()
        waiter.join(5)


def test_renewals_run_on_the_scheduler_retry_sooner_and_stop_when_lost() -> None:
    """A manual scheduler on the lock's fake clock: each step by hand."""
    clock = FakeClock()
    scheduler = Scheduler(clock, threaded=False)
    store = FaultyStore(MemoryStore())
    told: list[str] = []
    a = HudiTableLock(
        store,
        lease_timeout=60.0,
        renew_interval=6.0,
        store_timeout=0.5,
        clock=clock,
        on_lost=told.append,
        scheduler=scheduler,
    )
    other = HudiTableLock(store, clock=clock, heartbeat=False)
    assert a.try_lock()
    assert scheduler.run_due() == pytest.approx(clock.monotonic() + 6.0)  # not due yet
    version = store.read(KEY).version  # type: ignore[union-attr]
    clock.advance(6.0)
    assert scheduler.run_due() == pytest.approx(clock.monotonic() + 6.0)
    assert store.read(KEY).version != version  # type: ignore[union-attr]
    # A renewal that fails past the store timeout is tried again within a second.
    store.inject("replace", "unavailable", times=100)
    clock.advance(6.0)
    assert scheduler.run_due() == pytest.approx(clock.monotonic() + 1.0)
    store.clear()
    clock.advance(1.0)
    assert scheduler.run_due() == pytest.approx(clock.monotonic() + 6.0)
    # Forced free and taken: the next renewal finds it lost, tells on_lost once, and stops.
    seen = a.info()
    assert seen is not None
    a.force_unlock(if_owner=seen.owner, if_valid_until_ms=seen.valid_until_ms)
    assert other.try_lock()
    clock.advance(6.0)
    assert scheduler.run_due() is None and scheduler.pending == 0
    assert told == ["acquired by others"] and not a.is_current_owner()
    other.unlock()


def test_on_lost_runs_off_the_scheduler_and_a_raising_one_stops_no_renewal() -> None:
    store = MemoryStore()
    told = threading.Event()
    where: list[str] = []

    def on_lost(reason: str) -> None:
        where.append(threading.current_thread().name)
        told.set()
        raise RuntimeError("a receiver's bug")

    renews = threading.Semaphore(0)
    watched = Watched(store, lambda op, key: renews.release() if key == "b/" + KEY else None)
    kw = {"lease_timeout": 3.0, "renew_interval": 0.1, "max_clock_drift": 0.5}
    a = HudiTableLock(store, on_lost=on_lost, **kw)  # type: ignore[arg-type]
    b = HudiTableLock(watched, key="b/" + KEY, **kw)  # type: ignore[arg-type]
    try:
        assert a.try_lock() and b.try_lock()
        seen = a.info()
        assert seen is not None
        a.force_unlock(if_owner=seen.owner, if_valid_until_ms=seen.valid_until_ms)
        assert told.wait(10)  # a's next renewal found it forced free
        assert where == ["prioritylock-heartbeat-notifier"]
        for _ in range(3):  # b is still renewed after a's receiver raised
            assert renews.acquire(timeout=10)
        assert b.is_current_owner() and not a.is_current_owner()
    finally:
        b.close()
        a.close()
