"""What only the asyncio driver has: cancellation, async listeners, and sync/async interplay.

The behaviour both drivers share is tested once, on both, through the ``driver`` fixture (see
tests/lock/drivers.py). Cancellation is injected deterministically: the lock's effects are
counted, and the caller's task is cancelled right before, or right after, the N-th effect that
awaits (a store call, a backoff, a pause), for every N the operation reaches.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

import pytest

from prioritylock import (
    AsyncLock,
    CleanupNotice,
    LockBuilder,
    LockListener,
    PreemptionTimeout,
)
from prioritylock import _alock as alock_module
from prioritylock import _effects as effects
from prioritylock.stores import LocalStore, MemoryStore, ObjectStore
from prioritylock.testing import DelegatingStore
from prioritylock.testing.faults import FaultyStore
from tests.conftest import StoreFactory, selected_kinds
from tests.lock.helpers import builder

pytestmark = pytest.mark.timeout(120)

T = TypeVar("T")

#: A scenario run: (effects to count into, or None; cancel at the n-th; after it?).
Scenario = Callable[[list[str] | None, int | None, bool], Coroutine[Any, Any, None]]

#: Where the test that cancels a request at every point it reaches runs: the in-process stores,
#: one HTTP emulator and the servers (on the S3 and Azure emulators it adds a minute to the run).
EVERY_CANCELLATION_POINT = selected_kinds(["memory", "local", "gcs", "redis", "zookeeper", "etcd"])

#: Effects at which the async driver may suspend.
AWAITING = (effects.Put, effects.Read, effects.Sleep, effects.Pause)


def run(coro: Coroutine[Any, Any, T], timeout: float = 60.0) -> T:
    async def bounded() -> T:
        return await asyncio.wait_for(coro, timeout)

    return asyncio.run(bounded())


def alock(store: ObjectStore, owner: str, **opts: Any) -> AsyncLock:
    return builder(store, owner=owner, **opts).build_async()


class Injector:
    """Cancels the task that calls into ``lock`` (through :meth:`call`) at its ``n``-th awaiting
    effect: before it is performed, or after (a write that landed but whose answer the caller
    never saw). ``seen`` lists the awaiting effects, so a first run with ``n=None`` counts them.
    The caller's task is the one cancelled, also when the lock works in a shielded task of its
    own (unlock)."""

    def __init__(self, lock: AsyncLock, n: int | None, *, after: bool) -> None:
        self.seen: list[str] = []
        self._n = n
        self._after = after
        self._victim: asyncio.Task[Any] | None = None
        self._perform = lock._perform
        lock._perform = self._perform_and_cancel  # type: ignore[method-assign]
        # An in-process store's calls are made inline, never awaited (no task can be cancelled
        # there): await them here too, so that a cancellation lands at each.
        lock._inline = lock._straight = False

    async def call(self, op: Callable[[], Awaitable[T]]) -> T:
        self._victim = asyncio.current_task()
        return await op()

    def _cancel(self) -> None:
        assert self._victim is not None
        self._victim.cancel()

    async def _perform_and_cancel(self, effect: effects.Effect) -> Any:
        if type(effect) not in AWAITING:
            return await self._perform(effect)
        self.seen.append(type(effect).__name__)
        hit = len(self.seen) == self._n
        if hit and not self._after:
            self._cancel()
            await asyncio.sleep(0)
        result = await self._perform(effect)
        if hit and self._after:
            self._cancel()
            await asyncio.sleep(0)
        return result


async def _nothing_left_for(store: ObjectStore, owner: str) -> None:
    """The lease names neither a holder nor a requestor ``owner``, and a fresh client takes
    a free lock at once."""
    probe = alock(store, "probe")
    info = await probe.info()
    if info is not None:
        assert info.owner != owner, f"a lease is left claimed for {owner}: {info}"
        assert info.requestor_owner != owner, f"a request is left for {owner}: {info}"


def _count(scenario: Scenario) -> int:
    counted: list[str] = []
    run(scenario(counted, None, False))
    assert counted, "the scenario awaited nothing"
    return len(counted)


def _cancel_everywhere(
    scenario: Scenario,
) -> int:
    """Run ``scenario`` once per awaiting effect, cancelled before and after it."""
    total = _count(scenario)
    for n in range(1, total + 1):
        for after in (False, True):
            run(scenario(None, n, after))
    return total


def test_a_cancelled_acquire_of_a_free_lock_leaves_nothing_claimed(
    store_factory: StoreFactory,
) -> None:
    async def scenario(counted: list[str] | None, n: int | None, after: bool) -> None:
        store = store_factory()
        setup = alock(store, "setup")
        if n is not None and n % 2:  # half the runs on an existing (free) document
            assert await setup.try_lock()
            await setup.unlock()
        lock = alock(store, "victim")
        injector = Injector(lock, n, after=after)
        try:
            await injector.call(lock.lock)
        except asyncio.CancelledError:
            assert n is not None
            assert not lock.is_current_owner()
            await _nothing_left_for(store, "victim")
            start = time.monotonic()
            nxt = alock(store, "next")
            assert await nxt.try_lock(), "the next client must get the lock at once"
            assert time.monotonic() - start < 5
            await nxt.unlock()
        else:
            if counted is not None:
                counted.extend(injector.seen)  # the acquire's effects, not the unlock's
            assert lock.is_current_owner()
            await lock.unlock()

    assert _cancel_everywhere(scenario) >= 2


class _GatedWrites(DelegatingStore):
    """Holds every write in its thread until :attr:`gate` opens; :attr:`entered` is set when one
    arrives and :attr:`landed` once it has been made."""

    def __init__(self, inner: ObjectStore) -> None:
        super().__init__(inner)
        self.entered = threading.Event()
        self.gate = threading.Event()
        self.landed = threading.Event()

    def _forward(self, op: str, key: str, call: Callable[[], T]) -> T:
        if op not in ("create", "replace"):
            return call()
        self.entered.set()
        assert self.gate.wait(30), "the test never opened the gate"
        try:
            return call()
        finally:
            self.landed.set()


def test_a_task_cancelled_while_its_claim_is_in_flight_takes_it_back_once_it_lands(
    tmp_path: Any,
) -> None:
    """Cancelled while its create runs on a worker thread, an acquire waits for that write to end
    (the call is shielded) and only then settles: the claim that landed is taken back. Were the
    cancel to reach the call, the settle would read before the write lands and leave it claimed."""

    async def main() -> None:
        store = _GatedWrites(LocalStore(tmp_path))
        lock = alock(store, "victim")
        task = asyncio.create_task(lock.lock())
        assert await asyncio.to_thread(store.entered.wait, 10)
        task.cancel()
        finished, _ = await asyncio.wait({task}, timeout=0.2)
        assert not finished, "the cancelled acquire ended while its write was still in flight"
        store.gate.set()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert store.landed.is_set()
        assert not lock.is_current_owner()
        await _nothing_left_for(store.inner, "victim")

    run(main())


@pytest.mark.parametrize("store_kind", EVERY_CANCELLATION_POINT, indirect=True)
def test_a_cancelled_request_is_withdrawn(store_factory: StoreFactory) -> None:
    """A higher priority's request, cancelled anywhere while it waits for the handover, is taken
    back: the holder keeps the lock and sees no request."""

    async def scenario(counted: list[str] | None, n: int | None, after: bool) -> None:
        store = store_factory()
        holder = alock(store, "holder", cleanup_timeout=0.3, poll_interval=0.05)
        assert await holder.try_lock()
        lock = alock(store, "victim", priority=5, waiting_timeout=0.3, poll_interval=0.05)
        injector = Injector(lock, n, after=after)
        try:
            await injector.call(lock.try_lock)
        except asyncio.CancelledError:
            assert n is not None
        except PreemptionTimeout:
            # not cancelled: the holder (no listener) never handed over
            if counted is not None:
                counted.extend(injector.seen)
        assert holder.is_current_owner()
        info = await holder.info()
        assert info is not None and info.owner == "holder"
        assert info.requestor_owner is None, f"the request was left behind: {info}"
        await holder.unlock()

    assert _cancel_everywhere(scenario) >= 3


def test_a_cancelled_unlock_still_releases(store_factory: StoreFactory) -> None:
    async def scenario(counted: list[str] | None, n: int | None, after: bool) -> None:
        store = store_factory()
        lock = alock(store, "victim")
        assert await lock.try_lock()
        injector = Injector(lock, n, after=after)
        try:
            await injector.call(lock.unlock)
        except asyncio.CancelledError:
            assert n is not None
        assert not lock.is_current_owner()
        info = await alock(store, "probe").info()
        assert info is not None and not info.held and info.last_event == "released"
        if counted is not None:
            counted.extend(injector.seen)

    assert _cancel_everywhere(scenario) >= 1


def test_an_unlock_made_inline_goes_on_through_a_cancellation_in_its_pause() -> None:
    """An in-process store's unlock runs without a task of its own: cancelled in the pause
    after its first write failed, it still writes its release, then raises the cancellation."""

    async def main() -> None:
        store = FaultyStore(MemoryStore("inline-unlock"))
        lock = alock(store, "victim")
        assert await lock.try_lock()
        store.inject("replace", "unavailable")  # the release pauses, then writes again
        unlocking = asyncio.ensure_future(lock.unlock())
        while store.injected["unavailable"] == 0:
            await asyncio.sleep(0)  # until the failed write: the unlock is in its pause
        unlocking.cancel()
        with pytest.raises(asyncio.CancelledError):
            await unlocking
        assert not lock.is_current_owner()
        info = await alock(store, "probe").info()
        assert info is not None and not info.held and info.last_event == "released"

    asyncio.run(main())


def test_leaving_async_with_in_a_cancelled_task_releases(store: ObjectStore) -> None:
    async def main() -> None:
        lock = alock(store, "worker")
        entered = asyncio.Event()

        async def work() -> None:
            async with lock:
                entered.set()
                await asyncio.Event().wait()  # until cancelled

        task = asyncio.create_task(work())
        await entered.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        info = await alock(store, "probe").info()
        assert info is not None and not info.held and info.last_event == "released"

    run(main())


class AsyncRecorder(LockListener):
    """Every method ``async def``: they are awaited on the lock's loop."""

    def __init__(self, cleanup: Callable[[CleanupNotice], Awaitable[None]] | None = None) -> None:
        self.calls: list[str] = []
        self.lost = asyncio.Event()
        self.cleanup_started = asyncio.Event()
        self._cleanup = cleanup

    async def on_acquired(self, lock: Any, info: Any) -> None:
        await asyncio.sleep(0)
        self.calls.append("acquired")

    async def on_released(self, lock: Any) -> None:
        self.calls.append("released")

    async def on_lock_lost(self, lock: Any, reason: str) -> None:
        self.calls.append(f"lost:{reason}")
        self.lost.set()

    async def on_cleanup_notification(self, notice: CleanupNotice) -> None:
        self.calls.append("cleanup")
        self.cleanup_started.set()
        if self._cleanup is not None:
            await self._cleanup(notice)


