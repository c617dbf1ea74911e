"""``push``: how fast a notice travels (issue 21). Request -> holder told (a priority-9
``try_lock()`` call -> the holder's ``on_cleanup_notification``) and release -> next holder
(``unlock()`` -> a waiter's ``lock()`` returns, 20 ms into its wait): one process (``Lock``,
``AsyncLock``), two processes on one directory (inotify), two apps of one ``prioritylock serve``
(NDJSON streams), filelock's handoff and ZooKeeper's channel when installed; the same with
notices off (``PRIORITYLOCK_NOTICES=off``: every lock polls, as across hosts); two processes on
each cloud emulator with hints (a datagram from the writer; 30 s polls) and without (polls, a
read a second), and what a held lock costs there; and the CPU of 1,000 held locks of one
directory with file-system notices on and off. A 60 s lease, 20 s cleanup window and 30 s
polls: without a notice, seconds. ``time.monotonic_ns`` is system-wide, so a child's readings
compare with ours."""

from __future__ import annotations

import asyncio
import http.client
import json
import multiprocessing as mp
import os
import random
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from dataclasses import asdict
from functools import partial
from multiprocessing.connection import Connection
from pathlib import Path

import _servers
import filelock
from _bench import Bench
from _harness import Section, stats_delta, summarize

from prioritylock import CleanupNotice, LockBuilder, LockListener
from prioritylock.stores import open_store
from sections.native import zookeeper

SLOW = {"lease_timeout": 60, "cleanup_timeout": 20, "waiting_timeout": 20, "poll_interval": 30}
POLLED = {"watch_interval": 1.0, "poll_interval": 1.0}  # on a cloud store: a read a second
# The waiter is this far into its wait when the lock is released; with notices off, deep in its
# backed-off polling.
WAITING = 2.0 if os.environ.get("PRIORITYLOCK_NOTICES") == "off" else 0.02
HELD, RATES = 1_000, (0, 100, 1_000)  # locks held in the CPU case; other files' writes a second
LOCKS = "v1.d/path.d/bench.d"  # where a LocalStore keeps the locks of the path ("bench", ...)
FIGURES = ("request -> told", "release -> next")
Samples = Sequence[list[int]]  # ns, one list per figure: FIGURES, unless said otherwise
Settings = Mapping[str, float]
NO_HINTS, NO_NOTICES = {"PRIORITYLOCK_HINTS": "off"}, {"PRIORITYLOCK_NOTICES": "off"}


class _Told(LockListener):  # when the holder was told, and that it let go (and when)
    def __init__(self) -> None:
        self.at, self.lost_at, self.event, self.lost = 0, 0, threading.Event(), threading.Event()

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


def _handoff(acquire: Callable[[], object], release: Callable[[], int | None]) -> int:
    """ns from ``release`` (which may return when the other process began it), ``WAITING`` into
    ``acquire``'s wait on a thread, to ``acquire`` returning there."""
    got: list[int] = []

    def wait() -> None:
        acquire()
        got.append(time.monotonic_ns())

    waiter = threading.Thread(target=wait)
    waiter.start()
    time.sleep(WAITING)
    began = time.monotonic_ns()
    released = release() or began
    waiter.join(60)
    return got[0] - released  # none: the waiter did not get the lock


def _requestor(url: str, settings: Settings, directory: str, conn: Connection) -> None:
    """The other process (or thread): request, unlock, flock, funlock; answers the clock
    before each."""
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


