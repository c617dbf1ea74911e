"""Scale: one process holding many leases. CPU used by the heartbeat, and how late renewals ran.

    python benchmarks/scale.py [--leases 1000,10000] [--seconds 30] [--json PATH]

Every lease uses the default timings (lease 30 s: renewed every 10 s, watched every 5 s) on one
MemoryStore, so the figures are the library's own cost. A lease that is not renewed before its
deadline fires ``lock_lost``; the run reports how many did (it must be 0).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import threading
import time
from typing import Any

from prioritylock import Heartbeat, LockBuilder, signals
from prioritylock._heartbeat import ScheduledTask
from prioritylock.stores import MemoryStore


class MeasuringHeartbeat(Heartbeat):
    """A Heartbeat that records how late each task started against its due time."""

    def __init__(self) -> None:
        super().__init__()
        self.lateness: list[float] = []
        self._mutex = threading.Lock()

    def _run(self, entry: ScheduledTask) -> None:
        late = self.clock.monotonic() - entry.when
        with self._mutex:
            self.lateness.append(late)
        super()._run(entry)


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def measure(leases: int, seconds: float) -> dict[str, Any]:
    store = MemoryStore()
    heartbeat = MeasuringHeartbeat()
    lost: list[str] = []

    def on_lost(sender: object, **kwargs: Any) -> None:
        lost.append(str(kwargs.get("reason")))

    signals.lock_lost.connect(on_lost, weak=False)
    locks = [
        LockBuilder().store(store).path("scale", f"lock-{i}").heartbeat(heartbeat).build()
        for i in range(leases)
    ]
    started = time.perf_counter()
    for lock in locks:
        assert lock.try_lock()
    acquire_s = time.perf_counter() - started
    heartbeat.lateness.clear()
    store.stats.reset()
    cpu0, wall0 = time.process_time(), time.perf_counter()
    time.sleep(seconds)  # the workload: holding; the heartbeat does all the work
    cpu = time.process_time() - cpu0
    wall = time.perf_counter() - wall0
    held = sum(lock.is_current_owner() for lock in locks)
    snap = store.stats.snapshot()
    for lock in locks:
        lock.unlock()
    heartbeat.close()
    signals.lock_lost.disconnect(on_lost)
    late_ms = [x * 1000 for x in heartbeat.lateness] or [0.0]
    return {
        "leases": leases,
        "seconds": round(wall, 2),
        "acquire_all_s": round(acquire_s, 3),
        "cpu_percent_of_one_core": round(100 * cpu / wall, 2),
        "tasks_run": len(heartbeat.lateness),
        "renews": snap["replaces"],
        "watch_reads": snap["reads"],
        "late_ms_p50": round(statistics.median(late_ms), 3),
        "late_ms_p99": round(_percentile(late_ms, 0.99), 3),
        "late_ms_max": round(max(late_ms), 3),
        "still_held": held,
        "lost": len(lost),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--leases", default="1000,10000")
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    rows = [measure(int(n), args.seconds) for n in args.leases.split(",")]
    header = (
        f"{'leases':>7} {'cpu % core':>10} {'renews':>7} {'reads':>7} {'late p50 ms':>11} "
        f"{'p99 ms':>8} {'max ms':>8} {'held':>6} {'lost':>5}"
    )
    print(f"scale on the memory store ({os.cpu_count()} cores, {args.seconds:g} s held)")
    print(header)
    for r in rows:
        print(
            f"{r['leases']:>7} {r['cpu_percent_of_one_core']:>10} {r['renews']:>7} "
            f"{r['watch_reads']:>7} {r['late_ms_p50']:>11} {r['late_ms_p99']:>8} "
            f"{r['late_ms_max']:>8} {r['still_held']:>6} {r['lost']:>5}"
        )
    if args.json:
        with open(args.json, "w", encoding="utf-8") as out:
            json.dump(rows, out, indent=2)


if __name__ == "__main__":
    main()
