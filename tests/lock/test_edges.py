"""Edges that bite: ending a wait from another thread, closing a lock someone waits in, one lock
object used from two threads, and ``with lock.acquire(timeout=...)``.

The races are made deterministic with events: a clock that says when a waiter starts to wait,
and a store whose write stops half-way until the test lets it go on. No sleeping to synchronise.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any, TypeVar

import pytest

from prioritylock import Lock, LockCancelled, LockHeld, LockTimeout, SystemClock
from prioritylock.stores import ObjectStore
from prioritylock.testing import DelegatingStore
from tests.conftest import StoreFactory
from tests.lock.helpers import builder

pytestmark = pytest.mark.timeout(60)

T = TypeVar("T")


class TellingClock(SystemClock):
    """The system clock, which says when a lock starts waiting between attempts. ``stretch``:
    each wait lasts up to 30 s whatever was asked (a waiter far into its backoff), so only an
    event can end it early."""

    def __init__(self, *, stretch: bool = False) -> None:
        self.waiting = threading.Event()
        self._stretch = stretch

    def sleep(self, seconds: float) -> None:
        self.waiting.set()
        super().sleep(seconds)

    def wait(self, event: threading.Event, timeout: float) -> bool:
        self.waiting.set()
        return super().wait(event, 30.0 if self._stretch else timeout)


class Run(threading.Thread):
    """Runs ``call`` and keeps what it returned or raised."""

    def __init__(self, call: Callable[[], Any]) -> None:
        super().__init__(daemon=True)
        self._call = call
        self.error: BaseException | None = None
        self.result: Any = None

    def run(self) -> None:
        try:
            self.result = self._call()
        except BaseException as exc:
            self.error = exc


def _waiter(store: ObjectStore, clock: TellingClock, **opts: Any) -> Lock:
    return builder(store, owner="waiter", clock=clock, poll_interval=30, **opts).build()


def test_close_ends_a_wait_in_another_thread(store_factory: StoreFactory) -> None:
    holder = builder(store_factory(), owner="holder").build()
    assert holder.try_lock()
    clock = TellingClock(stretch=True)
    waiter = _waiter(store_factory(), clock)
    run = Run(waiter.lock)
    run.start()
    assert clock.waiting.wait(10), "the waiter never started to wait"
    waiter.close()
    run.join(10)
    assert not run.is_alive(), "close() did not wake the wait"
    assert isinstance(run.error, LockCancelled)
    assert isinstance(run.error, LockTimeout)  # except LockTimeout still catches it
    assert not waiter.is_current_owner()
    holder.unlock()
    info = holder.info()
    assert info is not None and not info.held, "the closed waiter took the lock after all"


def test_a_cancel_event_ends_a_wait_and_withdraws_its_request(
    store_factory: StoreFactory,
) -> None:
    holder = builder(store_factory(), owner="holder", cleanup_timeout=30).build()
    assert holder.try_lock()
    clock = TellingClock()
    waiter = _waiter(store_factory(), clock, priority=5, waiting_timeout=30)
    cancel = threading.Event()
    run = Run(lambda: waiter.lock(cancel=cancel))
    run.start()
    # Its first wait may be the window rule's gap before the request's write (a holder that
    # hears hints): the request is recorded soon after.
    assert clock.waiting.wait(10)
    for _ in range(1000):
        info = holder.info()
        if info is not None and info.requestor_owner == "waiter":
            break
        clock.waiting.clear()
        clock.waiting.wait(0.01)
    assert info is not None and info.requestor_owner == "waiter"
    cancel.set()
    run.join(10)
    assert isinstance(run.error, LockCancelled)
    info = holder.info()
    assert info is not None and info.owner == "holder" and info.requestor_owner is None
    holder.unlock()


class HeldWrite(DelegatingStore):
    """Its next write lands only when ``go`` is set; ``writing`` says it has started."""

    def __init__(self, inner: ObjectStore) -> None:
        super().__init__(inner)
        self.writing = threading.Event()
        self.go = threading.Event()
        self.armed = True

    def _forward(self, op: str, key: str, call: Callable[[], T]) -> T:
        if self.armed and op in ("create", "replace", "replace_unsynced"):
            self.armed = False
            self.writing.set()
            assert self.go.wait(20)
        return call()


def test_a_lock_closed_while_its_acquiring_write_is_in_flight_never_holds(
    store_factory: StoreFactory,
) -> None:
    store = HeldWrite(store_factory())
    lock = builder(store, owner="late").build()
    run = Run(lock.lock)
    run.start()
    assert store.writing.wait(10)
    lock.close()
    store.go.set()  # the write lands after close()
    run.join(10)
    assert isinstance(run.error, LockCancelled)
    assert not lock.is_current_owner()
    info = builder(store_factory(), owner="probe").build().info()
    assert info is not None and not info.held and info.last_event == "released"


@pytest.mark.parametrize("first_holds", [True, False], ids=["holding", "waiting"])
def test_one_lock_object_in_two_threads_raises_lock_held(
    store_factory: StoreFactory, first_holds: bool
) -> None:
    """The same on every store: a lock object is one client. A second thread's lock() raises
    LockHeld while the object holds the lock, and while another thread waits with it."""
    clock = TellingClock()
    shared = _waiter(store_factory(), clock)
    other = builder(store_factory(), owner="other").build()
    run: Run | None = None
    if first_holds:
        assert shared.try_lock()
    else:
        assert other.try_lock()
        run = Run(shared.lock)
        run.start()
        assert clock.waiting.wait(10)
    with pytest.raises(LockHeld):
        shared.lock(timeout=1)
    with pytest.raises(LockHeld):
        shared.try_lock()
    if run is not None:
        shared.close()
        run.join(10)
        assert isinstance(run.error, LockCancelled)
        other.unlock()
    else:
        shared.unlock()


def test_acquire_returns_a_context_manager_in_the_manner_of_filelock(
    store_factory: StoreFactory,
) -> None:
    lock = builder(store_factory(), owner="a").build()
    rival = builder(store_factory(), owner="b").build()
    with lock.acquire(timeout=5) as held:
        assert held is lock and lock.is_current_owner()
        with pytest.raises(LockTimeout, match="held by 'a'"):
            rival.acquire(timeout=0.1)
    assert not lock.is_current_owner()
    with rival.acquire(timeout=5):
        assert rival.fencing_token == 2


def test_async_aclose_ends_a_wait_and_acquire_is_an_async_context_manager(
    store: ObjectStore,
) -> None:
    async def main() -> None:
        holder = builder(store, owner="holder").build_async()
        waiter = builder(store, owner="waiter", poll_interval=30).build_async()
        async with holder.acquire(timeout=5) as held:
            assert held is holder and holder.is_current_owner()
            waiting = asyncio.create_task(waiter.lock())
            while not waiter._acquiring:  # started: it waits from its first pause on
                await asyncio.sleep(0)
            await asyncio.sleep(0)
            await waiter.aclose()
            with pytest.raises(LockCancelled):
                await asyncio.wait_for(waiting, 10)
        info = await holder.info()
        assert info is not None and not info.held

    asyncio.run(main())
