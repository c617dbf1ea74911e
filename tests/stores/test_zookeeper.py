"""What the ZooKeeper store adds to the store contract: its URL, its layout (the lease JSON is the
znode's data), nodes that are not ours, digest credentials refused and never logged, a call that
ends by its timeout on a server that stopped answering, and its watches across a restart (a lock
held across one: tests/stores/test_restarts.py).

The contract, the fault contract and the lock suites run on ZooKeeper through ``store_kind``;
these are the cases only ZooKeeper has."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from prioritylock import ConfigError, StoreAccessError, StoreError, StoreUnavailable
from prioritylock.stores import open_store
from prioritylock.stores._base import own_writes
from prioritylock.stores._zookeeper import ZooKeeperStore
from scopes import LockScope
from tests._servers.zookeeper import ZooKeeperServer
from tests.lock.helpers import make

pytestmark = [pytest.mark.timeout(60)]


@pytest.fixture
def prefix() -> str:
    return f"/t-{uuid.uuid4().hex[:12]}/locks"


@pytest.fixture
def store(zookeeper_server: ZooKeeperServer, prefix: str) -> Iterator[ZooKeeperStore]:
    opened = zookeeper_server.store(prefix)
    yield opened
    opened.close()


# -- the URL ---------------------------------------------------------------------------------------


def test_the_url_names_hosts_prefix_credentials_and_timeouts() -> None:
    store = open_store("zk://ops:s%40cret@zk2:2182,zk1/team/locks?read_timeout=2&connect_timeout=1")
    try:
        assert isinstance(store, ZooKeeperStore)
        assert store.namespace == "zk:zk1:2181,zk2:2182/team/locks/"
        assert store.prefix == "/team/locks"
        assert store.client.auth_data == {("digest", "ops:s@cret")}
        assert "s@cret" not in repr(store)
    finally:
        store.close()


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("zk://127.0.0.1:2181", "prefix"),
        ("zk://127.0.0.1:2181/zookeeper/x", "/zookeeper"),
        ("zk:///locks", "hosts"),
        ("zk://h:port/locks", "HOST:PORT"),
        ("zk://h/locks?timeout=1", "unknown zk:// store URL option 'timeout'"),
        ("zk://h/locks?read_timeout=soon", "number of seconds"),
        ("zk://user-without-password@h/locks", "USER:PASSWORD"),
        ("zk://h/locks?ca_certs=/ca.pem", "for TLS"),
        ("zks://h/locks?client_key=/k.pem", "client_key needs client_cert"),
    ],
)
def test_a_bad_url_is_a_config_error(url: str, says: str) -> None:
    with pytest.raises(ConfigError, match=says):
        open_store(url)


# -- layout ----------------------------------------------------------------------------------------


def test_the_lease_document_is_the_znodes_data(
    zookeeper_server: ZooKeeperServer, store: ZooKeeperStore, prefix: str
) -> None:
    lock = make(store, "team/resource", "holder")
    key = LockScope.path("team/resource").key
    try:
        assert lock.try_lock()
        with zookeeper_server.client() as client:
            data, stat = client.get(f"{prefix}/{key.replace('/', '%2F')}")
            assert client.get_children(prefix) == [key.replace("/", "%2F")]
        assert json.loads(data)["holder"]["owner"] == "holder"
        found = store.read(key)
        assert found is not None and found.version == f"{stat.czxid}.{stat.version}"
    finally:
        lock.close()


def test_a_node_that_is_not_ours_is_left_untouched(
    zookeeper_server: ZooKeeperServer, store: ZooKeeperStore, prefix: str
) -> None:
    """An ephemeral node, or one with children, at a document's place is refused by name; a
    child of the prefix whose name is no key of ours is not listed."""
    with zookeeper_server.client() as client:
        client.ensure_path(prefix)
        client.create(f"{prefix}/ephemeral", b"theirs", ephemeral=True)
        client.create(f"{prefix}/parent/child", b"theirs", makepath=True)
        client.create(f"{prefix}/not%2", b"theirs")
        for key in ("ephemeral", "parent"):
            with pytest.raises(StoreError, match="not a document of ours"):
                store.read(key)
            assert client.get(f"{prefix}/{key}")[0] in (b"theirs", b"")
        assert store.list("") == ["ephemeral", "parent"]  # names of ours, data not


# -- credentials -----------------------------------------------------------------------------------


def test_refused_credentials_are_an_access_error_and_never_logged(
    zookeeper_server: ZooKeeperServer, prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Nodes made by a user (ZooKeeper's digest scheme) are that user's alone."""
    caplog.set_level(logging.DEBUG)
    owner = zookeeper_server.store(prefix, username="ops", password="owner-secret-1234")
    stranger = zookeeper_server.store(prefix, username="ops", password="wrong-secret-5678")
    anonymous = zookeeper_server.store(prefix)
    try:
        version = owner.create("doc", b"mine")
        assert owner.read("doc") is not None
        for refused in (stranger, anonymous):
            with pytest.raises(StoreAccessError) as caught:
                refused.read("doc")
            assert "password" in str(caught.value)
            with pytest.raises(StoreAccessError):
                refused.replace("doc", b"x", version)
        assert owner.replace("doc", b"still mine", version)
    finally:
        for opened in (owner, stranger, anonymous):
            opened.close()
    logged = "\n".join(caplog.handler.format(r) for r in caplog.records)
    assert "StoreAccessError" in logged
    for secret in ("owner-secret-1234", "wrong-secret-5678"):
        assert secret not in logged