def _pair(
    url: str,
    rounds: int,
    s: Settings = SLOW,
    *,
    process: bool = True,
    hints: bool = False,
    flock: bool = False,
) -> Samples:
    """Our holder against a requestor (:func:`_requestor`) in a child process (or, not
    ``process``, on a thread): our holder is asked; once the other holds, our holder waits and
    the other releases. With ``hints``, the second figure is the handover instead: our holder
    let go (``lock_lost``) -> the other held. A polled holder is asked at a random point of its
    watch interval, a hinted one up to 0.5 s after its last read. With ``flock``, a third list:
    filelock's handoffs between the two."""
    context, directory = mp.get_context("spawn"), url.removeprefix("file://")
    conn, theirs = context.Pipe()
    start = context.Process if process else threading.Thread
    other = start(target=_requestor, args=(url, s, directory, theirs), daemon=True)
    other.start()

    def call(command: str) -> int:
        conn.send(command)
        return int(conn.recv())

    told = _Told()
    holder = _builder(url, "low", 1, s).listener(told).build()
    requests, handoffs, flocks = [], [], []
    for _ in range(rounds):
        holder.lock(timeout=30)
        told.event.clear()
        told.lost.clear()
        time.sleep(random.uniform(0, 0.5 if hints else s.get("watch_interval", 0)))
        started = call("request")
        if not (told.event.wait(60) and told.lost.wait(60)):
            raise RuntimeError("the holder was not told of the request, or kept the lock")
        got, held_at = conn.recv()
        if not got:
            raise RuntimeError("the request did not get the lock")
        requests.append(told.at - started)
        if hints:
            handoffs.append(held_at - told.lost_at)
            call("unlock")
        else:
            handoffs.append(_handoff(lambda: holder.lock(timeout=60), partial(call, "unlock")))
            holder.unlock()
    holder.close()
    lock = filelock.FileLock(f"{directory}/push.filelock", thread_local=False)
    for _ in range(rounds if flock else 0):
        call("flock")
        flocks.append(_handoff(lock.acquire, partial(call, "funlock")))
        lock.release()
    conn.send(None)
    other.join(10)
    return [requests, handoffs, flocks] if flock else [requests, handoffs]


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
    return [requests, handoffs]


def _in_loop(url: str, rounds: int) -> Samples:
    return asyncio.run(_on_loop(url, rounds))


def _elsewhere(env: Mapping[str, str], runs: list[Callable[[], Samples]]) -> list[Samples]:
    """The ``runs`` side by side, each in a process started with ``env`` (so are its children):
    notices or hints off there."""
    with ProcessPoolExecutor(max(1, len(runs)), mp.get_context("spawn")) as pool:
        with _servers.environment(env):  # the processes start here
            futures = [pool.submit(run) for run in runs]
        return [future.result(timeout=600) for future in futures]


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


def _sidecar(url: str, rounds: int) -> Samples:
    """Each round, a holding stream asked by a priority-9 POST, and a waiting stream given the
    lock by DELETE."""
    body = {"owner": "batch", "priority": 1, "ttl": "60s", "cleanupTimeout": "20s"}
    urgent = {"owner": "urgent", "priority": 9, "waitingTimeout": "25s"}
    requests, handoffs = [], []
    with _servers.Service({"locks": url}) as service, ThreadPoolExecutor(1) as pool:

        def wait(resource: str, streams: list[_Stream]) -> None:
            streams.append(_Stream(service.http_port, resource, body))
            streams[0].until("lock-acquired")

        for resource in (f"push-{n}" for n in range(rounds)):
            path, streams = f"/v1.0-alpha2/lock/locks/{resource}", list[_Stream]()
            holder = _Stream(service.http_port, resource, body)
            holder.until("lock-acquired")
            started = time.monotonic_ns()
            asked = pool.submit(_servers.call_json, service.connection(), "POST", path, urgent)
            requests.append(holder.until("cleanup-requested") - started)
            holder.conn.close()  # cleaned up: hanging up hands over
            unlock = {"lockID": asked.result(60)["lockID"]}
            delete = partial(_servers.call_json, service.connection(), "DELETE", path, unlock, 204)
            handoffs.append(_handoff(partial(wait, resource, streams), delete))
            streams[0].conn.close()
    return [requests, handoffs]


def _holding(url: str, conn: Connection) -> None:
    """A child holding HELD locks of one directory: its CPU seconds so far, each time asked."""
    locks = [_builder(url, "held", 1).path("bench", f"held-{n}").build() for n in range(HELD)]
    if not all(lock.try_lock() for lock in locks):
        raise RuntimeError("a free lock was refused")
    conn.send(0)
    while conn.recv():  # not /proc's clock ticks: idle, it uses a few of them
        conn.send(time.process_time())
    for lock in locks:
        lock.close()  # releases it


def _other_writes(directory: Path, rate: int, seconds: float) -> None:
    """``rate`` writes a second, a lock's way (a new file renamed over the old), to files of
    ``directory`` that no lock of the child holds, for ``seconds``."""
    start = time.monotonic()
    for n in range(int(rate * seconds)):
        time.sleep(max(0.0, start + n / rate - time.monotonic()))
        (directory / ".w").write_bytes(b"{}")
        os.replace(directory / ".w", directory / f"other-{n % 100}.obj")
    time.sleep(max(0.0, start + seconds - time.monotonic()))


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
            cpu, started = conn.recv(), time.monotonic()
            _other_writes(Path(url.removeprefix("file://"), LOCKS), rate, window)
            conn.send(True)
            used = conn.recv() - cpu
            out.append((notices, rate, 100 * used / (time.monotonic() - started)))
        conn.send(False)
        child.join(120)
    return out


