"""``preemption``: a higher-priority ``try_lock()`` call -> it holds, on every store.

The holder (priority 1) watches every :data:`PREEMPT_WATCH_INTERVAL`; its cleanup is none
(``cleanup_timeout=0``), a listener that returns at once, or one that sleeps 50 ms. The same runs
also give the ``requests`` section its preemption counts (:func:`preemptions` measures them once).
"""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from dataclasses import asdict
from typing import cast

from _bench import Bench, StoreKind, TallyStore
from _harness import Json, Section, summarize

from prioritylock import CleanupNotice, Lock, LockListener
from prioritylock.stores import open_store

#: The holder's watch interval: how often it reads its lease to hear of a request. The preemption
#: latency of a cooperating holder is about this plus its cleanup.
PREEMPT_WATCH_INTERVAL = 0.01

PREEMPT_VARIANTS = [("cleanup_timeout0", "holder cleanup_timeout=0")]
PREEMPT_VARIANTS += [
    ("listener0", "listener returns at once"),
    ("listener50", "listener sleeps 50 ms"),
]


#: A variant's preemption latencies (ns) and mean requests per preemption, "requestor" and
#: "holder", by kind.
Preemptions = tuple[list[int], dict[str, dict[str, float]]]


class _Cleaner(LockListener):
    def __init__(self, sleep_s: float) -> None:
        self.sleep_s, self.lost = sleep_s, threading.Event()

    def on_cleanup_notification(self, notice: CleanupNotice) -> None:
        if self.sleep_s > 0:
            time.sleep(self.sleep_s)

    def on_lock_lost(self, lock: Lock, reason: str) -> None:
        self.lost.set()


def preemptions(b: Bench, kind: StoreKind, variant: str) -> Preemptions:
    """Time ``b.sizes.preemptions`` preemptions and count each client's requests, once per run:
    the latency and the request-count tables share them.

    A request counts from the requestor's ``try_lock()`` call until the holder's listener hears
    ``on_lock_lost``, the requestor's and the holder's each through their own view of the tally.
    """
    key = f"preemption/{kind.name}/{variant}"
    if key in b.shared:
        return cast(Preemptions, b.shared[key])
    rounds, inner, path = b.sizes.preemptions, open_store(b.url(kind)), b.path(f"preempt-{variant}")
    tally = TallyStore(inner, "holder")
    cleaner = _Cleaner(0.05 if variant == "listener50" else 0.0)
    holder = (
        b.builder(tally, path, "low")
        .priority(1)
        .cleanup_timeout(0 if variant == "cleanup_timeout0" else 5)
        .watch_interval(PREEMPT_WATCH_INTERVAL)
        .listener(cleaner)
        .build()
    )
    # A fresh requestor each round: a reused one would first try its stale cached version
    # (one failed write and a read more; see "stale cached version" in the requests table).
    requestor_builder = b.builder(tally.client("requestor"), path, "high").priority(10)
    requestor_builder.waiting_timeout(5)
    before = inner.stats.snapshot()["total"]
    samples: list[int] = []
    totals: dict[str, Counter[str]] = {"requestor": Counter(), "holder": Counter()}
    for _ in range(rounds):
        cleaner.lost.clear()
        holder.lock(timeout=5)
        requestor = requestor_builder.build()
        time.sleep(random.uniform(0, PREEMPT_WATCH_INTERVAL))  # any phase of the holder's watch
        t0, started = time.monotonic(), time.perf_counter_ns()
        if not requestor.try_lock():
            raise RuntimeError("the higher-priority try_lock() did not get the lock")
        samples.append(time.perf_counter_ns() - started)
        if not cleaner.lost.wait(5):
            raise RuntimeError("the preempted holder was not told it lost the lock")
        t1 = time.monotonic()
        requestor.close()
        for who in ("requestor", "holder"):
            totals[who].update(tally.counts(who, t0, t1))
    holder.close()
    if inner.stats.snapshot()["total"] - before != len(tally.events):
        raise RuntimeError("the per-client tally disagrees with store.stats")
    mean = {who: {k: round(v / rounds, 2) for k, v in c.items() if v} for who, c in totals.items()}
    b.shared[key] = samples, mean
    return samples, mean


def section_preemption(b: Bench) -> Section:
    title = "Preemption: priority-10 try_lock() call -> it holds; priority-1 holder (ms)"
    section = Section("preemption", title, ["case", "median", "p99", "n"])
    for kind in b.store_kinds:
        for variant, label in PREEMPT_VARIANTS:
            samples, requests = preemptions(b, kind, variant)
            summary = summarize(samples, 1e6)
            row: Json = {"store": kind.name, "variant": variant, "label": label, "unit": "ms"}
            row |= {"watch_interval_s": PREEMPT_WATCH_INTERVAL, "requests": requests}
            section.add([f"{kind.label}, {label}", *summary.cells()], row | asdict(summary))
    section.notes.append(
        f"Holder: watch_interval {PREEMPT_WATCH_INTERVAL:g} s, a LockListener, cleanup_timeout "
        "5 s unless 0; requestor: waiting_timeout 5 s; one process, one store object."
    )
    return section
