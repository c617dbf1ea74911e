"""The full lock API reuses its lock objects (``server._lockcache``): requests on one lock with the
same options build one ``AsyncLock``, not one each (issue 28: building one cost more than the
request itself), and two requests never share one. In process: ``Alpha2Locks`` on a memory
store, no service (the transports are tests/server/test_alpha2.py's)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest

from prioritylock import AsyncLock
from prioritylock.server._alpha2 import Alpha2Locks, Options, ResourceLocked, Stream
from prioritylock.server._events import CleanupRequested
from prioritylock.server._lockcache import LockCache
from prioritylock.server._names import Names
from prioritylock.stores import MemoryStore

pytestmark = pytest.mark.timeout(30)

NOW = Options(immediate=True)


@pytest.fixture
def built(monkeypatch: pytest.MonkeyPatch) -> list[AsyncLock]:
    """Every ``AsyncLock`` made while the test runs."""
    made: list[AsyncLock] = []
    init = AsyncLock.__init__

    def counting(self: AsyncLock, *args: Any, **kwargs: Any) -> None:
        made.append(self)
        init(self, *args, **kwargs)

    monkeypatch.setattr(AsyncLock, "__init__", counting)
    return made


@contextlib.asynccontextmanager
async def _served() -> AsyncIterator[Alpha2Locks]:
    locks = Alpha2Locks(Names({"s": MemoryStore()}, "app"))
    try:
        yield locks
    finally:
        await locks.shutdown()
        locks.close()


def test_requests_on_one_lock_build_one_lock_object(built: list[AsyncLock]) -> None:
    asyncio.run(_one_lock_many_requests(built))


async def _one_lock_many_requests(built: list[AsyncLock]) -> None:
    async with _served() as locks:
        for _ in range(20):
            held = await locks.lock("s", "r", NOW)
            assert held.lock.is_current_owner()
            await locks.unlock("s", "r", held.lock_id)
            assert (await locks.info("s", "r"))["state"] == "free"
        # One holder's object, one reader's: 40 with an object built per request.
        assert len(built) == 2
        assert locks.idle.built == 2
        other = await locks.lock("s", "r", Options(immediate=True, priority=3))  # other options
        assert len(built) == 3
        assert other.lock.config.priority == 3


def test_two_requests_never_share_a_lock_object(built: list[AsyncLock]) -> None:
    asyncio.run(_two_requests(built))


async def _two_requests(built: list[AsyncLock]) -> None:
    async with _served() as locks:
        first = await locks.lock("s", "r", NOW)
        with pytest.raises(ResourceLocked):
            await locks.lock("s", "r", NOW)  # its own object; refused, it goes idle
        waiting = asyncio.ensure_future(locks.lock("s", "r", Options(timeout=10)))
        await asyncio.sleep(0)  # one turn: its first step takes a lock object
        # The waiter took the refused request's idle object: not the holder's.
        assert len(built) == 2 and not waiting.done()
        await locks.unlock("s", "r", first.lock_id)
        second = await waiting
        assert second.lock is not first.lock and second.lock.is_current_owner()
        assert not first.lock.is_current_owner()
        third = asyncio.ensure_future(locks.lock("s", "r", Options(timeout=10)))
        await asyncio.sleep(0)  # it takes the released holder's object (it holds nothing)
        assert not third.done()
        await locks.unlock("s", "r", second.lock_id)
        assert (await third).lock is first.lock
        assert len(built) == 2


def test_a_reused_stream_lock_tells_its_new_stream(built: list[AsyncLock]) -> None:
    asyncio.run(_streams(built))


async def _streams(built: list[AsyncLock]) -> None:
    async with _served() as locks:
        old, new = Stream(), Stream()
        held = await locks.lock("s", "r", NOW, stream=old)
        await locks.end(held)
        held = await locks.lock("s", "r", NOW, stream=new)
        assert len(built) == 1
        asking = asyncio.ensure_future(locks.lock("s", "r", Options(priority=5, timeout=10)))
        told = await asyncio.wait_for(new.events.get(), 5)
        assert isinstance(told, CleanupRequested)
        assert old.events.empty()
        await locks.end(held)  # the stream closes: the lock is handed over
        assert (await asyncio.wait_for(asking, 5)).lock.is_current_owner()


def test_the_cache_is_bounded_and_forgets_idle_objects() -> None:
    asyncio.run(_bounded())


async def _bounded() -> None:
    async with _served() as locks:
        now = [0.0]
        cache = LockCache(size=2, idle=60.0, clock=lambda: now[0])
        held = [await locks.lock("s", f"r{i}", NOW) for i in range(4)]
        cache.give("held", held[3].lock)  # holds its lease: never kept
        assert len(cache) == 0
        for i in range(3):
            await locks.unlock("s", f"r{i}", held[i].lock_id)
            cache.give(i, held[i].lock)
        assert len(cache) == 2 and cache.take(0) is None  # the least recently given went
        now[0] = 61.0
        assert cache.take(1) is None and len(cache) == 0  # idle too long
