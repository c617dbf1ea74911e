"""prioritylock benchmarks: figures, not pass/fail. One run prints every table side by side.

Run ``python benchmarks/run.py [--quick] [--json PATH] [--profile] [--sections a,b]``.

Sections, in order (``SECTIONS``); each is a function ``(Bench) -> Section``:

- ``overhead``: µs per uncontended acquire+release cycle on each store kind, against
  ``filelock.FileLock`` on the same disk and ``threading.Lock`` (the floor); wall clock
  (median, p99) and process CPU per cycle.
- ``preemption``: a higher-priority ``try_lock()`` call -> it holds, against a holder whose
  cleanup takes 0 or 50 ms.
- ``requests``: store requests per operation, from ``store.stats``; where two clients share a
  store (a blocked waiter, a preemption) a per-thread tally splits them, checked against the
  store's own totals.
- ``handoff``: holder's ``unlock()`` call -> the next waiter's ``lock()`` returns, between threads
  and between processes (``time.monotonic_ns`` is system-wide).
- ``profile`` (with ``--profile``): where the cycle spends its time.

To add a store (the cloud emulators): add a ``StoreKind`` to ``STORE_KINDS``; every section that
loops over kinds picks it up, and ``cross_process`` kinds join the cross-process handoff. To add
a section (scale, contention, the raw-SDK baseline): write ``(Bench) -> Section`` and list it in
``SECTIONS``.
"""

from __future__ import annotations

import argparse
import cProfile
import datetime
import importlib
import itertools
import json
import math
import os
import platform
import pstats
import queue
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path
from typing import IO, Any, Protocol

import filelock

import prioritylock
from prioritylock import (
    CleanupNotice,
    Heartbeat,
    Lock,
    LockBuilder,
    LockInfo,
    LockListener,
    LockTimeout,
)
from prioritylock.stores import ObjectStore, StoreCapabilities, StoreStats, Versioned, open_store

HERE = Path(__file__).resolve().parent
DEFAULT_JSON = HERE / "results" / "latest.json"

Json = dict[str, Any]

#: The holder's watch interval in the preemption benchmark: how often it reads its lease to hear
#: of a request. The preemption latency of a cooperating holder is about this plus its cleanup.
PREEMPT_WATCH_INTERVAL = 0.01
#: Short poll interval for the blocked-waiter figures (the default is the library's, 1 s).
SHORT_POLL = 0.05


# -- sizes -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Sizes:
    """How much to measure. Counts are targets; ``budget_s`` caps each timed variant."""

    cycles: int  # per cycle variant on the memory store and for the baselines
    cycles_slow: int  # per cycle variant on stores that write to disk or network
    budget_s: float  # wall-clock cap per cycle variant
    rounds: int  # variants are interleaved in this many rounds, so noise hits all alike
    warmup: int
    handoffs: int
    hold_s: float  # how long the holder holds once the waiter is waiting
    handoffs_long: int
    hold_long_s: float
    preemptions: int
    waiter_s: float  # how long the blocked waiter waits
    waiter_settle_s: float  # steady-state reads/s are counted after this
    profile_cycles: int
    profile_cycles_slow: int


FULL = Sizes(
    cycles=20_000,
    cycles_slow=2_000,
    budget_s=6.0,
    rounds=10,
    warmup=200,
    handoffs=50,
    hold_s=0.02,
    handoffs_long=30,
    hold_long_s=0.25,
    preemptions=30,
    waiter_s=8.0,
    waiter_settle_s=2.0,
    profile_cycles=5_000,
    profile_cycles_slow=300,
)

QUICK = Sizes(
    cycles=2_000,
    cycles_slow=200,
    budget_s=1.5,
    rounds=4,
    warmup=50,
    handoffs=16,
    hold_s=0.02,
    handoffs_long=4,
    hold_long_s=0.25,
    preemptions=6,
    waiter_s=3.0,
    waiter_settle_s=1.5,
    profile_cycles=1_000,
    profile_cycles_slow=50,
)


# -- stores under test -----------------------------------------------------------------------------


@dataclass(frozen=True)
class StoreKind:
    """One kind of store. ``namespace(root)`` names a fresh, empty namespace as a store URL;
    ``open_store(url)`` opens a client on it (for ``memory://NAME`` the same object each time)."""

    name: str
    label: str
    namespace: Callable[[Path], str]
    cross_process: bool
    slow: bool  # writes to disk or network: fewer cycles


STORE_KINDS: tuple[StoreKind, ...] = (
    StoreKind(
        name="memory",
        label="MemoryStore",
        namespace=lambda root: f"memory://bench-{uuid.uuid4().hex}",
        cross_process=False,
        slow=False,
    ),
    StoreKind(
        name="local",
        label="LocalStore",
        namespace=lambda root: (root / f"local-{uuid.uuid4().hex[:12]}").as_uri(),
        cross_process=True,
        slow=True,
    ),
)


# -- the run's context -----------------------------------------------------------------------------


@dataclass
class Bench:
    sizes: Sizes
    root: Path  # a temp dir on the disk under test; LocalStore and filelock both live here
    _keys: Iterator[int] = field(default_factory=itertools.count)
    _preemptions: dict[str, PreemptionResult] = field(default_factory=dict)

    def path(self, what: str) -> tuple[str, str]:
        """A fresh lock path (two segments, so LocalStore files sit one directory down)."""
        return ("bench", f"{what}-{next(self._keys)}")

    def builder(self, store: ObjectStore, path: tuple[str, str], owner: str) -> LockBuilder:
        return LockBuilder().store(store).path(*path).owner(owner)

    def preemptions(self, kind: StoreKind, variant: str) -> PreemptionResult:
        """The preemption runs of (kind, variant), measured once and shared by the latency and
        the request-count tables."""
        key = f"{kind.name}/{variant}"
        if key not in self._preemptions:
            self._preemptions[key] = preemption_runs(self, kind, variant, self.sizes.preemptions)
        return self._preemptions[key]