# -- a server that stops answering, or restarts ------------------------------------------------


def test_a_call_ends_by_its_timeout_on_a_server_that_stopped_answering(
    zookeeper_server: ZooKeeperServer, prefix: str
) -> None:
    """SIGSTOP: the connection stays open and nothing answers; every call still ends by the
    read timeout, a write's outcome unknown."""
    store = zookeeper_server.store(prefix, read_timeout=0.5, connect_timeout=0.5)
    pid = zookeeper_server.running.pid
    try:
        version = store.create("doc", b"1")
        os.kill(pid, signal.SIGSTOP)
        try:
            _stopped(pid)
            for call, unknown in (
                (lambda: store.read("doc"), False),
                (lambda: store.replace("doc", b"2", version), True),
            ):
                began = time.monotonic()
                with pytest.raises(StoreUnavailable) as caught:
                    call()
                assert time.monotonic() - began < 1.5
                assert caught.value.outcome_unknown is unknown
        finally:
            os.kill(pid, signal.SIGCONT)
    finally:
        store.close()


def test_watches_come_back_after_a_restart(
    zookeeper_server: ZooKeeperServer,
    store: ZooKeeperStore,
    prefix: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The session reconnects by itself and each watcher is called once for what it may have
    missed; later writes from elsewhere are announced again."""
    # The writer's writes are another process's, as far as the watch can tell.
    for method in ("begin", "end"):
        monkeypatch.setattr(own_writes, method, lambda *_args, **_kwargs: None)
    told = threading.Event()
    stop = store.watch_key("doc", told.set)
    writer = zookeeper_server.store(prefix)
    with contextlib.ExitStack() as stack:
        stack.callback(writer.close)
        stack.callback(stop)
        version = writer.create("doc", b"1")
        _wait(told, "a write was not announced")
        told.clear()
        zookeeper_server.restart()
        _wait(told, "no call after the session reconnected")
        told.clear()
        _reconnected(writer)
        writer.replace("doc", b"2", version)
        _wait(told, "a write after the restart was not announced")


def test_a_write_of_this_process_calls_no_watcher(
    zookeeper_server: ZooKeeperServer, store: ZooKeeperStore, prefix: str
) -> None:
    """This process's locks were told in-process: a renewal must not cost the holder a read.
    ZooKeeper delivers a session's events in order: once another's write to a second key has
    been announced, our writes to the first, made before it, would have been too."""
    mine = ZooKeeperStore(store.hosts, prefix=prefix)
    calls: list[float] = []
    probe = threading.Event()
    version = mine.create("doc", b"1")
    mine.create("probe", b"1")
    stop = store.watch_key("doc", lambda: calls.append(time.monotonic()))
    stop_probe = store.watch_key("probe", probe.set)
    with zookeeper_server.client() as writer, contextlib.ExitStack() as stack:
        stack.callback(mine.close)
        stack.callback(stop)
        stack.callback(stop_probe)
        for i in range(5):
            version = mine.replace("doc", str(i).encode(), version)
        writer.set(f"{prefix}/probe", b"theirs")
        _wait(probe, "another's write was not announced")
        assert store.read("doc") is not None  # answered after the watch's own requests
        assert calls == [], f"{len(calls)} calls for this process's own writes"


def _stopped(pid: int) -> None:
    """Wait until every thread of ``pid`` is stopped (SIGSTOP is delivered asynchronously)."""
    deadline = time.monotonic() + 10
    while True:
        states = {
            (Path(f"/proc/{pid}/task") / task / "stat").read_text().rsplit(")", 1)[1].split()[0]
            for task in os.listdir(f"/proc/{pid}/task")
        }
        if states <= {"T", "t"}:
            return
        assert time.monotonic() < deadline, f"process {pid} did not stop: {states}"
        time.sleep(0.005)  # a bounded poll of a process we don't control


def _reconnected(*stores: ZooKeeperStore) -> None:
    """Wait until each store's session is connected again (kazoo reconnects with backoff)."""
    for opened in stores:
        assert opened._connected.wait(20), f"{opened!r} did not reconnect"


def _wait(event: threading.Event, what: str) -> None:
    assert event.wait(20), what
