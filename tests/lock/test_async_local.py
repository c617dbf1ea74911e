"""AsyncLock on the LocalStore: store calls are made on the event loop when they won't wait, and
go to the I/O thread pool when they would (a sync, a lock held by another thread or process),
while the loop keeps running.

Which calls went to the pool is seen by giving the lock a pool that records what it is given.
"""

from __future__ import annotations

import asyncio
import sys
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from prioritylock import AsyncLock, Clock, FakeClock, LockBuilder
from prioritylock._alock import Route
from prioritylock.stores import LocalStore, _local

pytestmark = pytest.mark.timeout(60)

CYCLES = 20


class _RecordingPool(ThreadPoolExecutor):
    """A thread pool that records the name of every call it is given."""

    def __init__(self) -> None:
        super().__init__(2, thread_name_prefix="test-recording-pool")
        self.calls: list[str] = []

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        self.calls.append(fn.__name__)
        return super().submit(fn, *args, **kwargs)


def _lock(
    store: LocalStore, owner: str = "a", clock: Clock | None = None
) -> tuple[AsyncLock, _RecordingPool]:
    builder = LockBuilder().store(store).path("aio", "local").owner(owner)
    lock = (builder if clock is None else builder.clock(clock)).build_async()
    pool = _RecordingPool()
    lock._route = Route(pool, store._try_nowait)
    return lock, pool


def _run(main: Callable[[], Any]) -> Any:
    async def bounded() -> Any:
        return await asyncio.wait_for(main(), 30)

    return asyncio.run(bounded())


@pytest.mark.parametrize("durable", [True, False])
def test_an_uncontended_cycle_makes_its_store_calls_on_the_loop(
    tmp_path: Path, durable: bool
) -> None:
    store = LocalStore(tmp_path, durable=durable)

    async def main() -> tuple[list[str], list[str], dict[str, int]]:
        # On a clock that stands still: a holding that spans a tick of the heartbeat's GRACE grid
        # (10 ms, often on a loaded machine) subscribes to the store's notices and reads what
        # landed meanwhile, a read this count of the acquire's and release's requests leaves out.
        lock, pool = _lock(store, clock=FakeClock())
        try:
            assert await lock.try_lock()  # creates the document
            await lock.unlock()
            first = list(pool.calls)
            before = store.stats.snapshot()
            for _ in range(CYCLES):
                assert await lock.try_lock()
                await lock.unlock()
            after = store.stats.snapshot()
            return first, pool.calls[len(first) :], {k: after[k] - before[k] for k in after}
        finally:
            pool.shutdown()

    first, later, requests = _run(main)
    # A durable store syncs a new file: that one call waits on a thread.
    assert first == (["create"] if durable else [])
    assert later == [], "an uncontended cycle went to the thread pool"
    assert requests["total"] == 2 * CYCLES  # the version is known: one write each way
    assert requests["replaces"] == 2 * CYCLES


def _hold_stripe(store: LocalStore, key: str) -> tuple[threading.Event, threading.Thread]:
    """Another thread of this process holds ``key``'s stripe lock until the event is set."""
    stripe = _local._STRIPES[hash((store.directory, key)) % len(_local._STRIPES)]
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        with stripe:
            held.set()
            release.wait(30)

    holder = threading.Thread(target=hold, daemon=True)
    holder.start()
    assert held.wait(10)
    return release, holder


_HOLD_FLOCK = """
import fcntl, os, sys
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o666)
fcntl.flock(fd, fcntl.LOCK_EX)
print("held", flush=True)
sys.stdin.readline()
"""


async def _waits_on_the_pool(
    lock: AsyncLock, pool: _RecordingPool, release: Callable[[], object]
) -> None:
    """``lock.try_lock()`` goes to the pool and waits there while a probe task keeps waking on
    the loop; once ``release()`` is called it gets the lock."""
    loop = asyncio.get_running_loop()
    gaps: list[float] = []
    stop = asyncio.Event()

    async def probe() -> None:
        last = loop.time()
        while not stop.is_set():
            await asyncio.sleep(0.001)
            now = loop.time()
            gaps.append(now - last)
            last = now

    probing = asyncio.create_task(probe())
    attempt = asyncio.create_task(lock.try_lock())
    for _ in range(1000):  # the probe's wakeups while the write waits on its thread
        if len(gaps) >= 20:
            break
        await asyncio.sleep(0.001)
    assert pool.calls == ["replace_unsynced"], pool.calls
    assert not attempt.done(), "the write should still be waiting for the key's lock"
    release()
    assert await asyncio.wait_for(attempt, 20)
    stop.set()
    await probing
    assert lock.is_current_owner()
    await lock.unlock()
    # Waiting on the loop would stall it for the store's lock_timeout (5 s).
    assert max(gaps) < 1.0, f"the loop stalled for {max(gaps):.3f} s"


def test_a_write_meeting_a_stripe_held_by_another_thread_waits_on_the_pool(
    tmp_path: Path,
) -> None:
    store = LocalStore(tmp_path, lock_timeout=5.0)

    async def main() -> int:
        lock, pool = _lock(store)
        try:
            assert await lock.try_lock()
            await lock.unlock()
            pool.calls.clear()
            replaces = store.stats.replaces
            release, holder = _hold_stripe(store, lock.key)
            try:
                await _waits_on_the_pool(lock, pool, release.set)
            finally:
                release.set()
                holder.join(10)
            return store.stats.replaces - replaces
        finally:
            pool.shutdown()

    # The refused quick attempt is not counted: the acquire and the release, once each.
    assert _run(main) == 2


def test_a_write_meeting_an_flock_held_by_another_process_waits_on_the_pool(
    tmp_path: Path,
) -> None:
    store = LocalStore(tmp_path, lock_timeout=5.0)

    async def main() -> None:
        lock, pool = _lock(store)
        child: asyncio.subprocess.Process | None = None
        try:
            assert await lock.try_lock()
            await lock.unlock()
            pool.calls.clear()
            lock_file = _local._key_paths(store.directory, lock.key)[1]
            child = await asyncio.create_subprocess_exec(
                sys.executable,
                "-c",
                _HOLD_FLOCK,
                lock_file,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
            )
            assert child.stdin is not None
            assert child.stdout is not None
            assert (await child.stdout.readline()).strip() == b"held"
            await _waits_on_the_pool(lock, pool, partial(child.stdin.write, b"go\n"))
        finally:
            if child is not None and child.returncode is None:
                child.kill()
                await child.wait()
            pool.shutdown()

    _run(main)
