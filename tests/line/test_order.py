"""The fair line: waiters of one priority take the lock in the order they joined, higher
priorities first; a ``try_lock()`` can't barge; a dead head costs a bounded time; a full line
still serves everyone (docs/protocol.md, the line of waiters)."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from prioritylock import AsyncLock, Lock, LockBuilder, LockCancelled, LockInfo
from prioritylock import _protocol as proto
from prioritylock.stores import LocalStore, MemoryStore, ObjectStore
from tests.conftest import StoreFactory

ROOT = Path(__file__).resolve().parents[2]
#: Rounds of the order tests: 3 in CI (each round is at least five joins 100 ms apart and five
#: handovers), 20 on demand: ``PRIORITYLOCK_LINE_ROUNDS=20 pytest tests/line``.
ROUNDS = int(os.environ.get("PRIORITYLOCK_LINE_ROUNDS", "3"))


def builder(store: ObjectStore, owner: str, **opts: Any) -> LockBuilder:
    b = LockBuilder().store(store).path("jobs/line").owner(owner).poll_interval(0.2)
    for name, value in opts.items():
        getattr(b, name)(value)
    return b


def info(store: ObjectStore) -> LockInfo:
    got = builder(store, "observer").build().info()
    assert got is not None
    return got


def until(check: Callable[[], bool], timeout: float = 10.0) -> None:
    """Poll the store (no event tells a test of another process's join) until ``check``."""
    end = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < end, "timed out"
        time.sleep(0.01)


def owners(store: ObjectStore) -> list[str]:
    return [w.owner for w in info(store).waiters]


def lined(store: ObjectStore, n: int) -> None:
    """Wait until the line holds ``n`` waiters."""
    until(lambda: len(info(store).waiters) == n)


def waiting(lock: Lock, order: list[str], *, then_unlock: bool = True) -> threading.Thread:
    """A thread that waits for ``lock`` and, once it holds it, notes its owner in ``order``."""

    def wait() -> None:
        lock.lock(timeout=30)
        order.append(lock.config.owner)
        if then_unlock:
            lock.unlock()

    thread = threading.Thread(target=wait)
    thread.start()
    return thread


@pytest.fixture
def factory(request: pytest.FixtureRequest, local_store_kind: str) -> StoreFactory:
    made: StoreFactory = request.getfixturevalue(f"{local_store_kind}_store_factory")
    return made


@pytest.mark.timeout(60)
def test_threads_take_it_in_the_order_they_joined(factory: StoreFactory) -> None:
    store = factory()
    holder = builder(store, "holder").build()
    waiters = [builder(factory(), f"w{i}").build() for i in range(5)]
    for _round in range(5):
        holder.lock()
        order: list[str] = []
        threads = []
        for i, w in enumerate(waiters):
            threads.append(waiting(w, order))
            lined(store, i + 1)
        assert owners(store) == [f"w{i}" for i in range(5)]
        assert all(w.priority == 0 and w.since > 0 for w in info(store).waiters)
        holder.unlock()
        for t in threads:
            t.join(30)
        assert order == [f"w{i}" for i in range(5)]
        assert info(store).waiters == ()


@pytest.mark.timeout(60)
def test_mixed_priorities_go_by_priority_then_arrival(memory_store_factory: StoreFactory) -> None:
    store = memory_store_factory()
    holder = builder(store, "holder", priority=9).build()
    holder.lock()
    order: list[str] = []
    threads = []
    priorities = [1, 5, 1, 5, 3]
    for i, priority in enumerate(priorities):
        threads.append(
            waiting(builder(store, f"w{i}p{priority}", priority=priority).build(), order)
        )
        lined(store, i + 1)
    expected = ["w1p5", "w3p5", "w4p3", "w0p1", "w2p1"]
    assert owners(store) == expected
    assert [w.priority for w in info(store).waiters] == [5, 5, 3, 1, 1]
    holder.unlock()
    for t in threads:
        t.join(30)
    assert order == expected


async def wait(lock: AsyncLock, order: list[str]) -> None:
    await lock.lock(timeout=30)
    order.append(lock.config.owner)
    await lock.unlock()


@pytest.mark.timeout(60)
def test_asyncio_waiters_in_one_loop_take_it_in_order() -> None:
    store = MemoryStore()

    async def main() -> None:
        holder = builder(store, "holder").build_async()
        waiters = [builder(store, f"w{i}").build_async() for i in range(5)]
        for _round in range(ROUNDS):
            await holder.lock()
            order: list[str] = []
            tasks = []
            for i, w in enumerate(waiters):
                tasks.append(asyncio.create_task(wait(w, order)))
                while len((await holder.info() or info(store)).waiters) < i + 1:
                    await asyncio.sleep(0.005)
                await asyncio.sleep(0.1)  # joins 100 ms apart, as the issue has it
            await holder.unlock()
            await asyncio.wait_for(asyncio.gather(*tasks), 30)
            assert order == [f"w{i}" for i in range(5)]

    asyncio.run(main())


@pytest.fixture
def processes(tmp_path: Path) -> Iterator[Callable[[str, float], subprocess.Popen[str]]]:
    started: list[subprocess.Popen[str]] = []

    def start(owner: str, lease: float) -> subprocess.Popen[str]:
        child = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests._helpers.line_waiter",
                *(str(tmp_path / "store"), "jobs/line", owner, str(lease)),
            ],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        started.append(child)
        assert child.stdout is not None and child.stdout.readline() == "ready\n"
        return child

    yield start
    for child in started:
        if child.poll() is None:
            child.kill()
        child.wait(10)
        for pipe in (child.stdin, child.stdout):
            if pipe is not None:
                pipe.close()


