"""``overhead``: µs per uncontended ``try_lock()`` + ``unlock()`` on the memory and local stores.

The LocalStore durable (its default) and ``durable=false``; the same ``Lock`` object, a new one
per cycle (built untimed), and the same on a ``StoreTimer`` (where the time goes: the store's
calls or the library); against ``filelock.FileLock`` in the same directory and
``threading.Lock`` (the floor). Wall clock and process CPU per cycle, interleaved.
"""

from __future__ import annotations

import threading
from functools import partial

import filelock
from _bench import Bench, StoreTimer, local_stores, lock_cycle
from _harness import CycleVariant, Section, compare, run_interleaved, summarize, timed

from prioritylock import Lock
from prioritylock.stores import open_store


def acquire_release(lock: threading.Lock | filelock.FileLock) -> None:
    lock.acquire()
    lock.release()


def split_cycle(lock: Lock, timer: StoreTimer, spent: list[int]) -> None:
    before = timer.spent_ns()  # ns in the store's calls, noted per cycle
    lock_cycle(lock)
    spent.append(timer.spent_ns() - before)


def section_overhead(b: Bench) -> Section:
    s, flock = b.sizes, filelock.FileLock(str(b.root / "bench.filelock"))  # beside the stores
    cases = [("timer", "empty cycle (timer overhead)", s.cycles, timed(int))]
    for key, label, lock in (
        ("threading", "threading.Lock", threading.Lock()),
        ("filelock", "filelock.FileLock (same directory)", flock),
    ):
        cases.append((key, label, s.cycles, timed(partial(acquire_release, lock))))
    splits: dict[str, tuple[list[int], str]] = {}
    for key, label, kind, url in local_stores(b):
        n, store = s.cycles_slow if kind.slow else s.cycles, open_store(url)
        same = b.builder(store, b.path("same"), "bench").build()
        fresh = b.builder(store, b.path("fresh"), "bench").build
        timer, spent = StoreTimer(store), splits.setdefault(f"{key}/split", ([], label))[0]
        split = partial(split_cycle, b.builder(timer, b.path("split"), "bench").build(), timer)
        cases += [
            (f"{key}/same", f"{label}, same Lock object", n, timed(partial(lock_cycle, same))),
            (f"{key}/fresh", f"{label}, fresh Lock each cycle", n, timed(lock_cycle, fresh)),
            (f"{key}/split", f"{label}, same, on a StoreTimer", n, timed(partial(split, spent))),
        ]
    variants = [CycleVariant(*case) for case in cases]
    run_interleaved(variants, s)
    notes = []
    for v in variants:
        if v.key in splits:
            spent, label = splits[v.key]
            calls, total = summarize(spent, 1e3).median, summarize(v.samples, 1e3).median
            notes.append(
                f"{label}: of the {total:.1f} µs median cycle, {calls:.1f} µs (median) in the"
                f" store's calls, {total - calls:.1f} µs in the library"
            )
    title = "Uncontended acquire+release: try_lock()+unlock() (µs per cycle)"
    against = {v.key: "filelock" for v in variants}
    return compare("overhead", title, variants, against, "filelock", s, notes)
