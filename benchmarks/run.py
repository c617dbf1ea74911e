"""prioritylock benchmarks: figures, not pass/fail. One run prints every table side by side.

Run ``python benchmarks/run.py [--quick] [--stores a,b] [--sections a,b] [--json PATH]
[--profile]``.

Stores (``STORE_KINDS``, all by default; ``--stores`` picks some): ``memory`` and ``local``, and the
cloud stores on their emulators, ``s3-moto``, ``s3-seaweedfs``, ``gcs`` (fake-gcs-server) and
``azure`` (Azurite). The emulators are started by the run itself on free ports on 127.0.0.1
(``_servers.py``), only when a section that uses them runs, and stopped at its end however it ends.

Sections, in order (``SECTIONS``); each is a function ``(Bench) -> Section``:

- ``overhead``: µs per uncontended acquire+release cycle on the memory and local stores (the
  LocalStore durable, its default, and ``durable=false``), against ``filelock.FileLock`` on the
  same disk and ``threading.Lock`` (the floor); wall clock (median, p99) and process CPU per
  cycle.
- ``cloud``: per cloud store on its emulator, median and p99 of acquire (``try_lock()`` on a free
  lock), renew and release, with their requests from ``store.stats``, next to one GET and one
  conditional PUT made directly with the SDK: the library's overhead over the store's own cost.
- ``preemption``: a higher-priority ``try_lock()`` call -> it holds, against a holder whose
  cleanup takes 0 or 50 ms, on every store.
- ``requests``: store requests per operation on every store, from ``store.stats``; where two
  clients share a store (a blocked waiter, a preemption) a per-thread tally splits them, checked
  against the store's own totals. Also what a held lock and an idle one cost per renew interval.
- ``handoff``: holder's ``unlock()`` call -> the next waiter's ``lock()`` returns, between threads
  and between processes (``time.monotonic_ns`` is system-wide).
- ``contention``: 8 processes loop ``lock()`` -> ``unlock()`` on one lock for a fixed window
  (10 s; ``--quick`` 2 s): acquisitions per second, how often the lock changed process, and
  fairness (acquisitions per process, waits), on the LocalStore (durable and ``durable=false``)
  against ``filelock.FileLock`` doing the same on the same disk.
- ``profile`` (with ``--profile``): where the cycle spends its time.

To add a store: add a ``StoreKind`` to ``STORE_KINDS`` (an emulated one also to ``_servers.py``);
every section that loops over kinds picks it up, and ``cross_process`` kinds join the
cross-process handoff. To add a section: write ``(Bench) -> Section`` and list it in ``SECTIONS``.
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
import secrets
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path
from typing import IO, Any, Protocol, TypeVar

import _servers  # benchmarks/_servers.py: run as a script, this directory is on the path
import filelock
from _servers import Emulator

import prioritylock
from prioritylock import (
    CleanupNotice,
    FakeClock,
    Heartbeat,
    Lock,
    LockBuilder,
    LockConfig,
    LockInfo,
    LockListener,
    LockTimeout,
)
from prioritylock.stores import (
    ConditionalReader,
    ObjectStore,
    ReadResult,
    StoreCapabilities,
    StoreStats,
    UnsyncedWriter,
    Versioned,
    open_store,
)
from prioritylock.testing._servers import EmulatorError

HERE = Path(__file__).resolve().parent
DEFAULT_JSON = HERE / "results" / "latest.json"

Json = dict[str, Any]
T = TypeVar("T")

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
    cloud_iterations: int  # per cloud store: rounds of raw GET, raw PUT, acquire, renew, release
    cloud_budget_s: float  # wall-clock cap per cloud store
    cloud_handoffs: int  # per handoff case on a cloud store
    contention_s: float  # the window each contention variant runs for
    contention_procs: int  # processes contending for one lock


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
    waiter_s=12.0,
    waiter_settle_s=2.0,
    profile_cycles=5_000,
    profile_cycles_slow=300,
    cloud_iterations=200,
    cloud_budget_s=18.0,
    cloud_handoffs=40,
    contention_s=10.0,
    contention_procs=8,
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
    cloud_iterations=25,
    cloud_budget_s=2.5,
    cloud_handoffs=8,
    contention_s=2.0,
    contention_procs=8,
)


# -- stores under test -----------------------------------------------------------------------------


@dataclass(frozen=True)
class StoreKind:
    """One kind of store. ``Bench.url(kind)`` names a fresh, empty namespace of it as a store URL;
    ``open_store(url)`` opens a client on it (for ``memory://NAME`` the same object each time).

    Local kinds name it with ``namespace(root)``; an ``emulator`` kind is a fresh prefix in a
    bucket of that running emulator (``_servers.EMULATORS``), whose URL needs the environment
    ``_servers.Emulator.env()`` gives (the run sets it).
    """

    name: str
    label: str
    cross_process: bool
    slow: bool  # writes to disk or network: fewer cycles
    namespace: Callable[[Path], str] | None = None
    emulator: str | None = None


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
    StoreKind(
        name="s3-moto", label="S3 (moto)", cross_process=False, slow=True, emulator="s3-moto"
    ),
    StoreKind(
        name="s3-seaweedfs",
        label="S3 (SeaweedFS)",
        cross_process=False,
        slow=True,
        emulator="s3-seaweedfs",
    ),
    StoreKind(name="gcs", label="GCS (fake-gcs)", cross_process=False, slow=True, emulator="gcs"),
    StoreKind(
        name="azure", label="Azure (Azurite)", cross_process=False, slow=True, emulator="azure"
    ),
)
MEMORY = STORE_KINDS[0]
#: The query that makes a LocalStore URL skip fsync (``LocalStore(durable=False)``).
NONDURABLE = "?durable=false"

#: Sections that use the emulated stores: the emulators start only when one of them runs.
CLOUD_SECTIONS = frozenset({"cloud", "preemption", "requests", "handoff"})


# -- the run's context -----------------------------------------------------------------------------


@dataclass
class Bench:
    sizes: Sizes
    root: Path  # a temp dir on the disk under test; LocalStore and filelock both live here
    kinds: tuple[StoreKind, ...] = STORE_KINDS[:2]  # the stores picked with --stores
    emulators: dict[str, Emulator] = field(default_factory=dict)  # running, by name
    _keys: Iterator[int] = field(default_factory=itertools.count)
    _preemptions: dict[str, PreemptionResult] = field(default_factory=dict)
    _buckets: dict[str, str] = field(default_factory=dict)

    @property
    def local_kinds(self) -> tuple[StoreKind, ...]:
        """The picked stores that need no emulator (memory, local)."""
        return tuple(k for k in self.kinds if k.emulator is None)

    @property
    def cloud_kinds(self) -> tuple[StoreKind, ...]:
        """The picked stores whose emulator is running."""
        return tuple(k for k in self.kinds if k.emulator in self.emulators)

    @property
    def store_kinds(self) -> tuple[StoreKind, ...]:
        """Every picked store that can be opened now."""
        return self.local_kinds + self.cloud_kinds

    def url(self, kind: StoreKind) -> str:
        """A fresh, empty namespace of ``kind`` as a store URL."""
        if kind.namespace is not None:
            return kind.namespace(self.root)
        assert kind.emulator is not None
        return self.emulators[kind.emulator].url(
            self.bucket(kind), f"bench-{uuid.uuid4().hex[:12]}"
        )

    def bucket(self, kind: StoreKind) -> str:
        """The run's bucket (container) on ``kind``'s emulator, made on first use."""
        assert kind.emulator is not None
        if kind.emulator not in self._buckets:
            self._buckets[kind.emulator] = self.emulators[kind.emulator].make_bucket()
        return self._buckets[kind.emulator]

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
    steal: float | None = None  # % of the machine's CPU time stolen by the hypervisor meanwhile

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
        steal = "" if self.steal is None else f", {self.steal:.0f}% of CPU time stolen (VM)"
        out.append(f"  ({self.elapsed_s:.1f} s{load}{steal})")
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


def _local_stores(b: Bench) -> list[tuple[str, str, StoreKind, str]]:
    """(key, label, kind, fresh URL) of the picked local stores, the LocalStore twice: durable
    (the default) and ``durable=false``."""
    stores: list[tuple[str, str, StoreKind, str]] = []
    for kind in b.local_kinds:
        stores.append((kind.name, kind.label, kind, b.url(kind)))
        if kind.name == "local":
            stores.append(
                ("local-nondurable", "LocalStore durable=false", kind, b.url(kind) + NONDURABLE)
            )
    return stores


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
    for key, label, kind, url in _local_stores(b):
        target = s.cycles_slow if kind.slow else s.cycles
        store = open_store(url)
        same = b.builder(store, b.path("same"), "bench").build()
        variants.append(
            CycleVariant(
                f"{key}/same",
                f"{label}, same Lock object",
                target,
                _timed(_lock_cycle(same)),
            )
        )
        fresh = b.builder(store, b.path("fresh"), "bench")
        variants.append(
            CycleVariant(
                f"{key}/fresh",
                f"{label}, fresh Lock each cycle",
                target,
                _fresh_lock_cycles(fresh),
            )
        )
    builder = b.builder(open_store(b.url(MEMORY)), b.path("build"), "bench")
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


# -- cloud stores against their SDKs --------------------------------------------------------------

#: (key, label, what its median is compared with: the raw SDK calls whose medians are summed)
_CLOUD_OPS: list[tuple[str, str, tuple[str, ...]]] = [
    ("raw_get", "raw SDK GET", ()),
    ("raw_put", "raw SDK conditional PUT", ()),
    ("store_read", "store.read()", ("raw_get",)),
    ("store_read_unchanged", "store.read_if_changed(), unchanged (304)", ("raw_get",)),
    ("store_replace", "store.replace()", ("raw_put",)),
    ("acquire", "acquire: try_lock(), fresh Lock on a free lock", ("raw_get", "raw_put")),
    ("acquire_known", "acquire: try_lock(), same Lock after its release", ("raw_put",)),
    ("renew", "renew()", ("raw_put",)),
    ("release", "unlock()", ("raw_put",)),
]
_BASE_NAMES = {"raw_get": "GET", "raw_put": "PUT"}
#: The SDK calls behind "raw SDK GET" and "raw SDK conditional PUT", by emulator.
_RAW_CALLS = {
    "s3-moto": ("boto3 get_object", "boto3 put_object(IfMatch=etag)"),
    "s3-seaweedfs": ("boto3 get_object", "boto3 put_object(IfMatch=etag)"),
    "gcs": ("download_as_bytes()", "upload_from_string(if_generation_match=gen)"),
    "azure": ("download_blob().readall()", "upload_blob(etag=, IfNotModified)"),
}
#: Where the library adds more than this over the raw SDK calls, the section flags it.
OVERHEAD_FLAG = 1.2


def _read_if_changed(store: ObjectStore, key: str, version: str) -> ReadResult:
    """The store's conditional read, so a wrapped store reads as the lock would read it bare."""
    if isinstance(store, ConditionalReader):
        return store.read_if_changed(key, version)
    return store.read(key)


def _replace_unsynced(store: ObjectStore, key: str, data: bytes, version: str) -> str:
    """The store's unsynced replace where it has one (LocalStore), else its replace."""
    if isinstance(store, UnsyncedWriter):
        return store.replace_unsynced(key, data, version)
    return store.replace(key, data, version)


class StoreTimer:
    """A store wrapper that adds up the time this thread spends inside store calls, so a lock
    operation's time splits into the store's and the library's own. ``namespace`` and ``stats``
    are the inner store's, so in-process wakeups and request counts are unchanged."""

    def __init__(self, inner: ObjectStore) -> None:
        self._inner = inner
        self._local = threading.local()

    def spent_ns(self) -> int:
        return int(getattr(self._local, "spent", 0))

    def _time(self, call: Callable[[], T]) -> T:
        t0 = time.perf_counter_ns()
        try:
            return call()
        finally:
            self._local.spent = self.spent_ns() + time.perf_counter_ns() - t0

    @property
    def namespace(self) -> str:
        return self._inner.namespace

    @property
    def stats(self) -> StoreStats:
        return self._inner.stats

    @property
    def capabilities(self) -> StoreCapabilities:
        return self._inner.capabilities

    def read(self, key: str) -> Versioned | None:
        return self._time(lambda: self._inner.read(key))

    def read_if_changed(self, key: str, version: str) -> ReadResult:
        return self._time(lambda: _read_if_changed(self._inner, key, version))

    def create(self, key: str, data: bytes) -> str:
        return self._time(lambda: self._inner.create(key, data))

    def replace(self, key: str, data: bytes, version: str) -> str:
        return self._time(lambda: self._inner.replace(key, data, version))

    def replace_unsynced(self, key: str, data: bytes, version: str) -> str:
        return self._time(lambda: _replace_unsynced(self._inner, key, data, version))

    def delete(self, key: str, version: str) -> None:
        self._time(lambda: self._inner.delete(key, version))

    def list(self, prefix: str) -> list[str]:
        return self._time(lambda: self._inner.list(prefix))

    def close(self) -> None:
        self._inner.close()


@dataclass
class CloudRun:
    """One cloud store's timed operations; stores take turns, one round each at a time."""

    kind: StoreKind
    store: ObjectStore
    timer: StoreTimer  # the same store, as the locks see it
    raw: _servers.RawClient
    builder: LockBuilder
    body_len: int  # a lease document's size: the raw PUTs write as many bytes
    raw_key: str
    raw_version: str
    store_key: str
    store_version: str
    samples: dict[str, list[int]] = field(default_factory=dict)
    #: op -> (its time - the raw calls it is made of, in the same round): the paired overhead
    over: dict[str, list[int]] = field(default_factory=dict)
    #: op -> its time outside store calls: the library's own work
    own: dict[str, list[int]] = field(default_factory=dict)
    requests: dict[str, dict[str, int]] = field(default_factory=dict)  # summed over samples
    spent_s: float = 0.0
    iterations: int = 0
    _round_raw: dict[str, int] = field(default_factory=dict)

    def timed(self, op: str, call: Callable[[], T], base: tuple[str, ...] = ()) -> T:
        """Run ``call``; note its duration and, for store and lock operations (``base``: the raw
        calls it is compared with), its requests, paired overhead and time outside the store."""
        before = self.store.stats.snapshot() if base else {}
        in_store = self.timer.spent_ns()
        t0 = time.perf_counter_ns()
        result = call()
        elapsed = time.perf_counter_ns() - t0
        self.samples.setdefault(op, []).append(elapsed)
        if not base:
            self._round_raw[op] = elapsed
            return result
        self.over.setdefault(op, []).append(elapsed - sum(self._round_raw[x] for x in base))
        if self.timer.spent_ns() != in_store:
            self.own.setdefault(op, []).append(elapsed - (self.timer.spent_ns() - in_store))
        after = self.store.stats.snapshot()
        tally = self.requests.setdefault(op, {})
        for k in after:
            if k != "total" and after[k] != before[k]:
                tally[k] = tally.get(k, 0) + after[k] - before[k]
        return result

    def iteration(self, record: bool = True) -> None:
        """One round: (an untimed GET,) raw GET and PUT, store read and replace, then a fresh
        Lock's acquire, renew, release, acquire again (version known) and release."""
        started = time.perf_counter()
        body = secrets.token_hex(self.body_len)[: self.body_len].encode()
        raw, store = self.raw, self.store
        # Untimed: the first request after another store's turn runs on cold caches.
        raw.get(self.raw_key)
        self.timed("raw_get", lambda: raw.get(self.raw_key))
        self.raw_version = self.timed(
            "raw_put", lambda: raw.put(self.raw_key, body, self.raw_version)
        )
        self.timed("store_read", lambda: store.read(self.store_key), _BASES["store_read"])
        known = self.store_version
        self.timed(
            "store_read_unchanged",
            lambda: _read_if_changed(store, self.store_key, known),
            _BASES["store_read_unchanged"],
        )
        self.store_version = self.timed(
            "store_replace",
            lambda: store.replace(self.store_key, body, self.store_version),
            _BASES["store_replace"],
        )
        lock = self.builder.build()
        try:
            if not self.timed("acquire", lock.try_lock, _BASES["acquire"]):
                raise RuntimeError(f"{self.kind.label}: try_lock() on a free lock failed")
            self.timed("renew", lock.renew, _BASES["renew"])
            self.timed("release", lock.unlock, _BASES["release"])
            if not self.timed("acquire_known", lock.try_lock, _BASES["acquire_known"]):
                raise RuntimeError(f"{self.kind.label}: try_lock() after own release failed")
            self.timed("release", lock.unlock, _BASES["release"])
        finally:
            lock.close()
        if not record:
            for table in (self.samples, self.over, self.own, self.requests):
                table.clear()
            return
        self.iterations += 1
        self.spent_s += time.perf_counter() - started


_BASES = {op: base for op, _, base in _CLOUD_OPS}


def _cloud_run(b: Bench, kind: StoreKind) -> CloudRun:
    assert kind.emulator is not None
    store = open_store(b.url(kind))
    timer = StoreTimer(store)
    builder = b.builder(timer, b.path("cloud"), "bench")
    first = builder.build()
    first.lock(timeout=10)
    found = store.read(first.key)
    first.unlock()
    first.close()
    assert found is not None
    raw = b.emulators[kind.emulator].raw(b.bucket(kind))
    raw_key = f"bench-raw/{uuid.uuid4().hex[:12]}"
    store_key = f"bench/store-{uuid.uuid4().hex[:12]}"
    return CloudRun(
        kind=kind,
        store=store,
        timer=timer,
        raw=raw,
        builder=builder,
        body_len=len(found.data),
        raw_key=raw_key,
        raw_version=raw.put(raw_key, found.data, None),
        store_key=store_key,
        store_version=store.create(store_key, found.data),
    )


def section_cloud(b: Bench) -> Section:
    s = b.sizes
    runs = [_cloud_run(b, kind) for kind in b.cloud_kinds]
    for run in runs:
        for _ in range(3):
            run.iteration(record=False)  # warm up connections and the SDKs' caches
    # Round-robin, one round per store at a time, so the machine's noise hits every store and
    # every operation alike; a store stops early once it has used its time budget.
    for _ in range(s.cloud_iterations):
        for run in runs:
            if run.spent_s < s.cloud_budget_s:
                run.iteration()

    table: list[list[str]] = []
    rows: list[Json] = []
    flagged: list[str] = []
    for run in runs:
        assert run.kind.emulator is not None
        raw_get, raw_put = _RAW_CALLS[run.kind.emulator]
        table.append([f"{run.kind.label}: {run.iterations} rounds", "", "", "", "", "", "", ""])
        medians = {op: summarize(v, 1e6).median for op, v in run.samples.items()}
        for op, label, base in _CLOUD_OPS:
            summary = summarize(run.samples[op], 1e6)
            shown = {"raw_get": f"{label}: {raw_get}", "raw_put": f"{label}: {raw_put}"}.get(
                op, label
            )
            mean_requests = {k: v / summary.n for k, v in run.requests.get(op, {}).items()}
            ratio = summary.median / sum(medians[x] for x in base) if base else None
            over = _median_ms(run.over.get(op))
            own = _median_ms(run.own.get(op))
            against = "+".join(_BASE_NAMES[x] for x in base)
            if ratio is not None and ratio > OVERHEAD_FLAG:
                flagged.append(f"{run.kind.label} {op} {ratio:.2f}x {against}")
            table.append(
                [
                    f"  {shown}",
                    fmt_num(summary.median),
                    fmt_num(summary.p99),
                    fmt_counts(mean_requests) if base else "1",
                    f"{ratio:.2f}x {against}" if ratio is not None else "",
                    f"{over:+.2f}" if over is not None else "",
                    fmt_num(own) if own is not None else "",
                    str(summary.n),
                ]
            )
            rows.append(
                {
                    "store": run.kind.name,
                    "operation": op,
                    "label": shown,
                    "unit": "ms",
                    "requests": mean_requests if base else {"total": 1},
                    "ratio_to_raw": ratio,
                    "raw_baseline": list(base),
                    "paired_overhead_ms": over,
                    "outside_store_ms": own,
                    **asdict(summary),
                }
            )
        run.raw.close()
        run.store.close()
    notes = [
        "Raw SDK calls: one request each, on their own SDK client, configured as the store "
        "configures its own (no SDK retries); the PUTs write as many bytes as a lease document.",
        "A round: an untimed GET, raw GET, raw PUT, store.read(), store.read_if_changed() of the "
        "version it just read, store.replace(), a fresh Lock's "
        "try_lock(), renew(), unlock(), try_lock() and unlock() (so unlock() has two samples a "
        f"round); the stores take turns round by round, each capped at {s.cloud_budget_s:g} s.",
        "requests: mean per operation, from store.stats. vs raw: the median over the sum of the "
        "raw medians it is made of (a fresh Lock's acquire = GET + PUT). +ms: median of (the "
        "operation - those raw calls in the same round). lib ms: median time outside store calls.",
    ]
    if flagged:
        notes.append(f"Over {OVERHEAD_FLAG:.2f}x the raw SDK cost: " + "; ".join(flagged) + ".")
    if not runs:
        notes = ["No cloud store picked (--stores), so nothing to measure."]
    return Section(
        name="cloud",
        title="Cloud stores on their emulators: lock operations vs the SDK's own GET and "
        "conditional PUT (ms)",
        headers=["operation", "median", "p99", "requests", "vs raw", "+ms", "lib ms", "n"],
        table=table,
        rows=rows,
        notes=notes,
    )


def _median_ms(samples_ns: list[int] | None) -> float | None:
    return summarize(samples_ns, 1e6).median if samples_ns else None


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
    def namespace(self) -> str:
        # None on purpose: locks on one TallyStore share its identity, and no cached reads.
        raise AttributeError("namespace")

    @property
    def stats(self) -> StoreStats:
        return self._inner.stats

    @property
    def capabilities(self) -> StoreCapabilities:
        return self._inner.capabilities

    def read(self, key: str) -> Versioned | None:
        self._note("reads")
        return self._inner.read(key)

    def read_if_changed(self, key: str, version: str) -> ReadResult:
        self._note("reads")
        return _read_if_changed(self._inner, key, version)

    def create(self, key: str, data: bytes) -> str:
        self._note("creates")
        return self._inner.create(key, data)

    def replace(self, key: str, data: bytes, version: str) -> str:
        self._note("replaces")
        return self._inner.replace(key, data, version)

    def replace_unsynced(self, key: str, data: bytes, version: str) -> str:
        self._note("replaces")
        return _replace_unsynced(self._inner, key, data, version)

    def delete(self, key: str, version: str) -> None:
        self._note("deletes")
        self._inner.delete(key, version)

    def list(self, prefix: str) -> list[str]:
        self._note("lists")
        return self._inner.list(prefix)

    def close(self) -> None:
        self._inner.close()


_KIND_NAMES = {"reads": "read", "creates": "create", "replaces": "replace", "deletes": "delete"}


def fmt_counts(counts: Mapping[str, float]) -> str:
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
    out.update(_expired_takeover(b, store))
    return out


def _expired_takeover(b: Bench, store: ObjectStore) -> dict[str, dict[str, int]]:
    """A holder that died (its heartbeat never runs) and a rival that takes over: one request to
    see the holder (refused), then, lease_timeout + max_clock_drift later on the rival's own
    clock, what taking the expired lease costs. Fake clocks: no waiting."""
    clock = FakeClock()
    stopped = Heartbeat(clock, threaded=False)  # never stepped: the holder never renews
    path = b.path("expired")
    dead = b.builder(store, path, "dead").clock(clock).heartbeat(stopped).lease_timeout(2).build()
    if not dead.try_lock():
        raise RuntimeError("the expired-takeover holder could not take a fresh lock")
    rival = b.builder(store, path, "rival").clock(clock).heartbeat(stopped).build()
    out = {"acquire_expired_sight": stats_delta(store, rival.try_lock)}
    clock.advance(2 + 0.5 + 0.01)  # the holder's lease timeout + the default max_clock_drift
    out["acquire_expired"] = stats_delta(store, rival.try_lock)
    if not rival.is_current_owner():
        raise RuntimeError("the rival did not take over the expired lease")
    rival.unlock()
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
    ("acquire_expired_sight", "expired holder: first sight (try_lock refused)"),
    ("acquire_expired", "expired holder: take over after lease_timeout + drift"),
]


