"""``push``: request -> holder told (a ``try_lock()`` -> ``on_cleanup_notification``) and release
-> next holder, 20 ms into its wait (issues 21, 29): in one process, two (inotify), one serve,
filelock; notices off; two hosts (``tools.netns``) per cloud emulator, hints on (30 s polls) and
off (1 s), ZooKeeper across them; a held lock's requests; 1,000 held locks' CPU, inotify on/off."""

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
from typing import Any
from urllib.parse import urlsplit

import _servers
import filelock
from _bench import Bench
from _harness import Section, stats_delta, summarize

from prioritylock import CleanupNotice, LockBuilder, LockListener
from prioritylock.stores import ObjectStore, open_store
from sections.native import zookeeper

SLOW = {"lease_timeout": 60, "cleanup_timeout": 20, "waiting_timeout": 20, "poll_interval": 30}
POLLED = {"watch_interval": 1.0, "poll_interval": 1.0}  # on a cloud store: a read a second
# A waiter's time into its wait at the release (notices off: deep in its backed-off polls).
WAITING = 2.0 if os.environ.get("PRIORITYLOCK_NOTICES") == "off" else 0.02
HELD, RATES = 1_000, (0, 100, 1_000)  # locks held in the CPU case; other files' writes a second
LOCKS = "v1.d/path.d/bench.d"  # where a LocalStore keeps the locks of the path ("bench", ...)
FIGURES = ("request -> told", "release -> next")
HINTED = (FIGURES[0], "request written -> told", "handover -> held")
HOW: dict[bool, Any] = {True: ("hint", HINTED, SLOW), False: ("poll", FIGURES, POLLED)}
Samples = Sequence[list[int]]  # ns, one list per figure: FIGURES, unless said otherwise
Settings = Mapping[str, float]
NO_HINTS, NO_NOTICES = {"PRIORITYLOCK_HINTS": "off"}, {"PRIORITYLOCK_NOTICES": "off"}


class _Told(LockListener):  # when the holder was told, and that it let go (and when)
    def __init__(self) -> None:
        self.at, self.lost_at, self.lost = 0, 0, threading.Event()

    def on_cleanup_notification(self, notice: CleanupNotice) -> None:
        self.at = time.monotonic_ns()

    def on_lock_lost(self, lock: object, reason: str) -> None:
        self.lost_at = time.monotonic_ns()
        self.lost.set()


def _builder(at: str | ObjectStore, owner: str, priority: int, s: Settings = SLOW) -> LockBuilder:
    b = LockBuilder().store(at).path("bench", "push").owner(owner).priority(priority)
    for name, value in s.items():
        getattr(b, name)(value)
    return b


def _handoff(acquire: Callable[[], object], release: Callable[[], int | None]) -> int:
    """ns from ``release`` (or when it says the other began it) to ``acquire`` on a thread."""
    got: list[int] = []
    waiter = threading.Thread(target=lambda: got.append((acquire(), time.monotonic_ns())[1]))
    waiter.start()
    time.sleep(WAITING)
    began = time.monotonic_ns()
    released = release() or began
    waiter.join(60)
    return got[0] - released  # none: the waiter did not get the lock


def _requestor(url: str, settings: Settings, directory: str, conn: Connection) -> None:
    """The other process (or thread): request, unlock, flock, funlock; answers the clock
    before each."""
    store, began = open_store(url), list[int]()  # when each of its writes began
    write = store.replace
    store.replace = lambda *a: (began.append(time.monotonic_ns()), write(*a))[1]  # type: ignore
    urgent = _builder(store, "high", 9, settings).build()
    flock = filelock.FileLock(f"{directory}/push.filelock")
    while (command := conn.recv()) is not None:
        if command == "request":
            conn.send(time.monotonic_ns())  # and when it held the lock, and wrote:
            conn.send((urgent.try_lock(), time.monotonic_ns(), began))
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
    there: tuple[str | None, Mapping[str, str]] = (None, {}),
) -> Samples:
    """Our holder, asked by a requestor (:func:`_requestor`) in a child process (or a thread; in
    namespace and environment ``there``), at a random point of its watch interval (hinted: of
    0.5 s), waits for it to release; ``hints``: :data:`HINTED`; ``flock``: filelock's too."""
    context, directory = mp.get_context("spawn"), url.removeprefix("file://")
    conn, theirs = context.Pipe()
    start = context.Process if process else threading.Thread
    other = start(target=_requestor, args=(url, s, directory, theirs), daemon=True)
    with _servers.netns.inside(there[0]), _servers.environment(there[1]):
        other.start()

    def call(command: str) -> int:
        conn.send(command)
        return int(conn.recv())

    holder = _builder(url, "low", 1, s).listener(told := _Told()).build()
    requests, written, handoffs, flocks = [], [], [], []
    for _ in range(rounds):
        holder.lock(timeout=30)
        told.lost.clear()
        time.sleep(random.uniform(0, 0.5 if hints else s.get("watch_interval", 0)))
        started = call("request")
        if not told.lost.wait(60):  # told first, then let go
            raise RuntimeError("the holder was not told of the request, or kept the lock")
        got, held_at, writes = conn.recv()
        if not got:
            raise RuntimeError("the request did not get the lock")
        requests.append(told.at - started)
        if hints:
            written.append(told.at - max(w for w in writes if w < told.at))
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
    return [requests, written, handoffs] if hints else [requests, handoffs, flocks][: 2 + flock]


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


def _across(url: str, rounds: int, two: Any, on: bool) -> Samples:
    """:func:`_pair`, we in one of ``two`` hosts, the requestor in the other; hints ``on``."""
    env = [{"PRIORITYLOCK_HINTS": a if on else "off"} for a in two.addresses]
    run = partial(_pair, url, rounds, HOW[on][2], hints=on, there=(two.names[1], env[1]))
    return _elsewhere(env[0], [run], two.names[0])[0]


def _in_loop(url: str, rounds: int) -> Samples:
    return asyncio.run(_on_loop(url, rounds))


def _elsewhere(env: Mapping[str, str], runs: list[Any], host: str | None = None) -> list[Samples]:
    """The ``runs`` side by side, each in a process started with ``env`` and in ``host``."""
    with ProcessPoolExecutor(max(1, len(runs)), mp.get_context("spawn")) as pool:
        with _servers.environment(env), _servers.netns.inside(host):  # they start here
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
        add(f"{kind.label}, two apps of one serve", _sidecar(b.url(kind), rounds))
    cloud = [k for k in b.store_kinds if k.emulator]
    with _servers.netns.two_hosts() as hosts:  # network namespaces, else two loopback addresses
        for kind in cloud:  # one process: a notice; another host's: a hint, else the next read
            add(f"{kind.label}, Lock, one process", _pair(b.url(kind), rounds // 5, process=False))
            hosts.expose(urlsplit(b.emulators[kind.emulator or ""].endpoint).port or 0)
            for on, word in ((True, "on"), (False, "off")):
                got = _across(b.url(kind), rounds // 5, hosts, on)
                add(f"{kind.label}, {hosts.label}, hints {word}", got, *HOW[on][:2])
        add(f"ZooKeeper (kazoo), {hosts.label}", zookeeper(rounds, b.root, hosts), "other")
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
