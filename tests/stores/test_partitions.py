"""A holder partitioned from its server (Redis, ZooKeeper, etcd), through the fault proxy.

The holder reaches the server through a raw route of :class:`~tests._helpers.fault_proxy.FaultProxy`
(every byte of its requests, answers, pub/sub, session pings and watch streams); a rival connects
directly. The route is cut while the holder holds the lock: its renewals go unanswered. What must
hold:

- the holder is told it lost the lock (listener and ``is_current_owner()``) before the rival's
  ``lock()`` returns: never two holders;
- the rival's fence is the holder's + 1;
- the partition heals cleanly: what it held is delivered late and changes nothing (the rival
  still holds and releases normally), and the old holder can take the lock again, fence + 2.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest

from prioritylock import Lock
from prioritylock.stores import ObjectStore
from tests._helpers.fault_proxy import FaultProxy
from tests.conftest import selected_kinds
from tests.lock.helpers import Recorder, make

pytestmark = [pytest.mark.timeout(60)]

LEASE = 1.0
DRIFT = 0.5  # room for a loaded CI worker to run the holder's heartbeat in time
#: The holder's store gives up on an unanswered request after this (connect and read).
STORE_TIMEOUT = 0.4


class Server:
    """One server kind: where it listens, and a store on it at a given address."""

    def __init__(self, upstream: str, open_at: Callable[[str], ObjectStore]) -> None:
        self.upstream = upstream
        self.open_at = open_at


@pytest.fixture(params=selected_kinds(["redis", "zookeeper", "etcd"]))
def server(request: pytest.FixtureRequest) -> Server:
    kind = str(request.param)
    timeouts: dict[str, Any] = {"connect_timeout": STORE_TIMEOUT, "read_timeout": STORE_TIMEOUT}
    if kind == "redis":
        from prioritylock.stores._redis import RedisStore

        redis = request.getfixturevalue("redis_server")
        prefix = f"t-{uuid.uuid4().hex[:12]}/"

        def open_redis(at: str) -> ObjectStore:
            host, _colon, port = at.rpartition(":")
            return RedisStore(host, int(port), prefix=prefix, password=redis.password, **timeouts)

        return Server(f"127.0.0.1:{redis.port}", open_redis)
    if kind == "zookeeper":
        from prioritylock.stores._zookeeper import ZooKeeperStore

        zookeeper = request.getfixturevalue("zookeeper_server")
        prefix = f"/t-{uuid.uuid4().hex[:12]}/locks"
        return Server(zookeeper.hosts, lambda at: ZooKeeperStore(at, prefix=prefix, **timeouts))
    from prioritylock.stores._etcd import EtcdStore

    etcd = request.getfixturevalue("etcd_server")
    prefix = f"t-{uuid.uuid4().hex[:12]}/locks"
    return Server(etcd.endpoint, lambda at: EtcdStore(at, prefix=prefix, **timeouts))


def test_a_partitioned_holder_is_told_before_anyone_else_takes_the_lock(
    server: Server, stores: list[ObjectStore]
) -> None:
    with FaultProxy(server.upstream, seed=31, raw=True) as proxy:
        holder_store = server.open_at(proxy.route("holder"))
        rival_store = server.open_at(server.upstream)
        stores += [holder_store, rival_store]
        told = _Timed()
        timings: dict[str, Any] = {"lease_timeout": LEASE, "max_clock_drift": DRIFT}
        holder = make(
            holder_store,
            "jobs/cut",
            "holder",
            listener=told,
            store_timeout=STORE_TIMEOUT,
            **timings,
        )
        rival = make(rival_store, "jobs/cut", "rival", **timings)
        try:
            assert holder.try_lock()
            fence = holder.fencing_token
            proxy.partition(30.0, "holder")  # until healed

            rival.lock(timeout=15)
            acquired_at = time.monotonic()
            assert told.lost.is_set(), "the rival took the lock before the holder was told"
            assert told.lost_at and told.lost_at[0] < acquired_at
            assert not holder.is_current_owner()
            assert rival.fencing_token == fence + 1
            assert proxy.snapshot().get("held by a partition", 0) > 0

            proxy.heal()
            # What the partition held is delivered now; the old holder's next try goes through
            # the healed route and finds the rival holding.
            _until(lambda: holder.try_lock() is False, "the healed holder never reached the server")
            assert rival.is_current_owner()
            info = rival.info()
            assert info is not None and info.owner == "rival" and info.fence == fence + 1
            rival.unlock()
            holder.lock(timeout=15)
            assert holder.fencing_token == fence + 2
            assert told.names().count("lost") == 1
            holder.unlock()
        finally:
            holder.close()
            rival.close()


class _Timed(Recorder):
    """A listener that also notes when the loss was told (monotonic)."""

    def __init__(self) -> None:
        super().__init__()
        self.lost_at: list[float] = []

    def on_lock_lost(self, lock: Lock, reason: str) -> None:
        self.lost_at.append(time.monotonic())
        super().on_lock_lost(lock, reason)


def _until(check: Callable[[], bool], message: str, seconds: float = 15.0) -> None:
    """Wait for ``check`` (each call is a round trip to the server: no sleeping between)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except Exception:  # the store may still be reconnecting
            threading.Event().wait(0.05)
    pytest.fail(message)
