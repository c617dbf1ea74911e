"""Transport faults on every cloud store, one suite: 5xx and throttling, lost answers, timeouts.

A write that lands runs against the real server of every cloud kind (moto, SeaweedFS,
fake-gcs-server, Azurite; narrowed by ``PRIORITYLOCK_STORES``); a fault that never reaches the
server, against one server per SDK (moto for S3). Faults are injected where the SDK meets the
network (``tests/lock/_cloud_faults.py``: a botocore ``before-send`` hook for S3, a requests
transport adapter for GCS and Azure), and again on the wire by the fault proxy
(``tests/_helpers/fault_proxy.py``) wherever a proxy can cause the fault: a 503 in the server's
place, a reset before the request is forwarded, a reset or a 503 after the server applied a write
(a read timeout through the proxy would cost the SDK's whole read timeout: the hooks' alone).

What a store must say is the same on every cloud: a throttled or failed request is
:class:`StoreUnavailable`, its outcome unknown exactly when it was a write; a write whose answer
was lost may have landed, and only a read-back tells; a request that never left (connection
refused) has a known outcome.
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from prioritylock import ConditionFailed, StoreUnavailable
from prioritylock.stores import ObjectStore, Versioned
from tests.conftest import CLOUD_KINDS, StoreFactory, selected_kinds
from tests.lock._cloud_faults import Fault, Injector, Op, Via, open_injector

pytestmark = [pytest.mark.timeout(60)]

#: Faults that never reach the server are the SDK's and the store's alone: one server per SDK.
one_per_sdk = pytest.mark.parametrize(
    "store_kind", selected_kinds(["s3-moto", "gcs", "azure", "etcd"]), indirect=True
)
#: The same, and Redis and ZooKeeper (which have no HTTP statuses to throttle with), and etcd.
one_per_client = pytest.mark.parametrize(
    "store_kind",
    selected_kinds(["s3-moto", "gcs", "azure", "redis", "zookeeper", "etcd"]),
    indirect=True,
)

KEY = "team/resource"
WRITES = ("create", "replace", "delete")
OPERATIONS = ("read", "read_if_changed", *WRITES, "list")
#: The injector's request kinds, by seam operation.
_OPS: dict[str, Op] = {
    "read": "read",
    "read_if_changed": "read",
    "create": "write",
    "replace": "write",
    "delete": "delete",
    "list": "list",
}
#: The error codes S3 sends with each status (GCS and Azure fabricate their own bodies).
_S3_CODES = {
    408: "RequestTimeout",
    429: "TooManyRequests",
    500: "InternalError",
    502: "BadGateway",
    503: "SlowDown",
    504: "GatewayTimeout",
}


@pytest.fixture(params=selected_kinds(CLOUD_KINDS))
def store_kind(request: pytest.FixtureRequest) -> str:
    """The cloud kinds only (overrides the suite-wide fixture that also has memory and local)."""
    return str(request.param)


@pytest.fixture
def via(request: pytest.FixtureRequest) -> Via:
    """Where the faults are injected: ``sdk`` unless a test parametrizes it (indirectly)."""
    return getattr(request, "param", "sdk")


@pytest.fixture
def faults(
    request: pytest.FixtureRequest, store_kind: str, store_factory: StoreFactory, via: Via
) -> Iterator[Injector]:
    """A store of the kind under test, on a fresh bucket, whose requests fail as told."""
    if via == "proxy" and store_kind == "redis":
        pytest.skip("the fault proxy speaks HTTP: Redis's faults are injected at its connection")
    if via == "proxy" and store_kind == "zookeeper":
        pytest.skip("the fault proxy speaks HTTP: ZooKeeper's faults are injected at its client")
    if via == "proxy" and store_kind == "etcd":
        pytest.skip(
            "the fault proxy picks faults by method and path, and etcd's requests are all"
            " POSTs to /v3/kv/: its faults are injected at its urllib3 pool"
        )
    injector = open_injector(request, store_kind, store_factory(), via=via)
    try:
        yield injector
    finally:
        injector.clear()
        injector.close()


def _sdk_errors(kind: str) -> tuple[type[BaseException], ...]:
    """What the store's SDK raises for an HTTP error answer: the cause our error chains to."""
    if kind.startswith("s3-"):
        import botocore.exceptions

        return (botocore.exceptions.ClientError,)
    if kind == "gcs":
        from google.api_core import exceptions as api_exceptions

        return (api_exceptions.GoogleAPICallError,)
    if kind == "etcd":
        from prioritylock.stores._etcd import EtcdStatusError

        return (EtcdStatusError,)
    from azure.core.exceptions import AzureError

    return (AzureError,)


