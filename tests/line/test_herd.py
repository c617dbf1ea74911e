"""Many waiters on one lock: the holder's writes come first, and the waiters beyond the line's
room stay quiet (docs/protocol.md, the holder's writes come first)."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Callable
from typing import TypeVar

import attrs
import pytest

from prioritylock import LockBuilder, LockCancelled
from prioritylock import _protocol as proto
from prioritylock._lease import Entry, Lease, decode, encode
from prioritylock.stores import MemoryStore, ObjectStore
from prioritylock.stores._delegate import DelegatingStore

T = TypeVar("T")


class Counting(DelegatingStore):
    """Counts the reads and writes of the lock objects that use it. ``joins`` > 0: before each
    of its next ``joins`` writes, a waiter's join lands first; then ``holdings`` > 0: before each
    of its next ``holdings`` writes, another client's holding lands first (a new holder, the
    next fence: a release and a take). Each is written straight to ``inner``."""

    def __init__(self, inner: ObjectStore) -> None:
        super().__init__(inner)
        self.reads = self.writes = self.joins = self.holdings = 0

    def _forward(self, op: str, key: str, call: Callable[[], T]) -> T:
        if op.startswith("read"):
            self.reads += 1
        elif op.startswith("replace"):
            self.writes += 1
            if self.joins:
                self.joins -= 1
                self._first(key, _joined)
            elif self.holdings:
                self.holdings -= 1
                self._first(key, _taken)
        return call()

    def _first(self, key: str, change: Callable[[Lease], Lease]) -> None:
        found = self.inner.read(key)
        assert found is not None
        lease = decode(key, found.data, name=key)
        self.inner.replace(key, encode(change(lease)), found.version)


def _joined(lease: Lease) -> Lease:
    joiner = Entry(f"w{len(lease.line)}", "joiner", 0, 1.0, 30.0)
    return lease.rewritten(line=(*lease.line, joiner))


def _taken(lease: Lease) -> Lease:
    assert lease.holder is not None
    other = attrs.evolve(lease.holder, lock_id=f"h{lease.fence}", owner="other")
    return lease.rewritten(fence=lease.fence + 1, holder=other)


def builder(store: ObjectStore, owner: str, poll: float = 0.05) -> LockBuilder:
    return (
        LockBuilder()
        .store(store)
        .path("jobs/herd")
        .owner(owner)
        .lease_timeout(30)
        .poll_interval(poll)
    )


#: Waiters' joins that beat the holder's write, in a row: more than the 8 lost races after which
#: a renewal gives up.
JOINS = 12
#: Holdings that beat a waiter's join in a row.
HOLDINGS = 8


@pytest.mark.timeout(10)
@pytest.mark.parametrize("write", ["renew", "unlock"])
def test_the_holders_write_lands_however_many_joins_beat_it(write: str) -> None:
    """Each join that lands first costs the holder's write one more attempt, made at once: the
    13th lands (0.1 s)."""
    inner = MemoryStore(f"herd-{time.time_ns()}")
    store = Counting(inner)
    holder = builder(store, "holder").build()
    holder.lock()
    store.joins, store.writes = JOINS, 0
    started = time.monotonic()
    getattr(holder, write)()
    took = time.monotonic() - started
    assert store.writes == JOINS + 1
    assert took < 1.0, took  # no step back between the attempts (the store answers at once)
    lease = document(inner)
    assert lease is not None and len(lease.line) == JOINS  # the waiters' entries kept
    assert (lease.holder is None) is (write == "unlock")
    assert lease.holder is None or lease.holder.beat == 1


@pytest.mark.timeout(10)
def test_a_join_that_lost_to_a_holding_tries_again_at_once() -> None:
    """Under a steady run of holdings (each a holder's write that beats the waiter's join) the
    waiter joins again at once, not after a growing step back: a waiter that stepped back after
    each never joined the line, and the lock went to whoever took it again (in CI: two
    processes never held a lock that twenty tasks of a third took 356 times in 2.5 s). Eight
    lost joins, the ninth lands, in well under the 0.6 s the steps back would take at the least.
    """
    inner = MemoryStore(f"herd-{time.time_ns()}")
    holder = builder(inner, "holder").build()
    holder.lock()
    store = Counting(inner)
    waiter = builder(store, "waiter", poll=5.0).build()
    store.holdings = HOLDINGS
    cancel = threading.Event()
    raised: list[BaseException] = []

    def wait() -> None:
        try:
            waiter.lock(10, cancel=cancel)
        except BaseException as exc:  # handed to the test thread
            raised.append(exc)

    started = time.monotonic()
    thread = threading.Thread(target=wait)
    thread.start()
    deadline = started + 5
    while lined_up(inner) != 1:
        assert time.monotonic() < deadline, "the waiter never joined"
        time.sleep(0.001)
    took = time.monotonic() - started
    assert store.writes == HOLDINGS + 1
    assert took < 0.3, took
    cancel.set()
    thread.join(5)
    assert len(raised) == 1 and isinstance(raised[0], LockCancelled), raised
    assert lined_up(inner) == 0  # it left the line
    waiter.close()
    holder.close()


@pytest.mark.timeout(20)
def test_a_waiter_of_a_full_line_is_not_woken_by_releases(monkeypatch: pytest.MonkeyPatch) -> None:
    """The line holds two; a third waiter finds it full and polls (every 2.5-7.5 s here)
    without writing: the releases and takes in its process don't wake it (0.3 s)."""
    monkeypatch.setattr(proto, "MAX_LINE", 2)

    async def main() -> None:
        inner = MemoryStore(f"herd-{time.time_ns()}")
        holder = builder(inner, "holder").build_async()
        await holder.lock()
        lined = [builder(inner, f"w{i}").build_async() for i in range(2)]
        waits = []
        for lock in lined:
            waits.append(asyncio.ensure_future(lock.lock(timeout=10)))
            await until(lambda: lined_up(inner) == len(waits))
        overflow = Counting(inner)
        extra = builder(overflow, "extra", poll=5.0).build_async()
        extra_wait = asyncio.ensure_future(extra.lock(timeout=10))
        await until(lambda: overflow.reads > 0)
        await asyncio.sleep(0)  # it decided, and sleeps
        reads, writes = overflow.reads, overflow.writes
        await holder.unlock()
        for lock, wait in zip(lined, waits, strict=True):
            await asyncio.wait_for(wait, 5)  # a release, a take: each wakes the lined waiters
            await lock.unlock()
        assert (overflow.reads, overflow.writes) == (reads, writes)
        extra_wait.cancel()
        await asyncio.gather(extra_wait, return_exceptions=True)
        for lock in (holder, *lined, extra):
            await lock.aclose()

    asyncio.run(main())


