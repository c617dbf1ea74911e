"""``handoff``: holder's ``unlock()`` call -> the blocked waiter's ``lock()`` returns.

Two peers pass the lock back and forth, on every store: two threads with ``Lock`` objects on one
store object, and two tasks of one event loop with ``AsyncLock`` objects; on the LocalStore also
two processes (``time.monotonic_ns`` is system-wide). Every handoff is checked: the waiter
holds, with a higher fence (tasks), or its ``lock()`` returned (threads, processes).
"""

from __future__ import annotations

import asyncio
import multiprocessing
import time
from collections.abc import Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from functools import partial
from multiprocessing.connection import Connection
from typing import Any

from _bench import Bench, close_loop
from _harness import Section, summarize

from prioritylock import AsyncLock, Lock, LockBuilder
from prioritylock.stores import ObjectStore, open_store

Times = dict[str, dict[int, int]]


def _expect(chan: Connection, what: str) -> None:
    if (got := chan.recv()) != what:
        raise RuntimeError(f"handoff peer said {got!r}, expected {what!r}")


def handoff_peer(lock: Lock, chan: Connection, first: bool, handoffs: int, hold_s: float) -> Times:
    """One side of a ping-pong. Handoff ``i``: the waiter says "ready" and calls ``lock()``;
    the holder waits ``hold_s`` so the waiter is surely blocked, notes ``monotonic_ns()`` and
    calls ``unlock()``; the waiter notes when ``lock()`` returned and says "got". They swap."""
    times: Times = {"releases": {}, "acquires": {}}
    if first:
        lock.lock(timeout=10)
        chan.send("go")
    else:
        _expect(chan, "go")
    for i in range(handoffs):
        if (i % 2 == 0) == first:
            _expect(chan, "ready")
            time.sleep(hold_s)
            times["releases"][i] = time.monotonic_ns()
            lock.unlock()
            _expect(chan, "got")
        else:
            chan.send("ready")
            lock.lock(timeout=10)
            times["acquires"][i] = time.monotonic_ns()
            chan.send("got")
    if lock.is_current_owner():
        lock.unlock()
    return times


def _latencies(a: Times, b: Times) -> list[int]:
    releases, acquires = a["releases"] | b["releases"], a["acquires"] | b["acquires"]
    return [acquires[i] - releases[i] for i in sorted(releases)]


def handoff_threads(
    b: Bench, stores: tuple[ObjectStore, ObjectStore], handoffs: int, hold_s: float
) -> list[int]:
    path = b.path("handoff")
    locks = [b.builder(st, path, f"peer-{i}").build() for i, st in enumerate(stores)]
    mine, theirs = multiprocessing.Pipe()
    with ThreadPoolExecutor(1, thread_name_prefix="bench-handoff-peer") as pool:
        other = pool.submit(handoff_peer, locks[1], theirs, False, handoffs, hold_s)
        return _latencies(handoff_peer(locks[0], mine, True, handoffs, hold_s), other.result())


async def _ping_pong(
    builders: tuple[LockBuilder, LockBuilder], handoffs: int, hold_s: float
) -> list[int]:
    """The lock passes ``handoffs`` times between two tasks of this loop. Handoff ``i``: the
    waiter's task calls ``await lock()``; the holder lets it block for ``hold_s``, notes the time
    and calls ``await unlock()``; the waiter notes when ``lock()`` returned."""
    out: list[int] = []
    holder, waiter = builders[0].build_async(), builders[1].build_async()
    await holder.lock(timeout=10)
    fence = holder.fencing_token
    for _ in range(handoffs):
        returned: list[int] = []

        async def wait(lock: AsyncLock = waiter, into: list[int] = returned) -> None:
            await lock.lock(timeout=10)
            into.append(time.perf_counter_ns())

        task = asyncio.create_task(wait())
        await asyncio.sleep(hold_s)
        if task.done():
            raise RuntimeError("the waiter got the lock while it was held")
        t0 = time.perf_counter_ns()
        await holder.unlock()
        await task
        if not waiter.is_current_owner() or waiter.fencing_token <= fence:
            raise RuntimeError("handoff: the waiter does not hold the lock with a newer fence")
        fence = waiter.fencing_token
        out.append(returned[0] - t0)
        holder, waiter = waiter, holder
    await holder.unlock()
    return out


def _in_loop(
    loop: asyncio.AbstractEventLoop, ping_pong: Callable[[], Coroutine[Any, Any, list[int]]]
) -> list[int]:
    return loop.run_until_complete(ping_pong())


def _child(url: str, path: tuple[str, str], chan: Connection, handoffs: int, hold_s: float) -> None:
    lock = LockBuilder().store(url).path(*path).owner("child").build()
    chan.send(handoff_peer(lock, chan, False, handoffs, hold_s))


def handoff_processes(b: Bench, url: str, handoffs: int, hold_s: float) -> list[int]:
    path = b.path("handoff-proc")
    mine, theirs = multiprocessing.Pipe()
    child = multiprocessing.get_context("spawn").Process(
        target=_child, args=(url, path, theirs, handoffs, hold_s)
    )
    child.start()
    try:
        times = handoff_peer(
            b.builder(open_store(url), path, "parent").build(), mine, True, handoffs, hold_s
        )
        if not mine.poll(30):
            raise RuntimeError("the handoff child did not report")
        return _latencies(times, mine.recv())
    finally:
        child.join(timeout=10)
        if child.is_alive():
            child.kill()


def section_handoff(b: Bench) -> Section:
    s = b.sizes
    loop = asyncio.new_event_loop()
    cases: list[tuple[str, str, float, Callable[[], list[int]]]] = []
    for kind in b.store_kinds:
        url, n, path = b.url(kind), s.cloud_handoffs if kind.emulator else s.handoffs, b.path("aio")
        store = open_store(url)
        tasks = (b.builder(store, path, "task-0"), b.builder(store, path, "task-1"))
        threads = partial(handoff_threads, b, (store, store), n, s.hold_s)
        in_loop = partial(_in_loop, loop, partial(_ping_pong, tasks, n, s.hold_s))
        cases.append((f"{kind.name}/threads", f"{kind.label}, 2 threads (Lock)", s.hold_s, threads))
        label = f"{kind.label}, 2 tasks of one loop (AsyncLock)"
        cases.append((f"{kind.name}/tasks", label, s.hold_s, in_loop))
        if kind.name == "local":
            for hold, k in ((s.hold_s, s.handoffs), (s.hold_long_s, s.handoffs_long)):
                run = partial(handoff_processes, b, url, k, hold)
                cases.append((f"local/processes/{hold:g}", "LocalStore, 2 processes", hold, run))
    try:
        results = [(key, label, hold, summarize(run(), 1e6)) for key, label, hold, run in cases]
    finally:
        close_loop(loop)
    table = [[label, f"{hold * 1000:g}", *summary.cells()] for _, label, hold, summary in results]
    rows = [
        {"case": key, "label": label, "hold_ms": hold * 1000, "unit": "ms"} | asdict(summary)
        for key, label, hold, summary in results
    ]
    title = "Handoff: holder's unlock() call -> the blocked waiter's lock() returns (ms)"
    note = (
        "hold: how long the waiter has been blocked when the holder releases; a waiter in "
        "another process polls, backing off from 5 ms towards poll_interval (1 s). Target "
        "(issue 11): the same-loop handoff on memory <= 1 ms median."
    )
    return Section("handoff", title, ["case", "hold ms", "median", "p99", "n"], table, rows, [note])