def test_an_async_cleanup_returning_hands_over(store_factory: StoreFactory) -> None:
    async def main() -> None:
        async def tidy(notice: CleanupNotice) -> None:
            assert notice.seconds_left() > 0
            await asyncio.sleep(0.05)

        rec = AsyncRecorder(tidy)
        holder = alock(
            store_factory(), "holder", listener=rec, cleanup_timeout=5, watch_interval=0.05
        )
        assert await holder.try_lock()
        assert rec.calls == ["acquired"]
        fence = holder.fencing_token
        urgent = alock(store_factory(), "urgent", priority=9, waiting_timeout=10)
        assert await urgent.try_lock()
        assert urgent.fencing_token == fence + 1
        await asyncio.wait_for(rec.lost.wait(), 5)
        assert rec.calls == ["acquired", "cleanup", "lost:preempted"]
        assert not holder.is_current_owner()
        info = await urgent.info()
        assert info is not None and info.last_event == "handover"
        await urgent.unlock()

    run(main())


def test_a_cancelled_async_cleanup_does_not_hand_over(store_factory: StoreFactory) -> None:
    """Cancelled half-way, a cleanup hands nothing over: the holder keeps the lock, the
    requestor's wait runs out (PreemptionTimeout), and the error is logged."""

    async def main() -> None:
        async def forever(notice: CleanupNotice) -> None:
            await asyncio.Event().wait()

        rec = AsyncRecorder(forever)
        holder = alock(
            store_factory(), "holder", listener=rec, cleanup_timeout=5, watch_interval=0.05
        )
        assert await holder.try_lock()
        # The holder is told only if it reads the request before the requestor gives up: 2 s
        # leave a loaded machine's emulator time for that read (0.8 s once did not, on moto).
        urgent = alock(store_factory(), "urgent", priority=9, waiting_timeout=2.0)
        attempt = asyncio.create_task(urgent.try_lock())
        await asyncio.wait_for(rec.cleanup_started.wait(), 5)
        cleanups = [t for t in alock_module._background if "_cleanup" in repr(t.get_coro())]
        assert len(cleanups) == 1
        cleanups[0].cancel()
        with pytest.raises(PreemptionTimeout):
            await attempt
        assert holder.is_current_owner()
        info = await holder.info()
        assert info is not None and info.owner == "holder" and info.requestor_owner is None
        assert "lost:preempted" not in rec.calls
        await holder.unlock()

    run(main())


