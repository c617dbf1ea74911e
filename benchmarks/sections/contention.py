"""``contention``: 8 processes loop ``lock()`` -> ``unlock()`` on one lock for a fixed window.

Acquisitions per second, how often the lock changed process, and fairness (acquisitions per
process, waits), on the LocalStore (durable and ``durable=false``) against ``filelock.FileLock``
doing the same on the same disk. Each process holds for no time and asks again at once, so the
figures are the lock's own throughput; every acquisition is noted with ``time.monotonic_ns``
(system-wide), and one before the previous holder's ``unlock()`` call (an overlap) must not occur.

Then the fair line (:func:`line_rows`): 2, 8 and 32 waiters of equal priority arrive 20 ms apart
at a held lock (threads of this process, on memory, local and S3 (moto) when its emulator runs),
with and without ``fair()``; the order they take it in (inversions: pairs served out of arrival
order), the spread of their waits (max / median), release -> next holder p50/p99, and the writes
a waiter pays per hour in the line (one per renew interval).
"""

from __future__ import annotations

import itertools
import os
import statistics
import threading
import time
from collections import Counter
from typing import Any

import filelock
from _bench import NONDURABLE, Bench, processes
from _harness import Json, Section, fmt_counts, fmt_num, load_average, percentile, summarize

from prioritylock import Lock, LockBuilder, LockTimeout
from prioritylock.stores import open_store


def contend(spec: Json, seconds: float, barrier: Any, results: Any) -> None:
    """One contending process: waits for the others at ``barrier``, then loops lock() ->
    unlock() for ``seconds``; puts (attempts, acquired, released ns, CPU s, requests)."""
    stats = None
    if spec["mode"] == "filelock":
        lock: Any = filelock.FileLock(spec["file"])
        take, release = lock.acquire, lock.release
        refused: type[Exception] = filelock.Timeout
    else:
        store = open_store(spec["url"])
        stats = store.stats
        lock = LockBuilder().store(store).path(*spec["path"]).owner(f"p{os.getpid()}").build()
        take, release, refused = lock.lock, lock.unlock, LockTimeout

    def acquire(timeout: float) -> bool:
        try:
            take(timeout=timeout)
        except refused:
            return False
        return True

    try:
        barrier.wait(timeout=120)
    except BaseException:
        barrier.abort()
        raise
    clock, events = time.monotonic_ns, []
    end = clock() + int(seconds * 1e9)
    before, cpu = stats.snapshot() if stats else {}, time.process_time()
    while (t0 := clock()) < end and acquire((end - t0) / 1e9):
        t1 = clock()
        events.append((t0, t1, clock()))  # the unlock() call's time
        release()
    cpu = time.process_time() - cpu
    after = stats.snapshot() if stats else {}
    requests = {k: after[k] - before[k] for k in after if k != "total" and after[k] != before[k]}
    results.put((events, cpu, requests))


def _variants(b: Bench) -> list[tuple[str, str, Json]]:
    (b.root / "contention").mkdir()
    file = str(b.root / "contention" / "contended.lock")
    variants: list[tuple[str, str, Json]] = [
        ("filelock", "filelock.FileLock (same disk)", {"mode": "filelock", "file": file})
    ]
    if any(k.name == "local" for k in b.kinds):
        for key, label, query in (
            ("local", "LocalStore (durable, the default)", ""),
            ("local-nondurable", "LocalStore, durable=false", NONDURABLE),
        ):
            url = (b.root / f"contention-{key}").as_uri() + query
            path = b.path("contended")
            first = LockBuilder().store(url).path(*path).owner("setup").build()
            first.lock(timeout=10)  # the document exists and is free when the window opens
            first.unlock()
            variants.append((key, label, {"mode": "prioritylock", "url": url, "path": path}))
    return variants


HEADERS = ["variant", "acq/s", "vs filelock", "switches/s", "per process min/med/max"]
HEADERS += ["wait p50/p99 ms", "max ms", "requests/acq", "CPU %", "overlaps"]


def _measure(b: Bench, key: str, label: str, spec: Json) -> Json:
    """One variant's window: what the processes did, as a results row."""
    s = b.sizes
    load = load_average()
    records = processes(
        contend, s.contention_procs, spec, s.contention_s, timeout=s.contention_s + 60
    )
    per_process = sorted(len(events) for events, _, _ in records)
    acquisitions = sum(per_process)
    timeline = sorted((acq, rel, i) for i, r in enumerate(records) for _, acq, rel in r[0])
    pairs = list(itertools.pairwise(timeline))
    overlaps = sum(1 for x, y in pairs if y[0] < x[1])
    if overlaps:
        raise RuntimeError(f"contention: {overlaps} overlapping acquisitions on {label}")
    waits = [acq - att for events, _, _ in records for att, acq, _ in events]
    requests: Counter[str] = Counter()
    for _, _, counts in records:
        requests.update(counts)
    return {
        "variant": key,
        "label": label,
        "processes": s.contention_procs,
        "seconds": s.contention_s,
        "acquisitions": acquisitions,
        "acquisitions_per_s": acquisitions / s.contention_s,
        "switches_per_s": sum(1 for x, y in pairs if x[2] != y[2]) / s.contention_s,
        "per_process": per_process,
        "wait_ms": vars(summarize(waits, 1e6)) if waits else None,
        "requests_per_acquisition": {
            k: round(n / max(acquisitions, 1), 2) for k, n in requests.items()
        },
        "cpu_percent_of_one_core": 100 * sum(r[1] for r in records) / s.contention_s,
        "overlaps": overlaps,
        "load": load,
    }


