"""``push``: how fast a notice travels (issue 21). Request -> holder told (a priority-9
``try_lock()`` call -> the holder's ``on_cleanup_notification``) and release -> next holder
(``unlock()`` -> a waiter's ``lock()`` returns, 20 ms into its wait): one process (``Lock``,
``AsyncLock``), two processes on one directory (inotify), two apps of one ``prioritylock serve``
(NDJSON streams), filelock's handoff and ZooKeeper's channel when installed; the same with
notices off (``PRIORITYLOCK_NOTICES=off``: every lock polls, as across hosts); two processes on
each cloud emulator with hints (a datagram from the writer; 30 s polls) and without (polls, a
read a second), and what a held lock costs there; and the CPU of
1,000 held locks of one directory with file-system notices on and off. A 60 s lease, 20 s
cleanup window and 30 s polls: without a notice, seconds. ``time.monotonic_ns`` is
system-wide, so a child's readings compare with ours."""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import json
import multiprocessing as mp
import os
import queue
import random
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from multiprocessing.connection import Connection
from multiprocessing.queues import Queue
from pathlib import Path
from typing import Any

import _servers
import filelock
from _bench import Bench
from _harness import Section, fmt_num, summarize

from prioritylock import CleanupNotice, LockBuilder, LockListener, configure_hints
from prioritylock.stores import open_store
from sections.native import zookeeper

SLOW = {"lease_timeout": 60, "cleanup_timeout": 20, "waiting_timeout": 20, "poll_interval": 30}
POLLED = {"watch_interval": 1.0, "poll_interval": 1.0}  # on a cloud store: a read a second
WAITING = 0.02  # the waiter is this far into its wait when the lock is released
HELD, RATES = 1_000, (0, 100, 1_000)  # locks held in the CPU case; other files' writes a second
Samples = tuple[list[int], list[int]]  # (request -> told, release -> next holder), ns
Settings = Mapping[str, float]


class _Told(LockListener):  # when the holder was told, and that it let go (and when)
    def __init__(self) -> None:
        self.at, self.event, self.lost = 0, threading.Event(), threading.Event()
        self.lost_at = 0

    def on_cleanup_notification(self, notice: CleanupNotice) -> None:
        self.at = time.monotonic_ns()
        self.event.set()

    def on_lock_lost(self, lock: object, reason: str) -> None:
        self.lost_at = time.monotonic_ns()
        self.lost.set()


def _builder(url: str, owner: str, priority: int, settings: Settings = SLOW) -> LockBuilder:
    b = LockBuilder().store(open_store(url)).path("bench", "push").owner(owner).priority(priority)
    for name, value in settings.items():
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


def _threads(
    url: str,
    rounds: int,
    ask: Callable[[], int],
    release: tuple[Callable[[], None], Callable[[], int]],
    s: Settings = SLOW,
) -> Samples:
    """Our holder is asked (``ask`` returns when it began); once the other holds (``release[0]``
    returns), our holder waits and the other releases (``release[1]`` returns when it began).
    A polled holder is asked at a random point of its watch interval."""
    told = _Told()
    holder = _builder(url, "low", 1, s).listener(told).build()
    requests, handoffs = [], []
    for _ in range(rounds):
        holder.lock(timeout=30)
        told.event.clear()
        told.lost.clear()
        time.sleep(random.uniform(0, s.get("watch_interval", 0)))
        started = ask()
        if not (told.event.wait(60) and told.lost.wait(60)):
            raise RuntimeError("the holder was not told of the request, or kept the lock")
        requests.append(told.at - started)
        release[0]()
        waiter, got = _waiting(lambda: holder.lock(timeout=60))
        time.sleep(WAITING)
        released = release[1]()
        waiter.join(60)
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

    def held() -> None:
        if not asked.get(timeout=60):
            raise RuntimeError("the request did not get the lock")

    def release() -> int:
        released = time.monotonic_ns()
        urgent.unlock()
        return released

    return _threads(url, rounds, ask, (held, release))


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
        waiter = asyncio.ensure_future(holder.lock(timeout=60))
        await asyncio.sleep(WAITING)
        released = time.monotonic_ns()
        await urgent.unlock()
        await waiter
        handoffs.append(time.monotonic_ns() - released)
        await holder.unlock()
    await asyncio.gather(holder.aclose(), urgent.aclose())
    return requests, handoffs


