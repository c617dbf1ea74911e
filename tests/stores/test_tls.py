"""The server stores over TLS (``rediss://``, ``etcds://``, ``zks://``) against servers whose
certificates a test CA signed (tests/_servers/tls.py), and etcd's authentication.

How a store is told the CA: the URL option ``ca_certs``, or ``SSL_CERT_FILE`` (the system trust
store's file, which every client here reads when no ``ca_certs`` is given)."""

from __future__ import annotations

import base64
import gc
import logging
import threading
import uuid
from collections.abc import Callable, Iterator

import pytest

from prioritylock import StoreAccessError, StoreError, StoreUnavailable
from prioritylock.stores import ObjectStore, open_store
from prioritylock.stores._base import KeyWatcher
from prioritylock.stores._etcd import EtcdStore
from prioritylock.stores._redis import RedisStore
from prioritylock.stores._zookeeper import ZooKeeperStore
from tests._servers.tls import ETCD_APP, ETCD_ROOT, TLSServer, etcd_call

pytestmark = [pytest.mark.timeout(60)]

SERVERS = ["redis", "etcd", "zookeeper"]


def _url(kind: str, server: TLSServer, prefix: str, **options: str) -> str:
    """The store URL of the TLS server ``kind`` (with its credentials), under ``prefix``."""
    query = "&".join(f"{name}={value}" for name, value in options.items())
    if kind == "redis":
        query = f"prefix={prefix}/" + (f"&{query}" if query else "")
        return f"rediss://:{server.secret}@{server.endpoint}/0?{query}"
    if kind == "etcd":
        user, password = ETCD_APP
        return f"etcds://{user}:{password}@{server.endpoint}/tls/{prefix}" + (
            f"?{query}" if query else ""
        )
    return f"zks://{server.endpoint}/{prefix}" + (f"?{query}" if query else "")


@pytest.fixture(params=SERVERS)
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def server(request: pytest.FixtureRequest, kind: str) -> TLSServer:
    found: TLSServer = request.getfixturevalue(f"{kind}_tls_server")
    return found


@pytest.fixture
def opened() -> Iterator[Callable[[str], ObjectStore]]:
    stores: list[ObjectStore] = []

    def open_url(url: str) -> ObjectStore:
        store = open_store(url)
        stores.append(store)
        return store

    yield open_url
    for store in stores:
        store.close()