def _send(child: subprocess.Popen[str], command: str) -> None:
    assert child.stdin is not None
    child.stdin.write(command + "\n")
    child.stdin.flush()


@pytest.mark.timeout(120)
def test_five_processes_joining_100ms_apart_take_it_in_that_order(
    tmp_path: Path, processes: Callable[[str, float], subprocess.Popen[str]]
) -> None:
    children = [processes(f"p{i}", 10.0) for i in range(5)]
    store = LocalStore(tmp_path / "store")
    holder = builder(store, "holder").build()
    for _round in range(ROUNDS):
        holder.lock()
        for i, child in enumerate(children):
            sent = time.monotonic()
            _send(child, "lock")
            lined(store, i + 1)
            time.sleep(max(0.0, sent + 0.1 - time.monotonic()))  # 100 ms apart
        assert owners(store) == [f"p{i}" for i in range(5)]
        holder.unlock()
        fences = []
        for child in children:
            assert child.stdout is not None
            word, fence = child.stdout.readline().split()
            assert word == "took"
            fences.append(int(fence))
        assert fences == sorted(fences), f"taken out of line order: fences {fences}"


@pytest.mark.timeout(60)
def test_a_try_lock_loop_cannot_barge_ahead_of_a_lined_waiter(
    memory_store_factory: StoreFactory,
) -> None:
    store = memory_store_factory()
    holder = builder(store, "holder").build()
    waiter = builder(store, "waiter").build()
    barger = builder(store, "barger").build()
    # Another racing with a shorter poll, out of the line, by blocking lock() calls.
    racer = builder(store, "racer", fair=False, poll_interval=0.001).build()
    stop = threading.Event()

    def barge() -> None:
        while not stop.is_set():
            if barger.try_lock():
                barger.unlock()

    def race() -> None:
        while not stop.is_set():
            try:
                racer.lock(timeout=0.05)
            except TimeoutError:
                continue
            racer.unlock()

    for _round in range(10):
        holder.lock()
        fence = holder.fencing_token
        order: list[str] = []
        w = waiting(waiter, order, then_unlock=False)
        until(lambda: owners(store) == ["waiter"])
        stop.clear()
        others = [threading.Thread(target=barge), threading.Thread(target=race)]
        for t in others:
            t.start()
        time.sleep(0.05)  # both race for a while against the held lock
        holder.unlock()
        w.join(30)
        # The waiter took the lock next: the first fence after the holder's.
        assert order == ["waiter"] and waiter.fencing_token == fence + 1
        stop.set()
        for t in others:
            t.join(30)
        waiter.unlock()
    assert owners(store) == []


