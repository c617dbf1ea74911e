"""``overhead``: µs per uncontended ``try_lock()`` + ``unlock()`` on the memory and local stores.

The LocalStore durable (its default) and ``durable=false``, each with the same ``Lock`` object
and a new one per cycle (built outside the timed part), against ``filelock.FileLock`` on the same
disk and ``threading.Lock`` (the floor); wall clock and process CPU per cycle, interleaved.
"""

from __future__ import annotations

import threading
from functools import partial

import filelock
from _bench import Bench, local_stores, lock_cycle
from _harness import CycleVariant, Section, compare, run_interleaved, timed

from prioritylock.stores import open_store


def acquire_release(lock: threading.Lock | filelock.FileLock) -> None:
    lock.acquire()
    lock.release()


def section_overhead(b: Bench) -> Section:
    s = b.sizes
    (b.root / "filelock").mkdir()
    file_lock = filelock.FileLock(str(b.root / "filelock" / "bench.lock"))
    variants = [
        CycleVariant("timer", "empty cycle (timer overhead)", s.cycles, timed(int)),
        CycleVariant(
            "threading",
            "threading.Lock",
            s.cycles,
            timed(partial(acquire_release, threading.Lock())),
        ),
        CycleVariant(
            "filelock",
            "filelock.FileLock (same disk)",
            s.cycles,
            timed(partial(acquire_release, file_lock)),
        ),
    ]
    for key, label, kind, url in local_stores(b):
        target = s.cycles_slow if kind.slow else s.cycles
        store = open_store(url)
        same = b.builder(store, b.path("same"), "bench").build()
        fresh = b.builder(store, b.path("fresh"), "bench").build
        variants += [
            CycleVariant(
                f"{key}/same",
                f"{label}, same Lock object",
                target,
                timed(partial(lock_cycle, same)),
            ),
            CycleVariant(
                f"{key}/fresh", f"{label}, fresh Lock each cycle", target, timed(lock_cycle, fresh)
            ),
        ]
    run_interleaved(variants, s)
    table, rows = compare(variants, {v.key: "filelock" for v in variants})
    return Section(
        name="overhead",
        title="Uncontended acquire+release: try_lock()+unlock() (µs per cycle)",
        headers=["variant", "median", "p99", "vs filelock", "CPU µs", "CPU vs filelock", "n"],
        table=table,
        rows=rows,
        notes=[
            "CPU µs: process CPU time of all threads (heartbeat included) per cycle, mean.",
            f"Variants interleaved in {s.rounds} rounds after {s.warmup} warm-up cycles each; "
            f"each capped at {s.budget_s:g} s.",
        ],
    )
