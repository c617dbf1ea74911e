"""Scale: one process holding many leases, the CPU its heartbeat uses and how late renewals run.

    python benchmarks/scale.py [--store memory|s3-moto|s3-seaweedfs] [--leases 1000,10000]
                               [--seconds 30] [--async] [--tune-gc] [--json PATH]
                               [--lease-timeout 30] [--watch-interval S] [--warm-up S]

N leases (by default lease 30 s: renewed every 10 s, watched half-way; a longer lease and watch
interval make fewer requests a second) are acquired by 8 workers, held for the window, then
released. Over the window: this process's CPU (and the emulator's), the store's requests, how late
each heartbeat task started, when each renewal finished against its due time and the margin it
left on the old lease (0 is a loss), and losses. ``--async`` holds ``AsyncLock`` leases on one
event loop (its ``AsyncScheduler``) and adds the loop's lag (a probe sleeping 50 ms); the garbage
collector's full collections are timed (``gc_full_ms``), its objects counted per lease;
``--tune-gc`` tunes it as the service does (``prioritylock._collector``) once the leases are
held. Exits with status 1 if a lease was lost or is not held at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import math
import sys
import threading
import time
from collections import Counter
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import _servers
from _harness import CpuWindow, Json, lag_probe, machine_info, ms_summary, write_json

from prioritylock import AsyncLock, Heartbeat, Lock, LockBuilder, signals
from prioritylock._ascheduler import AsyncScheduler, ScheduledAsyncTask
from prioritylock._collector import tune_collector
from prioritylock._scheduler import ScheduledTask
from prioritylock.stores import ObjectStore, open_store

THRESHOLDS = gc.get_threshold()  # restored after each row
DEFAULT_LEASES = {"memory": "1000,10000", "s3-moto": "1000", "s3-seaweedfs": "1000"}
#: Workers that acquire and release the leases: fewer than the S3 client's pooled connections.
SETUP_WORKERS = 8


@dataclass
class Tally:
    """What the heartbeat did, task by task. A renewal is told from a watch read by the lock's
    deadline moving: that reads the private ``_st.holding``, so a change there fails loudly."""

    locks: dict[str, Lock | AsyncLock] = field(default_factory=dict)  # task name -> its lock
    start_late: list[float] = field(default_factory=list)  # every task: started - due
    done_late: list[float] = field(default_factory=list)  # renewals: finished - due
    margin: list[float] = field(default_factory=list)  # renewals: old deadline - finished
    renewals: Counter[str] = field(default_factory=Counter)
    _mutex: threading.Lock = field(default_factory=threading.Lock)

    def begin(self, name: str, due: float, now: float) -> tuple[Any, ...]:
        lock = self.locks.get(name)
        holding = None if lock is None else lock._st.holding
        deadline, renew_due = getattr(holding, "deadline", None), getattr(holding, "next_renew", 0)
        return (name, due, now, holding, deadline, renew_due)

    def end(self, mark: tuple[Any, ...], now: float) -> None:
        name, due, started, holding, deadline, renew_due = mark
        with self._mutex:
            self.start_late.append(started - due)
            if deadline is not None and holding.deadline != deadline:
                self.done_late.append(now - renew_due)
                self.margin.append(deadline - now)
                self.renewals[name] += 1


class MeasuringHeartbeat(Heartbeat):
    """The threaded heartbeat, each task's run recorded in :attr:`tally`."""

    tally: Tally  # set by measure()

    def _run(self, entry: ScheduledTask) -> None:
        mark = self.tally.begin(entry.name, entry.when, self.clock.monotonic())
        super()._run(entry)
        self.tally.end(mark, self.clock.monotonic())


class MeasuringScheduler(AsyncScheduler):
    """The event loop's scheduler, each task's run recorded in :attr:`tally`."""

    tally: Tally  # set by measure()

    async def _run(self, entry: ScheduledAsyncTask) -> None:
        mark = self.tally.begin(entry.name, entry.when, self.clock.monotonic())
        await super()._run(entry)
        self.tally.end(mark, self.clock.monotonic())


def _row(tally: Tally, window: CpuWindow, requests: dict[str, int]) -> Json:
    n = len(tally.locks)
    config = next(iter(tally.locks.values())).config
    interval = config.renew_interval
    # Per lease and renew interval: 1 renewal, and a watch read every watch interval in between.
    expected = n / interval * (1 + max(0, math.ceil(interval / config.watch_interval) - 1))
    per_lease = [tally.renewals[name] for name in tally.locks]
    return {
        "leases": n,
        "load_at_window_start": window.load,
        "machine_cpu_percent": window.machine,
        "seconds": round(window.seconds, 2),
        "lease_timeout_s": config.lease_timeout,
        "renew_interval_s": interval,
        "cpu_percent_of_one_core": window.percent["own"],
        "emulator_cpu_percent_of_one_core": window.percent.get("emulator"),
        "requests": requests,
        "requests_per_s": round(requests.get("total", 0) / window.seconds, 1),
        "requests_per_s_expected": round(expected, 1),
        "late_ms": ms_summary(tally.start_late),
        "renew_done_late_ms": ms_summary(tally.done_late),
        "renewals_measured": len(tally.margin),
        "renewals_per_lease_min": min(per_lease),
        "renewals_per_lease_max": max(per_lease),
        "min_margin_s": round(min(tally.margin), 3) if tally.margin else None,
    }