@pytest.mark.timeout(60)
def test_a_sigkilled_head_costs_the_next_waiter_its_bound(
    tmp_path: Path, processes: Callable[[str, float], subprocess.Popen[str]]
) -> None:
    lease, drift, poll = 2.0, 0.5, 0.2
    store = LocalStore(tmp_path / "store")
    holder = builder(store, "holder").build()
    holder.lock()
    head = processes("head", lease)
    _send(head, "lock")
    until(lambda: owners(store) == ["head"])
    waiter = builder(store, "next", max_clock_drift=drift).build()
    order: list[str] = []
    t = waiting(waiter, order, then_unlock=False)
    until(lambda: owners(store) == ["head", "next"])
    head.send_signal(signal.SIGKILL)
    head.wait(10)
    released = time.monotonic()
    holder.unlock()
    t.join(30)
    took = time.monotonic() - released
    assert order == ["next"]
    # The head's entry is judged gone at most its ttl + drift after its last beat was seen,
    # itself within a poll (1.5 x the interval) of being written.
    assert took <= lease + drift + 1.5 * poll + 1.0, took
    assert info(store).waiters == () and waiter.is_current_owner()
    waiter.unlock()


@pytest.mark.timeout(60)
def test_a_full_line_still_serves_the_extra_waiter(
    memory_store_factory: StoreFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(proto, "MAX_LINE", 3)
    store = memory_store_factory()
    holder = builder(store, "holder").build()
    holder.lock()
    order: list[str] = []
    threads = []
    for i in range(4):
        threads.append(waiting(builder(store, f"w{i}").build(), order))
        if i < 3:
            lined(store, i + 1)
    time.sleep(0.3)  # the fourth reads a full line (and polls) meanwhile
    assert owners(store) == ["w0", "w1", "w2"]
    holder.unlock()
    for t in threads:
        t.join(30)
    assert order[:3] == ["w0", "w1", "w2"] and order[3] == "w3"
    assert info(store).waiters == ()


@pytest.mark.timeout(30)
def test_leaving_takes_the_entry_out(memory_store_factory: StoreFactory) -> None:
    """A waiter whose timeout runs out, or whose wait is cancelled, leaves the line."""
    store = memory_store_factory()
    holder = builder(store, "holder").build()
    holder.lock()
    waiter = builder(store, "timeout").build()
    with pytest.raises(TimeoutError):
        waiter.lock(timeout=0.3)
    assert owners(store) == []
    cancel = threading.Event()
    cancelled = builder(store, "cancelled").build()
    raised: list[BaseException] = []

    def wait() -> None:
        try:
            cancelled.lock(cancel=cancel)
        except LockCancelled as exc:
            raised.append(exc)

    t = threading.Thread(target=wait)
    t.start()
    until(lambda: owners(store) == ["cancelled"])
    cancel.set()
    t.join(10)
    assert raised and owners(store) == []

    async def cancel_task() -> None:
        alock = builder(store, "task").build_async()
        task = asyncio.create_task(alock.lock())
        while owners(store) != ["task"]:
            await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(cancel_task())
    until(lambda: owners(store) == [])


@pytest.mark.timeout(30)
def test_fair_false_does_not_join_but_never_barges(memory_store_factory: StoreFactory) -> None:
    store = memory_store_factory()
    holder = builder(store, "holder").build()
    holder.lock()
    lined = builder(store, "lined").build()
    got: list[str] = []
    t = waiting(lined, got, then_unlock=False)
    until(lambda: owners(store) == ["lined"])
    unfair = builder(store, "unfair", fair=False, poll_interval=0.01).build()
    u = waiting(unfair, got, then_unlock=False)
    time.sleep(0.2)
    assert owners(store) == ["lined"]  # no join
    holder.unlock()
    t.join(30)
    assert got == ["lined"]
    lined.unlock()
    u.join(30)
    assert got == ["lined", "unfair"]
    unfair.unlock()