def section_contention(b: Bench) -> Section:
    s = b.sizes
    rows = [_measure(b, *variant) for variant in _variants(b)]
    table = []
    for r in rows:
        r["vs_filelock"] = r["acquisitions_per_s"] / rows[0]["acquisitions_per_s"]
        per, w = r["per_process"], r["wait_ms"] or dict.fromkeys(("median", "p99", "max"), 0)
        counts = r["requests_per_acquisition"]
        rate, switches = (fmt_num(r[k]) for k in ("acquisitions_per_s", "switches_per_s"))
        table.append(
            [
                r["label"],
                rate,
                f"{r['vs_filelock']:.2f}x",
                switches,
                f"{per[0]} / {statistics.median(per):g} / {per[-1]}",
                f"{fmt_num(w['median'])} / {fmt_num(w['p99'])}",
                fmt_num(w["max"]),
                fmt_counts(counts) if counts else "-",
                f"{r['cpu_percent_of_one_core']:.0f}",
                str(r["overlaps"]),
            ]
        )
    title = f"Contention: {s.contention_procs} processes x 1 lock, lock() -> unlock() loop"
    notes = [
        f"{s.contention_procs} processes, {s.contention_s:g} s each variant, all starting at once, "
        "default settings (prioritylock polls up to every 1 s; filelock every 50 ms). switches/s: "
        "consecutive acquisitions by different processes; wait: lock() call -> it returned; CPU: "
        "all the processes, % of one core.",
        f"The machine has {os.cpu_count()} cores: the processes also contend for CPU.",
    ]
    lined = line_rows(b)
    notes += ["The fair line (threads, arriving 20 ms apart; see the module docstring):"]
    notes += [
        f"  {r['store']:<8} {r['waiters']:>2} waiters, {'line' if r['fair'] else 'no line'}: "
        f"{r['inversions']} inversions, wait spread {r['wait_spread']:.2f}, release -> next "
        f"p50 {fmt_num(r['handoff_ms']['p50'])} / p99 {fmt_num(r['handoff_ms']['p99'])} ms, "
        f"{r['writes_per_waiter_hour']:g} writes/waiter/hour"
        for r in lined
    ]
    return Section("contention", title, HEADERS, table, rows + lined, notes)


LINE_WAITERS = (2, 8, 32)


def _line_run(store: Any, path: tuple[str, str], n: int, fair: bool) -> Json:
    """One round: a holder, ``n`` waiters arriving 20 ms apart (each joined before the next
    arrives, when fair), the release; who took it when."""

    def make(owner: str) -> Lock:
        return LockBuilder().store(store).path(*path).owner(owner).fair(fair).build()

    holder, locks = make("holder"), [make(f"w{i}") for i in range(n)]
    holder.lock(timeout=30)
    starts, took, lock = [0] * n, [], threading.Lock()

    def wait(i: int) -> None:
        starts[i] = time.monotonic_ns()
        locks[i].lock(timeout=300)
        acquired = time.monotonic_ns()
        locks[i].unlock()
        with lock:
            took.append((i, acquired, time.monotonic_ns()))

    threads = [threading.Thread(target=wait, args=(i,)) for i in range(n)]
    for i, t in enumerate(threads):
        t.start()
        end = time.monotonic() + 10
        while fair and len((holder.info() or _never()).waiters) <= i and time.monotonic() < end:
            time.sleep(0.002)
        time.sleep(0.02)
    released = time.monotonic_ns()
    holder.unlock()
    for t in threads:
        t.join(300)
    took.sort(key=lambda t: t[1])  # by when each took the lock (not when it noted it)
    order = [i for i, _, _ in took]
    waits = sorted(acq - starts[i] for i, acq, _ in took)
    freed = [released] + [rel for _, _, rel in took[:-1]]
    handoffs = [(acq - f) / 1e6 for f, (_, acq, _) in zip(freed, took, strict=True)]
    return {
        "waiters": n,
        "fair": fair,
        "inversions": sum(1 for a, c in itertools.combinations(order, 2) if a > c),
        "wait_spread": waits[-1] / max(statistics.median(waits), 1),
        "handoff_ms": {"p50": statistics.median(handoffs), "p99": percentile(handoffs, 0.99)},
        "writes_per_waiter_hour": round(3600 / holder.config.renew_interval),
    }


def _never() -> Any:
    raise RuntimeError("line: the lease document vanished")


def line_rows(b: Bench) -> list[Json]:
    """The fair line's figures on memory, local and S3 (moto, when its emulator runs)."""
    rows = []
    for kind in b.store_kinds:
        if kind.name not in ("memory", "local", "s3-moto"):
            continue
        for n, fair in itertools.product(LINE_WAITERS, (True, False)):
            store = open_store(b.url(kind))
            try:
                row = _line_run(store, b.path("line"), n, fair)
            finally:
                store.close()
            rows.append({"variant": f"line-{kind.name}-{n}-{fair}", "store": kind.name, **row})
    return rows
