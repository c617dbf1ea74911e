"""``overhead``: µs per uncontended acquire+release cycle on the memory and local stores.

The LocalStore durable (its default) and ``durable=false``, each with the same ``Lock`` object
and a fresh one per cycle, against ``filelock.FileLock`` on the same disk and ``threading.Lock``
(the floor); wall clock (median, p99) and process CPU per cycle, variants interleaved.
"""

from __future__ import annotations

import threading
import time
from dataclasses import asdict

import filelock
from _bench import MEMORY, Bench, local_stores, lock_cycle
from _harness import Cycles, CycleVariant, Json, Section, fmt_num, run_interleaved, summarize, timed

from prioritylock import LockBuilder
from prioritylock.stores import open_store


def _fresh_lock_cycles(builder: LockBuilder) -> Cycles:
    """A new Lock object for every cycle (built outside the timed part)."""

    def run(k: int) -> list[int]:
        clock = time.perf_counter_ns
        out = [0] * k
        for i in range(k):
            lock = builder.build()
            t0 = clock()
            if not lock.try_lock():
                raise RuntimeError(f"uncontended try_lock() failed on {lock.key}")
            lock.unlock()
            out[i] = clock() - t0
        return out

    return run


def section_overhead(b: Bench) -> Section:
    s = b.sizes
    variants: list[CycleVariant] = []
    floor = threading.Lock()
    variants.append(CycleVariant("timer", "empty cycle (timer overhead)", s.cycles, timed(int)))

    def floor_cycle() -> None:
        floor.acquire()
        floor.release()

    variants.append(CycleVariant("threading", "threading.Lock", s.cycles, timed(floor_cycle)))
    flock_dir = b.root / "filelock"
    flock_dir.mkdir()
    file_lock = filelock.FileLock(str(flock_dir / "bench.lock"))

    def filelock_cycle() -> None:
        file_lock.acquire()
        file_lock.release()

    variants.append(
        CycleVariant("filelock", "filelock.FileLock (same disk)", s.cycles, timed(filelock_cycle))
    )
    for key, label, kind, url in local_stores(b):
        target = s.cycles_slow if kind.slow else s.cycles
        store = open_store(url)
        same = b.builder(store, b.path("same"), "bench").build()
        variants.append(
            CycleVariant(
                f"{key}/same",
                f"{label}, same Lock object",
                target,
                timed(lock_cycle(same)),
            )
        )
        fresh = b.builder(store, b.path("fresh"), "bench")
        variants.append(
            CycleVariant(
                f"{key}/fresh",
                f"{label}, fresh Lock each cycle",
                target,
                _fresh_lock_cycles(fresh),
            )
        )
    builder = b.builder(open_store(b.url(MEMORY)), b.path("build"), "bench")
    variants.append(
        CycleVariant("build", "LockBuilder...build() alone", s.cycles, timed(builder.build))
    )
    run_interleaved(variants, s)

    baseline = next(v for v in variants if v.key == "filelock")
    ref = summarize(baseline.samples, 1e3).median
    cpu_ref = baseline.cpu_us
    table: list[list[str]] = []
    rows: list[Json] = []
    for v in variants:
        summary = summarize(v.samples, 1e3)
        ratio = summary.median / ref
        table.append(
            [
                v.label,
                fmt_num(summary.median),
                fmt_num(summary.p99),
                f"{ratio:.2f}x" if ratio >= 0.01 else "<0.01x",
                fmt_num(v.cpu_us),
                f"{v.cpu_us / cpu_ref:.2f}x" if v.cpu_us >= 0.01 * cpu_ref else "<0.01x",
                str(summary.n),
            ]
        )
        rows.append(
            {
                "variant": v.key,
                "label": v.label,
                "unit": "us",
                "cpu_us_per_cycle": v.cpu_us,
                **asdict(summary),
            }
        )
    return Section(
        name="overhead",
        title="Uncontended acquire+release: try_lock()+unlock() (µs per cycle)",
        headers=["variant", "median", "p99", "vs filelock", "CPU µs", "CPU vs filelock", "n"],
        table=table,
        rows=rows,
        notes=[
            "Fresh Lock: build() is outside the timed part (its own cost is the last row).",
            "CPU µs: process CPU time of all threads (heartbeat included) per cycle, mean; "
            "time spent waiting for the disk or for another process's CPU is not in it.",
            f"Variants interleaved in {s.rounds} rounds after {s.warmup} warm-up cycles each; "
            f"each capped at {s.budget_s:g} s.",
        ],
    )
