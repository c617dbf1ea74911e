"""Notices: a write through any lock of the process tells the other locks of the process on the
same document at once (``prioritylock._wake``), on both drivers, on the stores of one machine;
a write by another process on the same local directory tells them through the file system
(``LocalStore.watch_key``), and a write by another process on the same Redis or ZooKeeper tells
them through its pub/sub channel or its watches (``RedisStore.watch_key``,
``ZooKeeperStore.watch_key``). The lease (60 s) and cleanup window (45 s) are long, the holder's
watch reads 30 s apart and the waiters' polls slow, so without the notice each of these would
take seconds."""

from __future__ import annotations

import functools
import multiprocessing
import sys
import threading
import time
from collections.abc import Callable, Iterator
from multiprocessing.connection import Connection
from typing import Any

import pytest

from prioritylock import FakeClock, Heartbeat, Lock, signals
from prioritylock import _flows as flows_module
from prioritylock._wake import BRIEF_STREAK, GRACE, NOTICES, ThreadWaiter
from prioritylock.stores import LocalStore, ObjectStore
from prioritylock.stores._base import KeyWatcher
from prioritylock.testing import DelegatingStore
from tests.conftest import CLOUD_KINDS, LOCAL_KINDS, StoreFactory, selected_kinds
from tests.lock.helpers import Recorder, make, receiving

pytestmark = [pytest.mark.timeout(60), pytest.mark.usefixtures("driver", "notices")]

#: How soon a notice must arrive (a watch read or a poll would take seconds here).
AT_ONCE = 0.05

SLOW: dict[str, Any] = {
    "lease_timeout": 60,
    "cleanup_timeout": 45,  # the watch interval (30 s) fits in it (the builder warns otherwise)
    "waiting_timeout": 20,
    "poll_interval": 30,
    "watch_interval": 30,
}


@pytest.fixture
def store(request: pytest.FixtureRequest, local_store_kind: str) -> Iterator[ObjectStore]:
    factory: StoreFactory = request.getfixturevalue(f"{local_store_kind}_store_factory")
    opened = factory()
    yield opened
    opened.close()


class _SlowPolls(flows_module.Backoff):
    """Every pause of a waiter as long as its cap (the poll interval), from the first."""

    def next(self) -> float:
        return self._cap


def _locked(store: ObjectStore, owner: str, priority: int, **opts: Any) -> Lock:
    return make(store, owner=owner, priority=priority, **SLOW, **opts)


class _TimedRecorder(Recorder):
    """Also keeps when the cleanup notice came (monotonic: the same clock in every process)."""

    told_at = 0.0

    def on_cleanup_notification(self, notice: Any) -> None:
        self.told_at = time.monotonic()
        super().on_cleanup_notification(notice)


class Peer:
    """The other client of a lock test: another lock of this process, on a thread; or a lock in
    another process on the same directory (file-system notices), a ``Lock`` there."""

    #: How soon the holder must hear of a request, and a waiter take a released lock.
    told_within = AT_ONCE
    handed_within = 1.0

    def __init__(self, store: ObjectStore) -> None:
        self._store = store
        self._lock: Lock | None = None
        self._outcome: list[bool] = []
        self._done = threading.Event()
        self._versions: dict[str, str] = {}

    def hold(self, owner: str) -> None:
        self._lock = _locked(self._store, owner, 1)
        assert self._lock.try_lock()

    def request(self, owner: str, priority: int) -> float:
        """Ask for the lock (a preempting ``try_lock`` waits for the handover); return the time
        it began."""
        self._lock = lock = _locked(self._store, owner, priority)

        def ask() -> None:
            self._outcome.append(lock.try_lock())
            self._done.set()

        started = time.monotonic()
        threading.Thread(target=ask, daemon=True).start()
        return started

    def outcome(self) -> bool:
        """Whether the request got the lock."""
        assert self._done.wait(10), "the request did not end"
        return self._outcome[0]

    def release(self) -> float:
        """Unlock; return the time just before."""
        assert self._lock is not None
        released = time.monotonic()
        self._lock.unlock()
        return released

    def flood(self, writes: int) -> None:
        """``writes`` writes to 100 other keys of the lock's directory (``jobs/``)."""
        versions, store = self._versions, self._store
        assert isinstance(store, LocalStore)
        for i in range(writes):
            key = f"jobs/other-{i % 100}"
            if key not in versions:
                versions[key] = store.create(key, b"0")
            versions[key] = store.replace_unsynced(key, b"1", versions[key])

    def touch(self, key: str) -> None:
        found = self._store.read(key)
        assert found is not None
        self._store.replace(key, b"touched", found.version)

    def close(self) -> None:
        pass