@pytest.mark.usefixtures("notices")
def test_sync_and_async_clients_share_the_lock_and_wake_each_other(
    store_factory: StoreFactory,
) -> None:
    """Same documents, same store: each refuses while the other holds, and a release by one
    wakes a waiter of the other in this process at once (a poll interval of 30 s would
    otherwise keep it waiting)."""
    store = store_factory()
    sync_lock = builder(store, owner="sync", poll_interval=30).build()

    async def main() -> None:
        async_lock = alock(store, "async", poll_interval=30)
        assert sync_lock.try_lock()
        assert not await async_lock.try_lock()
        loop = asyncio.get_running_loop()
        waiter = asyncio.create_task(async_lock.lock(timeout=20))
        await asyncio.sleep(0.05)
        start = time.monotonic()
        await loop.run_in_executor(None, sync_lock.unlock)
        await waiter
        assert time.monotonic() - start < 3
        assert async_lock.fencing_token == 2
        assert not sync_lock.try_lock()
        waiting = loop.run_in_executor(None, lambda: sync_lock.lock(timeout=20))
        await asyncio.sleep(0.05)
        start = time.monotonic()
        await async_lock.unlock()
        await waiting
        assert time.monotonic() - start < 3
        assert sync_lock.fencing_token == 3
        sync_lock.unlock()

    run(main())


def test_build_async_refuses_nothing_the_sync_builder_accepts(store: ObjectStore) -> None:
    """The same options make both: one config, two drivers."""
    b = LockBuilder().store(store).path("jobs/x").owner("o").priority(3).lease_timeout(7)
    sync_lock, async_lock = b.build(), b.build_async()
    assert sync_lock.config == async_lock.config
    assert repr(async_lock).startswith("<AsyncLock 'v1/path/jobs/x' owner='o' priority=3")