def _child(url: str, settings: Settings, directory: str, conn: Connection) -> None:
    """The other process: request, unlock, flock, funlock; answers the clock before each."""
    urgent = _builder(url, "high", 9, settings).build()
    flock = filelock.FileLock(f"{directory}/push.filelock")
    while (command := conn.recv()) is not None:
        if command == "request":
            conn.send(time.monotonic_ns())
            conn.send((urgent.try_lock(), time.monotonic_ns()))  # and when it held the lock
        elif command == "flock":
            flock.acquire()
            conn.send(0)
        else:
            conn.send(time.monotonic_ns())
            (urgent.unlock if command == "unlock" else flock.release)()


def _two_processes(
    url: str, rounds: int, s: Settings = SLOW, flock: list[int] | None = None
) -> Samples:
    """Our holder against a requestor in a child process; given a ``flock`` list, filelock's
    handoffs between the two too (``rounds`` of them, in ns, appended to it)."""
    context, directory = mp.get_context("spawn"), url.removeprefix("file://")
    conn, child_conn = context.Pipe()
    child = context.Process(target=_child, args=(url, s, directory, child_conn), daemon=True)
    child.start()

    def call(command: str) -> int:
        conn.send(command)
        return int(conn.recv())

    def held() -> None:
        if not conn.recv()[0]:
            raise RuntimeError("the request did not get the lock")

    ours = _threads(url, rounds, lambda: call("request"), (held, lambda: call("unlock")), s)
    lock = filelock.FileLock(f"{directory}/push.filelock", thread_local=False)
    handoffs = [] if flock is None else flock
    for _ in range(0 if flock is None else rounds):
        call("flock")
        waiter, got = _waiting(lock.acquire)
        time.sleep(WAITING)
        released = call("funlock")
        waiter.join(30)
        handoffs.append(got[0] - released)
        lock.release()
    conn.send(None)
    child.join(10)
    return ours


def _hinted(url: str, rounds: int, directory: str) -> Samples:
    """Two processes with hints, 30 s polls: request -> told, and the handover (from the holder's
    ``lock_lost``) -> the recorded requestor holds the lock (``try_lock()`` returned)."""
    context = mp.get_context("spawn")
    conn, child_conn = context.Pipe()
    child = context.Process(target=_child, args=(url, SLOW, directory, child_conn), daemon=True)
    child.start()
    told = _Told()
    holder = _builder(url, "low", 1).listener(told).build()
    requests, handoffs = [], []
    for _ in range(rounds):
        holder.lock(timeout=30)
        told.event.clear()
        told.lost.clear()
        time.sleep(random.uniform(0, 0.5))  # the holder's last read is a while ago
        conn.send("request")
        started = int(conn.recv())
        if not (told.event.wait(60) and told.lost.wait(60)):
            raise RuntimeError("the holder was not told of the request, or kept the lock")
        got, held_at = conn.recv()
        if not got:
            raise RuntimeError("the request did not get the lock")
        requests.append(told.at - started)
        handoffs.append(held_at - told.lost_at)
        conn.send("unlock")
        conn.recv()
    holder.close()
    conn.send(None)
    child.join(10)
    return requests, handoffs


@contextlib.contextmanager
def _hints_off() -> Iterator[None]:
    """No hints here nor in the children started meanwhile: every lock polls."""
    configure_hints(None)
    try:
        with _servers.environment({"PRIORITYLOCK_HINTS": "off"}):
            yield
    finally:
        configure_hints()


def _off(case: str, url: str, rounds: int, out: Queue[Samples]) -> None:
    """One case in a child process started with ``PRIORITYLOCK_NOTICES=off``, the waiter 2 s
    (not 20 ms) into its wait when the lock is released: deep in its backed-off polling."""
    global WAITING
    WAITING = 2.0
    if case == "AsyncLock":
        out.put(asyncio.run(_on_loop(url, rounds)))
    else:
        out.put((_in_process if case == "Lock" else _two_processes)(url, rounds))


def _notices_off(cases: list[tuple[str, str]], rounds: int) -> list[Samples]:
    """The (driver or "two", url) cases side by side, each in a child with notices off."""
    context = mp.get_context("spawn")
    queues: list[Queue[Samples]] = [context.Queue() for _ in cases]
    runs = [
        (context.Process(target=_off, args=(*c, rounds, q)), q)
        for c, q in zip(cases, queues, strict=True)
    ]
    with _servers.environment({"PRIORITYLOCK_NOTICES": "off"}):
        for child, _ in runs:
            child.start()
    out = [q.get(timeout=rounds * 60) for _, q in runs]
    for child, _ in runs:
        child.join(10)
    return out


