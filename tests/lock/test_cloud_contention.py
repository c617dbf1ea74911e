"""Contention on every cloud store: N clients race on one lock against a real server.

For each cloud store kind (moto S3, SeaweedFS S3, fake-gcs-server, Azurite; narrowed by
``PRIORITYLOCK_STORES``), N threads each open their *own* store client (their own SDK connection
pool, from ``store_factory``) and their own :class:`~prioritylock.Lock` on one lease document,
and loop for a bounded time: ``lock(timeout=...)`` → hold a few milliseconds → ``unlock()``.

Every critical section is recorded with ``time.monotonic_ns`` readings taken inside the held
region, and the lock's fencing token. The checks (the checker of ``tests/test_stress.py``): an
"inside" counter on entry and exit; afterwards, no two sections overlap; fences strictly increase
in entry order, with no duplicates and no gaps (no lease expires here: lease timeout 30 s, holds of
milliseconds, so every change of holder is a recorded acquisition); at least
:data:`MIN_ACQUISITIONS` acquisitions; and the document, read with a clean client at the end, is
free at the last fence. The figures (acquisitions, per second, store requests per acquisition)
are printed: run with ``pytest -s`` to see them.

moto's conditional PUT is not atomic by design (docs: EMULATORS): a CI run on a loaded machine saw
two winners here. tools.emulators serialises its writes, so its run shows the lock's behaviour on
S3 semantics; SeaweedFS's run is the proof of atomicity on an S3 API as it ships.
"""

from __future__ import annotations

import contextlib
import random
import statistics
import threading
import time
from collections.abc import Iterator

import pytest

from prioritylock import Lock, LockTimeout
from prioritylock.stores import ObjectStore
from tests._soak import size
from tests.conftest import CLOUD_KINDS, StoreFactory, selected_kinds
from tests.lock.helpers import make
from tests.test_stress import Occupancy, Section, check_sections

pytestmark = [pytest.mark.slow, pytest.mark.soak, pytest.mark.usefixtures("driver")]

PATH = "contention/one-lock"
LEASE_TIMEOUT = 30.0
POLL_INTERVAL = 0.03
MAX_HOLD = 0.005  # seconds: each holder sleeps a random 1-5 ms (the workload, not synchronisation)
# Progress, not speed (the contention benchmark measures speed): a livelock makes 0-2. Alone, 8
# fair clients make 36-55 in the window on moto and Azurite; a CI worker at load 4-11 made 15-19.
MIN_ACQUISITIONS = 10

# Clients per store kind, and how long they race. SeaweedFS is slow under contention on one key
# (docs: EMULATORS): fewer clients there.
CLIENTS = {
    "s3-moto": 8,
    "s3-seaweedfs": 6,
    "gcs": 8,
    "azure": 8,
    "redis": 8,
    "zookeeper": 8,
    "etcd": 8,
}
RUN_SECONDS = size(5.0, 60.0)
# A lock() call may overrun its timeout by one slow request: how long to wait for stragglers.
JOIN_GRACE = 5.0


@pytest.fixture(params=selected_kinds(CLOUD_KINDS))
def store_kind(request: pytest.FixtureRequest) -> str:
    """The cloud kinds only (overrides the suite-wide fixture that also has memory and local)."""
    return str(request.param)


def _lock(store: ObjectStore, owner: str) -> Lock:
    """A client of the test's driver (``Lock``, or ``AsyncLock`` behind its sync face)."""
    return make(store, PATH, owner, lease_timeout=LEASE_TIMEOUT, poll_interval=POLL_INTERVAL)


@contextlib.contextmanager
def _closing(locks: list[Lock]) -> Iterator[None]:
    try:
        yield
    finally:
        for lock in locks:
            with contextlib.suppress(Exception):
                lock.close()


@pytest.mark.timeout(RUN_SECONDS + 60)
def test_clients_racing_on_one_lock(store_kind: str, store_factory: StoreFactory) -> None:
    clients = CLIENTS[store_kind]
    stores = [store_factory() for _ in range(clients)]
    locks = [_lock(store, f"client-{i}") for i, store in enumerate(stores)]
    occupancy = Occupancy()
    records: list[list[Section]] = [[] for _ in range(clients)]
    timeouts = [0] * clients
    errors: list[tuple[int, BaseException]] = []
    errors_lock = threading.Lock()
    start = threading.Barrier(clients + 1)
    end_ns = [0]  # set by the main thread before it passes the barrier

    def contend(index: int) -> None:
        lock, owner, mine = locks[index], f"client-{index}", records[index]
        rng = random.Random(index)
        try:
            start.wait()
            while True:
                remaining = (end_ns[0] - time.monotonic_ns()) / 1e9
                if remaining <= 0:
                    break
                try:
                    lock.lock(timeout=remaining)
                except LockTimeout:
                    timeouts[index] += 1
                    continue
                enter = time.monotonic_ns()
                occupancy.enter(owner)
                fence = lock.fencing_token
                assert lock.is_current_owner(), f"{owner}: holds the lock but says it does not"
                time.sleep(rng.uniform(0.001, MAX_HOLD))  # the workload
                occupancy.exit(owner)
                exit_ = time.monotonic_ns()
                lock.unlock()
                mine.append(Section(enter, exit_, fence, owner))
        except BaseException as exc:
            with errors_lock:
                errors.append((index, exc))
            start.abort()

    with _closing(locks):
        for store in stores:
            store.stats.reset()
        threads = [
            threading.Thread(target=contend, args=(i,), name=f"contend-{i}", daemon=True)
            for i in range(clients)
        ]
        for thread in threads:
            thread.start()
        began_ns = time.monotonic_ns()
        end_ns[0] = began_ns + int(RUN_SECONDS * 1e9)
        with contextlib.suppress(threading.BrokenBarrierError):
            start.wait(timeout=10)
        join_by = time.monotonic() + RUN_SECONDS + JOIN_GRACE
        for thread in threads:
            thread.join(timeout=max(0.0, join_by - time.monotonic()))
        finished_ns = time.monotonic_ns()
        stuck = [t.name for t in threads if t.is_alive()]
        assert not stuck, f"{len(stuck)} clients did not finish: {stuck}"
    assert not errors, f"{len(errors)} clients raised; first: {errors[:3]!r}"
    assert not occupancy.violations, (
        f"{len(occupancy.violations)} mutual-exclusion violations: {occupancy.violations[:5]}"
    )

    sections = [s for mine in records for s in mine]
    assert len(sections) >= MIN_ACQUISITIONS, (
        f"{store_kind}: only {len(sections)} acquisitions in {RUN_SECONDS} s"
    )
    fences = check_sections(sections)

    inspector = store_factory()
    info = _lock(inspector, "inspector").info()
    assert info is not None
    assert not info.held, f"the lock ends held: {info}"
    assert info.fence == fences[-1]
    assert info.last_event == "released"

    seconds = (finished_ns - began_ns) / 1e9
    requests = [store.stats.snapshot() for store in stores]
    total = sum(r["total"] for r in requests)
    kinds = {k: sum(r[k] for r in requests) for k in ("reads", "creates", "replaces", "deletes")}
    per_client = [len(mine) for mine in records]
    print(
        f"\n[{store_kind}, {clients} clients] {len(sections)} acquisitions in {seconds:.2f} s"
        f" = {len(sections) / seconds:.1f}/s; {total} requests = "
        f"{total / len(sections):.1f} per acquisition ({kinds}); per client min/median/max ="
        f" {min(per_client)}/{statistics.median(per_client):g}/{max(per_client)};"
        f" lock() timeouts at the end: {sum(timeouts)}"
    )
