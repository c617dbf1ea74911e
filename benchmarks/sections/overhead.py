"""``overhead``: µs per uncontended ``try_lock()`` + ``unlock()`` on the memory and local stores.

The LocalStore durable (its default) and ``durable=false``; the same ``Lock`` object, a new one
per cycle (built untimed), and the same on a ``StoreTimer`` (where the time goes: the store's
calls or the library); against ``filelock.FileLock`` in the same directory and
``threading.Lock`` (the floor). Wall clock and process CPU per cycle, interleaved. Then where the
library's time goes: the cycle under ``cProfile``, each function's own time added up by the part
of the library it is in (:data:`PARTS`).
"""

from __future__ import annotations

import cProfile
import pstats
import threading
from functools import partial
from pathlib import Path

import filelock
from _bench import Bench, StoreTimer, local_stores, lock_cycle
from _harness import CycleVariant, Section, compare, run_interleaved, summarize, timed

from prioritylock import Lock
from prioritylock.stores import open_store


def acquire_release(lock: threading.Lock | filelock.FileLock) -> None:
    lock.acquire()
    lock.release()


#: The library's parts by module (anything else is "builtins", system calls included).
PARTS = {
    "the store": ("stores",),
    "flows, protocol and lease encoding": ("_flows", "_protocol", "_state", "_lease", "_reserve"),
    "driver (dispatch, store calls)": ("_runner", "_lock", "_driver", "_effects"),
    "heartbeat and notices": ("_wake", "_scheduler", "_due", "_clock"),
}


def _part(path: str) -> str:
    """The part of the library a cProfile entry's file is in."""
    made = path.startswith("<attrs generated methods prioritylock.")  # attrs' __init__ & co
    module = path.split(".")[1] if made else "stores" if "/stores/" in path else Path(path).stem
    return next((part for part, names in PARTS.items() if module in names), "builtins")


def breakdown(lock: Lock, cycles: int) -> str:
    """Shares of the cycle's time by part of the library (cProfile's cost per call weighs parts
    that make many small calls a little more)."""
    profile = cProfile.Profile()
    profile.enable()
    for _ in range(cycles):
        lock_cycle(lock)
    profile.disable()
    spent: dict[str, float] = {}
    for (path, _, _), (_, _, own, _, _) in pstats.Stats(profile).stats.items():  # type: ignore[attr-defined]
        spent[_part(path)] = spent.get(_part(path), 0.0) + own
    total, parts = sum(spent.values()), sorted(spent.items(), key=lambda item: -item[1])
    return ", ".join(f"{part} {100 * t / total:.0f}%" for part, t in parts)


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
    profiled: list[tuple[str, Lock]] = []
    for key, label, kind, url in local_stores(b):
        n, store = s.cycles_slow if kind.slow else s.cycles, open_store(url)
        same = b.builder(store, b.path("same"), "bench").build()
        fresh = b.builder(store, b.path("fresh"), "bench").build
        timer, spent = StoreTimer(store), splits.setdefault(f"{key}/split", ([], label))[0]
        split = partial(split_cycle, b.builder(timer, b.path("split"), "bench").build(), timer)
        profiled.append((label, same))
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
    for label, same in profiled:
        notes.append(f"{label}, where the time goes (cProfile): {breakdown(same, s.warmup * 5)}")
    title = "Uncontended acquire+release: try_lock()+unlock() (µs per cycle)"
    against = {v.key: "filelock" for v in variants}
    return compare("overhead", title, variants, against, "filelock", s, notes)
