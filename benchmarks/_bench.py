"""What ``run.py``'s sections share: :class:`Sizes` (full, ``--quick``), the stores under test
(:data:`STORE_KINDS`), the run's context :class:`Bench` (fresh namespaces, lock paths, builders),
cycles and processes, :class:`StoreTimer` (time inside store calls) and :class:`TallyStore`
(requests per client)."""

from __future__ import annotations

import asyncio
import itertools
import multiprocessing
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import _servers
from _harness import T
from _servers import Emulator

from prioritylock import AsyncLock, Lock, LockBuilder
from prioritylock.stores import ObjectStore
from prioritylock.testing import DelegatingStore
from tools import sdk

HERE = Path(__file__).resolve().parent

# -- sizes -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Sizes:
    """How much to measure (the defaults: a full run). Counts are targets; budgets cap them."""

    cycles: int = 20_000  # per cycle variant on the memory store and for the baselines
    cycles_slow: int = 2_000  # per cycle variant on stores that write to disk or network
    budget_s: float = 6.0  # wall-clock cap per cycle variant
    rounds: int = 10  # variants are interleaved in this many rounds, so noise hits all alike
    warmup: int = 200
    handoffs: int = 50  # rounds of each push case: request -> told, release -> next holder
    preemptions: int = 30
    waiter_s: float = 12.0  # how long the blocked waiter waits
    waiter_settle_s: float = 2.0  # steady-state reads/s are counted after this
    cloud_iterations: int = 200  # per cloud store: rounds of raw GET and PUT and lock operations
    cloud_budget_s: float = 18.0  # wall-clock cap per cloud store
    contention_s: float = 10.0  # the window each contention variant runs for
    contention_procs: int = 8  # processes contending for one lock


FULL = Sizes()
#: ``--quick``: a smoke test.
QUICK = Sizes(2_000, 200, 1.5, 4, 50, 16, 6, 3.0, 1.5, 25, 2.5, 2.0, 8)


# -- stores under test -----------------------------------------------------------------------------


@dataclass(frozen=True)
class StoreKind:
    """One kind of store: ``memory``, ``local`` or a cloud store on a running ``emulator`` (a
    name of ``tools.emulators``). ``Bench.url(kind)`` names a fresh, empty namespace of it."""

    name: str
    label: str
    emulator: str | None = None

    @property
    def slow(self) -> bool:
        """Writes to disk or network: fewer cycles."""
        return self.name != "memory"

    @property
    def server(self) -> bool:
        """Redis, ZooKeeper or etcd: a coordination server, not an object store."""
        return self.name in _servers.SERVERS


_CLOUD = {"s3-moto": "S3 (moto)", "s3-seaweedfs": "S3 (SeaweedFS)", "gcs": "GCS (fake-gcs)"}
_CLOUD |= {"azure": "Azure (Azurite)", "redis": "Redis", "zookeeper": "ZooKeeper", "etcd": "etcd"}
STORE_KINDS: tuple[StoreKind, ...] = (
    StoreKind("memory", "MemoryStore"),
    StoreKind("local", "LocalStore"),
    *(StoreKind(name, label, name) for name, label in _CLOUD.items()),
)
#: The query that makes a LocalStore URL skip fsync (``LocalStore(durable=False)``).
NONDURABLE = "?durable=false"


# -- the run's context -----------------------------------------------------------------------------


@dataclass
class Bench:
    sizes: Sizes
    root: Path  # a temp dir on the disk under test; LocalStore and filelock both live here
    kinds: tuple[StoreKind, ...] = STORE_KINDS[:2]  # the stores picked with --stores
    emulators: dict[str, Emulator] = field(default_factory=dict)  # running, by name
    _keys: Iterator[int] = field(default_factory=itertools.count)
    #: Results a section measures once and another reuses (the preemption runs), by key.
    shared: dict[str, Any] = field(default_factory=dict)
    _buckets: dict[str, str] = field(default_factory=dict)

    @property
    def store_kinds(self) -> tuple[StoreKind, ...]:
        """Every picked store that can be opened now, the cloud ones (emulator running) last; the
        servers (Redis, ZooKeeper, etcd) are the ``native`` section's alone."""
        cloud = tuple(k for k in self.kinds if k.emulator in self.emulators and not k.server)
        return tuple(k for k in self.kinds if k.emulator is None) + cloud

    def url(self, kind: StoreKind) -> str:
        """A fresh, empty namespace of ``kind`` as a store URL."""
        if kind.name == "memory":
            return f"memory://bench-{uuid.uuid4().hex}"
        if kind.emulator is None:
            return (self.root / f"local-{uuid.uuid4().hex[:12]}").as_uri()
        e, prefix = self.emulators[kind.emulator], f"bench-{uuid.uuid4().hex[:12]}"
        return _servers.namespace_url(e, lambda: self.bucket(e), prefix)

    def bucket(self, e: Emulator) -> str:
        """The run's bucket (container) on the emulator ``e``, made on first use."""
        if e.name not in self._buckets:
            self._buckets[e.name] = sdk.create_bucket(e.name, e.endpoint, e.key)
        return self._buckets[e.name]

    def path(self, what: str) -> tuple[str, str]:
        """A fresh lock path (two segments, so LocalStore files sit one directory down)."""
        return ("bench", f"{what}-{next(self._keys)}")

    def builder(self, store: ObjectStore, path: tuple[str, str], owner: str) -> LockBuilder:
        return LockBuilder().store(store).path(*path).owner(owner)


