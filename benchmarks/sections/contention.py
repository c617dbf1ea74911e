"""``contention``: 8 processes loop ``lock()`` -> ``unlock()`` on one lock for a fixed window.

Acquisitions per second, lock changes between processes, and fairness (per process, waits) on
the LocalStore (durable and ``durable=false``) against ``filelock.FileLock`` on the same disk;
each process asks again at once. An acquisition before the previous holder's ``unlock()`` call
(an overlap, by ``time.monotonic_ns``, system-wide) must not occur.

Then the fair line (:func:`line_rows`): 2, 8 and 32 waiters of equal priority (threads) arrive
20 ms apart at a held lock, with and without ``fair()``, and kazoo's fair ``Lock``: inversions
(pairs served out of arrival order), wait spread (max / median), release -> next p50/p99, and the
writes a waiter pays per hour in the line (one per renew interval).
"""

from __future__ import annotations

import contextlib
import itertools
import os
import statistics
import threading
import time
from collections import Counter
from collections.abc import Callable
from contextlib import ExitStack, closing
from functools import partial
from typing import Any

import _servers
import filelock
from _bench import NONDURABLE, Bench, lock_cycle, processes
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
        with contextlib.suppress(refused):
            take(timeout=timeout)
            return True
        return False

    try:
        barrier.wait(timeout=120)
    except BaseException:
        barrier.abort()
        raise
    clock, events = time.monotonic_ns, []
    end = clock() + int(seconds * 1e9)
    before, cpu = stats.snapshot() if stats else {}, time.process_time()
    while (t0 := clock()) < end and acquire((end - t0) / 1e9):
        events.append((t0, clock(), clock()))  # tried, acquired, the unlock() call's time
        release()
    cpu = time.process_time() - cpu
    after = stats.snapshot() if stats else {}
    requests = {k: after[k] - before[k] for k in after if k != "total" and after[k] != before[k]}
    results.put((events, cpu, requests))


def _variants(b: Bench) -> list[tuple[str, str, Json]]:
    (b.root / "contention").mkdir()
    spec: Json = {"mode": "filelock", "file": str(b.root / "contention" / "contended.lock")}
    variants = [("filelock", "filelock.FileLock (same disk)", spec)]
    if any(k.name == "local" for k in b.kinds):
        for key, label, query in (
            ("local", "LocalStore (durable, the default)", ""),
            ("local-nondurable", "LocalStore, durable=false", NONDURABLE),
        ):
            url = (b.root / f"contention-{key}").as_uri() + query
            path = b.path("contended")
            lock_cycle(LockBuilder().store(url).path(*path).owner("setup").build())  # made, free
            variants.append((key, label, {"mode": "prioritylock", "url": url, "path": path}))
    return variants


HEADERS = ["variant", "acq/s", "vs filelock", "switches/s", "per process min/med/max"]
HEADERS += ["wait p50/p99 ms", "max ms", "requests/acq", "CPU %", "overlaps"]


def _measure(b: Bench, key: str, label: str, spec: Json) -> Json:
    """One variant's window: what the processes did, as a results row."""
    s, load = b.sizes, load_average()
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
    requests = sum((Counter[str](counts) for _, _, counts in records), Counter[str]())
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
        counts, cpu = r["requests_per_acquisition"], r["cpu_percent_of_one_core"]
        row = [r["label"], fmt_num(r["acquisitions_per_s"]), f"{r['vs_filelock']:.2f}x"]
        row += [fmt_num(r["switches_per_s"]), f"{per[0]} / {statistics.median(per):g} / {per[-1]}"]
        row += [f"{fmt_num(w['median'])} / {fmt_num(w['p99'])}", fmt_num(w["max"])]
        row += [fmt_counts(counts) if counts else "-", f"{cpu:.0f}", str(r["overlaps"])]
        table.append(row)
    title = f"Contention: {s.contention_procs} processes x 1 lock, lock() -> unlock() loop"
    notes = [
        f"{s.contention_procs} processes, {s.contention_s:g} s each variant, all starting at once, "
        "default settings (prioritylock polls up to every 1 s; filelock every 50 ms). switches/s: "
        "consecutive acquisitions by different processes; wait: lock() call -> it returned; CPU: "
        "all the processes, % of one core.",
        f"The machine has {os.cpu_count()} cores: the processes also contend for CPU.",
    ]
    lined = line_rows(b)
    notes += ["The fair line (threads arriving 20 ms apart; see the module docstring):"] + [
        f"  {r['store']:<8} {r['waiters']:>2} waiters, {'line' if r['fair'] else 'no line'}: "
        f"{r['inversions']} inversions, wait spread {r['wait_spread']:.2f}, release -> next "
        f"p50 {fmt_num(r['handoff_ms']['p50'])} / p99 {fmt_num(r['handoff_ms']['p99'])} ms, "
        f"{r['writes_per_waiter_hour']:g} writes/waiter/hour"
        for r in lined
    ]
    return Section("contention", title, HEADERS, table, rows + lined, notes)


