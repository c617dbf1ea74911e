"""``push``: how fast a notice travels (issue 21). Request -> holder told (a priority-9
``try_lock()`` call -> the holder's ``on_cleanup_notification``) and release -> next holder
(``unlock()`` -> a waiter's ``lock()`` returns, 20 ms into its wait): one process (``Lock``,
``AsyncLock``), two processes on one directory (inotify), and filelock's handoff there. A 60 s
lease, 20 s cleanup window and 30 s polls: without a notice, seconds. ``time.monotonic_ns`` is
system-wide, so a child's readings compare with ours."""

from __future__ import annotations

import asyncio
import multiprocessing as mp
import queue
import threading
import time
from collections.abc import Callable
from multiprocessing.connection import Connection

import filelock
from _bench import Bench
from _harness import Section, fmt_num, summarize

from prioritylock import CleanupNotice, LockBuilder, LockListener
from prioritylock.stores import open_store

SLOW = {"lease_timeout": 60, "cleanup_timeout": 20, "waiting_timeout": 20, "poll_interval": 30}
WAITING = 0.02  # the waiter is this far into its wait when the lock is released
Samples = tuple[list[int], list[int]]  # (request -> told, release -> next holder), ns


class _Told(LockListener):  # when the holder was told, and that it let go
    def __init__(self) -> None:
        self.at, self.event, self.lost = 0, threading.Event(), threading.Event()

    def on_cleanup_notification(self, notice: CleanupNotice) -> None:
        self.at = time.monotonic_ns()
        self.event.set()

    def on_lock_lost(self, lock: object, reason: str) -> None:
        self.lost.set()


def _builder(url: str, owner: str, priority: int) -> LockBuilder:
    b = LockBuilder().store(open_store(url)).path("bench", "push").owner(owner).priority(priority)
    for name, value in SLOW.items():
        getattr(b, name)(value)
    return b


def _waiting(acquire: Callable[[], object]) -> tuple[threading.Thread, list[int]]:
    got: list[int] = []  # when ``acquire`` returned, on the thread

    def run() -> None:
        acquire()
        got.append(time.monotonic_ns())

    thread = threading.Thread(target=run)
    thread.start()
    return thread, got


def _threads(url: str, rounds: int, ask: Callable[[], int], release: Callable[[], int]) -> Samples:
    """Our holder is asked, then waits while the other releases (each returns when it began)."""
    told = _Told()
    holder = _builder(url, "low", 1).listener(told).build()
    requests, handoffs = [], []
    for _ in range(rounds):
        holder.lock(timeout=10)
        told.event.clear()
        told.lost.clear()
        started = ask()
        if not (told.event.wait(10) and told.lost.wait(10)):
            raise RuntimeError("the holder was not told of the request, or kept the lock")
        requests.append(told.at - started)
        waiter, got = _waiting(lambda: holder.lock(timeout=30))
        time.sleep(WAITING)
        released = release()
        waiter.join(30)
        handoffs.append(got[0] - released)  # none: the waiter did not get the lock
        holder.unlock()
    holder.close()
    return requests, handoffs


def _in_process(url: str, rounds: int) -> Samples:
    urgent = _builder(url, "high", 9).build()
    asked: queue.Queue[bool] = queue.Queue()

    def ask() -> int:
        started = time.monotonic_ns()
        threading.Thread(target=lambda: asked.put(urgent.try_lock())).start()
        return started

    def release() -> int:
        if not asked.get(timeout=10):
            raise RuntimeError("the request did not get the lock")
        released = time.monotonic_ns()
        urgent.unlock()
        return released

    return _threads(url, rounds, ask, release)


async def _on_loop(url: str, rounds: int) -> Samples:
    told = _Told()
    holder = _builder(url, "low", 1).listener(told).build_async()
    urgent = _builder(url, "high", 9).build_async()
    requests, handoffs = [], []
    for _ in range(rounds):
        await holder.lock(timeout=10)
        started = time.monotonic_ns()
        if not await urgent.try_lock():  # returns once the holder's cleanup returned
            raise RuntimeError("the request did not get the lock")
        requests.append(told.at - started)
        waiter = asyncio.ensure_future(holder.lock(timeout=30))
        await asyncio.sleep(WAITING)
        released = time.monotonic_ns()
        await urgent.unlock()
        await waiter
        handoffs.append(time.monotonic_ns() - released)
        await holder.unlock()
    await asyncio.gather(holder.aclose(), urgent.aclose())
    return requests, handoffs


def _child(url: str, directory: str, conn: Connection) -> None:
    """The other process: request, unlock, flock, funlock; answers the clock before each."""
    urgent = _builder(url, "high", 9).build()
    flock = filelock.FileLock(f"{directory}/push.filelock")
    while (command := conn.recv()) is not None:
        if command == "request":
            conn.send(time.monotonic_ns())
            conn.send(urgent.try_lock())
        elif command == "flock":
            flock.acquire()
            conn.send(0)
        else:
            conn.send(time.monotonic_ns())
            (urgent.unlock if command == "unlock" else flock.release)()


def _two_processes(url: str, directory: str, rounds: int) -> tuple[Samples, list[int]]:
    context = mp.get_context("spawn")
    conn, child_conn = context.Pipe()
    child = context.Process(target=_child, args=(url, directory, child_conn), daemon=True)
    child.start()

    def call(command: str) -> int:
        conn.send(command)
        return int(conn.recv())

    def release() -> int:
        if not conn.recv():
            raise RuntimeError("the request did not get the lock")
        return call("unlock")

    ours = _threads(url, rounds, lambda: call("request"), release)
    flock, handoffs = filelock.FileLock(f"{directory}/push.filelock", thread_local=False), []
    for _ in range(rounds):
        call("flock")
        waiter, got = _waiting(flock.acquire)
        time.sleep(WAITING)
        released = call("funlock")
        waiter.join(30)
        handoffs.append(got[0] - released)
        flock.release()
    conn.send(None)
    child.join(10)
    return ours, handoffs


def section_push(b: Bench) -> Section:
    rounds = b.sizes.handoffs
    cases: list[tuple[str, str, list[int]]] = []

    def add(label: str, samples: Samples) -> None:
        cases.extend(
            [(label, "request -> told", samples[0]), (label, "release -> next", samples[1])]
        )

    for kind in (k for k in b.store_kinds if k.emulator is None):
        add(f"{kind.label}, Lock, one process", _in_process(b.url(kind), rounds))
        add(f"{kind.label}, AsyncLock, one loop", asyncio.run(_on_loop(b.url(kind), rounds)))
        if kind.name == "local":  # one directory, two processes
            url = b.url(kind)
            ours, flock = _two_processes(url, url.removeprefix("file://"), rounds)
            add(f"{kind.label}, Lock, two processes", ours)
            cases.append(("filelock, two processes", "release -> next", flock))
    table, rows = [], []
    for label, what, samples in cases:
        summary = summarize(samples, 1e6)
        table.append([label, what, fmt_num(summary.median), fmt_num(summary.p99), str(summary.n)])
        rows.append({"case": label, "what": what, "unit": "ms", **summary.__dict__})
    return Section(
        name="push",
        title="Notices: request -> holder told, release -> next holder (ms)",
        headers=["case", "what", "p50", "p99", "n"],
        table=table,
        rows=rows,
        notes=["Lease 60 s, cleanup 20 s, polls 30 s apart; filelock polls every 50 ms."],
    )