async def measure(
    store: ObjectStore, leases: int, seconds: float, emulator: int | None, args: Any
) -> Json:
    """``leases`` locks held on ``store`` for ``seconds``: ``Lock`` objects on a threaded
    heartbeat, or (``args.aio``) ``AsyncLock`` objects on this event loop's scheduler."""
    aio = args.aio
    scheduler = MeasuringScheduler() if aio else MeasuringHeartbeat()
    tally, build = Tally(), LockBuilder().store(store).lease_timeout(args.lease_timeout)
    if args.watch_interval:
        build.watch_interval(args.watch_interval)
    gc.collect()
    untracked = len(gc.get_objects())
    scheduler.tally = tally
    if isinstance(scheduler, MeasuringHeartbeat):
        build.heartbeat(scheduler)
        locks: list[Any] = [build.path("scale", str(i)).build() for i in range(leases)]
    else:
        locks = [
            build.path("scale", str(i)).build_async(scheduler=scheduler) for i in range(leases)
        ]
    tally.locks = {f"lease {lock.key}": lock for lock in locks}
    pool, loop = ThreadPoolExecutor(SETUP_WORKERS), asyncio.get_running_loop()

    async def each(op: str) -> list[Any]:  # SETUP_WORKERS at a time; not by a Semaphore, whose
        out: list[Any] = []  # acquire scans its waiters (3.11): hours at 100,000 leases
        for i in range(0, len(locks), SETUP_WORKERS):
            calls = [getattr(lock, op) for lock in locks[i : i + SETUP_WORKERS]]
            runs = (c() if aio else loop.run_in_executor(pool, c) for c in calls)
            out += await asyncio.gather(*runs, return_exceptions=True)  # a lost unlock() raises
        return out

    lost: list[str] = []
    pauses: list[float] = []  # each full collection's start, then its seconds

    def on_lost(sender: object, **kwargs: Any) -> None:
        lost.append(str(kwargs.get("reason")))

    def full(phase: str, info: dict[str, int]) -> None:
        if info["generation"] == 2:
            pauses.append(time.perf_counter() - (pauses.pop() if phase == "stop" else 0.0))

    signals.lock_lost.connect(on_lost, weak=False)
    try:
        t0 = time.perf_counter()
        if not all(x is True for x in await each("try_lock")):
            raise RuntimeError("a free lock could not be acquired")
        acquired = time.perf_counter() - t0
        gc.collect()
        tracked = (len(gc.get_objects()) - untracked) / leases
        if args.tune_gc:
            tune_collector()
        await asyncio.sleep(args.warm_up)  # renewals due while acquiring catch up first
        gc.callbacks.append(full)
        scheduler.tally = tally = Tally(tally.locks)  # the acquisitions left out
        lags: list[float] = []
        probe = asyncio.create_task(lag_probe(lags))
        before = store.stats.snapshot()
        with CpuWindow(emulator=emulator) as window:
            await asyncio.sleep(seconds)  # the workload: holding; the heartbeat does it all
        probe.cancel()
        gc.callbacks.remove(full)
        after = store.stats.snapshot()
        row = _row(tally, window, {k: after[k] - before[k] for k in after if after[k] != before[k]})
        row["loop_lag_ms"] = ms_summary(lags) if aio else None
        row["gc_full_ms"] = [round(p * 1e3, 1) for p in pauses]
        row |= {"tracked_per_lease": round(tracked, 1), "gc_tuned": args.tune_gc}
        row["still_held"] = sum(lock.is_current_owner() for lock in locks)
        row |= {"lost_reasons": sorted(set(lost)), "lost": len(lost)}
        t0 = time.perf_counter()
        await each("unlock")
    finally:
        signals.lock_lost.disconnect(on_lost)
        gc.unfreeze()
        gc.set_threshold(*THRESHOLDS)
        pool.shutdown()
        await scheduler.aclose() if aio else scheduler.close()  # type: ignore[union-attr]
    released = round(time.perf_counter() - t0, 3)
    return {**row, "acquire_all_s": round(acquired, 3), "release_all_s": released}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--store", choices=sorted(DEFAULT_LEASES), default="memory")
    parser.add_argument("--leases", default=None, help="comma-separated (default: per store)")
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--async", dest="aio", action="store_true", help="AsyncLock leases")
    parser.add_argument("--tune-gc", action="store_true", help="as the service, once held")
    parser.add_argument("--lease-timeout", type=float, default=30.0)
    parser.add_argument("--watch-interval", type=float, default=None, help="default: derived")
    parser.add_argument("--warm-up", type=float, default=0.0, help="held before the window")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    counts = [int(n) for n in (args.leases or DEFAULT_LEASES[args.store]).split(",")]
    facts: Json = machine_info()
    rows: list[Json] = []
    for n in counts:
        with _servers.store_url(args.store, "scale") as (url, emulator):
            store = open_store(url)
            pid = emulator.pid if emulator else None
            rows.append(asyncio.run(measure(store, n, args.seconds, pid, args)))
            store.close()
            if emulator is not None:
                facts["versions"] = _servers.versions()
    driver = "asyncio" if args.aio else "threads"
    print(f"scale on {args.store}, {driver}:", *map(json.dumps, rows), sep="\n")
    if args.json:
        payload = {"store": args.store, "driver": driver, "machine": facts, "rows": rows}
        write_json(args.json, payload)
    failed = [r for r in rows if r["lost"] or r["still_held"] != r["leases"]]
    for r in failed:
        print(f"FAILED: {r['leases']:,} leases: {r['lost']} lost, {r['still_held']:,} held")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
