"""What ``run.py``'s sections share: how much to measure, the stores under test, the run's context.

- :class:`Sizes` (:data:`FULL`, and :data:`QUICK` for ``--quick``);
- :class:`StoreKind` and :data:`STORE_KINDS`: every store a section can loop over;
- :class:`Bench`: the run's sizes, scratch directory, picked stores and running emulators, and
  fresh namespaces, lock paths and builders on them;
- :func:`lock_cycle`, :func:`alock_cycle` and :func:`local_stores`, used by more than one section.
"""

from __future__ import annotations

import itertools
import multiprocessing
import threading
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from _servers import Emulator

from prioritylock import AsyncLock, Lock, LockBuilder
from prioritylock.stores import ObjectStore

HERE = Path(__file__).resolve().parent

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
            if child.is_alive():
                child.kill()


def local_stores(b: Bench) -> list[tuple[str, str, StoreKind, str]]:
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