class _Stream:
    """An app's NDJSON lock stream on the service (``locks`` store), read event by event."""

    def __init__(self, port: int, resource: str, body: Mapping[str, object]) -> None:
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        headers = {"Accept": "application/x-ndjson", "Content-Type": "application/json"}
        self.conn.request("POST", f"/v1.0-alpha2/lock/locks/{resource}", json.dumps(body), headers)
        self.response = self.conn.getresponse()

    def until(self, kind: str) -> int:
        """When the next event of type ``kind`` came (the ones before it skipped)."""
        while line := self.response.readline():
            if json.loads(line).get("type") == kind:
                return time.monotonic_ns()
        raise RuntimeError(f"the stream ended before a {kind} event")


def _sidecar_round(service: _servers.Service, resource: str) -> tuple[int, int]:
    """A holding stream asked by a priority-9 POST; a waiting stream given the lock by DELETE."""
    body = {"owner": "batch", "priority": 1, "ttl": "60s", "cleanupTimeout": "20s"}
    path, asked = f"/v1.0-alpha2/lock/locks/{resource}", queue.Queue[Any]()

    def post() -> None:
        urgent = {"owner": "urgent", "priority": 9, "waitingTimeout": "25s"}
        asked.put(_servers.call_json(service.connection(), "POST", path, urgent))

    holder = _Stream(service.http_port, resource, body)
    holder.until("lock-acquired")
    started = time.monotonic_ns()
    threading.Thread(target=post).start()
    told = holder.until("cleanup-requested") - started
    holder.conn.close()  # cleaned up: hanging up hands over
    lock_id = asked.get(timeout=60)["lockID"]
    streams: list[_Stream] = []

    def wait() -> None:
        streams.append(_Stream(service.http_port, resource, body))
        streams[0].until("lock-acquired")

    waiter, got = _waiting(wait)
    time.sleep(WAITING)
    released = time.monotonic_ns()
    _servers.call_json(service.connection(), "DELETE", path, {"lockID": lock_id}, expect=204)
    waiter.join(60)
    streams[0].conn.close()
    return told, got[0] - released


def _sidecar(url: str, rounds: int) -> Samples:
    with _servers.Service({"locks": url}) as service:
        pairs = [_sidecar_round(service, f"push-{n}") for n in range(rounds)]
    return [p[0] for p in pairs], [p[1] for p in pairs]


def _holding(url: str, conn: Connection) -> None:
    """A child holding HELD locks of one directory: its CPU seconds in each window we open."""
    locks = [_builder(url, "held", 1).path("bench", f"held-{n}").build() for n in range(HELD)]
    if not all(lock.try_lock() for lock in locks):
        raise RuntimeError("a free lock was refused")
    conn.send(0)
    while conn.recv():  # a window opens ...
        cpu = time.process_time()
        conn.recv()  # ... and closes
        conn.send(time.process_time() - cpu)
    for lock in locks:
        lock.unlock()
        lock.close()


def _other_writes(directory: Path, rate: int, seconds: float) -> None:
    """``rate`` writes a second, a lock's way (a new file renamed over the old), to files of
    ``directory`` that no lock of the child holds, for ``seconds``."""
    start, n = time.monotonic(), 0
    while (now := time.monotonic()) < start + seconds:
        if not rate or now < start + n / rate:
            time.sleep(min(start + seconds - now, 1 / (rate or 1)))
            continue
        (directory / ".w").write_bytes(b"{}")
        os.replace(directory / ".w", directory / f"other-{n % 100}.obj")
        n += 1


def _cpu(b: Bench, window: float) -> list[tuple[str, int, float]]:
    """(notices, writes a second, % of a core the holding child used): inotify on, then off."""
    out, context = [], mp.get_context("spawn")
    for notices, setting in (("on", None), ("off", "0")):
        url = b.url(next(k for k in b.kinds if k.name == "local"))
        conn, child_conn = context.Pipe()
        with _servers.environment({"PRIORITYLOCK_FSNOTIFY": setting}):
            child = context.Process(target=_holding, args=(url, child_conn), daemon=True)
            child.start()
        conn.recv()  # holding
        time.sleep(window)  # the heartbeat settles: a watch read every 10 s, a renewal every 20
        for rate in RATES:
            conn.send(True)
            started = time.monotonic()
            _other_writes(Path(url.removeprefix("file://"), "v1.d/path.d/bench.d"), rate, window)
            conn.send(True)
            out.append((notices, rate, 100 * conn.recv() / (time.monotonic() - started)))
        conn.send(False)
        child.join(120)
    return out


