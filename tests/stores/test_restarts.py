"""A server restarted under a held lock, on the stores whose server keeps its data on disk
(Redis with its append-only file, ZooKeeper, etcd): the lease and its holder survive it, and a
holder whose lease ran out while the server was down is told.

What each store adds of its own across a restart (its watches or notices coming back, written
to from elsewhere) is in its own module."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable
from typing import Any, Protocol

import pytest

from prioritylock import StoreUnavailable
from prioritylock.stores import ObjectStore
from prioritylock.stores._zookeeper import ZooKeeperStore
from tests.conftest import selected_kinds
from tests.lock.helpers import Recorder, make

pytestmark = [pytest.mark.timeout(60)]


class _Server(Protocol):
    def store(self, prefix: str, **options: Any) -> Any: ...

    def restart(self, down: Callable[[], None] = ...) -> None: ...


@pytest.fixture(params=selected_kinds(["redis", "zookeeper", "etcd"]))
def restartable(request: pytest.FixtureRequest) -> _Server:
    found: _Server = request.getfixturevalue(f"{request.param}_server")
    return found


@pytest.fixture
def prefix() -> str:
    return f"t-{uuid.uuid4().hex[:12]}/locks"


def _open(server: _Server, prefix: str, stores: list[ObjectStore], **options: Any) -> Any:
    store = server.store(prefix, **options)
    stores.append(store)
    return store


def _reconnected(*stores: ObjectStore) -> None:
    """Wait until each ZooKeeper store's session is connected again (kazoo reconnects with
    backoff, and a request while disconnected is refused at once); the others connect per
    request."""
    for store in stores:
        if isinstance(store, ZooKeeperStore):
            assert store._connected.wait(20), f"{store!r} did not reconnect"


def test_a_restart_keeps_the_lease_its_holder_and_the_watches(
    restartable: _Server, prefix: str, stores: list[ObjectStore]
) -> None:
    """The holder renews across the restart; nobody else gets in, even while the server is
    down; a watch opened before is told after; the next holder's fence is one more."""
    recorder = Recorder()
    store = _open(restartable, prefix, stores)
    holder = make(store, "jobs/restart", "holder", listener=recorder, lease_timeout=30)
    rival_store = _open(restartable, prefix, stores, connect_timeout=0.5, read_timeout=2.0)
    rival = make(rival_store, "jobs/restart", "rival")
    told = threading.Event()
    try:
        assert holder.try_lock()
        fence = holder.fencing_token
        stop = rival_store.watch_key("jobs/restart", told.set)

        def down() -> None:
            with pytest.raises(StoreUnavailable):
                rival.try_lock()

        restartable.restart(down=down)
        assert told.wait(20), "the watch was not told after the restart"
        stop()
        _reconnected(store, rival_store)
        assert not rival.try_lock(), "the restarted server forgot the lease"
        holder.renew()
        assert holder.is_current_owner() and not recorder.lost.is_set()
        holder.unlock()
        assert rival.try_lock()
        assert rival.fencing_token == fence + 1
        rival.unlock()
    finally:
        holder.close()
        rival.close()


def test_a_holder_whose_lease_ran_out_while_the_server_was_down_is_told(
    restartable: _Server, prefix: str, stores: list[ObjectStore]
) -> None:
    recorder = Recorder()
    short = _open(restartable, prefix, stores, connect_timeout=0.3, read_timeout=0.3)
    holder = make(
        short,
        "jobs/outage",
        "holder",
        listener=recorder,
        lease_timeout=1.0,
        max_clock_drift=0.1,
        store_timeout=0.5,
    )
    rival_store = _open(restartable, prefix, stores)
    # Up to 30 s for the server to serve again: a loaded machine's ZooKeeper once took longer
    # than the default store timeout (10 s) after its restart.
    rival = make(
        rival_store,
        "jobs/outage",
        "rival",
        lease_timeout=1.0,
        max_clock_drift=0.1,
        store_timeout=30.0,
    )
    try:
        assert holder.try_lock()
        fence = holder.fencing_token
        restartable.restart(down=lambda: _told(recorder.lost))
        assert not holder.is_current_owner()
        rival.lock(timeout=30)  # the lease it waits out is the one that was stored
        assert rival.fencing_token == fence + 1
        rival.unlock()
    finally:
        holder.close()
        rival.close()


def _told(event: threading.Event) -> None:
    assert event.wait(20), "the holder was not told"
