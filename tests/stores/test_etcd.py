"""What the etcd store adds to the store contract: its URL, its layout (the lease JSON is the key's
value, under the prefix), revisions as versions, its watch, and a call that ends by its timeout
on a server that stopped answering (a lock held across a restart: tests/stores/test_restarts.py).

The contract, the fault contract and the lock suites run on etcd through ``store_kind``; these are
the cases only etcd has."""

from __future__ import annotations

import base64
import json
import socket
import threading
import time
import urllib.request
import uuid
from collections.abc import Iterator

import pytest
import urllib3

from prioritylock import ConfigError, StoreUnavailable
from prioritylock.stores import open_store
from prioritylock.stores._etcd import EtcdStore
from tests._servers.etcd import EtcdServer

pytestmark = [pytest.mark.timeout(60)]


@pytest.fixture
def store(etcd_server: EtcdServer) -> Iterator[EtcdStore]:
    opened = etcd_server.store(f"t-{uuid.uuid4().hex[:12]}/locks")
    yield opened
    opened.close()


def _raw_get(server: EtcdServer, name: str) -> dict[str, object]:
    """The key ``name`` as etcd's own gateway shows it (no store code involved)."""
    body = json.dumps({"key": base64.b64encode(name.encode()).decode()}).encode()
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    url = f"http://{server.endpoint}/v3/kv/range"
    with opener.open(urllib.request.Request(url, body, method="POST"), timeout=10) as answer:
        kvs = json.loads(answer.read()).get("kvs", [])
    return dict(kvs[0]) if kvs else {}


def _raw_put(server: EtcdServer, name: str, value: bytes) -> None:
    """Put ``name`` through etcd's own gateway: a write this process's store did not make."""
    body = json.dumps(
        {"key": base64.b64encode(name.encode()).decode(), "value": base64.b64encode(value).decode()}
    ).encode()
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    url = f"http://{server.endpoint}/v3/kv/put"
    with opener.open(urllib.request.Request(url, body, method="POST"), timeout=10) as answer:
        assert answer.status == 200


def test_the_url_names_endpoint_prefix_and_timeouts() -> None:
    store = open_store("etcd://etcd1:2380/team/locks/?read_timeout=2&connect_timeout=1")
    try:
        assert isinstance(store, EtcdStore)
        assert store.namespace == "etcd:etcd1:2380/team/locks/"
        assert store.prefix == "team/locks/"
        assert store.endpoint == "etcd1:2380"
    finally:
        store.close()
    default_port = open_store("etcd://etcd1/locks")
    assert isinstance(default_port, EtcdStore) and default_port.endpoint == "etcd1:2379"
    default_port.close()


def test_the_url_names_credentials_and_tls_files_without_showing_the_password() -> None:
    store = open_store(
        "etcds://ops:s%40cret@etcd1:2379/locks?ca_certs=/etc/ca.pem"
        "&client_cert=/etc/me.pem&client_key=/etc/me.key"
    )
    try:
        assert isinstance(store, EtcdStore)
        assert store.namespace == "etcd:etcd1:2379/locks/"  # the same cluster as over http
        assert store._credentials == {"name": "ops", "password": "s@cret"}
        pool = store.client
        assert isinstance(pool, urllib3.HTTPSConnectionPool)
        assert (pool.ca_certs, pool.cert_file, pool.key_file) == (
            "/etc/ca.pem",
            "/etc/me.pem",
            "/etc/me.key",
        )
        assert "s@cret" not in repr(store) and "s%40cret" not in repr(store)
    finally:
        store.close()


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("etcd://etcd1:2379/", "prefix must not be empty"),
        ("etcd://etcd1:2379/locks?ttl=3", "unknown etcd:// store URL option 'ttl'"),
        ("etcd://etcd1:2379/locks?read_timeout=soon", "number of seconds"),
        ("etcd://user-without-password@etcd1:2379/locks", "USER:PASSWORD"),
        ("etcd://etcd1:2379/locks?ca_certs=/ca.pem", "for TLS"),
        ("etcds://etcd1:2379/locks?ca_certs=", "is empty"),
        ("etcd://etcd1:99999/locks", "port must be 1-65535"),
    ],
)
def test_bad_urls_are_refused_saying_why(url: str, says: str) -> None:
    with pytest.raises(ConfigError, match=says):
        open_store(url)


def test_the_document_is_the_keys_value_and_its_version_the_mod_revision(
    etcd_server: EtcdServer, store: EtcdStore
) -> None:
    first = store.create("team/resource", b'{"owner": "a"}')
    second = store.replace("team/resource", b'{"owner": "b"}', first)
    raw = _raw_get(etcd_server, store.prefix + "team/resource")
    assert base64.b64decode(str(raw["value"])) == b'{"owner": "b"}'
    assert str(raw["mod_revision"]) == second and int(second) > int(first)
    # Deleted and created again: a new revision, so the old token never matches.
    store.delete("team/resource", second)
    again = store.create("team/resource", b"x")
    assert int(again) > int(second)
    assert store.read_if_changed("team/resource", second) is not None


def test_a_call_ends_by_its_timeout_when_the_server_never_answers() -> None:
    with socket.socket() as silent:  # accepts connections (the backlog), never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        port = silent.getsockname()[1]
        store = EtcdStore(f"127.0.0.1:{port}", prefix="p", read_timeout=0.5)
        try:
            began = time.monotonic()
            with pytest.raises(StoreUnavailable) as caught:
                store.create("k", b"x")
            assert time.monotonic() - began < 5.0
            assert caught.value.outcome_unknown is True
            with pytest.raises(StoreUnavailable) as read:
                store.read("k")
            assert read.value.outcome_unknown is False
        finally:
            store.close()


def test_a_watch_hears_anothers_writes_not_its_own_and_stops(
    etcd_server: EtcdServer, store: EtcdStore
) -> None:
    told = threading.Semaphore(0)
    version = store.create("k", b"0")
    stop = store.watch_key("k", told.release)
    # The watch is armed on its own thread: another's writes until one is heard.
    deadline = time.monotonic() + 10
    while not told.acquire(timeout=0.2):
        _raw_put(etcd_server, store.prefix + "k", b"other")
        assert time.monotonic() < deadline, "another's write was never heard"
    while told.acquire(timeout=0.3):  # drain writes heard late
        pass
    found = store.read("k")
    assert found is not None
    version = found.version
    for _ in range(3):
        version = store.replace("k", b"mine", version)
    assert not told.acquire(timeout=0.5), "this process's own write woke its watch"
    stop()
    _raw_put(etcd_server, store.prefix + "k", b"after")
    assert not told.acquire(timeout=0.5), "a stopped watch still calls"