def lock_cycle(lock: Lock) -> None:
    """One uncontended ``try_lock()`` + ``unlock()``; a refused free lock is an error."""
    if not lock.try_lock():
        raise RuntimeError(f"uncontended try_lock() failed on {lock.key}")
    lock.unlock()


async def alock_cycle(lock: AsyncLock) -> None:
    """:func:`lock_cycle`, awaited."""
    if not await lock.try_lock():
        raise RuntimeError(f"uncontended try_lock() failed on {lock.key}")
    await lock.unlock()


def close_loop(loop: asyncio.AbstractEventLoop) -> None:
    """Stop what the AsyncLocks left running on ``loop`` (the scheduler's task), then close it."""

    async def cancel_all() -> None:
        pending = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)

    loop.run_until_complete(cancel_all())
    loop.run_until_complete(loop.shutdown_default_executor())
    loop.close()


def processes(target: Callable[..., None], n: int, *args: Any, timeout: float) -> list[Any]:
    """``target(*args, barrier, results)`` in ``n`` new processes (spawned: no threads or locks
    inherited), released together at ``barrier`` once all are ready: what each ``results.put``
    (in order of arrival), each waited for at most ``timeout`` s after the start."""
    ctx = multiprocessing.get_context("spawn")
    barrier, results = ctx.Barrier(n + 1), ctx.Queue()
    children = [ctx.Process(target=target, args=(*args, barrier, results)) for _ in range(n)]
    for child in children:
        child.start()
    try:
        barrier.wait(timeout=120)
        return [results.get(timeout=timeout) for _ in children]
    except threading.BrokenBarrierError:
        raise RuntimeError("a child process failed before the start (traceback above)") from None
    finally:
        for child in children:
            child.join(timeout=10)
            child.kill()  # if still alive (a no-op once it exited)


def local_stores(b: Bench) -> list[tuple[str, str, StoreKind, str]]:
    """(key, label, kind, fresh URL) of the picked memory and local stores, the LocalStore
    twice: durable (the default) and ``durable=false``."""
    stores = [(k.name, k.label, k, b.url(k)) for k in b.kinds if k.emulator is None]
    for kind in (k for k in b.kinds if k.name == "local"):
        nondurable = b.url(kind) + NONDURABLE
        stores.append(("local-nondurable", "LocalStore durable=false", kind, nondurable))
    return stores


# -- store wrappers: DelegatingStores (the bare store's stats, capabilities and lock choices) --


class StoreTimer(DelegatingStore):
    """Adds up the time spent in its store calls on any thread (a lock makes a network store's
    on worker threads): an operation's time, one at a time, splits into the store's and ours."""

    def __init__(self, inner: ObjectStore) -> None:
        super().__init__(inner)
        self._spent, self._spent_lock = 0, threading.Lock()

    def spent_ns(self) -> int:
        """Time spent inside this store's calls so far."""
        return self._spent

    def _forward(self, op: str, key: str, call: Callable[[], T]) -> T:
        t0 = time.perf_counter_ns()
        try:
            return call()
        finally:
            with self._spent_lock:
                self._spent += time.perf_counter_ns() - t0


#: The tally's name for each kind of request.
_KINDS = {"read": "reads", "read_if_changed": "reads", "create": "creates", "replace": "replaces"}
_KINDS |= {"replace_unsynced": "replaces", "delete": "deletes", "list": "lists"}


class TallyStore(DelegatingStore):
    """Notes each request with the label of the client it came through: each client's locks
    are built on its own :meth:`client` view, whichever thread then makes the calls (a lock
    makes a network store's on worker threads). The views share one identity (``namespace``),
    so their locks hear each other's writes as locks of one process do."""

    def __init__(self, inner: ObjectStore, label: str = "other", of: TallyStore | None = None):
        super().__init__(inner)
        self.label, self._root = label, of or self
        self._lock: threading.Lock = of._lock if of else threading.Lock()
        self.events: list[tuple[str, str, float]] = of.events if of else []  # (label, kind, time)

    def client(self, label: str) -> TallyStore:
        """A view whose requests are labelled ``label``."""
        return TallyStore(self.inner, label, self._root)

    def _forward(self, op: str, key: str, call: Callable[[], T]) -> T:
        with self._lock:
            self.events.append((self.label, _KINDS[op], time.monotonic()))
        return call()

    def counts(self, label: str | None, since: float, until: float) -> dict[str, int]:
        """Requests by kind made through views labelled ``label`` (None: all) in [since, until]."""
        out = dict.fromkeys(("reads", "creates", "replaces", "deletes", "lists"), 0)
        with self._lock:
            events = list(self.events)
        out.update(
            Counter(k for who, k, at in events if since <= at <= until and label in (None, who))
        )
        return out

    @property
    def namespace(self) -> str:
        return f"tally-{id(self._root)}"
