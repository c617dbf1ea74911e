"""Who a notice wakes in the line: of the waiters of one process that wait behind the line's
head, only the first in the line's order reads when the document changes; the head and every
waiter that may act on the news read as before (``_wake.Waiter.behind``, docs/design.md)."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest

from prioritylock import AsyncLock, Lock, LockBuilder, LockCancelled, NotLockOwner
from prioritylock import _flows as flows_module
from prioritylock._lease import Entry, decode, encode
from prioritylock._wake import NOTICES, location
from prioritylock.stores import LocalStore, MemoryStore, ObjectStore
from prioritylock.stores._delegate import DelegatingStore

T = TypeVar("T")
KEY = "jobs/wake"
#: Waiters behind the holder: the first two may read at the release and the take (the head, and
#: the first behind it, woken by each notice while the head's own wait is being re-armed); the
#: rest must not.
WAITERS = 8


class Reads(DelegatingStore):
    """Counts one lock object's reads."""

    def __init__(self, inner: ObjectStore) -> None:
        super().__init__(inner)
        self.reads = 0

    def _forward(self, op: str, key: str, call: Callable[[], T]) -> T:
        if op.startswith("read"):
            self.reads += 1
        return call()


class _SlowPolls(flows_module.Backoff):
    """Every pause of a waiter as long as its cap (the poll interval, 5 s here), from the
    first: whatever a waiter reads within the test, a notice woke it to read."""

    def next(self) -> float:
        return self._cap