@dataclass
class WaiterResult:
    reads: int
    first_second: int
    steady_per_s: float
    steady_reads: int
    steady_window_s: float
    holder: dict[str, int]
    waited_s: float


def _blocked_waiter(
    b: Bench, kind: StoreKind, poll: float | None, out: dict[str, WaiterResult]
) -> Callable[[], None]:
    """A waiter blocked for ``waiter_s`` behind a holder; returns a function that runs it."""
    tally = TallyStore(open_store(b.url(kind)))
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
        steady_reads = tally.counts("waiter", t0 + s.waiter_settle_s, t1)["reads"]
        out[f"{kind.name}/{poll}"] = WaiterResult(
            reads=tally.counts("waiter", t0, t1)["reads"],
            first_second=tally.counts("waiter", t0, t0 + 1.0)["reads"],
            steady_per_s=steady_reads / steady_window,
            steady_reads=steady_reads,
            steady_window_s=steady_window,
            holder={k: v for k, v in tally.counts("other", t0, t1).items() if v},
            waited_s=t1 - t0,
        )

    return run


#: The held-lock figures run with every default timing scaled by this (lease 3 s instead of
#: 30 s...), so a short window holds many renew intervals; counts per interval are unchanged.
HELD_SCALE = 0.1


@dataclass
class HeldResult:
    """Requests of one held lock and one idle (built, locked, released) lock over a window."""

    window_s: float
    renew_interval_s: float  # scaled
    watch_interval_s: float  # scaled
    held: dict[str, int]
    idle: dict[str, int]

    def per_interval(self, kind: str) -> float:
        """``kind`` requests ("reads", "replaces") of the held lock per renew interval."""
        return self.held[kind] / (self.window_s / self.renew_interval_s)


