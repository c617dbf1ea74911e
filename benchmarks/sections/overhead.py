"""``overhead``: µs per uncontended ``try_lock()`` + ``unlock()`` on the memory and local stores.

The LocalStore durable (its default) and ``durable=false``: the same ``Lock``, a new one per cycle
(built untimed), the same on a ``StoreTimer`` (the store's calls vs the library's own time), an
``AsyncLock`` on the MemoryStore; against ``filelock`` in the same directory and ``threading.Lock``
(the floor). Wall clock and process CPU per cycle, interleaved; issue 28's ratios (:data:`TARGETS`)
by CPU. Where the library's time goes: each function's own time under ``cProfile``, by part.
"""

from __future__ import annotations

import asyncio
import cProfile
import pstats
import threading
from functools import partial
from pathlib import Path

import filelock
from _bench import Bench, StoreTimer, alock_cycle, close_loop, local_stores, lock_cycle
from _harness import CycleVariant, Section, compare, run_interleaved, summarize, timed, timed_async

from prioritylock import Lock
from prioritylock.stores import open_store

#: The library's parts by module (anything else is "builtins", system calls included).
PARTS = {
    "the store": ("stores",),
    "flows, protocol and lease encoding": ("_flows", "_protocol", "_state", "_lease", "_reserve"),
    "driver (dispatch, store calls)": ("_runner", "_lock", "_driver", "_effects"),
    "heartbeat and notices": ("_wake", "_scheduler", "_due", "_clock"),
}


#: Issue 28's targets: variant -> (the variant it is held against, at most this CPU ratio).
TARGETS = {"memory/same": ("filelock", 0.4), "local/same": ("filelock", 1.0)}
TARGETS["memory/async"] = ("memory/same", 1.5)  # AsyncLock against Lock


def _part(path: str) -> str:
    """The part of the library a cProfile entry's file is in."""
    made = path.startswith("<attrs generated methods prioritylock.")  # attrs' __init__ & co
    module = path.split(".")[1] if made else "stores" if "/stores/" in path else Path(path).stem
    return next((part for part, names in PARTS.items() if module in names), "builtins")


def breakdown(lock: Lock, cycles: int) -> str:
    """Shares of the cycle's time by part of the library (cProfile weighs many small calls)."""
    with cProfile.Profile() as profile:
        for _ in range(cycles):
            lock_cycle(lock)
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
    s, loop = b.sizes, asyncio.new_event_loop()
    cases = [("timer", "empty cycle (timer overhead)", s.cycles, timed(int))]
    for key, label, lock in (
        ("threading", "threading.Lock", threading.Lock()),
        ("filelock", "filelock.FileLock (same directory)", filelock.FileLock(str(b.root / "f"))),
    ):
        cases.append((key, label, s.cycles, timed(lambda x=lock: (x.acquire(), x.release()))))
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
        if key == "memory":
            alock = b.builder(store, b.path("async"), "bench").build_async()
            run = timed_async(loop, partial(alock_cycle, alock))
            cases.append(("memory/async", f"{label}, same AsyncLock object", n, run))
    variants = [CycleVariant(*case) for case in cases]
    run_interleaved(variants, s)
    close_loop(loop)
    cpu = {v.key: v.cpu_us for v in variants}
    met = [f"{a} {cpu[a] / cpu[b]:.2f}x {b} (<= {t}x)" for a, (b, t) in TARGETS.items() if a in cpu]
    notes = ["CPU per cycle, issue 28's targets: " + "; ".join(met)]
    for v, (spent, label) in ((v, splits[v.key]) for v in variants if v.key in splits):
        calls, total = summarize(spent, 1e3).median, summarize(v.samples, 1e3).median
        what = (
            f"{calls:.1f} µs (median) in the store's calls, {total - calls:.1f} µs in the library"
        )
        notes.append(f"{label}: of the {total:.1f} µs median cycle, {what}")
    for label, same in profiled:
        notes.append(f"{label}, where the time goes (cProfile): {breakdown(same, s.warmup * 5)}")
    title = "Uncontended acquire+release: try_lock()+unlock() (µs per cycle)"
    against = {v.key: "filelock" for v in variants}
    return compare("overhead", title, variants, against, "filelock", s, notes)