@dataclass
class Section:
    """One section's result: a table for people and rows for the JSON file."""

    name: str
    title: str
    headers: list[str]
    table: list[list[str]]
    rows: list[Json]
    notes: list[str] = field(default_factory=list)
    elapsed_s: float = 0.0
    load: float | None = None  # 1-minute load average when the section started

    def render(self) -> str:
        widths = [len(h) for h in self.headers]
        for line in self.table:
            widths = [max(w, len(c)) for w, c in zip(widths, line, strict=True)]

        def fmt(cells: Sequence[str]) -> str:
            first = cells[0].ljust(widths[0])
            rest = (c.rjust(w) for c, w in zip(cells[1:], widths[1:], strict=True))
            return "  ".join([first, *rest]).rstrip()

        out = [self.title, fmt(self.headers), fmt(["-" * w for w in widths])]
        out += [fmt(line) for line in self.table]
        out += [f"  {note}" for note in self.notes]
        load = "" if self.load is None else f", load average {self.load:.2f} at its start"
        out.append(f"  ({self.elapsed_s:.1f} s{load})")
        return "\n".join(out)


# -- statistics ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Summary:
    n: int
    median: float
    p99: float
    mean: float
    min: float
    max: float


def summarize(samples_ns: Sequence[int], unit_ns: float) -> Summary:
    """Median, p99 (nearest rank), mean, min and max of ``samples_ns`` in units of ``unit_ns``."""
    if not samples_ns:
        raise ValueError("no samples")
    ordered = sorted(samples_ns)
    n = len(ordered)
    mid = ordered[n // 2] if n % 2 else (ordered[n // 2 - 1] + ordered[n // 2]) / 2
    p99 = ordered[max(0, math.ceil(0.99 * n) - 1)]
    return Summary(
        n=n,
        median=mid / unit_ns,
        p99=p99 / unit_ns,
        mean=sum(ordered) / n / unit_ns,
        min=ordered[0] / unit_ns,
        max=ordered[-1] / unit_ns,
    )


def fmt_num(value: float) -> str:
    """Three significant figures, at least; no exponent."""
    if value >= 100:
        return f"{value:,.0f}"
    if value >= 10:
        return f"{value:.1f}"
    if value >= 1:
        return f"{value:.2f}"
    return f"{value:.3f}"


# -- overhead: acquire+release cycles --------------------------------------------------------------

Cycles = Callable[[int], list[int]]  # run k timed cycles, return their durations in ns


@dataclass
class CycleVariant:
    key: str
    label: str
    target: int
    run: Cycles
    samples: list[int] = field(default_factory=list)
    spent_s: float = 0.0
    cpu_ns: int = 0  # process CPU time (every thread) over the timed chunks

    @property
    def cpu_us(self) -> float:
        """Mean process CPU µs per cycle: the work done, however loaded the machine is."""
        return self.cpu_ns / len(self.samples) / 1e3

    def over_budget(self, sizes: Sizes, round_index: int) -> bool:
        """Whether this variant used its share of the time budget for rounds up to this one."""
        return self.spent_s >= sizes.budget_s * (round_index + 1) / sizes.rounds


def _timed(body: Callable[[], object]) -> Cycles:
    def run(k: int) -> list[int]:
        clock = time.perf_counter_ns
        out = [0] * k
        for i in range(k):
            t0 = clock()
            body()
            out[i] = clock() - t0
        return out

    return run


def _lock_cycle(lock: Lock) -> Callable[[], None]:
    def cycle() -> None:
        if not lock.try_lock():
            raise RuntimeError(f"uncontended try_lock() failed on {lock.key}")
        lock.unlock()

    return cycle


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


def _run_interleaved(variants: list[CycleVariant], sizes: Sizes) -> None:
    """Run every variant's warm-up, then its cycles in ``sizes.rounds`` interleaved chunks,
    each variant stopping early once it has used ``sizes.budget_s``."""
    for v in variants:
        v.run(sizes.warmup)
    for r in range(sizes.rounds):
        for v in variants:
            left = v.target - len(v.samples)
            if left <= 0 or v.over_budget(sizes, r):
                continue
            chunk = min(left, math.ceil(v.target / sizes.rounds))
            started = time.perf_counter()
            cpu = time.process_time_ns()
            v.samples += v.run(chunk)
            v.cpu_ns += time.process_time_ns() - cpu
            v.spent_s += time.perf_counter() - started


def section_overhead(b: Bench) -> Section:
    s = b.sizes
    variants: list[CycleVariant] = []
    floor = threading.Lock()
    variants.append(CycleVariant("timer", "empty cycle (timer overhead)", s.cycles, _timed(int)))

    def floor_cycle() -> None:
        floor.acquire()
        floor.release()

    variants.append(CycleVariant("threading", "threading.Lock", s.cycles, _timed(floor_cycle)))
    flock_dir = b.root / "filelock"
    flock_dir.mkdir()
    file_lock = filelock.FileLock(str(flock_dir / "bench.lock"))

    def filelock_cycle() -> None:
        file_lock.acquire()
        file_lock.release()

    variants.append(
        CycleVariant("filelock", "filelock.FileLock (same disk)", s.cycles, _timed(filelock_cycle))
    )
    for kind in STORE_KINDS:
        target = s.cycles_slow if kind.slow else s.cycles
        store = open_store(kind.namespace(b.root))
        same = b.builder(store, b.path("same"), "bench").build()
        variants.append(
            CycleVariant(
                f"{kind.name}/same",
                f"{kind.label}, same Lock object",
                target,
                _timed(_lock_cycle(same)),
            )
        )
        fresh = b.builder(store, b.path("fresh"), "bench")
        variants.append(
            CycleVariant(
                f"{kind.name}/fresh",
                f"{kind.label}, fresh Lock each cycle",
                target,
                _fresh_lock_cycles(fresh),
            )
        )
    builder = b.builder(open_store(STORE_KINDS[0].namespace(b.root)), b.path("build"), "bench")
    variants.append(
        CycleVariant("build", "LockBuilder...build() alone", s.cycles, _timed(builder.build))
    )
    _run_interleaved(variants, s)

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


# -- per-client request tally ----------------------------------------------------------------------


class TallyStore:
    """A store wrapper that notes each request with the label of the thread that made it.

    Locks that share one ``TallyStore`` share its identity, so in-process wakeups (keyed on the
    store object) still work between them. ``stats`` is the inner store's, untouched.
    """

    def __init__(self, inner: ObjectStore) -> None:
        self._inner = inner
        self._labels: dict[int, str] = {}
        self._lock = threading.Lock()
        self.events: list[tuple[str, str, float]] = []  # (label, kind, monotonic time)

    def label_thread(self, label: str) -> None:
        self._labels[threading.get_ident()] = label

    def _note(self, kind: str) -> None:
        label = self._labels.get(threading.get_ident(), "other")
        with self._lock:
            self.events.append((label, kind, time.monotonic()))

    def counts(self, label: str | None, since: float, until: float) -> dict[str, int]:
        """Requests by kind made by threads labelled ``label`` (None: all) in [since, until]."""
        out = {"reads": 0, "creates": 0, "replaces": 0, "deletes": 0, "lists": 0}
        with self._lock:
            events = list(self.events)
        for who, kind, at in events:
            if since <= at <= until and (label is None or who == label):
                out[kind] += 1
        return out

    @property
    def stats(self) -> StoreStats:
        return self._inner.stats

    @property
    def capabilities(self) -> StoreCapabilities:
        return self._inner.capabilities

    def read(self, key: str) -> Versioned | None:
        self._note("reads")
        return self._inner.read(key)

    def create(self, key: str, data: bytes) -> str:
        self._note("creates")
        return self._inner.create(key, data)

    def replace(self, key: str, data: bytes, version: str) -> str:
        self._note("replaces")
        return self._inner.replace(key, data, version)

    def delete(self, key: str, version: str) -> None:
        self._note("deletes")
        self._inner.delete(key, version)

    def list(self, prefix: str) -> list[str]:
        self._note("lists")
        return self._inner.list(prefix)

    def close(self) -> None:
        self._inner.close()


_KIND_NAMES = {"reads": "read", "creates": "create", "replaces": "replace", "deletes": "delete"}


def fmt_counts(counts: dict[str, float]) -> str:
    """``2 (1 read, 1 replace)``; averages keep one decimal."""

    def num(x: float) -> str:
        return str(int(x)) if float(x).is_integer() else f"{x:.1f}"

    total = sum(v for k, v in counts.items() if k != "total")
    parts = [f"{num(v)} {_KIND_NAMES.get(k, k)}" for k, v in counts.items() if v and k != "total"]
    return f"{num(total)} ({', '.join(parts)})" if parts else "0"


def stats_delta(store: ObjectStore, action: Callable[[], object]) -> dict[str, int]:
    before = store.stats.snapshot()
    action()
    after = store.stats.snapshot()
    return {k: after[k] - before[k] for k in after if k != "total"}


# -- requests per operation ------------------------------------------------------------------------


def _single_client_ops(b: Bench, store: ObjectStore) -> dict[str, dict[str, int]]:
    """Requests of one client's operations, each counted alone with ``store.stats``."""
    out: dict[str, dict[str, int]] = {}
    absent = b.builder(store, b.path("absent"), "a").build()
    out["acquire_absent"] = stats_delta(store, absent.try_lock)
    absent.unlock()

    path = b.path("free")
    first = b.builder(store, path, "a").build()
    first.lock(timeout=5)
    first.unlock()
    fresh = b.builder(store, path, "b").build()
    out["acquire_free_fresh"] = stats_delta(store, fresh.try_lock)
    out["renew"] = stats_delta(store, fresh.renew)
    out["release"] = stats_delta(store, fresh.unlock)
    out["acquire_known_own_release"] = stats_delta(store, fresh.try_lock)
    fresh.unlock()
    after_info = b.builder(store, path, "c").build()
    after_info.info()
    out["acquire_known_after_info"] = stats_delta(store, after_info.try_lock)

    refused = b.builder(store, path, "d").build()
    out["try_lock_refused"] = stats_delta(store, refused.try_lock)
    after_info.unlock()
    # ``fresh`` still caches the version of its own release; others have written since.
    out["acquire_stale_cache"] = stats_delta(store, fresh.try_lock)
    fresh.unlock()
    return out


_OPS = [
    ("acquire_absent", "acquire, document absent (fresh Lock)"),
    ("acquire_free_fresh", "acquire, free document, fresh Lock (version unknown)"),
    ("acquire_known_own_release", "acquire, version known (same Lock after its release)"),
    ("acquire_known_after_info", "acquire, version known (after info())"),
    ("renew", "renew()"),
    ("release", "unlock()"),
    ("acquire_stale_cache", "acquire, stale cached version (same Lock, others wrote since)"),
    ("try_lock_refused", "try_lock() refused (held by another)"),
]


@dataclass
class WaiterResult:
    reads: int
    first_second: int
    steady_per_s: float
    holder: dict[str, int]
    waited_s: float


def _blocked_waiter(
    b: Bench, kind: StoreKind, poll: float | None, out: dict[str, WaiterResult]
) -> Callable[[], None]:
    """A waiter blocked for ``waiter_s`` behind a holder; returns a function that runs it."""
    tally = TallyStore(open_store(kind.namespace(b.root)))
    path = b.path("waiter")
    holder = b.builder(tally, path, "holder").build()
    waiter_builder = b.builder(tally, path, "waiter")
    if poll is not None:
        waiter_builder.poll_interval(poll)
    waiter = waiter_builder.build()
    s = b.sizes

    def run() -> None:
        holder.lock(timeout=5)
        tally.label_thread("waiter")
        t0 = time.monotonic()
        try:
            waiter.lock(timeout=s.waiter_s)
        except LockTimeout:
            pass
        else:
            raise RuntimeError("the blocked waiter got a held lock")
        t1 = time.monotonic()
        holder.unlock()
        steady_window = t1 - (t0 + s.waiter_settle_s)
        out[f"{kind.name}/{poll}"] = WaiterResult(
            reads=tally.counts("waiter", t0, t1)["reads"],
            first_second=tally.counts("waiter", t0, t0 + 1.0)["reads"],
            steady_per_s=tally.counts("waiter", t0 + s.waiter_settle_s, t1)["reads"]
            / steady_window,
            holder={k: v for k, v in tally.counts("other", t0, t1).items() if v},
            waited_s=t1 - t0,
        )

    return run


def _run_threads(bodies: Sequence[Callable[[], None]], name: str) -> None:
    """Run ``bodies`` on threads at the same time; re-raise the first failure here."""
    errors: list[BaseException] = []

    def guarded(body: Callable[[], None]) -> None:
        try:
            body()
        except BaseException as exc:
            errors.append(exc)

    threads = [
        threading.Thread(target=guarded, args=(body,), name=f"{name}-{i}")
        for i, body in enumerate(bodies)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]


def section_requests(b: Bench) -> Section:
    per_kind = {
        kind.name: _single_client_ops(b, open_store(kind.namespace(b.root))) for kind in STORE_KINDS
    }
    # Blocked waiters: every (kind, poll) pair waits at the same time, on its own lock.
    waiters: dict[str, WaiterResult] = {}
    runs = [_blocked_waiter(b, k, p, waiters) for k in STORE_KINDS for p in (None, SHORT_POLL)]
    _run_threads(runs, "bench-waiter")

    table: list[list[str]] = []
    rows: list[Json] = []
    for op, label in _OPS:
        table.append([label, *(fmt_counts(dict(per_kind[k.name][op])) for k in STORE_KINDS)])
        rows.append(
            {"operation": op, "label": label, **{k.name: per_kind[k.name][op] for k in STORE_KINDS}}
        )
    for poll, poll_label in (
        (None, "default poll_interval (1 s)"),
        (SHORT_POLL, f"poll_interval {SHORT_POLL:g} s"),
    ):
        cells = []
        for kind in STORE_KINDS:
            w = waiters[f"{kind.name}/{poll}"]
            cells.append(f"{w.steady_per_s:.2f}/s (1st s: {w.first_second})")
        table.append([f"blocked waiter reads, {poll_label}", *cells])
        rows.append(
            {
                "operation": "waiter_reads",
                "poll_interval": poll,
                **{k.name: asdict(waiters[f"{k.name}/{poll}"]) for k in STORE_KINDS},
            }
        )
    for variant, label in _PREEMPT_VARIANTS:
        counts = {k.name: b.preemptions(k, variant).requests for k in STORE_KINDS}
        for who in ("requestor", "holder"):
            cells = [fmt_counts(counts[k.name][who]) for k in STORE_KINDS]
            table.append([f"preemption, {label}: {who}", *cells])
        rows.append({"operation": "preemption", "variant": variant, **counts})
    s = b.sizes
    return Section(
        name="requests",
        title="Store requests per operation (from store.stats; two-client cases split per thread)",
        headers=["operation", *(k.label for k in STORE_KINDS)],
        table=table,
        rows=rows,
        notes=[
            f"Blocked waiter: steady reads/s counted after the first {s.waiter_settle_s:g} s of "
            f"a {s.waiter_s:g} s wait (backoff from 5 ms up to the poll interval).",
            "Preemption: mean over the preemption-latency runs, from the requestor's try_lock() "
            "call until the holder is told it lost the lock.",
        ],
    )


# -- handoff latency -------------------------------------------------------------------------------


class Channel(Protocol):
    """Coordination between the two peers of a handoff run (never part of a timed path)."""

    def send(self, message: str) -> None: ...

    def recv(self) -> str: ...


class QueueChannel:
    def __init__(self, inbox: queue.Queue[str], outbox: queue.Queue[str]) -> None:
        self._inbox = inbox
        self._outbox = outbox

    def send(self, message: str) -> None:
        self._outbox.put(message)

    def recv(self) -> str:
        try:
            return self._inbox.get(timeout=60)
        except queue.Empty:
            raise RuntimeError("handoff peer went silent") from None


class PipeChannel:
    def __init__(self, rfile: IO[str], wfile: IO[str]) -> None:
        self._r = rfile
        self._w = wfile

    def send(self, message: str) -> None:
        self._w.write(message + "\n")
        self._w.flush()

    def recv(self) -> str:
        line = self._r.readline()
        if not line:
            raise RuntimeError("handoff peer closed its pipe")
        return line.rstrip("\n")


def _expect(chan: Channel, what: str) -> None:
    got = chan.recv()
    if got != what:
        raise RuntimeError(f"handoff peer said {got!r}, expected {what!r}")


def handoff_peer(
    lock: Lock, chan: Channel, *, first: bool, handoffs: int, hold_s: float
) -> dict[str, dict[int, int]]:
    """One side of a ping-pong: the lock passes ``handoffs`` times between two peers.

    Handoff ``i``: the waiter says "ready" and calls ``lock()``; the holder waits ``hold_s`` so the
    waiter is surely blocked, notes ``monotonic_ns()`` and calls ``unlock()``; the waiter notes the
    time ``lock()`` returned and says "got". Then they swap roles.
    """
    releases: dict[int, int] = {}
    acquires: dict[int, int] = {}
    if first:
        lock.lock(timeout=10)
        chan.send("go")
    else:
        _expect(chan, "go")
    for i in range(handoffs):
        if (i % 2 == 0) == first:
            _expect(chan, "ready")
            time.sleep(hold_s)
            releases[i] = time.monotonic_ns()
            lock.unlock()
            _expect(chan, "got")
        else:
            chan.send("ready")
            lock.lock(timeout=10)
            acquires[i] = time.monotonic_ns()
            chan.send("got")
    if lock.is_current_owner():
        lock.unlock()
    return {"releases": releases, "acquires": acquires}


def _latencies(a: dict[str, dict[int, int]], b: dict[str, dict[int, int]]) -> list[int]:
    releases = {**a["releases"], **b["releases"]}
    acquires = {**a["acquires"], **b["acquires"]}
    return [acquires[i] - releases[i] for i in sorted(releases)]


def handoff_threads(
    b: Bench, stores: tuple[ObjectStore, ObjectStore], handoffs: int, hold_s: float
) -> list[int]:
    path = b.path("handoff")
    locks = [b.builder(st, path, f"peer-{i}").build() for i, st in enumerate(stores)]
    q1: queue.Queue[str] = queue.Queue()
    q2: queue.Queue[str] = queue.Queue()
    result: dict[str, dict[int, int]] = {}
    error: list[BaseException] = []

    def second() -> None:
        try:
            result.update(
                handoff_peer(
                    locks[1], QueueChannel(q2, q1), first=False, handoffs=handoffs, hold_s=hold_s
                )
            )
        except BaseException as exc:
            error.append(exc)

    thread = threading.Thread(target=second, name="bench-handoff-peer")
    thread.start()
    mine = handoff_peer(
        locks[0], QueueChannel(q1, q2), first=True, handoffs=handoffs, hold_s=hold_s
    )
    thread.join()
    if error:
        raise error[0]
    return _latencies(mine, result)


def handoff_processes(b: Bench, url: str, handoffs: int, hold_s: float) -> list[int]:
    path = b.path("handoff-proc")
    spec = json.dumps({"url": url, "path": list(path), "handoffs": handoffs, "hold_s": hold_s})
    child = subprocess.Popen(
        [sys.executable, str(Path(__file__).resolve()), "--child-handoff", spec],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert child.stdin is not None and child.stdout is not None
    try:
        lock = b.builder(open_store(url), path, "parent").build()
        mine = handoff_peer(
            lock,
            PipeChannel(child.stdout, child.stdin),
            first=True,
            handoffs=handoffs,
            hold_s=hold_s,
        )
        out, err = child.communicate(timeout=30)
        if child.returncode != 0 or not out.startswith("result "):
            raise RuntimeError(f"handoff child failed ({child.returncode}): {out!r} {err}")
        raw = json.loads(out[len("result ") :])
        theirs = {k: {int(i): t for i, t in v.items()} for k, v in raw.items()}
        return _latencies(mine, theirs)
    except BaseException:
        if child.poll() is None:
            child.kill()
            _, err = child.communicate()
            sys.stderr.write(err)
        raise


def child_handoff(spec_json: str) -> int:
    """The child process of :func:`handoff_processes` (``--child-handoff SPEC``)."""
    spec = json.loads(spec_json)
    lock = LockBuilder().store(spec["url"]).path(*spec["path"]).owner("child").build()
    chan = PipeChannel(sys.stdin, sys.stdout)
    result = handoff_peer(lock, chan, first=False, handoffs=spec["handoffs"], hold_s=spec["hold_s"])
    sys.stdout.write("result " + json.dumps(result) + "\n")
    sys.stdout.flush()
    return 0


@dataclass(frozen=True)
class HandoffCase:
    key: str
    label: str
    hold_s: float
    run: Callable[[], list[int]]


def section_handoff(b: Bench) -> Section:
    s = b.sizes
    cases: list[HandoffCase] = []
    for kind in STORE_KINDS:
        url = kind.namespace(b.root)
        shared = open_store(url)
        cases.append(
            HandoffCase(
                f"{kind.name}/threads",
                f"{kind.label}, 2 threads, one store object",
                s.hold_s,
                partial(handoff_threads, b, (shared, shared), s.handoffs, s.hold_s),
            )
        )
        holds = ((s.hold_s, s.handoffs), (s.hold_long_s, s.handoffs_long))
        if open_store(url) is not shared:
            # What two .store("file://...") calls give: in-process wakeups don't reach across.
            for hold, n in holds:
                cases.append(
                    HandoffCase(
                        f"{kind.name}/threads-2-stores/{hold:g}",
                        f"{kind.label}, 2 threads, a store object each",
                        hold,
                        partial(handoff_threads, b, (open_store(url), open_store(url)), n, hold),
                    )
                )
        if kind.cross_process:
            for hold, n in holds:
                cases.append(
                    HandoffCase(
                        f"{kind.name}/processes/{hold:g}",
                        f"{kind.label}, 2 processes",
                        hold,
                        partial(handoff_processes, b, url, n, hold),
                    )
                )
    table: list[list[str]] = []
    rows: list[Json] = []
    for case in cases:
        summary = summarize(case.run(), 1e6)
        hold_ms = f"{case.hold_s * 1000:g}"
        table.append(
            [case.label, hold_ms, fmt_num(summary.median), fmt_num(summary.p99), str(summary.n)]
        )
        rows.append(
            {
                "case": case.key,
                "label": case.label,
                "hold_ms": case.hold_s * 1000,
                "unit": "ms",
                **asdict(summary),
            }
        )
    return Section(
        name="handoff",
        title="Handoff: holder's unlock() call -> the blocked waiter's lock() returns (ms)",
        headers=["case", "hold ms", "median", "p99", "n"],
        table=table,
        rows=rows,
        notes=[
            "hold: how long the waiter has been blocked when the holder releases; a waiter that "
            "polls backs off from 5 ms towards poll_interval (default 1 s), so longer holds mean "
            "later wakeups.",
        ],
    )


# -- preemption latency ----------------------------------------------------------------------------

_PREEMPT_VARIANTS = [
    ("cleanup_timeout0", "holder cleanup_timeout=0"),
    ("listener0", "listener returns at once"),
    ("listener50", "listener sleeps 50 ms"),
]


@dataclass(frozen=True)
class PreemptionResult:
    samples_ns: list[int]
    #: "requestor" / "holder" -> mean requests per preemption, by kind.
    requests: dict[str, dict[str, float]]


class _Cleaner(LockListener):
    def __init__(self, sleep_s: float) -> None:
        self.sleep_s = sleep_s
        self.lost = threading.Event()

    def on_cleanup_notification(self, notice: CleanupNotice) -> None:
        if self.sleep_s > 0:
            time.sleep(self.sleep_s)

    def on_lock_lost(self, lock: Lock, reason: str) -> None:
        self.lost.set()


def preemption_runs(b: Bench, kind: StoreKind, variant: str, rounds: int) -> PreemptionResult:
    """Time ``rounds`` preemptions and count each client's requests.

    A request counts from the requestor's ``try_lock()`` call until the holder's listener hears
    ``on_lock_lost``: the requestor's requests are made on this thread, the holder's on the
    library's heartbeat and cleanup threads.
    """
    inner = open_store(kind.namespace(b.root))
    tally = TallyStore(inner)
    tally.label_thread("requestor")
    path = b.path(f"preempt-{variant}")
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
    requestor_builder = b.builder(tally, path, "high").priority(10).waiting_timeout(5)
    before = inner.stats.snapshot()["total"]
    samples: list[int] = []
    totals: dict[str, dict[str, float]] = {"requestor": {}, "holder": {}}
    for _ in range(rounds):
        cleaner.lost.clear()
        holder.lock(timeout=5)
        requestor = requestor_builder.build()
        time.sleep(random.uniform(0, PREEMPT_WATCH_INTERVAL))  # any phase of the holder's watch
        t0 = time.monotonic()
        started = time.perf_counter_ns()
        if not requestor.try_lock():
            raise RuntimeError("the higher-priority try_lock() did not get the lock")
        samples.append(time.perf_counter_ns() - started)
        if not cleaner.lost.wait(5):
            raise RuntimeError("the preempted holder was not told it lost the lock")
        t1 = time.monotonic()
        requestor.close()
        for who, label in (("requestor", "requestor"), ("holder", "other")):
            for k, v in tally.counts(label, t0, t1).items():
                totals[who][k] = totals[who].get(k, 0.0) + v / rounds
    holder.close()
    if inner.stats.snapshot()["total"] - before != len(tally.events):
        raise RuntimeError("the per-thread tally disagrees with store.stats")
    mean = {who: {k: round(v, 2) for k, v in c.items() if v} for who, c in totals.items()}
    return PreemptionResult(samples, mean)


def section_preemption(b: Bench) -> Section:
    table: list[list[str]] = []
    rows: list[Json] = []
    for kind in STORE_KINDS:
        for variant, label in _PREEMPT_VARIANTS:
            result = b.preemptions(kind, variant)
            summary = summarize(result.samples_ns, 1e6)
            table.append(
                [
                    f"{kind.label}, {label}",
                    fmt_num(summary.median),
                    fmt_num(summary.p99),
                    str(summary.n),
                ]
            )
            rows.append(
                {
                    "store": kind.name,
                    "variant": variant,
                    "label": label,
                    "unit": "ms",
                    "watch_interval_s": PREEMPT_WATCH_INTERVAL,
                    "requests": result.requests,
                    **asdict(summary),
                }
            )
    return Section(
        name="preemption",
        title="Preemption: priority-10 try_lock() call -> it holds; priority-1 holder (ms)",
        headers=["case", "median", "p99", "n"],
        table=table,
        rows=rows,
        notes=[
            f"Holder: watch_interval {PREEMPT_WATCH_INTERVAL:g} s, a LockListener, "
            "cleanup_timeout 5 s unless 0; requestor: waiting_timeout 5 s; one process, one "
            "store object."
        ],
    )


# -- profile ---------------------------------------------------------------------------------------


def _func_name(key: tuple[str, int, str]) -> str:
    filename, line, name = key
    if filename == "~":
        return name
    if "prioritylock" in filename:
        return f"{filename[filename.rindex('prioritylock') :]}:{line}({name})"
    return f"{Path(filename).name}:{line}({name})"


def _profile_cycles(lock: Lock, cycles: int) -> pstats.Stats:
    cycle = _lock_cycle(lock)
    for _ in range(50):
        cycle()
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(cycles):
        cycle()
    profiler.disable()
    return pstats.Stats(profiler)


#: Library functions whose cumulative time per cycle the profile section reports, when present.
_WATCHED = tuple(
    f"({name})"
    for name in (
        "try_lock",
        "unlock",
        "encode",
        "decode",
        "rewritten",
        "_claim",
        "_become_holder",
        "_announce_acquired",
        "_announce_released",
        "schedule",
        "cancel",
        "current",
        "fire",
        "from_lease",
        "validate_key",
        "count",
        "read",
        "replace",
        "create",
    )
)


@dataclass(frozen=True)
class ProfileLine:
    function: str
    calls_per_cycle: float
    own_us: float  # per cycle, in the function itself
    cum_us: float  # per cycle, with what it calls


def _profile_lines(stats: pstats.Stats, cycles: int) -> list[ProfileLine]:
    raw: dict[tuple[str, int, str], tuple[int, int, float, float, Any]] = stats.stats  # type: ignore[attr-defined]
    per_cycle = 1e6 / cycles
    return [
        ProfileLine(_func_name(k), v[1] / cycles, v[2] * per_cycle, v[3] * per_cycle)
        for k, v in raw.items()
    ]


def _heartbeat_wakeup_cost(b: Bench) -> dict[str, Summary]:
    """The same memory-store cycle with the process heartbeat thread, and with an unthreaded
    heartbeat (no thread to wake): the difference is what waking the scheduler costs."""
    store = open_store(STORE_KINDS[0].namespace(b.root))
    threaded = b.builder(store, b.path("hb"), "bench").build()
    manual = b.builder(store, b.path("hb"), "bench").heartbeat(Heartbeat(threaded=False)).build()
    s = b.sizes
    n = s.profile_cycles * 2
    variants = [
        CycleVariant("threaded", "", n, _timed(_lock_cycle(threaded))),
        CycleVariant("manual", "", n, _timed(_lock_cycle(manual))),
    ]
    _run_interleaved(variants, s)
    return {v.key: summarize(v.samples, 1e3) for v in variants}


@dataclass(frozen=True)
class Component:
    name: str
    calls_per_cycle: float
    us_per_call: float


def _components(b: Bench) -> list[Component]:
    """What the pieces of a same-Lock memory-store try_lock()+unlock() cost, each timed alone
    (no profiler). Reaches into library internals; if they moved, the caller skips the table."""
    lease_mod: Any = importlib.import_module("prioritylock._lease")
    store = open_store(STORE_KINDS[0].namespace(b.root))
    lock = b.builder(store, b.path("components"), "bench").build()
    lock.try_lock()
    found = store.read(lock.key)
    lock.unlock()
    assert found is not None
    lease = lease_mod.decode(lock.key, found.data, name=lock.key)
    version = [found.version]

    def replace() -> None:
        version[0] = store.replace("bench/components-scratch", found.data, version[0])

    version[0] = store.create("bench/components-scratch", found.data)
    pieces: list[tuple[str, float, Callable[[], object]]] = [
        ("encode (lease -> JSON bytes)", 2, lambda: lease_mod.encode(lease)),
        ("Lease.rewritten (attrs.evolve + new nonce)", 2, lease.rewritten),
        ("new_lock_id (secrets.token_urlsafe)", 1, lease_mod.new_lock_id),
        ("LockInfo.from_lease (for the acquired signal)", 1, lambda: LockInfo.from_lease(lease)),
        ("threading.Event() (in-process wakeup)", 1, threading.Event),
        ("MemoryStore.replace", 2, replace),
        (
            "decode (fresh Lock only: its first read)",
            0,
            lambda: lease_mod.decode(lock.key, found.data, name=lock.key),
        ),
    ]
    n = max(1000, b.sizes.profile_cycles)
    out: list[Component] = []
    for name, calls, fn in pieces:
        for _ in range(100):
            fn()
        started = time.perf_counter_ns()
        for _ in range(n):
            fn()
        out.append(Component(name, calls, (time.perf_counter_ns() - started) / n / 1e3))
    return out


def section_profile(b: Bench) -> Section:
    s = b.sizes
    table: list[list[str]] = []
    rows: list[Json] = []
    notes: list[str] = []
    for kind in STORE_KINDS:
        cycles = s.profile_cycles_slow if kind.slow else s.profile_cycles
        lock = b.builder(open_store(kind.namespace(b.root)), b.path("profile"), "bench").build()
        lines = _profile_lines(_profile_cycles(lock, cycles), cycles)
        own = sorted(lines, key=lambda p: p.own_us, reverse=True)[: 6 if kind.slow else 12]
        table.append([f"{kind.label}: top own time ({cycles} cycles under cProfile)", "", "", ""])
        for p in own:
            table.append(
                [
                    f"  {p.function}",
                    f"{p.calls_per_cycle:.1f}",
                    fmt_num(p.own_us),
                    fmt_num(p.cum_us),
                ]
            )
        watched = sorted(
            (p for p in lines if "prioritylock/" in p.function and p.function.endswith(_WATCHED)),
            key=lambda p: p.cum_us,
            reverse=True,
        )
        if not kind.slow:
            table.append([f"{kind.label}: library functions, cumulative", "", "", ""])
            for p in watched:
                table.append([f"  {p.function}", f"{p.calls_per_cycle:.1f}", "", fmt_num(p.cum_us)])
        rows.append(
            {
                "store": kind.name,
                "cycles": cycles,
                "top_own": [asdict(p) for p in own],
                "library_cumulative": [asdict(p) for p in watched],
            }
        )
        _pyinstrument(lock, cycles, HERE / "results" / f"profile-{kind.name}.txt", notes)
    hb = _heartbeat_wakeup_cost(b)
    rows.append({"heartbeat_wakeup": {k: asdict(v) for k, v in hb.items()}})
    try:
        parts = _components(b)
    except (ImportError, AttributeError, TypeError) as exc:
        notes.append(f"component timings skipped: library internals changed ({exc})")
    else:
        table.append(
            ["Pieces of the MemoryStore cycle, timed alone (µs)", "", "per call", "per cycle"]
        )
        for c in parts:
            table.append(
                [
                    f"  {c.name}",
                    f"{c.calls_per_cycle:g}",
                    fmt_num(c.us_per_call),
                    fmt_num(c.us_per_call * c.calls_per_cycle),
                ]
            )
        total = sum(c.us_per_call * c.calls_per_cycle for c in parts)
        table.append(
            [
                "  sum of the above / the cycle (threaded heartbeat)",
                "",
                "",
                f"{fmt_num(total)} / {fmt_num(hb['threaded'].median)}",
            ]
        )
        rows.append({"components": [asdict(c) for c in parts]})
    notes.append(
        "cProfile sees only the calling thread and inflates small calls; µs here are relative. "
        f"Same memory cycle, wall clock: {fmt_num(hb['threaded'].median)} µs with the process "
        f"heartbeat thread, {fmt_num(hb['manual'].median)} µs with Heartbeat(threaded=False) "
        "(no scheduler thread to wake on schedule/cancel)."
    )
    return Section(
        name="profile",
        title="Profile of the same-Lock cycle (µs per cycle, under the profiler)",
        headers=["function", "calls", "own", "cumulative"],
        table=table,
        rows=rows,
        notes=notes,
    )


def _pyinstrument(lock: Lock, cycles: int, out: Path, notes: list[str]) -> None:
    """A wall-clock sampling profile (pyinstrument, if installed) of the same cycle, to a file."""
    try:
        module: Any = importlib.import_module("pyinstrument")
    except ImportError:
        return
    profiler = module.Profiler(interval=0.0002)
    cycle = _lock_cycle(lock)
    profiler.start()
    for _ in range(cycles):
        cycle()
    profiler.stop()
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(profiler.output_text(unicode=False, color=False, show_all=False))
    notes.append(f"pyinstrument (wall clock) profile written to {out.relative_to(HERE.parent)}")


# -- machine ---------------------------------------------------------------------------------------


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _filesystem(path: Path) -> str:
    """``device fstype`` of the mount holding ``path`` (Linux), else ``unknown``."""
    best = ("", "unknown")
    try:
        with open("/proc/mounts", encoding="utf-8") as f:
            for line in f:
                parts = line.split()
                if (
                    len(parts) >= 3
                    and str(path).startswith(parts[1])
                    and len(parts[1]) > len(best[0])
                ):
                    best = (parts[1], f"{parts[0]} {parts[2]} on {parts[1]}")
    except OSError:
        pass
    return best[1]


def _git(*args: str) -> str:
    try:
        done = subprocess.run(
            ["git", *args], cwd=HERE.parent, capture_output=True, text=True, timeout=10, check=True
        )
    except (OSError, subprocess.SubprocessError):
        return ""
    return done.stdout.strip()


def _load() -> float | None:
    return os.getloadavg()[0] if hasattr(os, "getloadavg") else None


def machine_info(root: Path) -> Json:
    load = os.getloadavg() if hasattr(os, "getloadavg") else None
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "platform": platform.platform(),
        "cpu": _cpu_model(),
        "cores": os.cpu_count(),
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "prioritylock": prioritylock.__version__,
        "filelock": filelock.__version__,
        "git_commit": _git("rev-parse", "--short", "HEAD"),
        "git_dirty_files": len(_git("status", "--porcelain").splitlines()),
        "tmp_dir": str(root),
        "filesystem": _filesystem(root),
        "loadavg_start": load,
    }


def machine_line(m: Json) -> str:
    load = m.get("loadavg_start")
    load_text = f", load {load[0]:.2f}" if load else ""
    return (
        f"{m['date']} | {m['cpu']}, {m['cores']} cores | {m['platform']} | {m['python']} | "
        f"filelock {m['filelock']} | prioritylock {m['prioritylock']} @ {m['git_commit']}"
        f"{' (+' + str(m['git_dirty_files']) + ' changed files)' if m['git_dirty_files'] else ''}"
        f" | {m['filesystem']}{load_text}"
    )


# -- main ------------------------------------------------------------------------------------------

SECTIONS: dict[str, Callable[[Bench], Section]] = {
    "overhead": section_overhead,
    # Before requests, whose table counts the requests of these same preemption runs.
    "preemption": section_preemption,
    "requests": section_requests,
    "handoff": section_handoff,
    "profile": section_profile,
}


@contextmanager
def _scratch(parent: str | None) -> Iterator[Path]:
    root = Path(tempfile.mkdtemp(prefix="prioritylock-bench-", dir=parent))
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _write_json(path: Path, payload: Json) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(payload, indent=2, default=str) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="small sizes: a smoke test (< 30 s)")
    parser.add_argument("--json", type=Path, default=DEFAULT_JSON, help="where to write results")
    parser.add_argument("--profile", action="store_true", help="also profile the cycle")
    parser.add_argument(
        "--sections",
        default="",
        help=f"comma-separated subset of {','.join(SECTIONS)} (default: all but profile)",
    )
    parser.add_argument("--dir", default=None, help="parent of the scratch dir (default: $TMPDIR)")
    parser.add_argument("--child-handoff", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child_handoff:
        return child_handoff(args.child_handoff)

    wanted = [s.strip() for s in args.sections.split(",") if s.strip()] or [
        s for s in SECTIONS if s != "profile" or args.profile
    ]
    unknown = sorted(set(wanted) - set(SECTIONS))
    if unknown:
        parser.error(f"unknown sections: {', '.join(unknown)}")
    started = time.monotonic()
    with _scratch(args.dir) as root:
        bench = Bench(sizes=QUICK if args.quick else FULL, root=root)
        machine = machine_info(root)
        print(f"prioritylock benchmarks{' (quick)' if args.quick else ''}")
        print(machine_line(machine), flush=True)
        done: dict[str, Section] = {}
        for name, run in SECTIONS.items():
            if name in wanted:
                load = _load()
                t0 = time.monotonic()
                section = done[name] = run(bench)
                section.elapsed_s = time.monotonic() - t0
                section.load = load
                print()
                print(section.render(), flush=True)
    elapsed = time.monotonic() - started
    machine["loadavg_end"] = os.getloadavg() if hasattr(os, "getloadavg") else None
    payload: Json = {
        "machine": machine,
        "quick": args.quick,
        "sizes": asdict(bench.sizes),
        "elapsed_s": round(elapsed, 1),
        "sections": {
            n: {
                "title": s.title,
                "elapsed_s": round(s.elapsed_s, 1),
                "load": s.load,
                "rows": s.rows,
                "notes": s.notes,
            }
            for n, s in done.items()
        },
    }
    _write_json(args.json, payload)
    print(f"\n{elapsed:.1f} s; results in {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