def _lost_answer_errors(kind: str, lose: str) -> tuple[type[BaseException], ...]:
    """What the SDK raises when the answer never comes (S3: exactly botocore's error)."""
    if kind == "redis":
        import redis.exceptions

        return (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError)
    if kind == "etcd":
        import urllib3.exceptions

        return (urllib3.exceptions.ReadTimeoutError, urllib3.exceptions.ProtocolError)
    if kind == "zookeeper":
        from kazoo.exceptions import ConnectionLoss
        from kazoo.handlers.threading import KazooTimeoutError

        return (ConnectionLoss, KazooTimeoutError)
    if kind.startswith("s3-"):
        import botocore.exceptions

        if lose == "timeout":
            return (botocore.exceptions.ReadTimeoutError,)
        return (botocore.exceptions.ConnectionClosedError,)
    import requests

    return (requests.exceptions.RequestException, *_sdk_errors(kind))


def _target(store: ObjectStore, operation: str) -> tuple[str, str, Versioned | None]:
    """The key ``operation`` works on, the version to pass, and that key's object before it."""
    version = store.create(KEY, b"before")
    if operation == "create":
        return "new", version, None
    return KEY, version, Versioned(b"before", version)


def _run(store: ObjectStore, operation: str, key: str, version: str) -> object:
    calls: dict[str, Callable[[], object]] = {
        "read": lambda: store.read(key),
        "read_if_changed": lambda: store.read_if_changed(key, version),  # type: ignore[attr-defined]
        "create": lambda: store.create(key, b"after"),
        "replace": lambda: store.replace(key, b"after", version),
        "delete": lambda: store.delete(key, version),
        "list": lambda: store.list(""),
    }
    return calls[operation]()


# -- the request was refused: nothing changed -----------------------------------------------------


@one_per_sdk
@pytest.mark.parametrize(
    ("via", "status"),
    [*(("sdk", status) for status in (408, 429, 500, 502, 503, 504)), ("proxy", 503)],
    indirect=["via"],
)
@pytest.mark.parametrize("operation", OPERATIONS)
def test_throttling_and_5xx_are_unavailable_after_one_attempt_unknown_for_writes(
    faults: Injector, store_kind: str, operation: str, status: int
) -> None:
    store = faults.store
    key, version, before = _target(store, operation)
    store.stats.reset()
    faults.fail(_OPS[operation], Fault(status=status, code=_S3_CODES[status]))
    with pytest.raises(StoreUnavailable) as caught:
        _run(store, operation, key, version)
    assert caught.value.outcome_unknown is (operation in WRITES)
    assert isinstance(caught.value.__cause__, _sdk_errors(store_kind))
    if store_kind.startswith("s3-"):
        assert _S3_CODES[status] in str(caught.value)
    assert faults.injected(_OPS[operation]) == 1
    assert store.stats.total == 1, f"the SDK retried: {store.stats!r}"
    assert store.read(key) == before, "the refused request changed the object"


@one_per_client
@pytest.mark.parametrize(
    ("via", "lose"), [("sdk", "timeout"), ("sdk", "reset"), ("proxy", "reset")], indirect=["via"]
)
@pytest.mark.parametrize("operation", OPERATIONS)
def test_a_lost_answer_is_unavailable_and_unknown_for_writes(
    faults: Injector, store_kind: str, operation: str, lose: Any
) -> None:
    """A read timeout or a reset connection: a write might have been applied (here it was not)."""
    store = faults.store
    key, version, before = _target(store, operation)
    went_through = faults.passed(_OPS[operation])
    faults.fail(_OPS[operation], Fault(lose=lose))
    with pytest.raises(StoreUnavailable) as caught:
        _run(store, operation, key, version)
    assert caught.value.outcome_unknown is (operation in WRITES)
    assert isinstance(caught.value.__cause__, _lost_answer_errors(store_kind, lose))
    assert faults.injected(_OPS[operation]) == 1
    assert faults.passed(_OPS[operation]) == went_through, "the request reached the server"
    assert store.read(key) == before