def _peer_process(open_store: Callable[[], ObjectStore], conn: Connection) -> None:
    """In another process: run a :class:`Peer`'s commands on the store ``open_store`` opens."""
    peer = Peer(open_store())
    while (command := conn.recv()) is not None:
        op, *args = command
        if op == "request":
            conn.send(peer.request(*args))
            conn.send(peer.outcome())
        else:
            conn.send(getattr(peer, op)(*args))


def _opener(store: ObjectStore) -> Callable[[], ObjectStore]:
    """How another process opens a store on what ``store`` addresses (picklable)."""
    if isinstance(store, LocalStore):
        return functools.partial(LocalStore, store.directory)
    from prioritylock.stores._etcd import EtcdStore
    from prioritylock.stores._redis import RedisStore
    from prioritylock.stores._zookeeper import ZooKeeperStore

    if isinstance(store, ZooKeeperStore):
        return functools.partial(ZooKeeperStore, store.hosts, prefix=store.prefix)
    if isinstance(store, EtcdStore):
        return functools.partial(EtcdStore, store.endpoint, prefix=store.prefix)
    assert isinstance(store, RedisStore)
    options = store.client.connection_pool.connection_kwargs
    return functools.partial(
        RedisStore,
        options["host"],
        options["port"],
        prefix=store.prefix,
        password=options["password"],
    )


class ProcessPeer(Peer):
    """A :class:`Peer` in another process (a forkserver's child, this module preloaded)."""

    def __init__(self, store: ObjectStore) -> None:
        # The file system's notices within 100 ms; Redis's pub/sub and ZooKeeper's watches within
        # 50 ms (issue 31).
        self.told_within = self.handed_within = 0.100 if isinstance(store, LocalStore) else 0.050
        context = multiprocessing.get_context("forkserver")
        context.set_forkserver_preload([__name__])
        self._conn, child = context.Pipe()
        self._process = context.Process(
            target=_peer_process, args=(_opener(store), child), daemon=True
        )
        self._process.start()

    def _call(self, *command: Any) -> Any:
        self._conn.send(command)
        return self._answer()

    def _answer(self) -> Any:
        assert self._conn.poll(30), "the other process did not answer"
        return self._conn.recv()

    def hold(self, owner: str) -> None:
        self._call("hold", owner)

    def request(self, owner: str, priority: int) -> float:
        started = self._call("request", owner, priority)
        assert isinstance(started, float)
        return started

    def outcome(self) -> bool:
        return bool(self._answer())

    def release(self) -> float:
        released = self._call("release")
        assert isinstance(released, float)
        return released

    def flood(self, writes: int) -> None:
        self._call("flood", writes)

    def touch(self, key: str) -> None:
        self._call("touch", key)

    def close(self) -> None:
        self._conn.send(None)
        self._process.join(10)
        if self._process.is_alive():
            self._process.kill()
            self._process.join(10)


#: (store, where the other client is): every store of one machine in this process, two
#: processes on one directory, and two processes on one Redis or one ZooKeeper (its pub/sub
#: channel or its watches alone).
TOPOLOGIES = [(kind, "thread") for kind in selected_kinds(LOCAL_KINDS)]
if "local" in selected_kinds(LOCAL_KINDS) and sys.platform.startswith("linux"):
    TOPOLOGIES.append(("local", "process"))
if "redis" in selected_kinds(CLOUD_KINDS):
    TOPOLOGIES.append(("redis", "process"))
if "zookeeper" in selected_kinds(CLOUD_KINDS):
    TOPOLOGIES.append(("zookeeper", "process"))
if "etcd" in selected_kinds(CLOUD_KINDS):
    TOPOLOGIES.append(("etcd", "process"))


#: Under 50 ms across processes is a timing measurement: run alone (scripts/test's serial pass).
_SERVERS = ("redis", "zookeeper", "etcd")
_PARAMS = [
    pytest.param(t, id="-".join(t), marks=[pytest.mark.serial] if t[0] in _SERVERS else [])
    for t in TOPOLOGIES
]


@pytest.fixture(params=_PARAMS)
def two(request: pytest.FixtureRequest) -> Iterator[tuple[ObjectStore, Peer]]:
    """A store, and the test's other client (a :class:`Peer`) on it."""
    kind, where = request.param
    factory: StoreFactory = request.getfixturevalue(f"{kind}_store_factory")
    store = factory()
    peer = Peer(store) if where == "thread" else ProcessPeer(store)
    try:
        yield store, peer
    finally:
        peer.close()
        store.close()


