"""In-process notices (``prioritylock._wake``): a write through any lock of the process tells the
other locks of the process on the same document at once, on both drivers, on the stores of one
machine. The lease (60 s) and cleanup window (20 s) are long and the waiters' polls slow, so
without the notice each of these would take seconds: the test would time out."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from prioritylock import FakeClock, Heartbeat, Lock, signals
from prioritylock import _flows as flows_module
from prioritylock._wake import NOTICES
from prioritylock.stores import ObjectStore
from prioritylock.stores._base import KeyWatcher
from prioritylock.testing import DelegatingStore
from tests.conftest import StoreFactory
from tests.lock.helpers import Recorder, make

pytestmark = [pytest.mark.timeout(60), pytest.mark.usefixtures("driver", "notices")]

#: How soon a notice must arrive (a watch read or a poll would take seconds here).
AT_ONCE = 0.05

SLOW: dict[str, Any] = {
    "lease_timeout": 60,
    "cleanup_timeout": 20,
    "waiting_timeout": 20,
    "poll_interval": 30,
}


@pytest.fixture
def store(request: pytest.FixtureRequest, local_store_kind: str) -> Iterator[ObjectStore]:
    factory: StoreFactory = request.getfixturevalue(f"{local_store_kind}_store_factory")
    opened = factory()
    yield opened
    opened.close()


class _Timed(DelegatingStore):
    """Remembers when each write returned: a notice is timed from there, not from the store's
    own latency (a synced write to a busy disk may take longer than the notice)."""

    def __init__(self, inner: ObjectStore) -> None:
        super().__init__(inner)
        self.wrote: list[float] = []

    def _forward(self, op: str, key: str, call: Callable[[], Any]) -> Any:
        result = call()
        if op in ("create", "replace", "replace_unsynced"):
            self.wrote.append(time.monotonic())
        return result


def _told_at(signal: Any) -> tuple[list[float], Callable[..., None]]:
    """When ``signal`` was sent (connect the receiver returned)."""
    times: list[float] = []

    def receiver(sender: Any, **kwargs: Any) -> None:
        times.append(time.monotonic())

    return times, receiver


class _SlowPolls(flows_module.Backoff):
    """Every pause of a waiter as long as its cap (the poll interval), from the first."""

    def next(self) -> float:
        return self._cap


def _locked(store: ObjectStore, owner: str, priority: int, **opts: Any) -> Lock:
    return make(store, owner=owner, priority=priority, **SLOW, **opts)


def test_a_request_reaches_the_holder_at_once(store: ObjectStore) -> None:
    recorder = Recorder()
    holder = _locked(store, "holder", 1, listener=recorder)
    asking = _Timed(store)
    urgent = _locked(asking, "urgent", 9)
    assert holder.try_lock()
    told, receiver = _told_at(signals.cleanup_requested)
    signals.cleanup_requested.connect(receiver, weak=False)
    try:
        thread = threading.Thread(target=urgent.try_lock, daemon=True)
        thread.start()
        assert recorder.cleanup.wait(10), "the holder was not told"
        thread.join(10)
    finally:
        signals.cleanup_requested.disconnect(receiver)
    latency = told[0] - asking.wrote[0]  # the request is the requestor's first write
    assert latency < AT_ONCE, f"the holder heard of the request {latency * 1000:.1f} ms after it"
    assert recorder.notices[0].requestor_owner == "urgent"
    assert urgent.is_current_owner(), "the lock passed on when the cleanup returned"
    urgent.unlock()


def test_a_release_wakes_a_waiter_deep_in_its_backoff(
    store: ObjectStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(flows_module, "Backoff", _SlowPolls)
    holder = _locked(store, "holder", 1)
    waiter = _locked(store, "waiter", 1)
    assert holder.try_lock()
    reads = store.stats.reads
    got = threading.Event()

    def wait() -> None:
        waiter.lock(timeout=40)
        got.set()

    threading.Thread(target=wait, daemon=True).start()
    deadline = time.monotonic() + 10
    while store.stats.reads == reads:  # the waiter read the lease: busy, so it pauses 30 s
        assert time.monotonic() < deadline, "the waiter never read"
        time.sleep(0.001)
    released = time.monotonic()
    holder.unlock()
    assert got.wait(10), "the waiter was not woken"
    woken = time.monotonic() - released
    assert woken < 1.0, f"the waiter took the lock {woken * 1000:.0f} ms after the release"
    assert waiter.fencing_token == 2
    waiter.unlock()


@pytest.mark.parametrize("how", ["force_unlock", "override"])
def test_a_break_glass_write_tells_the_old_holder_at_once(store: ObjectStore, how: str) -> None:
    recorder = Recorder()
    holder = _locked(store, "holder", 1, listener=recorder)
    assert holder.try_lock()
    breaking = _Timed(store)
    told, receiver = _told_at(signals.lock_lost)
    signals.lock_lost.connect(receiver, weak=False)
    try:
        if how == "force_unlock":
            make(breaking, owner="operator").force_unlock("stuck job")
        else:
            assert make(breaking, owner="operator", emergency_override="broken").try_lock()
        assert recorder.lost.wait(10), "the old holder was not told"
    finally:
        signals.lock_lost.disconnect(receiver)
    latency = told[0] - breaking.wrote[0]
    assert latency < AT_ONCE, f"the old holder heard {latency * 1000:.1f} ms after the write"
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