@one_per_client
def test_connection_refused_is_unavailable_with_a_known_outcome(
    request: pytest.FixtureRequest, store_kind: str, store_factory: StoreFactory
) -> None:
    nowhere = _unreachable(request, store_kind, store_factory())
    try:
        for operation in OPERATIONS:
            with pytest.raises(StoreUnavailable) as caught:
                _run(nowhere, operation, KEY, _version_like(store_kind))
            assert caught.value.outcome_unknown is False, f"{operation}: it never left"
        assert nowhere.stats.total == len(OPERATIONS)
    finally:
        nowhere.close()


# -- the write landed, its answer did not: only a read-back tells --------------------------------


@pytest.mark.parametrize(
    ("via", "fault"),
    [("sdk", "timeout"), ("sdk", "reset"), ("sdk", "503"), ("proxy", "reset"), ("proxy", "503")],
    indirect=["via"],
)
@pytest.mark.parametrize("operation", WRITES)
def test_a_write_that_landed_but_lost_its_answer_is_unknown_and_did_change(
    faults: Injector, operation: str, fault: str
) -> None:
    store = faults.store
    key, version, _before = _target(store, operation)
    lost = Fault(status=503, deliver=True) if fault == "503" else Fault(lose=fault, deliver=True)  # type: ignore[arg-type]
    faults.fail(_OPS[operation], lost)
    with pytest.raises(StoreUnavailable) as caught:
        _run(store, operation, key, version)
    assert caught.value.outcome_unknown is True
    landed = store.read(key)
    if operation == "delete":
        assert landed is None, "the delete landed, so the object is gone"
    else:
        assert landed is not None and landed.data == b"after", "the write landed"
        assert landed.version != version
    # Retrying blindly now fails the condition against our own write.
    with pytest.raises(ConditionFailed):
        _run(store, operation, key, version)


# -- helpers that differ by kind ------------------------------------------------------------------


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def _version_like(kind: str) -> str:
    return {"gcs": "1", "redis": "1", "zookeeper": "1.1", "etcd": "1"}.get(kind, '"0x1"')


def _unreachable(request: pytest.FixtureRequest, kind: str, like: ObjectStore) -> ObjectStore:
    """A store of ``kind`` on ``like``'s bucket whose endpoint is a port nobody listens on."""
    closed = f"http://127.0.0.1:{_closed_port()}"
    if kind == "redis":
        from prioritylock.stores._redis import RedisStore

        assert isinstance(like, RedisStore)
        return RedisStore("127.0.0.1", _closed_port(), prefix=like.prefix, connect_timeout=2.0)
    if kind == "etcd":
        from prioritylock.stores._etcd import EtcdStore

        assert isinstance(like, EtcdStore)
        return EtcdStore(f"127.0.0.1:{_closed_port()}", prefix=like.prefix, connect_timeout=2.0)
    if kind == "zookeeper":
        from prioritylock.stores._zookeeper import ZooKeeperStore

        assert isinstance(like, ZooKeeperStore)
        hosts = f"127.0.0.1:{_closed_port()}"
        # Each call waits the connect timeout for a session that never comes: the shorter, the
        # sooner the test ends (1 s made it 6 s).
        return ZooKeeperStore(hosts, prefix=like.prefix, connect_timeout=0.2)
    if kind.startswith("s3-"):
        from prioritylock.stores._s3 import S3Store
        from tests._servers.s3 import S3Server

        assert isinstance(like, S3Store)
        s3: S3Server = request.getfixturevalue(f"{kind.removeprefix('s3-')}_server")
        return s3.store(like.bucket, endpoint_url=closed, connect_timeout=2.0)
    if kind == "gcs":
        from prioritylock.stores._gcs import GCSStore
        from tests._servers.gcs import FakeGCSServer

        assert isinstance(like, GCSStore)
        gcs: FakeGCSServer = request.getfixturevalue("fake_gcs_server")
        return gcs.store(like.bucket, endpoint=closed, connect_timeout=2.0)
    from azure.core.credentials import AzureNamedKeyCredential

    from prioritylock.stores._azure import AzureBlobStore
    from tests._servers.azure import ACCOUNT, ACCOUNT_KEY

    assert isinstance(like, AzureBlobStore)
    return AzureBlobStore(
        like.container,
        account_url=f"{closed}/{ACCOUNT}",
        credential=AzureNamedKeyCredential(ACCOUNT, ACCOUNT_KEY),
        connect_timeout=2.0,
    )