@pytest.fixture(autouse=True)
def _slow_polls(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(flows_module, "Backoff", _SlowPolls)


@pytest.fixture(params=["memory", "local"])
def inner(request: pytest.FixtureRequest, tmp_path: Path) -> ObjectStore:
    return (
        MemoryStore(f"wake-{time.time_ns()}") if request.param == "memory" else LocalStore(tmp_path)
    )


def builder(store: ObjectStore, owner: str) -> LockBuilder:
    # Polls 5 s apart: a handover within the test's second is a notice's doing.
    return LockBuilder().store(store).path(KEY).owner(owner).lease_timeout(30).poll_interval(5.0)


def line_ids(store: ObjectStore) -> list[str]:
    (key,) = store.list("")
    found = store.read(key)
    assert found is not None
    return [e.entry_id for e in decode(key, found.data, name=key).line]


def placed_behind(store: ObjectStore) -> int:
    """The waiters of this process armed on the document with a place behind the head."""
    (key,) = store.list("")
    waiting = NOTICES._waiters.get(location(store, key), ())
    return sum(w.behind is not None for w in list(waiting))


def until(check: Callable[[], bool], timeout: float = 5.0) -> None:
    end = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < end, "timed out"
        time.sleep(0.002)


class Waiters:
    """``WAITERS`` lock objects (each on its own read-counting store), sync on threads or async
    tasks on a loop of their own, waiting in turn: each holds, and releases when told."""

    def __init__(self, inner: ObjectStore, driver: str) -> None:
        self.stores = [Reads(inner) for _ in range(WAITERS)]
        self.held: list[int] = []  # the order in which they held the lock
        self.go = [threading.Event() for _ in range(WAITERS)]  # release when set
        self.threads: list[threading.Thread] = []
        self.loop: asyncio.AbstractEventLoop | None = None
        self.locks: list[Lock] = []
        self.alocks: list[AsyncLock] = []
        if driver == "sync":
            self.locks = [builder(s, f"w{i}").build() for i, s in enumerate(self.stores)]
        else:
            self.loop = asyncio.new_event_loop()
            self.alocks = [builder(s, f"w{i}").build_async() for i, s in enumerate(self.stores)]
            self.runner = threading.Thread(target=self.loop.run_forever, daemon=True)
            self.runner.start()
        self.tasks: list[Any] = []

    def start(self, i: int) -> None:
        if self.loop is None:
            thread = threading.Thread(target=self._sync, args=(i,))
            self.threads.append(thread)
            thread.start()
        else:
            self.tasks.append(asyncio.run_coroutine_threadsafe(self._async(i), self.loop))

    def _sync(self, i: int) -> None:
        lock = self.locks[i]
        with contextlib.suppress(LockCancelled, NotLockOwner):  # closed at the end of the test
            lock.lock(timeout=20)
            self.held.append(i)
            self.go[i].wait(20)
            lock.unlock()

    async def _async(self, i: int) -> None:
        lock = self.alocks[i]
        with contextlib.suppress(LockCancelled, NotLockOwner):
            await lock.lock(timeout=20)
            self.held.append(i)
            await asyncio.get_running_loop().run_in_executor(None, self.go[i].wait, 20)
            await lock.unlock()

    def reads(self) -> list[int]:
        return [s.reads for s in self.stores]

    def close(self) -> None:
        for event in self.go:
            event.set()
        for lock in self.locks:
            lock.close()
        for thread in self.threads:
            thread.join(10)
        if self.loop is not None:
            for alock in self.alocks:
                asyncio.run_coroutine_threadsafe(alock.aclose(), self.loop).result(10)
            for task in self.tasks:
                task.result(10)
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.runner.join(10)
            self.loop.close()


@pytest.mark.timeout(30)
@pytest.mark.parametrize("driver", ["sync", "async"])
def test_a_release_wakes_the_head_and_the_first_behind_it_only(
    inner: ObjectStore, driver: str
) -> None:
    """Eight waiters of one process in the line; the holder releases: the head takes the lock,
    and the five at the back read nothing (before: every waiter read at every release and take).
    Then each takes its turn, in the line's order, woken by the release before it (polls are
    5 s apart: the seven handovers take well under a second)."""
    holder = builder(inner, "holder").build()
    holder.lock()
    waiters = Waiters(inner, driver)
    try:
        for i in range(WAITERS):
            waiters.start(i)
            until(lambda i=i: len(line_ids(inner)) == i + 1)  # type: ignore[misc]
        until(lambda: placed_behind(inner) == WAITERS - 1)
        before = waiters.reads()
        holder.unlock()
        until(lambda: waiters.held == [0])
        read = [after - was for after, was in zip(waiters.reads(), before, strict=True)]
        assert read[0] >= 1, read  # the head read, and took the lock
        assert read[3:] == [0] * (WAITERS - 3), read
        started = time.monotonic()
        for i in range(WAITERS):
            waiters.go[i].set()
            until(lambda i=i: len(waiters.held) == min(WAITERS, i + 2))  # type: ignore[misc]
        took = time.monotonic() - started
        assert waiters.held == list(range(WAITERS))
        assert took < 1.5, took
    finally:
        waiters.close()
        holder.close()


@pytest.mark.timeout(30)
@pytest.mark.parametrize("driver", ["sync", "async"])
def test_with_the_head_elsewhere_the_first_behind_it_reads_at_a_release(
    inner: ObjectStore, driver: str
) -> None:
    """The line's head is a waiter of another process (an entry written straight into the
    document: it never takes the lock here). Every waiter of this process waits behind it; at
    the release the first of them reads (the head may be gone: then it is the one to go), the
    others read nothing."""
    holder = builder(inner, "holder").build()
    holder.lock()
    (key,) = inner.list("")
    found = inner.read(key)
    assert found is not None
    lease = decode(key, found.data, name=key)
    elsewhere = Entry("elsewhere", "another process", 0, time.time(), 30.0)
    inner.replace(key, encode(lease.rewritten(line=(elsewhere,))), found.version)
    waiters = Waiters(inner, driver)
    try:
        for i in range(4):
            waiters.start(i)
            until(lambda i=i: len(line_ids(inner)) == i + 2)  # type: ignore[misc]
        until(lambda: placed_behind(inner) == 4)
        before = waiters.reads()
        holder.unlock()
        until(lambda: waiters.reads()[0] > before[0])
        until(lambda: placed_behind(inner) == 4)  # the first read, and waits behind again
        read = [after - was for after, was in zip(waiters.reads(), before, strict=True)]
        assert read[1:4] == [0, 0, 0], read
        assert waiters.held == []
    finally:
        waiters.close()
        holder.close()