def test_a_request_reaches_the_holder_at_once(two: tuple[ObjectStore, Peer]) -> None:
    store, peer = two
    recorder = _TimedRecorder()
    holder = _locked(store, "holder", 1, listener=recorder)
    assert holder.try_lock()
    with receiving(signals.cleanup_requested) as asked:
        started = peer.request("urgent", 9)
        assert recorder.cleanup.wait(10), "the holder was not told"
        told = recorder.told_at - started
        assert peer.outcome(), "the lock passed on when the cleanup returned"
    assert told < peer.told_within, f"the holder heard of the request after {told * 1000:.1f} ms"
    assert asked and asked[0]["notice"].requestor_owner == "urgent"
    assert not holder.is_current_owner()
    peer.release()


def test_a_release_wakes_a_waiter_deep_in_its_backoff(
    two: tuple[ObjectStore, Peer], monkeypatch: pytest.MonkeyPatch
) -> None:
    store, peer = two
    monkeypatch.setattr(flows_module, "Backoff", _SlowPolls)
    peer.hold("holder")
    waiter = _locked(store, "waiter", 1)
    reads = store.stats.reads
    got = threading.Event()
    got_at: list[float] = []

    def wait() -> None:
        waiter.lock(timeout=40)
        got_at.append(time.monotonic())
        got.set()

    threading.Thread(target=wait, daemon=True).start()
    deadline = time.monotonic() + 10
    while store.stats.reads == reads:  # the waiter read the lease: busy, so it pauses 30 s
        assert time.monotonic() < deadline, "the waiter never read"
        time.sleep(0.001)
    released = peer.release()
    assert got.wait(10), "the waiter was not woken"
    woken = got_at[0] - released
    assert woken < peer.handed_within, f"the waiter took the lock {woken * 1000:.1f} ms after"
    assert waiter.fencing_token == 2
    waiter.unlock()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="inotify is Linux's")
def test_a_holder_flooded_by_writes_to_other_keys_keeps_its_budget_and_its_cpu(
    local_store_factory: StoreFactory,
) -> None:
    store = local_store_factory()
    assert isinstance(store, LocalStore)
    peer = ProcessPeer(store)
    try:
        # Watch reads 150 s apart, renewals 200 s: any request in the flood is the flood's.
        holder = make(store, owner="holder", lease_timeout=600, cleanup_timeout=300)
        assert holder.try_lock()
        store.create("jobs/probe", b"0")
        probe = threading.Event()
        stop = store.watch_key("jobs/probe", probe.set)  # one of jobs/'s events, in order
        peer.flood(100)  # the other keys' files exist before the count starts
        peer.touch("jobs/probe")
        assert probe.wait(10)
        probe.clear()
        store.stats.reset()
        cpu = time.process_time()
        peer.flood(10_000)
        peer.touch("jobs/probe")  # told after every flood event was read
        assert probe.wait(30)
        cpu = time.process_time() - cpu
        stop()
        assert store.stats.total == 0, repr(store.stats)
        assert cpu < 0.5, f"{cpu:.2f} s of CPU for 10,000 writes to other keys"
        assert holder.is_current_owner()
        holder.unlock()
    finally:
        peer.close()


@pytest.mark.parametrize("how", ["force_unlock", "override"])
def test_a_break_glass_write_tells_the_old_holder_at_once(store: ObjectStore, how: str) -> None:
    recorder = Recorder()
    holder = _locked(store, "holder", 1, listener=recorder)
    assert holder.try_lock()
    started = time.monotonic()
    if how == "force_unlock":
        make(store, owner="operator").force_unlock("stuck job")
    else:
        operator = make(store, owner="operator", emergency_override="broken")
        assert operator.try_lock()
    assert recorder.lost.wait(10), "the old holder was not told"
    told = time.monotonic() - started
    assert told < AT_ONCE + 0.05, f"the old holder heard after {told * 1000:.1f} ms"
    assert not holder.is_current_owner()


def test_a_burst_of_notices_is_one_read_and_a_renewal_is_none(store: ObjectStore) -> None:
    clock = FakeClock()
    heartbeat = Heartbeat(clock, threaded=False)
    holder = make(store, owner="holder", clock=clock, heartbeat=heartbeat, **SLOW)
    other = make(store, owner="other", clock=clock, heartbeat=heartbeat, **SLOW)
    assert holder.try_lock()
    stats = store.stats
    stats.reset()
    for _ in range(1000):  # a flood of hints (a store's own watch may send many)
        NOTICES.notice(store, holder.key)
    heartbeat.run_due()
    assert (stats.reads, stats.total) == (1, 1), f"one read for the burst: {stats!r}"
    heartbeat.run_due()
    assert stats.total == 1, "the burst was read once"
    assert not other.try_lock()  # a read: no notice (nothing was written)
    stats.reset()
    clock.advance(20.1)  # the renewal falls due: one write, which tells nobody
    heartbeat.run_due()
    assert (stats.replaces, stats.total) == (1, 1), repr(stats)
    heartbeat.run_due()
    assert stats.total == 1, "a renewal brings no watch forward"
    holder.unlock()


