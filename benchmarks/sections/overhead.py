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
    thread_lock = timed(partial(acquire_release, threading.Lock()))
    cases = [
        ("timer", "empty cycle (timer overhead)", s.cycles, timed(int)),
        ("threading", "threading.Lock", s.cycles, thread_lock),
        (
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
        cases.append(
            (f"{key}/same", f"{label}, same Lock object", target, timed(partial(lock_cycle, same)))
        )
        cases.append(
            (f"{key}/fresh", f"{label}, fresh Lock each cycle", target, timed(lock_cycle, fresh))
        )
    variants = [CycleVariant(*case) for case in cases]
    run_interleaved(variants, s)
    title = "Uncontended acquire+release: try_lock()+unlock() (µs per cycle)"
    against = {v.key: "filelock" for v in variants}
    return compare("overhead", title, variants, against, "filelock", s)
