"""Scale: one process holding many leases. CPU used by the heartbeat, and how late renewals ran.

    python benchmarks/scale.py [--store memory|s3-moto|s3-seaweedfs] [--leases 1000,10000]
                               [--seconds 30] [--workers 32] [--plain | --profile | --floor]
                               [--async] [--json PATH]

Every lease uses the default timings (lease 30 s: renewed every 10 s, watched every 5 s, a
renewal restarting the watch interval). ``--store memory`` (the default; 1,000 and 10,000 leases)
holds them on one MemoryStore, so the figures are the library's own cost: its heartbeat renews
in-process leases on the scheduler thread. ``--store s3-moto`` or ``s3-seaweedfs`` (1,000 leases)
starts that S3 emulator on a free port (``_servers.py``) and holds them on one S3Store: there the
heartbeat hands each renewal and watch read to its pool of workers (32 by default), so that many
requests run at a time.

Measured over the window, after every lease is held (acquired by 8 threads at once, as fast as
the store allows) and before any is released:

- CPU: this process's CPU time (every thread) over the window, as % of one core; on an emulator
  also the emulator process's, which shares the machine.
- Requests made (``store.stats``) and, on an emulator, each request's latency as the lock sees it.
- Lateness of each heartbeat task: when it started against when it was due (on the pool that
  includes its wait for a free worker). For renewals also when the renewal *finished* against
  when it was due, and the margin left: the old lease's deadline minus that finish (a lease is
  lost if a renewal does not finish before its deadline; with the defaults the margin should be
  about 20 s).
- Losses (``lock_lost``; must be 0), and how many leases are still held at the end: the script
  exits with status 1 if a lease was lost or is no longer held.
- The machine's CPU over the window (``/proc/stat``): busy, idle, and stolen by a hypervisor.

``--plain`` leaves the per-task timing out (CPU only); ``--profile`` profiles the heartbeat
threads (cProfile) to ``results/profile-scale-STORE-N.txt``; ``--floor`` runs no locks at all,
only the heartbeat with a no-op task per lease at the same rate, its due times spread as real
leases' are and then rounded to 50 ms: the scheduler's own cost.

``--async`` holds ``AsyncLock`` leases instead, on one event loop: its ``AsyncScheduler`` renews
and watches them all (memory-store calls inline on the loop, S3 calls on the library's 32-thread
I/O pool). The same window and figures, plus the loop's lag: a probe task sleeps 50 ms at a
time and records by how much it overslept (a stalled loop shows there).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import io
import math
import os
import pstats
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import _servers  # benchmarks/_servers.py: run as a script, this directory is on the path
from _harness import (
    cpu_split,
    cpu_times,
    func_name,
    machine_info,
    ms_summary,
    process_cpu_s,
    write_json,
)
from _servers import EmulatorError
from _wrappers import StoreTimer

import prioritylock
from prioritylock import AsyncLock, Heartbeat, Lock, LockBuilder, signals
from prioritylock._alock import DISK_WORKERS, NETWORK_WORKERS
from prioritylock._ascheduler import AsyncScheduler, ScheduledAsyncTask
from prioritylock._scheduler import DEFAULT_WORKERS, ScheduledTask
from prioritylock.stores import MemoryStore, ObjectStore, open_store

STORES = ("memory", "s3-moto", "s3-seaweedfs")
DEFAULT_LEASES = {"memory": "1000,10000", "s3-moto": "1000", "s3-seaweedfs": "1000"}
#: Threads that acquire (and at the end release) the leases: fewer than the S3 client's pooled
#: connections (one per heartbeat worker, 32), so setting up never opens extra ones.
SETUP_THREADS = 8
RESULTS = Path(__file__).resolve().parent / "results"

T = TypeVar("T")


# -- measuring ---------------------------------------------------------------------------------


@dataclass
class Tally:
    """What the heartbeat did, task by task (appended under ``MeasuringHeartbeat._mutex``)."""

    start_late: list[float] = field(default_factory=list)  # every task: started - due
    renew_start_late: list[float] = field(default_factory=list)  # renewals: started - due
    renew_done_late: list[float] = field(default_factory=list)  # renewals: finished - due
    margin: list[float] = field(default_factory=list)  # renewals: old deadline - finished
    renewals: dict[str, int] = field(default_factory=dict)  # per lease key

    def clear(self) -> None:
        for values in (self.start_late, self.renew_start_late, self.renew_done_late, self.margin):
            values.clear()
        self.renewals.clear()


class MeasuringHeartbeat(Heartbeat):
    """A Heartbeat that records how late each task started against its due time and, for a
    renewal, when it finished and how much of the old lease was left.

    A renewal is told apart from a watch read by the holding's deadline moving. That reads the
    lock's private ``_st.holding`` (``deadline``, ``next_renew``), so a change there in the
    library fails here loudly rather than leaving the renewal figures out.

    ``mode``: ``measure`` (the above), ``plain`` (run tasks as the library's Heartbeat does, no
    more), or ``profile`` (cProfile on the scheduler thread and around every task run on the
    pool; wall-clock timer, so on a network store a task's time includes its request).
    """

    def __init__(self, workers: int = DEFAULT_WORKERS, *, mode: str = "measure") -> None:
        super().__init__(workers=workers)
        self.mode = mode
        self.tally = Tally()
        self.locks: dict[str, Lock] = {}  # task name ("lease KEY") -> its lock
        self.profiles: list[cProfile.Profile] = []
        self._mutex = threading.Lock()
        self._local = threading.local()

    def watch(self, lock: Lock) -> None:
        self.locks[f"lease {lock.key}"] = lock

    def _profiler(self) -> cProfile.Profile:
        """This thread's profiler, made on first use."""
        profiler: cProfile.Profile | None = getattr(self._local, "profiler", None)
        if profiler is None:
            profiler = cProfile.Profile()  # wall clock: a per-thread CPU clock costs a syscall
            self._local.profiler = profiler
            with self._mutex:
                self.profiles.append(profiler)
        return profiler

    def _loop(self) -> None:
        if self.mode != "profile":
            super()._loop()
            return
        profiler = self._profiler()
        self._local.in_loop = True
        profiler.enable()
        try:
            super()._loop()
        finally:
            profiler.disable()

    def _run(self, entry: ScheduledTask) -> None:
        if self.mode == "plain" or getattr(self._local, "in_loop", False):
            super()._run(entry)  # plain, or an inline task inside the profiled scheduler loop
            return
        if self.mode == "profile":
            profiler = self._profiler()
            profiler.enable()
            try:
                super()._run(entry)
            finally:
                profiler.disable()
            return
        started = self.clock.monotonic()
        due = entry.when  # before the run: it re-schedules the entry
        lock = self.locks.get(entry.name)
        holding = None if lock is None else lock._st.holding
        deadline = getattr(holding, "deadline", None)
        renew_due = getattr(holding, "next_renew", None)
        super()._run(entry)
        done = self.clock.monotonic()
        renewed = deadline is not None and getattr(holding, "deadline", None) != deadline
        with self._mutex:
            self.tally.start_late.append(started - due)
            if renewed and renew_due is not None and deadline is not None:
                self.tally.renew_start_late.append(started - renew_due)
                self.tally.renew_done_late.append(done - renew_due)
                self.tally.margin.append(deadline - done)
                self.tally.renewals[entry.name] = self.tally.renewals.get(entry.name, 0) + 1

    def close_and_wait(self) -> None:
        """Close, and wait for the scheduler thread and running tasks to end (for profiles)."""
        self.close()
        thread, pool = getattr(self, "_thread", None), getattr(self, "_pool", None)
        if thread is not None:
            thread.join(10)
        if pool is not None:
            pool.shutdown(wait=True)


def _in_threads(fn: Callable[[Lock], object], locks: Sequence[Lock]) -> None:
    with ThreadPoolExecutor(SETUP_THREADS, thread_name_prefix="scale-setup") as pool:
        for _ in pool.map(fn, locks):
            pass


def _acquire(lock: Lock) -> None:
    if not lock.try_lock():
        raise RuntimeError(f"could not acquire the free lock {lock.key}")


def _release(lock: Lock) -> None:
    with contextlib.suppress(prioritylock.PriorityLockError):
        lock.unlock()


class Window:
    """The measuring window: CPU (this process, the emulator's, the machine's), the store's
    requests, and the request timer's recording, from :meth:`open` to :meth:`close`."""

    def __init__(self, store: ObjectStore, emulator_pid: int | None) -> None:
        self.store = store
        self.timed = store if isinstance(store, StoreTimer) else None
        self.emulator_pid = emulator_pid

    def open(self) -> None:
        if self.timed is not None:
            self.timed.recording = True
        self.load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
        self.machine_cpu0 = cpu_times()
        self.before = self.store.stats.snapshot()
        pid = self.emulator_pid
        self.emulator_cpu0 = process_cpu_s(pid) if pid else None
        self.cpu0, self.wall0 = time.process_time(), time.perf_counter()

    def close(self) -> None:
        self.cpu = time.process_time() - self.cpu0
        self.wall = time.perf_counter() - self.wall0
        pid = self.emulator_pid
        emulator_cpu1 = process_cpu_s(pid) if pid else None
        self.machine_cpu = cpu_split(self.machine_cpu0, cpu_times())
        after = self.store.stats.snapshot()
        if self.timed is not None:
            self.timed.recording = False
        self.requests = {k: after[k] - self.before[k] for k in after if after[k] != self.before[k]}
        self.emulator_cpu = (
            None
            if self.emulator_cpu0 is None or emulator_cpu1 is None
            else round(100 * (emulator_cpu1 - self.emulator_cpu0) / self.wall, 1)
        )


def _row(
    w: Window,
    *,
    leases: int,
    keys: Sequence[str],
    config: prioritylock.LockConfig,
    workers: int,
    mode: str,
    tally: Tally,
    acquire_s: float,
    release_s: float,
    held: int,
    lost: Sequence[str],
) -> dict[str, Any]:
    """One result row (the same fields for the threaded heartbeat and the asyncio scheduler)."""
    requests = w.requests
    # Tasks in the window, counted by their requests (each task makes one: a renewal or a read).
    tasks = len(tally.start_late) or requests.get("total", 0)
    renew_counts = [tally.renewals.get(f"lease {key}", 0) for key in keys]
    # Per lease and renew interval: 1 renewal, and a watch read every watch interval in between.
    interval = config.renew_interval
    expected = leases / interval * (1 + max(0, math.ceil(interval / config.watch_interval) - 1))
    return {
        "leases": leases,
        "workers": workers,
        "mode": mode,
        "load_at_window_start": w.load,
        "machine_cpu_percent": w.machine_cpu,
        "seconds": round(w.wall, 2),
        "lease_timeout_s": config.lease_timeout,
        "renew_interval_s": config.renew_interval,
        "watch_interval_s": config.watch_interval,
        "acquire_all_s": round(acquire_s, 3),
        "release_all_s": round(release_s, 3),
        "cpu_percent_of_one_core": round(100 * w.cpu / w.wall, 2),
        "emulator_cpu_percent_of_one_core": w.emulator_cpu,
        "requests": requests,
        "requests_per_s": round(requests.get("total", 0) / w.wall, 1),
        "requests_per_s_expected": round(expected, 1),
        "request_ms": ms_summary(w.timed.durations_s) if w.timed is not None else None,
        "tasks_run": tasks,
        "renews": requests.get("replaces", 0),
        "watch_reads": requests.get("reads", 0),
        "late_ms": ms_summary(tally.start_late),
        "renew_start_late_ms": ms_summary(tally.renew_start_late),
        "renew_done_late_ms": ms_summary(tally.renew_done_late),
        "renewals_measured": len(tally.margin),
        "renewals_per_lease_min": min(renew_counts) if mode == "measure" else None,
        "renewals_per_lease_max": max(renew_counts) if mode == "measure" else None,
        "min_margin_s": round(min(tally.margin), 3) if tally.margin else None,
        "still_held": held,
        "lost": len(lost),
        "lost_reasons": sorted(set(lost)),
        "profile": None,
    }


def measure(
    store: ObjectStore,
    leases: int,
    seconds: float,
    emulator_pid: int | None = None,
    workers: int = DEFAULT_WORKERS,
    mode: str = "measure",
) -> dict[str, Any]:
    heartbeat = MeasuringHeartbeat(workers, mode=mode)
    lost: list[str] = []

    def on_lost(sender: object, **kwargs: Any) -> None:
        lost.append(str(kwargs.get("reason")))

    signals.lock_lost.connect(on_lost, weak=False)
    prefix = uuid.uuid4().hex[:8]
    locks = [
        LockBuilder().store(store).path("scale", f"{prefix}-{i}").heartbeat(heartbeat).build()
        for i in range(leases)
    ]
    for lock in locks:
        heartbeat.watch(lock)
    window = Window(store, emulator_pid)
    try:
        started = time.perf_counter()
        _in_threads(_acquire, locks)
        acquire_s = time.perf_counter() - started
        with heartbeat._mutex:
            heartbeat.tally.clear()
        window.open()
        time.sleep(seconds)  # the workload: holding; the heartbeat does all the work
        window.close()
        with heartbeat._mutex:
            tally = heartbeat.tally
            heartbeat.tally = Tally()
        held = sum(lock.is_current_owner() for lock in locks)
        lost_in_window = list(lost)
        started = time.perf_counter()
        _in_threads(_release, locks)
        release_s = time.perf_counter() - started
    finally:
        heartbeat.close_and_wait()
        signals.lock_lost.disconnect(on_lost)
    row = _row(
        window,
        leases=leases,
        keys=[lock.key for lock in locks],
        config=locks[0].config,
        workers=workers,
        mode=mode,
        tally=tally,
        acquire_s=acquire_s,
        release_s=release_s,
        held=held,
        lost=lost_in_window,
    )
    row["driver"] = "threads"
    if heartbeat.profiles:
        row["profile"] = _profile_summary(heartbeat.profiles)
    return row


# -- asyncio: the same window over AsyncLock leases and the loop's AsyncScheduler --------------


class MeasuringScheduler(AsyncScheduler):
    """An AsyncScheduler that records what :class:`MeasuringHeartbeat` records, task by task.

    A renewal is told apart from a watch read by the holding's deadline moving (the lock's
    private ``_st.holding``: ``deadline``, ``next_renew``). For a task run as its own asyncio
    task (a store on the I/O pool), the start lateness includes its wait for the loop.
    """

    def __init__(self, mode: str = "measure") -> None:
        super().__init__()
        self.mode = mode
        self.tally = Tally()
        self.locks: dict[str, AsyncLock] = {}

    def watch(self, lock: AsyncLock) -> None:
        self.locks[f"lease {lock.key}"] = lock

    async def _run(self, entry: ScheduledAsyncTask) -> None:
        if self.mode == "plain":
            await super()._run(entry)
            return
        started = self.clock.monotonic()
        due = entry.when  # before the run: it re-schedules the entry
        lock = self.locks.get(entry.name)
        holding = None if lock is None else lock._st.holding
        deadline = getattr(holding, "deadline", None)
        renew_due = getattr(holding, "next_renew", None)
        await super()._run(entry)
        done = self.clock.monotonic()
        self.tally.start_late.append(started - due)
        renewed = deadline is not None and getattr(holding, "deadline", None) != deadline
        if renewed and renew_due is not None and deadline is not None:
            self.tally.renew_start_late.append(started - renew_due)
            self.tally.renew_done_late.append(done - renew_due)
            self.tally.margin.append(deadline - done)
            self.tally.renewals[entry.name] = self.tally.renewals.get(entry.name, 0) + 1


#: The loop-lag probe's period: it sleeps this long and records by how much it overslept.
LAG_PROBE_S = 0.05


async def _lag_probe(lags: list[float], stop: asyncio.Event) -> None:
    loop = asyncio.get_running_loop()
    while not stop.is_set():
        asked = loop.time()
        await asyncio.sleep(LAG_PROBE_S)
        lags.append(loop.time() - asked - LAG_PROBE_S)


async def _each_limited(
    fn: Callable[[AsyncLock], Awaitable[object]], locks: Sequence[AsyncLock]
) -> None:
    """``fn`` on every lock, at most SETUP_THREADS at a time (as the threaded setup)."""
    gate = asyncio.Semaphore(SETUP_THREADS)

    async def one(lock: AsyncLock) -> None:
        async with gate:
            await fn(lock)

    await asyncio.gather(*(one(lock) for lock in locks))


async def _aacquire(lock: AsyncLock) -> None:
    if not await lock.try_lock():
        raise RuntimeError(f"could not acquire the free lock {lock.key}")


async def _arelease(lock: AsyncLock) -> None:
    with contextlib.suppress(prioritylock.PriorityLockError):
        await lock.unlock()


async def _measure_async(
    store: ObjectStore, leases: int, seconds: float, emulator_pid: int | None, mode: str
) -> dict[str, Any]:
    scheduler = MeasuringScheduler(mode)
    lost: list[str] = []

    def on_lost(sender: object, **kwargs: Any) -> None:
        lost.append(str(kwargs.get("reason")))

    signals.lock_lost.connect(on_lost, weak=False)
    prefix = uuid.uuid4().hex[:8]
    locks = [
        LockBuilder().store(store).path("scale", f"{prefix}-{i}").build_async(scheduler=scheduler)
        for i in range(leases)
    ]
    for lock in locks:
        scheduler.watch(lock)
    window = Window(store, emulator_pid)
    lags: list[float] = []
    try:
        started = time.perf_counter()
        await _each_limited(_aacquire, locks)
        acquire_s = time.perf_counter() - started
        scheduler.tally.clear()
        stop = asyncio.Event()
        probe = asyncio.create_task(_lag_probe(lags, stop))
        window.open()
        await asyncio.sleep(seconds)  # the workload: holding; the scheduler does all the work
        window.close()
        stop.set()
        await probe
        tally, scheduler.tally = scheduler.tally, Tally()
        held = sum(lock.is_current_owner() for lock in locks)
        lost_in_window = list(lost)
        started = time.perf_counter()
        await _each_limited(_arelease, locks)
        release_s = time.perf_counter() - started
    finally:
        await scheduler.aclose()
        signals.lock_lost.disconnect(on_lost)
    row = _row(
        window,
        leases=leases,
        keys=[lock.key for lock in locks],
        config=locks[0].config,
        # -1: the store's native async client (S3 on obstore), the pool only for the rest.
        workers=-1
        if _native(store)
        else (
            0
            if isinstance(store, MemoryStore)
            else NETWORK_WORKERS
            if store.capabilities.shared_across_hosts
            else DISK_WORKERS
        ),
        mode=mode,
        tally=tally,
        acquire_s=acquire_s,
        release_s=release_s,
        held=held,
        lost=lost_in_window,
    )
    row["driver"] = "asyncio"
    row["loop_lag_ms"] = ms_summary(lags)
    return row


def measure_async(
    store: ObjectStore,
    leases: int,
    seconds: float,
    emulator_pid: int | None = None,
    mode: str = "measure",
) -> dict[str, Any]:
    """:func:`measure` for ``leases`` AsyncLock objects held by one event loop (a new one)."""
    return asyncio.run(_measure_async(store, leases, seconds, emulator_pid, mode))


#: Where the scheduler thread sleeps between due times (idle, not work): left out of the sums.
_IDLE = ("threading.py", "wait")


def _profile_summary(profiles: Sequence[cProfile.Profile]) -> dict[str, Any]:
    """The heartbeat threads' profiles merged: µs per heartbeat task (``Lock._beat`` call) with
    the scheduler's own bookkeeping, the top functions by their own time, the full listing."""
    stats = pstats.Stats(profiles[0])
    for profiler in profiles[1:]:
        stats.add(profiler)
    raw: dict[tuple[str, int, str], tuple[int, int, float, float, Any]] = stats.stats  # type: ignore[attr-defined]
    beats = sum(v[1] for k, v in raw.items() if k[2] == "_beat" and k[0].endswith("_lock.py"))
    idle = sum(v[3] for k, v in raw.items() if k[0].endswith(_IDLE[0]) and k[2] == _IDLE[1])
    idle_keys = {
        k
        for k, v in raw.items()
        if (k[0].endswith(_IDLE[0]) and k[2] == _IDLE[1])
        or k[2] == "<method 'acquire' of '_thread.lock' objects>"
    }
    busy: float = stats.total_tt - idle  # type: ignore[attr-defined]
    per = 1e6 / max(1, beats)
    top = sorted(
        ((k, v) for k, v in raw.items() if k not in idle_keys),
        key=lambda kv: kv[1][2],
        reverse=True,
    )[:15]
    text = io.StringIO()
    stats.stream = text  # type: ignore[attr-defined]
    stats.sort_stats("tottime").print_stats(40)
    stats.sort_stats("cumulative").print_stats(r"prioritylock", 30)
    return {
        "timer": "wall clock under cProfile, the scheduler's idle waits left out",
        "tasks": beats,
        "busy_s": round(busy, 3),
        "us_per_task": round(busy * per, 2),
        "top_own_us_per_task": [
            {
                "function": func_name(k),
                "calls_per_task": round(v[1] / max(1, beats), 2),
                "own_us": round(v[2] * per, 2),
                "cum_us": round(v[3] * per, 2),
            }
            for k, v in top
        ],
        "text": text.getvalue(),
    }


# -- stores ------------------------------------------------------------------------------------


def _native(store: ObjectStore) -> bool:
    """Whether an AsyncLock sends this store's reads and writes on a native async client."""
    inner = getattr(store, "inner", store)  # under the StoreTimer
    made = getattr(inner, "_native_io", None)
    return callable(made) and made() is not None


@contextlib.contextmanager
def open_scale_store(name: str) -> Iterator[tuple[ObjectStore, int | None, dict[str, Any]]]:
    """The store to hold the leases on, the emulator's pid (if any), and facts about it."""
    if name == "memory":
        yield MemoryStore(), None, {}
        return
    with (
        tempfile.TemporaryDirectory(prefix="prioritylock-scale-") as work,
        _servers.running([name], Path(work)) as running,
    ):
        emulator = running[name]
        with _servers.environment(emulator.env()):
            bucket = emulator.make_bucket()
            store = open_store(emulator.url(bucket, f"scale-{uuid.uuid4().hex[:8]}"))
            facts = {
                "emulator_startup_s": round(emulator.startup_s, 2),
                "versions": _servers.versions(),
            }
            try:
                yield StoreTimer(store), emulator.pid, facts
            finally:
                store.close()


def _fmt(value: float | None) -> str:
    if value is None:
        return "-"
    if value >= 100:
        return f"{value:,.0f}"
    if value >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


def render(store: str, seconds: float, rows: Sequence[dict[str, Any]], facts: Any) -> str:
    cloud = store != "memory"
    headers = ["leases", "cpu % core"]
    if cloud:
        headers += ["emulator cpu %", "req/s (expected)", "request p50/p99 ms"]
    headers += [
        "renews",
        "reads",
        "late p50/p99/max ms",
        "renewal done p50/p99/max ms",
        "min margin s",
        "renewals/lease",
        "held",
        "lost",
    ]
    aio = bool(rows) and rows[0].get("driver") == "asyncio"
    if aio:
        headers.append("loop lag p50/p99/max ms")
    table: list[list[str]] = []
    for r in rows:
        late, done = r["late_ms"], r["renew_done_late_ms"]
        line = [f"{r['leases']:,}", f"{r['cpu_percent_of_one_core']:.1f}"]
        if cloud:
            req = r["request_ms"] or {}
            line += [
                _fmt(r["emulator_cpu_percent_of_one_core"]),
                f"{r['requests_per_s']:.0f} ({r['requests_per_s_expected']:.0f})",
                f"{_fmt(req.get('p50'))} / {_fmt(req.get('p99'))}",
            ]
        line += [
            str(r["renews"]),
            str(r["watch_reads"]),
            f"{_fmt(late['p50'])} / {_fmt(late['p99'])} / {_fmt(late['max'])}",
            f"{_fmt(done['p50'])} / {_fmt(done['p99'])} / {_fmt(done['max'])}",
            _fmt(r["min_margin_s"]),
            "-"
            if r["renewals_per_lease_min"] is None
            else f"{r['renewals_per_lease_min']}-{r['renewals_per_lease_max']}",
            f"{r['still_held']:,}",
            str(r["lost"]),
        ]
        if aio:
            lag = r["loop_lag_ms"]
            line.append(f"{_fmt(lag['p50'])} / {_fmt(lag['p99'])} / {_fmt(lag['max'])}")
        table.append(line)
    widths = [max(len(h), *(len(t[i]) for t in table)) for i, h in enumerate(headers)]
    workers = rows[0]["workers"] if rows else DEFAULT_WORKERS
    mode = rows[0]["mode"] if rows else "measure"
    how = {
        "measure": "",
        "plain": ", tasks not timed (--plain)",
        "profile": ", UNDER THE PROFILER (--profile)",
    }[mode]
    driver = (
        "AsyncLock leases, one event loop's scheduler, store calls "
        + (
            "inline on the loop"
            if workers == 0
            else "on the store's native async client (obstore)"
            if workers < 0
            else f"on the {workers}-thread I/O pool"
        )
        if aio
        else f"{workers} heartbeat workers"
    )
    out = [
        f"scale on {store} ({os.cpu_count()} cores, {seconds:g} s held, default timings, "
        f"{driver}{how}; "
        f"load average {facts['loadavg_start'][0]:.2f} at the start)",
        "  ".join(h.rjust(w) for h, w in zip(headers, widths, strict=True)),
        "  ".join("-" * w for w in widths),
    ]
    out += ["  ".join(c.rjust(w) for c, w in zip(t, widths, strict=True)) for t in table]
    for r in rows:
        out.append(
            f"  {r['leases']:,} leases: acquired in {r['acquire_all_s']:.1f} s, released in "
            f"{r['release_all_s']:.1f} s ({SETUP_THREADS} "
            f"{'tasks at a time' if aio else 'threads'}); {r['tasks_run']:,} heartbeat "
            f"tasks in the window"
            + (f", {r['renewals_measured']:,} of them renewals" if r["mode"] == "measure" else "")
            + (
                f"; load average {r['load_at_window_start']:.2f} when it opened"
                if r["load_at_window_start"] is not None
                else ""
            )
            + (
                f"; machine CPU {m['busy']:.0f}% busy, {m['idle']:.0f}% idle, "
                f"{m['steal']:.0f}% stolen by the hypervisor"
                if (m := r["machine_cpu_percent"])
                else ""
            )
            + (f"; lost: {', '.join(r['lost_reasons'])}" if r["lost_reasons"] else "")
        )
        prof = r["profile"]
        if prof:
            out.append(
                f"  profile ({prof['timer']}): {prof['tasks']:,} tasks, "
                f"{prof['us_per_task']:.1f} µs each; top own time, µs per task:"
            )
            for f in prof["top_own_us_per_task"]:
                out.append(
                    f"    {f['own_us']:8.2f} own {f['cum_us']:8.2f} cum {f['calls_per_task']:6.2f}"
                    f" calls  {f['function']}"
                )
    return "\n".join(out)


#: A lease's heartbeat makes one request every 5 s at the defaults (a renewal every 10 s, a
#: watch read half-way): the no-op floor runs one task per lease every this many seconds.
FLOOR_PERIOD = 5.0


def heartbeat_floor(leases: int, seconds: float, slot_s: float) -> dict[str, Any]:
    """CPU of a Heartbeat running ``leases`` no-op inline tasks, each every FLOOR_PERIOD, their
    due times spread evenly (``slot_s`` 0) or rounded to multiples of ``slot_s``."""
    heartbeat = Heartbeat()
    start = time.monotonic() + 0.5

    def task_at(first: float) -> Callable[[], float]:
        due = [first]

        def task() -> float:
            due[0] += FLOOR_PERIOD
            return due[0]

        return task

    dues = []
    for i in range(leases):
        due = start + FLOOR_PERIOD * i / leases
        if slot_s:
            due = start + math.floor((due - start) / slot_s) * slot_s
        dues.append(due)
        heartbeat.schedule(task_at(due), due, f"noop {i}", inline=True)
    time.sleep(FLOOR_PERIOD / 2)
    cpu0, wall0 = time.process_time(), time.perf_counter()
    time.sleep(seconds)
    cpu = time.process_time() - cpu0
    wall = time.perf_counter() - wall0
    heartbeat.close()
    return {
        "leases": leases,
        "slot_s": slot_s,
        "tasks_per_s": leases / FLOOR_PERIOD,
        "wakeups_per_s": len(set(dues)) / FLOOR_PERIOD,
        "cpu_percent_of_one_core": round(100 * cpu / wall, 2),
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--store", choices=STORES, default="memory")
    parser.add_argument(
        "--leases", default=None, help="counts, comma-separated (default: per store)"
    )
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument(
        "--workers",
        type=int,
        default=DEFAULT_WORKERS,
        help=f"the heartbeat's pool (default: the library's, {DEFAULT_WORKERS})",
    )
    modes = parser.add_mutually_exclusive_group()
    modes.add_argument(
        "--plain",
        action="store_true",
        help="don't time each heartbeat task (CPU without the measuring; no lateness figures)",
    )
    modes.add_argument(
        "--profile",
        action="store_true",
        help="profile the heartbeat threads (cProfile, wall clock; figures inflated); "
        "the listing goes to benchmarks/results/profile-scale-STORE-N.txt",
    )
    modes.add_argument(
        "--floor",
        action="store_true",
        help="no locks: the heartbeat alone running no-op tasks at the rate N leases need, each "
        "at its own due time and with due times rounded to 50 ms (the scheduler's own cost)",
    )
    parser.add_argument(
        "--async",
        dest="aio",
        action="store_true",
        help="hold AsyncLock leases on one event loop (its AsyncScheduler) instead of Lock "
        "leases on the threaded heartbeat; adds the loop's lag (a probe sleeping 50 ms)",
    )
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    if args.aio and (args.profile or args.floor):
        parser.error("--async measures, or --plain; not --profile or --floor")
    counts = [int(n) for n in (args.leases or DEFAULT_LEASES[args.store]).split(",")]
    facts: dict[str, Any] = machine_info()
    if args.floor:
        floor = [heartbeat_floor(n, args.seconds, slot) for n in counts for slot in (0.0, 0.05)]
        print(
            f"the heartbeat alone: no-op inline tasks, 2 per lease per {FLOOR_PERIOD * 2:g} s "
            f"({os.cpu_count()} cores, {args.seconds:g} s)"
        )
        for f in floor:
            spread = f"rounded to {f['slot_s'] * 1000:g} ms" if f["slot_s"] else "each its own"
            print(
                f"  {f['leases']:>7,} leases = {f['tasks_per_s']:,.0f} tasks/s, due times "
                f"{spread} ({f['wakeups_per_s']:,.0f} distinct/s): "
                f"{f['cpu_percent_of_one_core']:.2f} % of a core"
            )
        if args.json:
            write_json(Path(args.json), {"floor": floor, "machine": facts})
        return 0
    rows: list[dict[str, Any]] = []
    try:
        for n in counts:
            with open_scale_store(args.store) as (store, pid, store_facts):
                facts.update(store_facts)
                mode = "plain" if args.plain else "profile" if args.profile else "measure"
                if args.aio:
                    rows.append(measure_async(store, n, args.seconds, pid, mode))
                else:
                    rows.append(measure(store, n, args.seconds, pid, args.workers, mode))
    except EmulatorError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(render(args.store, args.seconds, rows, facts))
    for r in rows:
        if r["profile"]:
            path = RESULTS / f"profile-scale-{args.store}-{r['leases']}.txt"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(r["profile"].pop("text"), encoding="utf-8")
            print(f"profile written to {path.relative_to(RESULTS.parents[1])}")
    if args.json:
        driver = "asyncio" if args.aio else "threads"
        payload = {"store": args.store, "driver": driver, "machine": facts, "rows": rows}
        write_json(Path(args.json), payload)
    failed = [r for r in rows if r["lost"] or r["still_held"] != r["leases"]]
    for r in failed:
        print(
            f"FAILED: {r['leases']:,} leases: {r['lost']} lost, {r['still_held']:,} still held",
            file=sys.stderr,
        )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
