"""``cloud``: each cloud store on its emulator against its own SDK's GET and conditional PUT.

Median and p99 of acquire (``try_lock()`` on a free lock), renew and release, with their requests
from ``store.stats``, next to one GET and one conditional PUT made directly with the SDK: the
library's overhead over the store's own cost. The stores take turns round by round.
"""

from __future__ import annotations

import contextlib
import secrets
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict
from functools import partial

from _bench import Bench, StoreKind, StoreTimer
from _harness import Json, Section, T, fmt_counts, fmt_num, summarize

from prioritylock.stores import open_store
from tools import sdk

#: (key, label, what its median is compared with: the raw SDK calls whose medians are summed)
_CLOUD_OPS: list[tuple[str, str, tuple[str, ...]]] = [
    ("raw_get", "raw SDK GET", ()),
    ("raw_put", "raw SDK conditional PUT", ()),
    ("acquire", "acquire: try_lock(), fresh Lock on a free lock", ("raw_get", "raw_put")),
    ("acquire_known", "acquire: try_lock(), same Lock after its release", ("raw_put",)),
    ("renew", "renew()", ("raw_put",)),
    ("release", "unlock()", ("raw_put",)),
]
_BASES = {op: base for op, _, base in _CLOUD_OPS}


class CloudRun:
    """One cloud store's timed operations; stores take turns, one round each at a time."""

    def __init__(self, b: Bench, kind: StoreKind) -> None:
        self.kind, self.store, e = kind, open_store(b.url(kind)), b.emulators[str(kind.emulator)]
        self.timer = StoreTimer(self.store)  # the same store, as the locks see it
        self.builder = b.builder(self.timer, b.path("cloud"), "bench")
        with contextlib.closing(self.builder.build()) as first:
            first.lock(timeout=10)
            found = self.store.read(first.key)
            first.unlock()
        assert found is not None
        self.body_len = len(found.data)  # the raw PUTs write as many bytes as a lease document
        self.raw = sdk.raw_client(e.name, e.endpoint, b.bucket(e), e.key)
        self.raw_key = f"bench-raw/{uuid.uuid4().hex}"
        self.raw_version = self.raw.put(self.raw_key, found.data, None)
        self.samples: dict[str, list[int]] = {}
        self.own: dict[str, list[int]] = {}  # time outside store calls: the library's own work
        self.requests: dict[str, Counter[str]] = {}  # summed over samples
        self.spent_s, self.iterations = 0.0, 0

    def timed(self, op: str, call: Callable[[], T]) -> T:
        """Run ``call``; note its duration and, for lock operations, its requests and its time
        outside the store."""
        base, before, in_store = _BASES[op], self.store.stats.snapshot(), self.timer.spent_ns()
        t0 = time.perf_counter_ns()
        result = call()
        self.samples.setdefault(op, []).append(elapsed := time.perf_counter_ns() - t0)
        if base and (spent := self.timer.spent_ns() - in_store):
            self.own.setdefault(op, []).append(elapsed - spent)
        after = self.store.stats.snapshot()
        made = {k: after[k] - before[k] for k in after if k != "total" and after[k] != before[k]}
        self.requests.setdefault(op, Counter()).update(made if base else {})
        return result

    def iteration(self, record: bool = True) -> None:
        """One round: (an untimed GET,) raw GET and PUT, then a fresh Lock's acquire, renew,
        release, acquire again (version known) and release."""
        started, raw = time.perf_counter(), self.raw
        body = secrets.token_hex(self.body_len)[: self.body_len].encode()
        raw.get(self.raw_key)  # untimed: the first after another store's turn runs on cold caches
        self.timed("raw_get", lambda: raw.get(self.raw_key))
        put = partial(raw.put, self.raw_key, body, self.raw_version)
        self.raw_version = self.timed("raw_put", put)
        lock = self.builder.build()
        try:
            if not self.timed("acquire", lock.try_lock):
                raise RuntimeError(f"{self.kind.label}: try_lock() on a free lock failed")
            self.timed("renew", lock.renew)
            self.timed("release", lock.unlock)
            if not self.timed("acquire_known", lock.try_lock):
                raise RuntimeError(f"{self.kind.label}: try_lock() after own release failed")
            self.timed("release", lock.unlock)
        finally:
            lock.close()
        for table in () if record else (self.samples, self.own, self.requests):
            table.clear()
        self.iterations += record
        self.spent_s += time.perf_counter() - started if record else 0


def section_cloud(b: Bench) -> Section:
    s = b.sizes
    runs = [CloudRun(b, kind) for kind in b.store_kinds if kind.emulator]
    for run in runs:
        for _ in range(3):
            run.iteration(record=False)  # warm up connections and the SDKs' caches
    # Round-robin, one round per store at a time, so the machine's noise hits every store and
    # every operation alike; a store stops early once it has used its time budget.
    for _ in range(s.cloud_iterations):
        for run in runs:
            if run.spent_s < s.cloud_budget_s:
                run.iteration()

    title = "Cloud stores on their emulators: lock operations vs the SDK's own GET and PUT (ms)"
    headers = ["operation", "median", "p99", "requests", "vs raw", "lib ms", "n"]
    section = Section("cloud", title, headers)
    for run in runs:
        section.table.append([f"{run.kind.label}: {run.iterations} rounds", *[""] * 6])
        medians = {op: summarize(v, 1e6).median for op, v in run.samples.items()}
        for op, label, base in _CLOUD_OPS:
            summary = summarize(run.samples[op], 1e6)
            requests = {k: v / summary.n for k, v in run.requests.get(op, {}).items()}
            ratio = summary.median / sum(medians[x] for x in base) if base else None
            own = summarize(run.own[op], 1e6).median if run.own.get(op) else None
            row: Json = {"store": run.kind.name, "operation": op, "label": label, "unit": "ms"}
            row |= {"requests": requests if base else {"total": 1}, "ratio_to_raw": ratio}
            row |= {"raw_baseline": list(base), "outside_store_ms": own, **asdict(summary)}
            raws, own_ms = (
                "+".join(x[4:].upper() for x in base),
                "" if own is None else fmt_num(own),
            )
            versus, count = "" if ratio is None else f"{ratio:.2f}x {raws}", fmt_counts(requests)
            median, p99, n = summary.cells()
            section.add([f"  {label}", median, p99, count if base else "1", versus, own_ms, n], row)
        run.raw.close()
        run.store.close()
    section.notes = [
        "Raw SDK calls: one request each, on their own SDK client, configured as the store "
        "configures its own (no SDK retries); the PUTs write as many bytes as a lease document.",
        "A round: an untimed GET, raw GET, raw PUT, a fresh Lock's try_lock(), renew(), "
        "unlock(), try_lock() and unlock(); the stores take turns round by round, each capped "
        f"at {s.cloud_budget_s:g} s. requests: mean per operation, from store.stats. vs raw: the "
        "median over the sum of the raw medians it is made of (a fresh acquire = GET + PUT). "
        "lib ms: median time outside store calls.",
    ]
    if not runs:
        section.notes = ["No cloud store picked (--stores), so nothing to measure."]
    return section