# kazoo 2.11 leaves the socket of a refused TLS handshake unclosed (its create_tcp_connection
# re-raises the SSLError without closing it).
@pytest.mark.filterwarnings("ignore:unclosed <ssl.SSLSocket:ResourceWarning")
def test_tls_trusts_the_ca_it_is_told_of_and_no_other(
    kind: str,
    server: TLSServer,
    opened: Callable[[str], ObjectStore],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """One test per server (each starts its TLS server once per worker):

    - without the test CA (the system's trust store does not hold it), nothing is sent: Redis
      and etcd say the certificate was not trusted (retrying won't help); kazoo retries a
      refused handshake as it does a refused connection, so ZooKeeper says, by the connect
      timeout, that no server answered or none was trusted;
    - trusting the CA through ``SSL_CERT_FILE`` works;
    - with ``ca_certs``, every operation and the change notices (their own connections) speak
      TLS to the server.
    """
    prefix = f"p{uuid.uuid4().hex[:10]}"
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    untrusting = opened(_url(kind, server, prefix, connect_timeout="1"))
    expected: type[StoreError] = StoreUnavailable if kind == "zookeeper" else StoreAccessError
    with pytest.raises(expected) as caught:
        untrusting.create("doc", b"x")
    assert "ca_certs" in str(caught.value) and "SSL_CERT_FILE" in str(caught.value)
    untrusting.close()
    gc.collect()  # kazoo's unclosed sockets (see the mark) go now, not in a later test

    monkeypatch.setenv("SSL_CERT_FILE", str(server.ca.ca))
    through_env = opened(_url(kind, server, prefix))
    version = through_env.create("doc", b"trusted through SSL_CERT_FILE")
    monkeypatch.delenv("SSL_CERT_FILE")

    store = opened(_url(kind, server, prefix, ca_certs=str(server.ca.ca)))
    found = store.read("doc")
    assert found is not None and found.version == version
    assert store.list("") == ["doc"]
    assert store.replace("doc", b"two", version) != version
    heard = threading.Event()
    assert isinstance(store, KeyWatcher)
    stop = store.watch_key("doc", heard.set)
    try:
        _write_from_elsewhere(kind, server, store)
        assert heard.wait(10), "the watch over TLS heard nothing"
    finally:
        stop()


def _write_from_elsewhere(kind: str, server: TLSServer, store: ObjectStore) -> None:
    """Change ``doc`` (or announce a change) as another process would: with the server's own
    client over TLS, since a store's own process never wakes itself."""
    ca = str(server.ca.ca)
    if kind == "redis":
        import redis

        assert isinstance(store, RedisStore)
        client = redis.Redis(port=server.port, password=server.secret, ssl=True, ssl_ca_certs=ca)
        with client:
            client.publish(store._channel(store._object_name("doc")), b"elsewhere 1")
    elif kind == "etcd":
        assert isinstance(store, EtcdStore)
        root, password = ETCD_ROOT
        login = {"name": root, "password": password}
        token = etcd_call(server.port, server.ca, "/v3/auth/authenticate", login)["token"]
        put = {"key": _b64(store.prefix + "doc"), "value": _b64("elsewhere")}
        etcd_call(server.port, server.ca, "/v3/kv/put", put, token)
    else:
        from kazoo.client import KazooClient

        assert isinstance(store, ZooKeeperStore)
        client = KazooClient(server.endpoint, use_ssl=True, ca=ca, verify_certs=True)
        client.start(30)
        try:
            client.set(f"{store.prefix}/doc", b"elsewhere")
        finally:
            client.stop()
            client.close()


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


@pytest.mark.parametrize("kind", ["redis", "etcd"])
def test_a_refused_password_is_an_access_error_and_never_logged(
    kind: str,
    server: TLSServer,
    opened: Callable[[str], ObjectStore],
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    secret = "wrong-" + uuid.uuid4().hex
    url = _url(kind, server, "refused", ca_certs=str(server.ca.ca))
    right = server.secret if kind == "redis" else ETCD_APP[1]
    store = opened(url.replace(f":{right}@", f":{secret}@"))
    for call in (lambda: store.read("doc"), lambda: store.create("doc", b"x")):
        with pytest.raises(StoreAccessError) as caught:
            call()
        assert "password" in str(caught.value)
        chain: BaseException | None = caught.value
        while chain is not None:  # nor in anything it was chained to
            assert secret not in str(chain) and secret not in repr(chain)
            chain = chain.__cause__ or chain.__context__
    logged = "\n".join(caplog.handler.format(record) for record in caplog.records)
    assert "StoreAccessError" in logged
    assert secret not in logged and right not in logged


# -- etcd's authentication -----------------------------------------------------------------------


def test_etcd_refuses_no_user_and_keys_outside_the_role_and_renews_a_forgotten_token(
    etcd_tls_server: TLSServer, opened: Callable[[str], ObjectStore]
) -> None:
    """A token the server forgot (expired, or the server restarted) is answered 401 before
    anything is applied: the store gets a new token and sends the request once more."""
    ca = str(etcd_tls_server.ca.ca)
    anonymous = opened(f"etcds://{etcd_tls_server.endpoint}/tls/anonymous?ca_certs={ca}")
    with pytest.raises(StoreAccessError, match="user name and password"):
        anonymous.read("doc")
    user, password = ETCD_APP
    elsewhere = opened(f"etcds://{user}:{password}@{etcd_tls_server.endpoint}/other?ca_certs={ca}")
    with pytest.raises(StoreAccessError, match="role"):
        elsewhere.create("doc", b"x")
    with pytest.raises(StoreAccessError):
        elsewhere.list("")

    store = opened(_url("etcd", etcd_tls_server, "retoken", ca_certs=ca))
    assert isinstance(store, EtcdStore)
    assert store.create(f"doc-{uuid.uuid4().hex[:8]}", b"one")
    store._token = "forgotten.1"  # as the server sees an expired one
    store.stats.reset()
    assert store.list("") != []
    assert store._token not in (None, "forgotten.1")
    assert store.stats.lists == 1  # the retry is the same request, counted once