class _WatchingStore(DelegatingStore):
    """A store that says when a key may have changed (``stores._base.KeyWatcher``), as one
    watching the file system would: the test plays the other process's write."""

    def __init__(self, inner: ObjectStore) -> None:
        super().__init__(inner)
        self.watched: dict[str, Callable[[], None]] = {}
        self.unwatched: list[str] = []

    def watch_key(self, key: str, callback: Callable[[], None]) -> Callable[[], None]:
        assert key not in self.watched, "one subscription per key, not one per lock"
        self.watched[key] = callback
        return lambda: self.unwatched.append(key)


def test_a_store_that_notices_changes_brings_the_holders_watch_forward(
    store: ObjectStore,
) -> None:
    watching = _WatchingStore(store)
    assert isinstance(watching, KeyWatcher)
    clock = FakeClock()
    heartbeat = Heartbeat(clock, threaded=False)
    holder = make(watching, owner="holder", clock=clock, heartbeat=heartbeat, **SLOW)
    assert holder.try_lock()
    assert list(watching.watched) == [holder.key]
    stats = store.stats
    stats.reset()
    heartbeat.run_due()
    assert stats.total == 0, "nothing due yet"
    threading.Thread(target=watching.watched[holder.key]).start()  # from the store's thread
    deadline = time.monotonic() + 10
    while stats.reads == 0:
        assert time.monotonic() < deadline, "the store's notice brought no read"
        heartbeat.run_due()
    assert (stats.reads, stats.total) == (1, 1)
    holder.unlock()
    assert watching.unwatched == [holder.key], "nobody is interested any more: the feed ends"


class _Subscriptions(DelegatingStore):
    """A store that notices changes (``KeyWatcher``) and counts its subscriptions."""

    def __init__(self, inner: ObjectStore) -> None:
        super().__init__(inner)
        self.live: dict[str, Callable[[], None]] = {}
        self.made = 0

    def watch_key(self, key: str, callback: Callable[[], None]) -> Callable[[], None]:
        self.made += 1
        self.live[key] = callback

        def stop() -> None:
            self.live.pop(key, None)

        return stop


def test_a_holder_in_quick_bursts_subscribes_only_once_a_holding_outlives_the_grace(
    store: ObjectStore,
) -> None:
    """Brief holdings, never asked, stop paying for the store's subscription (an inotify watch
    on a LocalStore); a holding that outlives the grace subscribes at its first heartbeat and
    reads what landed meanwhile; one that was asked makes the next subscribe at once."""
    watching = _Subscriptions(store)
    clock = FakeClock()
    heartbeat = Heartbeat(clock, threaded=False)
    holder = make(watching, owner="holder", clock=clock, heartbeat=heartbeat, **SLOW)
    for _ in range(BRIEF_STREAK):  # held for no time at all, and never asked
        assert holder.try_lock()
        assert list(watching.live) == [holder.key], "subscribed at once until the streak"
        holder.unlock()
        assert not watching.live
    made = watching.made
    for _ in range(5):
        assert holder.try_lock()
        holder.unlock()
    assert watching.made == made, "a burst of brief holdings subscribes nothing"
    assert holder.try_lock()
    assert not watching.live
    stats = store.stats
    stats.reset()
    clock.advance(2 * GRACE)  # it outlives the grace: its first heartbeat subscribes
    heartbeat.run_due()
    assert list(watching.live) == [holder.key], "subscribed at the first heartbeat"
    assert (stats.reads, stats.total) == (1, 1), f"one read of what landed meanwhile: {stats!r}"
    holder.unlock()
    assert holder.try_lock()
    assert list(watching.live) == [holder.key], "after a long holding: at once again"
    NOTICES.notice(store, holder.key)  # asked (any notice): the next holding subscribes too
    holder.unlock()
    for _ in range(BRIEF_STREAK - 1):
        assert holder.try_lock()
        holder.unlock()
    assert holder.try_lock()
    assert list(watching.live) == [holder.key], "the streak began again after the notice"
    holder.unlock()


def test_a_notice_wakes_a_waiter_when_no_lock_of_the_process_holds(store: ObjectStore) -> None:
    """A notice nobody listens for returns at once; one a waiter alone listens for wakes it."""
    waiter = ThreadWaiter(owner=object())
    NOTICES.notice(store, "jobs/nobody")  # nobody: nothing to do
    NOTICES.arm(store, "jobs/alone", waiter)
    NOTICES.notice(store, "jobs/alone")
    assert waiter.event.is_set()