def _cost(url: str, seconds: float) -> float:
    """Requests a lock held for ``seconds`` made, per hour, reading once a second."""
    lock = _builder(url, "held", 1, POLLED).build()
    lock.lock(timeout=30)
    stats = lock.config.store.stats
    time.sleep(0.5)  # half a watch interval in: the window holds ``seconds`` reads
    before = stats.total
    time.sleep(seconds)  # holding: the heartbeat reads and renews meanwhile
    made = stats.total - before
    lock.unlock()
    lock.close()
    return made * 3600 / seconds


def section_push(b: Bench) -> Section:
    rounds, quick = b.sizes.handoffs, b.sizes.handoffs < 50
    cases: list[tuple[str, str, str, list[int]]] = []  # (case, channel, what, samples in ns)

    def add(label: str, samples: Samples | None, channel: str = "notice") -> None:
        if samples:  # the channel: "notice", "poll" (none), or "other" (a comparator)
            cases.append((label, channel, "request -> told", samples[0]))
            cases.append((label, channel, "release -> next", samples[1]))

    off: list[tuple[str, str, str]] = []  # (label, driver or "two", url): notices off
    for kind in (k for k in b.store_kinds if k.emulator is None):
        add(f"{kind.label}, Lock, one process", _in_process(b.url(kind), rounds))
        add(f"{kind.label}, AsyncLock, one loop", asyncio.run(_on_loop(b.url(kind), rounds)))
        off += [(f"{kind.label}, {d}, notices off", d, b.url(kind)) for d in ("Lock", "AsyncLock")]
        if kind.name == "local":  # one directory, two processes
            flock: list[int] = []
            add(f"{kind.label}, two processes", _two_processes(b.url(kind), rounds, flock=flock))
            cases.append(("filelock, two processes", "other", "release -> next", flock))
            off.append((f"{kind.label}, two processes, notices off", "two", b.url(kind)))
            add("ZooKeeper (kazoo), two processes", zookeeper(rounds, b.root), "other")
        add(f"{kind.label}, two apps of one serve", _sidecar(b.url(kind), rounds))
    cloud = [k for k in b.store_kinds if k.emulator]
    for kind in cloud:  # one process: a notice; another process's: a hint, else the next read
        add(f"{kind.label}, Lock, one process", _in_process(b.url(kind), rounds // 5))
        hinted = _hinted(b.url(kind), rounds // 5, str(b.root))
        cases.append((f"{kind.label}, two processes, hints", "hint", "request -> told", hinted[0]))
        cases.append((f"{kind.label}, two processes, hints", "hint", "handover -> held", hinted[1]))
        with _hints_off():
            polled = _two_processes(b.url(kind), rounds // 5, POLLED)
        add(f"{kind.label}, two processes", polled, "poll")
    for (label, *_), got in zip(off, _notices_off([c[1:] for c in off], rounds // 8), strict=True):
        add(label, got, "poll")
    table: list[list[str]] = []
    rows: list[dict[str, Any]] = []
    notes = ["Lease 60 s, cleanup 20 s, polls 30 s apart; on a cloud store, reads every 1 s."]
    for label, channel, what, samples in cases:
        summary = summarize(samples, 1e6)
        table.append([label, what, fmt_num(summary.median), fmt_num(summary.p99), str(summary.n)])
        rows.append({"case": label, "channel": channel, "what": what, "unit": "ms"})
        rows[-1] |= summary.__dict__
    for kind in cloud:
        hourly = _cost(b.url(kind), 3 if quick else 20)
        rows.append(
            {"case": kind.label, "what": "requests per held lock per hour", "value": hourly}
        )
        notes.append(f"{kind.label}: {hourly:,.0f} requests per held lock per hour")
    has_local = any(k.name == "local" for k in b.kinds)
    for notices, rate, percent in _cpu(b, 2 if quick else 20) if has_local else ():
        case = f"{HELD} held locks, inotify {notices}, {rate} other writes/s"
        rows.append({"case": case, "what": "CPU, % of a core", "value": percent})
        notes.append(f"{case}: {percent:.2f}% of a core")
    return Section(
        name="push",
        title="Notices: request -> holder told, release -> next holder (ms)",
        headers=["case", "what", "p50", "p99", "n"],
        table=table,
        rows=rows,
        notes=notes,
    )