def _cost(url: str, seconds: float) -> float:
    """Requests a lock held for ``seconds`` made, per hour, reading once a second."""
    lock = _builder(url, "held", 1, POLLED).build()
    lock.lock(timeout=30)
    time.sleep(0.5)  # half a watch interval in: the window holds ``seconds`` reads
    # Holding: the heartbeat reads and renews meanwhile.
    made = sum(stats_delta(lock.config.store, partial(time.sleep, seconds)).values())
    lock.close()  # releases it
    return made * 3600 / seconds


def section_push(b: Bench) -> Section:
    rounds, quick = b.sizes.handoffs, b.sizes.handoffs < 50
    title = "Notices: request -> holder told, release -> next holder (ms)"
    notes = ["Lease 60 s, cleanup 20 s, polls 30 s apart; on a cloud store, reads every 1 s."]
    section = Section("push", title, ["case", "what", "p50", "p99", "n"], notes=notes)

    def add(
        case: str, got: Samples | None, channel: str = "notice", what: Sequence[str] = FIGURES
    ) -> None:
        """The figures of a case (none: a comparator not installed); the channel: "notice",
        "hint", "poll" (none), or "other" (a comparator)."""
        for figure, samples in zip(what, got or [[] for _ in what], strict=True):
            if samples:
                summary = summarize(samples, 1e6)
                row = {"case": case, "channel": channel, "what": figure, "unit": "ms"}
                section.add([case, figure, *summary.cells()], row | asdict(summary))

    def value(case: str, what: str, value: float, shown: str) -> None:
        section.rows.append({"case": case, "what": what, "value": value})
        section.notes.append(f"{case}: {shown}")

    drivers: dict[str, Callable[[str, int], Samples]] = {
        "Lock, one process": partial(_pair, process=False),
        "AsyncLock, one loop": _in_loop,
    }
    off: dict[str, Callable[[], Samples]] = {}  # the cases again with notices off, by label
    for kind in (k for k in b.store_kinds if k.emulator is None):
        for name, run in drivers.items():
            add(f"{kind.label}, {name}", run(b.url(kind), rounds))
            driver = name.split(",")[0]
            off[f"{kind.label}, {driver}, notices off"] = partial(run, b.url(kind), rounds // 8)
        if kind.name == "local":  # one directory, two processes
            ours = _pair(b.url(kind), rounds, flock=True)
            add(f"{kind.label}, two processes", ours[:2])
            add("filelock, two processes", ours[2:], "other", FIGURES[1:])
            two = partial(_pair, b.url(kind), rounds // 8)
            off[f"{kind.label}, two processes, notices off"] = two
            add("ZooKeeper (kazoo), two processes", zookeeper(rounds, b.root), "other")
        add(f"{kind.label}, two apps of one serve", _sidecar(b.url(kind), rounds))
    cloud = [k for k in b.store_kinds if k.emulator]
    for kind in cloud:  # one process: a notice; another process's: a hint, else the next read
        add(f"{kind.label}, Lock, one process", _pair(b.url(kind), rounds // 5, process=False))
        hinted = _pair(b.url(kind), rounds // 5, hints=True)
        add(f"{kind.label}, two processes, hints", hinted, "hint", [FIGURES[0], "handover -> held"])
        polled = partial(_pair, b.url(kind), rounds // 5, POLLED)
        add(f"{kind.label}, two processes", _elsewhere(NO_HINTS, [polled])[0], "poll")
    for kind in (k for k in b.kinds if k.server and k.name in b.emulators):  # their own channel
        two = partial(_pair, b.url(kind), rounds // 5)  # a holder's reads 30 s apart
        add(f"{kind.label}, two processes, hints off", _elsewhere(NO_HINTS, [two])[0])
    for label, got in zip(off, _elsewhere(NO_NOTICES, list(off.values())), strict=True):
        add(label, got, "poll")
    per_hour = "requests per held lock per hour"
    for kind in cloud:
        hourly = _cost(b.url(kind), 3 if quick else 20)
        value(kind.label, per_hour, hourly, f"{hourly:,.0f} {per_hour}")
    has_local = any(k.name == "local" for k in b.kinds)
    for notices, rate, percent in _cpu(b, 2 if quick else 20) if has_local else ():
        case = f"{HELD} held locks, inotify {notices}, {rate} other writes/s"
        value(case, "CPU, % of a core", percent, f"{percent:.2f}% of a core")
    return section