def _default_timings() -> LockConfig:
    """A Lock's configuration with every timing at its default."""
    return LockBuilder().store("memory://").path("bench", "defaults").build().config


#: Apache Hudi's default lock timings, as ``LockBuilder.from_properties`` maps them: lease
#: (``lock_validity_timeout_ms``) 5 min, renew (``heartbeat_poll_ms``) 30 s.
HUDI_LEASE_S = 300.0
HUDI_RENEW_S = 30.0


def _held_lock(
    b: Bench, kind: StoreKind, timings: str, out: dict[str, HeldResult]
) -> Callable[[], None]:
    """A lock held for about ``waiter_s`` and an idle one next to it; returns a function that
    runs them. ``timings``: ``defaults``, or ``hudi`` (Hudi's lease and renew interval, watched
    at the renew interval, as ``from_properties`` sets them); either way scaled by
    :data:`HELD_SCALE`."""
    defaults = _default_timings()
    held_tally = TallyStore(open_store(b.url(kind)))
    builder = b.builder(held_tally, b.path("held"), "holder").cleanup_timeout(
        defaults.cleanup_timeout * HELD_SCALE
    )
    if timings == "hudi":
        # As LockBuilder.from_properties sets them: Hudi's lease and heartbeat, and watching at
        # the renew interval (Hudi has no preemption to hear of).
        builder.lease_timeout(HUDI_LEASE_S * HELD_SCALE).renew_interval(HUDI_RENEW_S * HELD_SCALE)
        builder.watch_interval(HUDI_RENEW_S * HELD_SCALE)
    else:
        builder.lease_timeout(defaults.lease_timeout * HELD_SCALE)
    held = builder.build()
    idle_tally = TallyStore(open_store(b.url(kind)))
    idle = b.builder(idle_tally, b.path("idle"), "idle").build()
    s = b.sizes

    def run() -> None:
        idle.lock(timeout=5)
        idle.unlock()
        held.lock(timeout=5)
        # Renewals come every renew interval after the acquire, watch reads in between: a
        # window a quarter interval off that phase, a whole number of intervals long, holds
        # each of them exactly as often as an interval does.
        cfg = held.config
        every = cfg.renew_interval
        t0 = time.monotonic() + every / 4
        t1 = t0 + every * max(1, int((s.waiter_s - every / 4) // every))
        time.sleep(t1 - time.monotonic())
        held.unlock()
        out[f"{kind.name}/{timings}"] = HeldResult(
            window_s=t1 - t0,
            renew_interval_s=cfg.renew_interval,
            watch_interval_s=cfg.watch_interval,
            held=held_tally.counts(None, t0, t1),
            idle=idle_tally.counts(None, t0, t1),
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
    kinds = b.store_kinds
    per_kind = {kind.name: _single_client_ops(b, open_store(b.url(kind))) for kind in kinds}
    # Blocked waiters and held locks: every one at the same time, each on its own lock.
    waiters: dict[str, WaiterResult] = {}
    held: dict[str, HeldResult] = {}
    runs = [_blocked_waiter(b, k, p, waiters) for k in kinds for p in (None, SHORT_POLL)]
    runs += [_held_lock(b, k, t, held) for k in kinds for t in ("defaults", "hudi")]
    _run_threads(runs, "bench-waiter")

    table: list[list[str]] = []
    rows: list[Json] = []
    for op, label in _OPS:
        table.append([label, *(fmt_counts(dict(per_kind[k.name][op])) for k in kinds)])
        rows.append(
            {"operation": op, "label": label, **{k.name: per_kind[k.name][op] for k in kinds}}
        )
    for poll, poll_label in (
        (None, "default poll_interval (1 s)"),
        (SHORT_POLL, f"poll_interval {SHORT_POLL:g} s"),
    ):
        cells = []
        for kind in kinds:
            w = waiters[f"{kind.name}/{poll}"]
            cells.append(f"{w.steady_per_s:.2f}/s (1st s: {w.first_second})")
        table.append([f"blocked waiter reads, {poll_label}", *cells])
        rows.append(
            {
                "operation": "waiter_reads",
                "poll_interval": poll,
                **{k.name: asdict(waiters[f"{k.name}/{poll}"]) for k in kinds},
            }
        )
    for timings, label in (
        ("defaults", "held lock, default timings: per renew interval"),
        ("hudi", "held lock, Hudi's timings: per renew interval"),
    ):
        table.append(
            [
                label,
                *(
                    f"{held[f'{k.name}/{timings}'].per_interval('replaces'):.2f} w, "
                    f"{held[f'{k.name}/{timings}'].per_interval('reads'):.2f} r"
                    for k in kinds
                ),
            ]
        )
        rows.append(
            {
                "operation": "held",
                "timings": timings,
                "scale": HELD_SCALE,
                **{
                    k.name: {
                        **asdict(held[f"{k.name}/{timings}"]),
                        "writes_per_renew_interval": held[f"{k.name}/{timings}"].per_interval(
                            "replaces"
                        ),
                        "reads_per_renew_interval": held[f"{k.name}/{timings}"].per_interval(
                            "reads"
                        ),
                    }
                    for k in kinds
                },
            }
        )
    table.append(
        [
            "idle lock (built, used, released)",
            *(fmt_counts(held[f"{k.name}/defaults"].idle) for k in kinds),
        ]
    )
    for variant, label in _PREEMPT_VARIANTS:
        counts = {k.name: b.preemptions(k, variant).requests for k in b.store_kinds}
        for who in ("requestor", "holder"):
            cells = [fmt_counts(counts[k.name][who]) if k.name in counts else "-" for k in kinds]
            table.append([f"preemption, {label}: {who}", *cells])
        rows.append({"operation": "preemption", "variant": variant, **counts})

    s = b.sizes
    pooled = [waiters[f"{k.name}/None"] for k in kinds]
    pooled_rate = sum(w.steady_reads for w in pooled) / sum(w.steady_window_s for w in pooled)
    defaults = _default_timings()

    def per_day(timings: str, what: str) -> float:
        renew = defaults.renew_interval if timings == "defaults" else HUDI_RENEW_S
        mean = statistics.fmean(held[f"{k.name}/{timings}"].per_interval(what) for k in kinds)
        return mean * 86400 / renew

    rows.append(
        {
            "operation": "per_day_at_full_scale",
            "waiter_reads_per_s_pooled": pooled_rate,
            "waiter_reads_per_day": pooled_rate * 86400,
            "held_defaults": {
                "writes": per_day("defaults", "replaces"),
                "reads": per_day("defaults", "reads"),
            },
            "held_hudi": {"writes": per_day("hudi", "replaces"), "reads": per_day("hudi", "reads")},
        }
    )
    dflt = held[f"{kinds[0].name}/defaults"]
    hudi = held[f"{kinds[0].name}/hudi"]
    return Section(
        name="requests",
        title="Store requests per operation (from store.stats; two-client cases split per thread)",
        headers=["operation", *(k.label for k in kinds)],
        table=table,
        rows=rows,
        notes=[
            f"Blocked waiter: steady reads/s counted after the first {s.waiter_settle_s:g} s of "
            f"a {s.waiter_s:g} s wait (backoff from 5 ms up to the poll interval); all stores "
            f"pooled, default poll_interval: {pooled_rate:.2f} reads/s "
            f"({sum(w.steady_reads for w in pooled)} reads), {pooled_rate * 86400:,.0f} a day.",
            f"Held lock: timings x{HELD_SCALE:g} so a short window holds several renew intervals "
            f"(defaults: renew every {dflt.renew_interval_s:g} s, watch every "
            f"{dflt.watch_interval_s:g} s, over {dflt.window_s:.1f} s; Hudi's: lease "
            f"{HUDI_LEASE_S:g} s, renew {HUDI_RENEW_S:g} s and watch every "
            f"{hudi.watch_interval_s / HELD_SCALE:g} s, as from_properties maps them; "
            f"over {hudi.window_s:.1f} s); w = conditional writes, r = reads. Per day at full "
            f"scale: defaults {per_day('defaults', 'replaces'):,.0f} writes + "
            f"{per_day('defaults', 'reads'):,.0f} reads; Hudi's {per_day('hudi', 'replaces'):,.0f}"
            f" writes + {per_day('hudi', 'reads'):,.0f} reads (extrapolated from the scaled "
            "window, where the heartbeat's 50 ms wakeup grid stretches each 1 s interval by up to "
            "5%, against 0.5% at full scale: full-scale counts are up to ~5% higher). Idle: "
            "requests in the same window.",
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
    for kind in b.local_kinds:
        url = b.url(kind)
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
            # Two .store("file://...") calls: separate store objects whose ``namespace`` (the
            # directory) is the same, so in-process wakeups still reach across.
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
        if kind.name == "local":  # the same without fsync: threads, and processes
            fast = b.url(kind) + NONDURABLE
            fast_shared = open_store(fast)
            cases.append(
                HandoffCase(
                    "local-nondurable/threads",
                    "LocalStore durable=false, 2 threads, one store object",
                    s.hold_s,
                    partial(handoff_threads, b, (fast_shared, fast_shared), s.handoffs, s.hold_s),
                )
            )
            cases.append(
                HandoffCase(
                    f"local-nondurable/processes/{s.hold_s:g}",
                    "LocalStore durable=false, 2 processes",
                    s.hold_s,
                    partial(handoff_processes, b, fast, s.handoffs, s.hold_s),
                )
            )
    for kind in b.cloud_kinds:
        url = b.url(kind)
        shared = open_store(url)
        n = s.cloud_handoffs
        clients = (open_store(url), open_store(url))  # two SDK clients, one namespace
        # Wrapped, the two clients lose their shared ``namespace``: no in-process wakeup, the
        # waiter polls as one in another process or on another host would.
        isolated = (TallyStore(open_store(url)), TallyStore(open_store(url)))
        for key, label, stores in (
            ("threads", "2 threads, one store object", (shared, shared)),
            ("threads-2-clients", "2 threads, a store client each", clients),
            ("threads-2-clients-polling", "2 store clients, no in-process wakeup", isolated),
        ):
            cases.append(
                HandoffCase(
                    f"{kind.name}/{key}",
                    f"{kind.label}, {label}",
                    s.hold_s,
                    partial(handoff_threads, b, stores, n, s.hold_s),
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
            "Cloud stores: 'a store client each' is two open_store(url) calls (two SDK clients; "
            "their common namespace lets the release wake the waiter in-process); 'no in-process "
            "wakeup' hides the namespace, so the waiter polls as in another process or host.",
        ],
    )


# -- contention: processes queueing for one lock ---------------------------------------------------

#: How long a contending process holds the lock: 0, it calls unlock() as soon as lock() returns
#: (and lock() again as soon as unlock() returns), so the figures are the lock's own throughput.
CONTENTION_HOLD_S = 0.0
#: Between the "go" and the window's start: every child has read it before the window opens.
CONTENTION_LEAD_S = 0.2


@dataclass(frozen=True)
class ContentionVariant:
    key: str
    label: str
    #: What each child is told: ``{"mode": "filelock", "file": PATH}`` or
    #: ``{"mode": "prioritylock", "url": URL, "path": [a, b]}``.
    spec: Json


@dataclass
class ContentionChild:
    """One contending process's record of the window."""

    attempts_ns: list[int]  # lock() called
    acquired_ns: list[int]  # lock() returned
    released_ns: list[int]  # unlock() called
    cpu_s: float
    requests: dict[str, int]


@dataclass(frozen=True)
class ContentionResult:
    seconds: float
    per_process: list[int]
    switches: int  # consecutive acquisitions by different processes
    overlaps: int  # an acquisition before the previous holder's unlock() call: must be 0
    waits: Summary | None  # lock() call -> it returned, ms
    cpu_s: float  # all contending processes
    requests: dict[str, int]  # all contending processes, by kind
    load: float | None

    @property
    def acquisitions(self) -> int:
        return sum(self.per_process)


def _contention_variants(b: Bench) -> list[ContentionVariant]:
    flock_dir = b.root / "contention-filelock"
    flock_dir.mkdir()
    variants = [
        ContentionVariant(
            "filelock",
            "filelock.FileLock (same disk)",
            {"mode": "filelock", "file": str(flock_dir / "contended.lock")},
        )
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
            first.close()
            variants.append(
                ContentionVariant(key, label, {"mode": "prioritylock", "url": url, "path": path})
            )
    return variants


def _contention_children(
    variant: ContentionVariant, procs: int, seconds: float
) -> tuple[list[ContentionChild], float | None]:
    """Run the ``procs`` children of one variant through one window: their records, and the
    load average when the window opened. A child's stderr goes to a file, so a chatty child
    never blocks on a full pipe while it holds the lock."""
    with ExitStack() as stack:
        logs = [stack.enter_context(tempfile.TemporaryFile("w+")) for _ in range(procs)]
        children = [
            subprocess.Popen(
                [
                    sys.executable,
                    str(Path(__file__).resolve()),
                    "--child-contention",
                    json.dumps({**variant.spec, "index": i, "hold_s": CONTENTION_HOLD_S}),
                ],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=logs[i],
                text=True,
            )
            for i in range(procs)
        ]

        def failed(i: int, what: str) -> RuntimeError:
            children[i].wait(10)
            logs[i].seek(0)
            return RuntimeError(f"contention child {what}: {logs[i].read()[-2000:]}")

        try:
            for i, child in enumerate(children):
                assert child.stdout is not None
                if child.stdout.readline().strip() != "ready":
                    raise failed(i, "did not start")
            load = _load()
            start = time.monotonic_ns() + int(CONTENTION_LEAD_S * 1e9)
            end = start + int(seconds * 1e9)
            for child in children:
                assert child.stdin is not None
                child.stdin.write(f"go {start} {end}\n")
                child.stdin.flush()
            records: list[ContentionChild] = []
            for i, child in enumerate(children):
                out, _ = child.communicate(timeout=seconds + 60)
                if child.returncode != 0 or not out.startswith("result "):
                    raise failed(i, f"failed ({child.returncode})")
                records.append(ContentionChild(**json.loads(out[len("result ") :])))
        except BaseException:
            for child in children:
                if child.poll() is None:
                    child.kill()
                    child.communicate()
            raise
    return records, load


def contention_run(variant: ContentionVariant, procs: int, seconds: float) -> ContentionResult:
    """``procs`` processes loop lock() -> unlock() on one lock for ``seconds``, all starting at
    once; every acquisition is noted with ``time.monotonic_ns`` (system-wide)."""
    records, load = _contention_children(variant, procs, seconds)
    events = sorted(
        (acq, rel, i)
        for i, rec in enumerate(records)
        for acq, rel in zip(rec.acquired_ns, rec.released_ns, strict=True)
    )
    switches = sum(1 for x, y in itertools.pairwise(events) if x[2] != y[2])
    overlaps = sum(1 for x, y in itertools.pairwise(events) if y[0] < x[1])
    waits = [
        acq - att
        for rec in records
        for att, acq in zip(rec.attempts_ns, rec.acquired_ns, strict=True)
    ]
    requests: dict[str, int] = {}
    for rec in records:
        for k, v in rec.requests.items():
            requests[k] = requests.get(k, 0) + v
    return ContentionResult(
        seconds=seconds,
        per_process=[len(rec.acquired_ns) for rec in records],
        switches=switches,
        overlaps=overlaps,
        waits=summarize(waits, 1e6) if waits else None,
        cpu_s=sum(rec.cpu_s for rec in records),
        requests=requests,
        load=load,
    )


def child_contention(spec_json: str) -> int:
    """A child process of :func:`contention_run` (``--child-contention SPEC``): says "ready",
    waits for "go START END" (monotonic ns), then loops lock() -> unlock() until END."""
    spec = json.loads(spec_json)
    hold_s = float(spec["hold_s"])
    stats: StoreStats | None = None
    if spec["mode"] == "filelock":
        flock = filelock.FileLock(spec["file"])

        def acquire(timeout: float) -> bool:
            try:
                flock.acquire(timeout=timeout)
            except filelock.Timeout:
                return False
            return True

        release: Callable[[], object] = flock.release
        close: Callable[[], object] = flock.release
    else:
        store = open_store(spec["url"])
        stats = store.stats
        lock = LockBuilder().store(store).path(*spec["path"]).owner(f"proc-{spec['index']}").build()

        def acquire(timeout: float) -> bool:
            try:
                lock.lock(timeout=timeout)
            except LockTimeout:
                return False
            return True

        release = lock.unlock
        close = lock.close
    print("ready", flush=True)
    words = sys.stdin.readline().split()
    if len(words) != 3 or words[0] != "go":
        return 2
    start, end = int(words[1]), int(words[2])
    time.sleep(max(0.0, (start - time.monotonic_ns()) / 1e9))
    attempts: list[int] = []
    acquired: list[int] = []
    released: list[int] = []
    before = stats.snapshot() if stats is not None else {}
    cpu = time.process_time()
    clock = time.monotonic_ns
    while True:
        t0 = clock()
        if t0 >= end or not acquire((end - t0) / 1e9):
            break
        t1 = clock()
        if hold_s:
            time.sleep(hold_s)
        t2 = clock()
        release()
        attempts.append(t0)
        acquired.append(t1)
        released.append(t2)
    cpu = time.process_time() - cpu
    after = stats.snapshot() if stats is not None else {}
    close()
    result = ContentionChild(
        attempts_ns=attempts,
        acquired_ns=acquired,
        released_ns=released,
        cpu_s=cpu,
        requests={k: after[k] - before[k] for k in after if k != "total" and after[k] != before[k]},
    )
    sys.stdout.write("result " + json.dumps(asdict(result)) + "\n")
    sys.stdout.flush()
    return 0


def section_contention(b: Bench) -> Section:
    s = b.sizes
    variants = _contention_variants(b)
    results = {v.key: contention_run(v, s.contention_procs, s.contention_s) for v in variants}
    ref = results["filelock"].acquisitions / s.contention_s
    table: list[list[str]] = []
    rows: list[Json] = []
    for v in variants:
        r = results[v.key]
        rate = r.acquisitions / r.seconds
        counts = sorted(r.per_process)
        per_acq = {k: n / r.acquisitions for k, n in r.requests.items()} if r.acquisitions else {}
        waits = r.waits
        table.append(
            [
                v.label,
                fmt_num(rate),
                f"{rate / ref:.2f}x" if ref else "-",
                fmt_num(r.switches / r.seconds),
                f"{counts[0]} / {statistics.median(counts):g} / {counts[-1]}",
                "-" if waits is None else f"{fmt_num(waits.median)} / {fmt_num(waits.p99)}",
                "-" if waits is None else fmt_num(waits.max),
                fmt_counts({k: round(x, 2) for k, x in per_acq.items()}) if per_acq else "-",
                f"{100 * r.cpu_s / r.seconds:.0f}",
                str(r.overlaps),
            ]
        )
        rows.append(
            {
                "variant": v.key,
                "label": v.label,
                "processes": s.contention_procs,
                "hold_s": CONTENTION_HOLD_S,
                "seconds": r.seconds,
                "acquisitions": r.acquisitions,
                "acquisitions_per_s": rate,
                "vs_filelock": rate / ref if ref else None,
                "switches": r.switches,
                "switches_per_s": r.switches / r.seconds,
                "per_process": r.per_process,
                "per_process_min": counts[0],
                "per_process_median": statistics.median(counts),
                "per_process_max": counts[-1],
                "wait_ms": None if waits is None else asdict(waits),
                "requests": r.requests,
                "requests_per_acquisition": per_acq,
                "cpu_s": r.cpu_s,
                "cpu_percent_of_one_core": 100 * r.cpu_s / r.seconds,
                "overlaps": r.overlaps,
                "load": r.load,
            }
        )
    notes = [
        f"{s.contention_procs} processes, one lock, {s.contention_s:g} s each variant, all "
        "starting at once; each loops lock(timeout=rest of the window) -> unlock() with no hold "
        f"({CONTENTION_HOLD_S:g} s) and no pause, one Lock (FileLock) object per process, default "
        "settings (prioritylock poll_interval 1 s; filelock polls every 50 ms).",
        "switches/s: consecutive acquisitions by different processes. per process: acquisitions "
        "of the least / median / busiest process. wait: lock() call -> it returned, over every "
        "acquisition (ms). CPU: all the contending processes together, % of one core. overlaps: "
        "acquisitions noted before the previous holder's unlock() call (must be 0).",
        f"The machine has {os.cpu_count()} cores: the {s.contention_procs} processes also "
        "contend for CPU.",
    ]
    if "local" not in results:
        notes.append("LocalStore not picked (--stores): filelock alone.")
    return Section(
        name="contention",
        title=f"Contention: {s.contention_procs} processes x 1 lock, lock() -> unlock() loop",
        headers=[
            "variant",
            "acq/s",
            "vs filelock",
            "switches/s",
            "per process min/med/max",
            "wait p50/p99 ms",
            "max ms",
            "requests/acq",
            "CPU %",
            "overlaps",
        ],
        table=table,
        rows=rows,
        notes=notes,
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
    inner = open_store(b.url(kind))
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
    for kind in b.store_kinds:
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
    store = open_store(b.url(MEMORY))
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


def _components(b: Bench, profiled: Sequence[ProfileLine]) -> list[Component]:
    """What the pieces of a same-Lock memory-store try_lock()+unlock() cost, each timed alone
    (no profiler), times how often the profiled cycle (``profiled``) called each. Reaches into
    library internals; if they moved, the caller skips the table."""
    lease_mod: Any = importlib.import_module("prioritylock._lease")
    store = open_store(b.url(MEMORY))
    lock = b.builder(store, b.path("components"), "bench").build()
    lock.try_lock()
    found = store.read(lock.key)
    lock.unlock()
    assert found is not None
    lease = lease_mod.decode(lock.key, found.data, name=lock.key)
    version = [found.version]

    def replace() -> None:
        version[0] = store.replace("bench/components-scratch", found.data, version[0])

    def calls(suffix: str) -> float:
        """Calls per profiled cycle of the function whose name ends with ``suffix``."""
        return sum(p.calls_per_cycle for p in profiled if p.function.endswith(suffix))

    version[0] = store.create("bench/components-scratch", found.data)
    pieces: list[tuple[str, float, Callable[[], object]]] = [
        (
            "encode (lease -> JSON bytes)",
            calls("_lease.py:" + _line(lease_mod.encode) + "(encode)"),
            lambda: lease_mod.encode(lease),
        ),
        (
            "Lease.rewritten (a copy + new nonce)",
            calls("(rewritten)"),
            lease.rewritten,
        ),
        ("new_lock_id (keyed BLAKE2b)", calls("(new_lock_id)"), lease_mod.new_lock_id),
        (
            "LockInfo.from_lease (only with a listener or receiver)",
            calls("(from_lease)"),
            lambda: LockInfo.from_lease(lease),
        ),
        (
            "threading.Event() (only when a lock() call waits)",
            calls("threading.py:" + _line(threading.Event.__init__) + "(__init__)"),
            threading.Event,
        ),
        ("MemoryStore.replace", calls("_memory.py:" + _line(store.replace) + "(replace)"), replace),
        (
            "decode (a first read whose document changed or is not cached in the process)",
            calls("(decode)"),
            lambda: lease_mod.decode(lock.key, found.data, name=lock.key),
        ),
    ]
    n = max(1000, b.sizes.profile_cycles)
    out: list[Component] = []
    for name, per_cycle, fn in pieces:
        for _ in range(100):
            fn()
        started = time.perf_counter_ns()
        for _ in range(n):
            fn()
        out.append(Component(name, per_cycle, (time.perf_counter_ns() - started) / n / 1e3))
    return out


def _line(fn: Callable[..., object]) -> str:
    """The line a function starts on, as cProfile names it."""
    code = getattr(getattr(fn, "__func__", fn), "__code__", None)
    return str(code.co_firstlineno) if code is not None else "?"


def section_profile(b: Bench) -> Section:
    s = b.sizes
    table: list[list[str]] = []
    rows: list[Json] = []
    notes: list[str] = []
    memory_lines: list[ProfileLine] = []
    for key, label, kind, url in _local_stores(b):
        cycles = s.profile_cycles_slow if kind.slow else s.profile_cycles
        lock = b.builder(open_store(url), b.path("profile"), "bench").build()
        lines = _profile_lines(_profile_cycles(lock, cycles), cycles)
        if kind is MEMORY:
            memory_lines = lines
        own = sorted(lines, key=lambda p: p.own_us, reverse=True)[: 6 if kind.slow else 12]
        table.append([f"{label}: top own time ({cycles} cycles under cProfile)", "", "", ""])
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
            table.append([f"{label}: library functions, cumulative", "", "", ""])
            for p in watched:
                table.append([f"  {p.function}", f"{p.calls_per_cycle:.1f}", "", fmt_num(p.cum_us)])
        rows.append(
            {
                "store": key,
                "cycles": cycles,
                "top_own": [asdict(p) for p in own],
                "library_cumulative": [asdict(p) for p in watched],
            }
        )
        _pyinstrument(lock, cycles, HERE / "results" / f"profile-{key}.txt", notes)
    hb = _heartbeat_wakeup_cost(b)
    rows.append({"heartbeat_wakeup": {k: asdict(v) for k, v in hb.items()}})
    try:
        parts = _components(b, memory_lines)
    except (ImportError, AttributeError, TypeError) as exc:
        notes.append(f"component timings skipped: library internals changed ({exc})")
    else:
        table.append(
            [
                "Pieces of the MemoryStore cycle, timed alone (µs; calls: from the profile)",
                "",
                "per call",
                "per cycle",
            ]
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


def cpu_times() -> list[int] | None:
    """The machine's CPU time counters (Linux ``/proc/stat``: user nice system idle iowait irq
    softirq steal ...), in clock ticks; None elsewhere."""
    try:
        with open("/proc/stat", encoding="ascii") as f:
            first = f.readline().split()
    except OSError:
        return None
    return [int(x) for x in first[1:]] if first and first[0] == "cpu" else None


def steal_percent(before: list[int] | None, after: list[int] | None) -> float | None:
    """% of the CPU time between two :func:`cpu_times` the hypervisor gave to other guests."""
    if before is None or after is None or len(before) < 8 or len(after) < 8:
        return None
    delta = [a - b for a, b in zip(after[:8], before[:8], strict=True)]
    total = sum(delta)
    return 100 * delta[7] / total if total > 0 else None


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


def emulator_line(m: Json) -> str:
    started = ", ".join(f"{n} {e['startup_s']:g} s" for n, e in m.get("emulators", {}).items())
    versions = ", ".join(f"{k} {v}" for k, v in m.get("emulator_versions", {}).items())
    return f"emulators up in: {started} | {versions}"


# -- main ------------------------------------------------------------------------------------------

SECTIONS: dict[str, Callable[[Bench], Section]] = {
    "overhead": section_overhead,
    "cloud": section_cloud,
    # Before requests, whose table counts the requests of these same preemption runs.
    "preemption": section_preemption,
    "requests": section_requests,
    "handoff": section_handoff,
    "contention": section_contention,
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


@contextmanager
def _emulators(bench: Bench, kinds: Sequence[StoreKind], sections: Sequence[str]) -> Iterator[None]:
    """The emulators of the picked cloud stores, running (and their store URLs' environment set)
    while the ``with`` block runs, if a section that uses them is picked; stopped however it
    ends. SIGTERM unwinds like Ctrl-C, so the servers are stopped then too."""
    names = [k.emulator for k in kinds if k.emulator is not None]
    if not names or not set(sections) & CLOUD_SECTIONS:
        yield
        return

    def terminate(signum: int, _frame: object) -> None:
        raise SystemExit(128 + signum)

    previous = signal.signal(signal.SIGTERM, terminate)
    work = bench.root / "emulators"
    work.mkdir()
    try:
        print(f"starting emulators: {', '.join(names)}", flush=True)
        with _servers.running(names, work) as running:
            env: dict[str, str | None] = {}
            for emulator in running.values():
                env.update(emulator.env())
            bench.emulators = running
            with _servers.environment(env):
                yield
            print("stopping emulators", flush=True)
    finally:
        bench.emulators = {}
        signal.signal(signal.SIGTERM, previous)


def _run_sections(
    bench: Bench, wanted: Sequence[str], machine: Json, done: dict[str, Section]
) -> None:
    machine["emulators"] = {
        name: {"startup_s": round(e.startup_s, 2), "endpoint": e.endpoint}
        for name, e in bench.emulators.items()
    }
    if bench.emulators:
        machine["emulator_versions"] = _servers.versions()
        print(emulator_line(machine), flush=True)
    for name, run in SECTIONS.items():
        if name in wanted:
            load = _load()
            cpu = cpu_times()
            t0 = time.monotonic()
            section = done[name] = run(bench)
            section.elapsed_s = time.monotonic() - t0
            section.load = load
            section.steal = steal_percent(cpu, cpu_times())
            print()
            print(section.render(), flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="small sizes: a smoke test (< 60 s)")
    parser.add_argument("--json", type=Path, default=DEFAULT_JSON, help="where to write results")
    parser.add_argument("--profile", action="store_true", help="also profile the cycle")
    parser.add_argument(
        "--sections",
        default="",
        help=f"comma-separated subset of {','.join(SECTIONS)} (default: all but profile)",
    )
    parser.add_argument(
        "--stores",
        default="",
        help=f"comma-separated subset of {','.join(k.name for k in STORE_KINDS)} (default: all)",
    )
    parser.add_argument("--dir", default=None, help="parent of the scratch dir (default: $TMPDIR)")
    parser.add_argument("--child-handoff", help=argparse.SUPPRESS)
    parser.add_argument("--child-contention", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child_handoff:
        return child_handoff(args.child_handoff)
    if args.child_contention:
        return child_contention(args.child_contention)

    wanted = [s.strip() for s in args.sections.split(",") if s.strip()] or [
        s for s in SECTIONS if s != "profile" or args.profile
    ]
    unknown = sorted(set(wanted) - set(SECTIONS))
    if unknown:
        parser.error(f"unknown sections: {', '.join(unknown)}")
    picked = {s.strip() for s in args.stores.split(",") if s.strip()}
    unknown = sorted(picked - {k.name for k in STORE_KINDS})
    if unknown:
        parser.error(f"unknown stores: {', '.join(unknown)}")
    kinds = tuple(k for k in STORE_KINDS if not picked or k.name in picked)
    started = time.monotonic()
    with _scratch(args.dir) as root:
        bench = Bench(sizes=QUICK if args.quick else FULL, root=root, kinds=kinds)
        machine = machine_info(root)
        print(f"prioritylock benchmarks{' (quick)' if args.quick else ''}")
        print(machine_line(machine), flush=True)
        done: dict[str, Section] = {}
        try:
            with _emulators(bench, kinds, wanted):
                _run_sections(bench, wanted, machine, done)
        except EmulatorError as exc:
            print(f"error: {exc}", file=sys.stderr)
            print("(install it, or leave its store out with --stores)", file=sys.stderr)
            return 2
    elapsed = time.monotonic() - started
    machine["loadavg_end"] = os.getloadavg() if hasattr(os, "getloadavg") else None
    payload: Json = {
        "machine": machine,
        "quick": args.quick,
        "stores": [k.name for k in kinds],
        "sizes": asdict(bench.sizes),
        "elapsed_s": round(elapsed, 1),
        "sections": {
            n: {
                "title": s.title,
                "elapsed_s": round(s.elapsed_s, 1),
                "load": s.load,
                "steal_percent": s.steal,
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