LINE_WAITERS = (2, 8, 32)
Waiter = tuple[Callable[[], object], Callable[[], object]]  # take (blocking), release


def _line_run(make: Callable[[str], Waiter], joined: Callable[[int], bool], n: int) -> Json:
    """One round: a holder, ``n`` waiters arriving 20 ms apart (each in line before the next
    arrives, when ``joined(i)`` can tell), the release; who took it when."""
    (take, release), waiters = make("holder"), [make(f"w{i}") for i in range(n)]
    take()
    starts, took = [0] * n, []

    def wait(i: int) -> None:
        starts[i] = time.monotonic_ns()
        waiters[i][0]()
        acquired = time.monotonic_ns()
        waiters[i][1]()
        took.append((i, acquired, time.monotonic_ns()))  # (append is atomic)

    threads = [threading.Thread(target=wait, args=(i,)) for i in range(n)]
    for i, t in enumerate(threads):
        t.start()
        end = time.monotonic() + 10
        while not joined(i) and time.monotonic() < end:
            time.sleep(0.002)
        time.sleep(0.02)
    released = time.monotonic_ns()
    release()
    for t in threads:
        t.join(300)
    took.sort(key=lambda t: t[1])  # by when each took the lock (not when it noted it)
    order = [i for i, _, _ in took]
    waits = sorted(acq - starts[i] for i, acq, _ in took)
    freed = [released] + [rel for _, _, rel in took[:-1]]
    handoffs = [(acq - f) / 1e6 for f, (_, acq, _) in zip(freed, took, strict=True)]
    return {
        "waiters": n,
        "inversions": sum(1 for a, c in itertools.combinations(order, 2) if a > c),
        "wait_spread": waits[-1] / max(statistics.median(waits), 1),
        "handoff_ms": {"p50": statistics.median(handoffs), "p99": percentile(handoffs, 0.99)},
    }


def _ours(store: Any, path: tuple[str, str], n: int, fair: bool) -> Json:
    locks: list[Lock] = []

    def make(owner: str) -> Waiter:
        locks.append(LockBuilder().store(store).path(*path).owner(owner).fair(fair).build())
        return partial(locks[-1].lock, timeout=300), locks[-1].unlock

    row = _line_run(make, lambda i: not fair or len(getattr(locks[0].info(), "waiters", ())) > i, n)
    return row | {"fair": fair, "writes_per_waiter_hour": 3600 / locks[0].config.renew_interval}


def line_rows(b: Bench) -> list[Json]:
    """The fair line's figures on memory, local and S3 (moto, when its emulator runs), and
    kazoo's fair ``Lock`` on ZooKeeper where installed (sequential znodes; its waiters write
    nothing while they wait: the session's pings keep them)."""
    rows = []
    for kind in (k for k in b.store_kinds if k.name in ("memory", "local", "s3-moto")):
        for n, fair in itertools.product(LINE_WAITERS, (True, False)):
            with closing(open_store(b.url(kind))) as store:
                row = _ours(store, b.path("line"), n, fair)
            rows.append({"variant": f"line-{kind.name}-{n}-{fair}", "store": kind.name, **row})
    with ExitStack() as stack:
        try:
            from kazoo.client import KazooClient

            zk = stack.enter_context(_servers.running(["zookeeper"], b.root))["zookeeper"]
        except (ImportError, _servers.EmulatorError):
            return rows
        (client := KazooClient(zk.endpoint)).start(30)
        stack.callback(client.stop)
        rows += [{"variant": f"line-kazoo-{n}", **_kazoo(client, n)} for n in LINE_WAITERS]
    return rows


def _kazoo(client: Any, n: int) -> Json:
    def make(owner: str) -> Waiter:
        lock = client.Lock(f"/line/{n}", owner)
        return partial(lock.acquire, timeout=300), lock.release

    row = _line_run(make, lambda i: len(client.get_children(f"/line/{n}")) > i + 1, n)
    return {"store": "kazoo", **row, "fair": True, "writes_per_waiter_hour": 0}