@pytest.mark.timeout(20)
@pytest.mark.parametrize("how", ["close", "cancel", "aclose"])
def test_a_full_lines_waiter_stops_at_once_when_closed_or_cancelled(
    how: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A full line's waiter polls (every 2.5-7.5 s here) unwoken by releases, but closing its
    lock object or cancelling its wait ends the wait at once, with nothing claimed (0.2 s)."""
    monkeypatch.setattr(proto, "MAX_LINE", 1)
    inner = MemoryStore(f"herd-{time.time_ns()}")
    holder = builder(inner, "holder").build()
    holder.lock()
    lined = builder(inner, "lined").build()

    def wait_in_line() -> None:
        with contextlib.suppress(LockCancelled):  # closed at the end
            lined.lock(10)

    lined_wait = threading.Thread(target=wait_in_line)
    lined_wait.start()
    deadline = time.monotonic() + 5
    while lined_up(inner) != 1:
        assert time.monotonic() < deadline, "the first waiter never joined"
        time.sleep(0.005)
    overflow = Counting(inner)
    extra = builder(overflow, "extra", poll=5.0)
    if how == "aclose":

        async def main() -> float:
            lock = extra.build_async()
            wait = asyncio.ensure_future(lock.lock(timeout=10))
            await until(lambda: overflow.reads > 0)
            started = time.monotonic()
            await lock.aclose()
            with pytest.raises(LockCancelled):
                await asyncio.wait_for(wait, 5)
            return time.monotonic() - started

        took = asyncio.run(main())
    else:
        lock, cancel = extra.build(), threading.Event()
        raised: list[BaseException] = []

        def wait() -> None:
            try:
                lock.lock(10, cancel=cancel)
            except BaseException as exc:  # handed to the test thread
                raised.append(exc)

        waiter = threading.Thread(target=wait)
        waiter.start()
        deadline = time.monotonic() + 5
        while overflow.reads == 0:
            assert time.monotonic() < deadline, "the extra waiter never read"
            time.sleep(0.005)
        started = time.monotonic()
        if how == "close":
            lock.close()
        else:
            cancel.set()
        waiter.join(5)
        took = time.monotonic() - started
        assert len(raised) == 1 and isinstance(raised[0], LockCancelled), raised
    assert took < 1.0, took  # not at its next poll (2.5 s at the soonest) or its deadline
    assert overflow.writes == 0 and lined_up(inner) == 1  # it never wrote: nothing claimed
    lined.close()
    lined_wait.join(5)
    holder.close()


def document(store: ObjectStore) -> Lease | None:
    """The lock's document (the only object in ``store``)."""
    (key,) = store.list("")
    found = store.read(key)
    return None if found is None else decode(key, found.data, name=key)


def lined_up(store: ObjectStore) -> int:
    lease = document(store)
    return 0 if lease is None else len(lease.line)


async def until(check: Callable[[], bool], timeout: float = 5.0) -> None:
    end = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < end, "timed out"
        await asyncio.sleep(0.005)
