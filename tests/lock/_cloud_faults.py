"""Faults injected at the SDK boundary of the cloud stores, for tests that drive real Locks.

:func:`open_injector` gives a store of the kind under test, with its *own* SDK client on the same
bucket or container as the test's ``store_factory``, whose requests can be failed the ways
networks and servers fail them:

- **S3** (moto, SeaweedFS): a botocore ``before-send`` handler on the store's client
  (``store.client.meta.events``) answers in the server's place with a fabricated error response,
  or raises what urllib3 would (read timeout, connection closed); with ``deliver`` it first sends
  the signed request to the real server itself, so the write lands and only its response is lost
  or replaced. With ``sdk_retries`` the store is built on a caller's client whose botocore retries
  are on, so a retried write is visible as the SDK does it.
- **GCS** and **Azure**: a :class:`~tests._servers.gcs.FaultyAdapter` mounted on the requests
  session under the SDK (``google.auth`` ``AuthorizedSession`` / azure-core
  ``RequestsTransport``), as ``tests/stores/test_gcs.py`` and ``test_azure.py`` do; this subclass
  picks faults by seam operation instead of HTTP method, and can keep failing until cleared.

- **Redis**: a ``redis.Connection`` subclass in the store's connection pool fails the scripts
  and scans. Redis has no statuses: a refused request is an error reply the script never ran
  under (``LOADING`` for a 5xx or 429, the script's own "condition failed" answer for a 409 or
  412); a delivered fault with a status loses the answer instead (an error reply always means
  the script did not run, so "landed, then answered 503" is a lost answer on Redis).
- **ZooKeeper**: a ``KazooClient`` subclass whose asynchronous calls (the store's requests) fail
  as planned. ZooKeeper has no statuses: a refused request is its ``ThrottledOpError`` (a 409 or
  412: ``NodeExistsError`` for a create, ``BadVersionError`` otherwise); a lost answer is
  ``ConnectionLoss``, a timeout an answer that never comes (the store's read timeout is 1 s).
- **etcd**: a ``urllib3.HTTPConnectionPool`` subclass as the store's pool answers in the
  gateway's place, or raises what urllib3 would (read timeout, connection reset). A 409 or 412
  is a transaction answered without ``succeeded`` (its condition failed); other statuses are
  answered as they are, with the gateway's JSON error.

With ``via="proxy"`` the same faults are injected on the wire instead, by a
:class:`~tests._helpers.fault_proxy.FaultProxy` in front of the server (the store's endpoint is
the proxy's route): a refused request is answered by the proxy, a reset cuts the connection
before the request is forwarded, a delivered fault forwards it and then resets the connection or
replaces the server's answer. A proxy cannot make the SDK time out without waiting for its read
timeout, so ``lose="timeout"`` is the SDK hooks' alone (:attr:`Injector.can_time_out`).

Faults are queued per seam operation: ``"read"``, ``"write"`` (create and replace: one request
type on every store), ``"delete"`` and ``"list"``. Everything else goes to the real server.
"""

from __future__ import annotations

import functools
import http
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import pytest
import requests
import urllib3.exceptions

from prioritylock.stores import ObjectStore
from tests._helpers.fault_proxy import Choice, FaultProxy
from tests._servers.azure import azure_error_body
from tests._servers.gcs import FaultyAdapter, gcs_error_body

__all__ = ["VIAS", "Fault", "Injector", "Op", "Via", "open_injector"]

Op = Literal["read", "write", "delete", "list"]
Via = Literal["sdk", "proxy"]
#: Where faults can be injected: at the SDK's HTTP boundary, or on the wire by the fault proxy.
VIAS: tuple[Via, ...] = ("sdk", "proxy")
Loss = Literal["timeout", "reset"]

# Error codes of fabricated answers, by status, as each service spells them.
_S3_CODES = {
    409: "ConditionalRequestConflict",
    412: "PreconditionFailed",
    429: "TooManyRequests",
    500: "InternalError",
    502: "BadGateway",
    503: "SlowDown",
}
_AZURE_CODES = {409: "BlobAlreadyExists", 412: "ConditionNotMet"}


@dataclass(frozen=True)
class Fault:
    """How one request fails.

    :ivar status: answer with this HTTP status (fabricated; the server's answer, if the request
        was delivered, is dropped).
    :ivar code: the error code in the fabricated answer (S3 only; default by status).
    :ivar lose: no answer at all: the read times out, or the connection is reset.
    :ivar deliver: let the request reach the real server first (a write lands).
    :ivar before: called on the sending thread before the request is failed (and before it is
        delivered): lets a test make another client act at exactly that moment.
    """

    status: int | None = None
    code: str | None = None
    lose: Loss | None = None
    deliver: bool = False
    before: Callable[[], None] | None = None

    def __post_init__(self) -> None:
        if (self.status is None) == (self.lose is None):
            raise ValueError("a fault gives exactly one of status and lose")


@dataclass
class _Entry:
    fault: Fault
    remaining: int | None  # None: until cleared


@dataclass
class _Plan:
    """Faults queued per operation; thread-safe; counts what it injected."""

    _cond: threading.Condition = field(default_factory=threading.Condition)
    _queues: dict[str, list[_Entry]] = field(default_factory=dict)
    used: dict[str, int] = field(default_factory=dict)
    passed: dict[str, int] = field(default_factory=dict)

    def add(self, op: Op, fault: Fault, times: int | None) -> None:
        if times is not None and times < 1:
            raise ValueError("times must be positive (or None: until cleared)")
        with self._cond:
            self._queues.setdefault(op, []).append(_Entry(fault, times))

    def take(self, op: str) -> Fault | None:
        with self._cond:
            queue = self._queues.get(op)
            if not queue:
                self.passed[op] = self.passed.get(op, 0) + 1
                return None
            entry = queue[0]
            if entry.remaining is not None:
                entry.remaining -= 1
                if entry.remaining == 0:
                    queue.pop(0)
            self.used[op] = self.used.get(op, 0) + 1
            self._cond.notify_all()
            return entry.fault

    def clear(self) -> None:
        with self._cond:
            self._queues.clear()

    def pending(self) -> int:
        with self._cond:
            return sum(
                1 if e.remaining is None else e.remaining
                for queue in self._queues.values()
                for e in queue
            )

    def wait_used(self, op: Op, count: int, timeout: float) -> bool:
        with self._cond:
            return self._cond.wait_for(lambda: self.used.get(op, 0) >= count, timeout)


class Injector:
    """A store of the kind under test whose requests fail as told (see the module notes)."""

    def __init__(self, kind: str, store: ObjectStore, plan: _Plan, via: Via = "sdk") -> None:
        self.kind = kind
        self.store = store
        self.via = via
        #: Whether ``Fault(lose="timeout")`` can be injected (not through the proxy).
        self.can_time_out = via == "sdk"
        self._plan = plan
        self._closers: list[Callable[[], None]] = []

    def fail(self, op: Op, fault: Fault, times: int | None = 1) -> None:
        """Fail the next ``times`` requests of ``op`` (``None``: every one until :meth:`clear`)."""
        if fault.lose == "timeout" and not self.can_time_out:
            raise ValueError(f"no read timeouts {self.via}: see the module notes")
        self._plan.add(op, fault, times)

    def clear(self) -> None:
        """Drop every fault not yet used: requests go through from now on."""
        self._plan.clear()

    def injected(self, op: Op) -> int:
        """How many ``op`` requests were failed so far."""
        with self._plan._cond:
            return self._plan.used.get(op, 0)

    def passed(self, op: Op) -> int:
        """How many ``op`` requests went through untouched so far."""
        with self._plan._cond:
            return self._plan.passed.get(op, 0)

    def pending(self) -> int:
        """Faults queued and not yet used (a fault ``until cleared`` counts one)."""
        return self._plan.pending()

    def wait_injected(self, op: Op, count: int, timeout: float) -> bool:
        """Wait until ``count`` requests of ``op`` were failed; false on timeout."""
        return self._plan.wait_used(op, count, timeout)

    def close(self) -> None:
        for closer in reversed(self._closers):
            closer()


# -- S3: botocore event hooks ----------------------------------------------------------------------


class _Body:
    """The ``raw`` of a fabricated botocore response."""

    def __init__(self, data: bytes) -> None:
        self._data = data

    def stream(self, **_kwargs: Any) -> Any:
        yield self._data


_S3_OPS = {"GetObject": "read", "PutObject": "write", "DeleteObject": "delete"}


def _s3_body(status: int, code: str | None = None) -> tuple[bytes, dict[str, str]]:
    code = code or _S3_CODES.get(status, "InjectedFault")
    body = (
        '<?xml version="1.0" encoding="UTF-8"?>'
        f"<Error><Code>{code}</Code><Message>injected by the test</Message>"
        "<RequestId>test</RequestId></Error>"
    ).encode()
    return body, {"Content-Type": "application/xml"}


def _s3_injector(
    request: pytest.FixtureRequest, kind: str, like: ObjectStore, sdk_retries: int
) -> Injector:
    import botocore.awsrequest
    import botocore.exceptions
    import botocore.httpsession

    from prioritylock.stores._s3 import S3Store
    from tests._servers.s3 import S3Server

    assert isinstance(like, S3Store)
    server: S3Server = request.getfixturevalue(f"{kind.removeprefix('s3-')}_server")
    client: Any = None
    if sdk_retries:
        client = server.client(retries={"total_max_attempts": 1 + sdk_retries, "mode": "standard"})
        store = S3Store(like.bucket, like.prefix, client=client)
    else:
        store = server.store(like.bucket, like.prefix)
    plan = _Plan()
    session = botocore.httpsession.URLLib3Session()

    def handler(request: Any, event_name: str, **_kwargs: Any) -> Any:
        operation = event_name.rsplit(".", 1)[-1]
        fault = plan.take(_S3_OPS.get(operation, "list"))
        if fault is None:
            return None  # botocore sends it
        if fault.before is not None:
            fault.before()
        if fault.deliver:
            session.send(request)  # the server applies it; its answer is dropped
        if fault.lose == "timeout":
            raise botocore.exceptions.ReadTimeoutError(endpoint_url=request.url)
        if fault.lose == "reset":
            raise botocore.exceptions.ConnectionClosedError(endpoint_url=request.url)
        assert fault.status is not None
        body, headers = _s3_body(fault.status, fault.code)
        headers["Content-Length"] = str(len(body))
        return botocore.awsrequest.AWSResponse(request.url, fault.status, headers, _Body(body))

    unique = f"cloud-faults-{id(plan)}"
    store.client.meta.events.register("before-send.s3", handler, unique_id=unique)
    injector = Injector(kind, store, plan)
    injector._closers.append(store.close)
    if client is not None:
        injector._closers.append(client.close)
    injector._closers.append(
        lambda: store.client.meta.events.unregister("before-send.s3", unique_id=unique)
    )
    injector._closers.append(session.close)
    return injector


# -- GCS and Azure: a FaultyAdapter at the requests transport --------------------------------------


class _PlannedAdapter(FaultyAdapter):
    """:class:`FaultyAdapter` whose faults come from a :class:`_Plan`, by seam operation."""

    def __init__(
        self, plan: _Plan, error_body: Callable[[int], tuple[bytes, dict[str, str]]]
    ) -> None:
        super().__init__(error_body)
        self._plan = plan

    def send(  # type: ignore[override]
        self, request: requests.PreparedRequest, **kwargs: Any
    ) -> requests.Response:
        fault = self._plan.take(_http_op(request.method or "", request.url or ""))
        if fault is None:
            return super().send(request, **kwargs)
        if fault.before is not None:
            fault.before()
        if fault.deliver:
            response = super().send(request, **kwargs)  # no queued fault: straight through
            response.content  # noqa: B018 - read it all, so the server has finished the request
            response.close()
        if fault.lose == "reset":
            reset = ConnectionResetError(104, "Connection reset by peer")
            raise requests.exceptions.ConnectionError(
                urllib3.exceptions.ProtocolError("Connection aborted.", reset), request=request
            )
        if fault.lose == "timeout":
            raise requests.exceptions.ReadTimeout("injected read timeout", request=request)
        assert fault.status is not None
        return self._fabricate(request, fault.status)


def _http_op(method: str, url: str) -> str:
    path = url.split("?", 1)[0]
    if method == "GET":
        # GCS lists objects at .../b/BUCKET/o; Azure lists with comp=list; S3 with list-type=2.
        listing = "comp=list" in url or "list-type=" in url or path.endswith("/o")
        return "list" if listing else "read"
    if method in ("POST", "PUT"):
        return "write"
    if method == "DELETE":
        return "delete"
    return "other"


def _azure_body(status: int) -> tuple[bytes, dict[str, str]]:
    """Azure's own error for ``status``: a lost create is 409 BlobAlreadyExists, else 412."""
    code = _AZURE_CODES.get(status)
    if code is None:
        return azure_error_body(status)
    body = (
        '<?xml version="1.0" encoding="utf-8"?>'
        f"<Error><Code>{code}</Code><Message>injected fault</Message></Error>"
    ).encode()
    return body, {"Content-Type": "application/xml", "x-ms-error-code": code}


def _gcs_injector(request: pytest.FixtureRequest, like: ObjectStore) -> Injector:
    from prioritylock.stores._gcs import GCSStore
    from tests._servers.gcs import FakeGCSServer

    assert isinstance(like, GCSStore)
    server: FakeGCSServer = request.getfixturevalue("fake_gcs_server")
    plan = _Plan()
    adapter = _PlannedAdapter(plan, gcs_error_body)
    client = server.client(http=server.faulty_session(adapter))
    store = GCSStore(like.bucket, like.prefix, client=client)
    injector = Injector("gcs", store, plan)
    injector._closers.append(client.close)
    return injector


def _azure_injector(request: pytest.FixtureRequest, like: ObjectStore) -> Injector:
    from prioritylock.stores._azure import AzureBlobStore
    from tests._servers.azure import AzuriteServer

    assert isinstance(like, AzureBlobStore)
    server: AzuriteServer = request.getfixturevalue("azurite_server")
    plan = _Plan()
    adapter = _PlannedAdapter(plan, _azure_body)
    client = server.container_client(like.container, adapter=adapter)
    store = AzureBlobStore(like.container, like.prefix, client=client)
    injector = Injector("azure", store, plan)
    injector._closers.append(client.close)
    return injector


# -- Redis: a connection class in the store's pool ------------------------------------------------


def _redis_injector(like: ObjectStore) -> Injector:
    import redis
    import redis.exceptions

    from prioritylock.stores import _redis

    assert isinstance(like, _redis.RedisStore)
    plan = _Plan()
    kinds: dict[str, Op] = {"read": "read", "create": "write", "replace": "write"}

    class FaultyConnection(redis.Connection):
        fault: Fault | None = None
        script = ""

        def send_command(self, *args: Any, **kwargs: Any) -> None:
            name = str(args[0]).upper() if args else ""
            op: str | None = None
            if name in ("EVAL", "EVALSHA"):
                scripts = _redis._SCRIPTS if name == "EVAL" else _redis._SHAS
                self.script = next((op for op, text in scripts.items() if text == args[1]), "")
                op = kinds.get(self.script, "delete" if self.script == "delete" else None)
            elif name == "SCAN":
                op = "list"
            fault = None if op is None else plan.take(op)
            if fault is not None and fault.before is not None:
                fault.before()
            if fault is None or fault.deliver:
                # Connecting sends (and reads) commands of its own: the fault is set after.
                super().send_command(*args, **kwargs)  # type: ignore[no-untyped-call]
            if op is not None:
                self.fault = fault

        def read_response(self, *args: Any, **kwargs: Any) -> Any:
            fault, self.fault = self.fault, None
            if fault is None:
                return super().read_response(*args, **kwargs)
            if fault.deliver:
                super().read_response(*args, **kwargs)  # the server acted; its answer is lost
                self.disconnect()  # type: ignore[no-untyped-call]
                raise redis.exceptions.ConnectionError("Connection reset by peer")
            if fault.lose == "timeout":
                raise redis.exceptions.TimeoutError("Timeout reading from socket")
            if fault.lose == "reset":
                raise redis.exceptions.ConnectionError("Connection reset by peer")
            assert fault.status is not None
            if fault.status in (409, 412):
                return [b"exists" if self.script == "create" else b"moved"]
            raise redis.exceptions.BusyLoadingError("Redis is loading the dataset in memory")

    options = like.client.connection_pool.connection_kwargs
    store = _redis.RedisStore(
        options["host"], options["port"], prefix=like.prefix, password=options["password"]
    )
    store.client.connection_pool.connection_class = FaultyConnection
    for script in _redis._SCRIPTS.values():  # a fault is for the script's run, not a NOSCRIPT
        store.client.script_load(script)
    injector = Injector("redis", store, plan)
    injector._closers.append(store.close)
    return injector


# -- ZooKeeper: a kazoo client whose calls fail ------------------------------------------------


def _zookeeper_injector(like: ObjectStore) -> Injector:
    from kazoo import exceptions as zk_errors
    from kazoo.client import KazooClient

    from prioritylock.stores._zookeeper import ZooKeeperStore

    assert isinstance(like, ZooKeeperStore)
    plan = _Plan()
    depth = like.prefix.count("/")  # the prefix's znodes are made unfailed

    class FaultyClient(KazooClient):  # type: ignore[misc]
        def _planned(self, op: str, send: Callable[[], Any], refused: BaseException) -> Any:
            fault = plan.take(op)
            if fault is None:
                return send()
            if fault.before is not None:
                fault.before()
            if fault.deliver:
                send().get(timeout=10)  # the server applies it; its answer is dropped
            result = self.handler.async_result()
            if fault.lose == "timeout":
                return result  # never answered: the store's read timeout ends the wait
            if fault.lose == "reset" or (fault.deliver and fault.status not in (409, 412)):
                result.set_exception(zk_errors.ConnectionLoss())
            else:
                throttled = zk_errors.ThrottledOpError()
                result.set_exception(refused if fault.status in (409, 412) else throttled)
            return result

        def get_async(self, path: str, watch: Any = None) -> Any:
            send = functools.partial(super().get_async, path, watch)
            return self._planned("read", send, zk_errors.BadVersionError())

        def create_async(self, path: str, value: bytes = b"", *args: Any, **kw: Any) -> Any:
            if path.count("/") <= depth:
                return super().create_async(path, value, *args, **kw)
            send = functools.partial(super().create_async, path, value, *args, **kw)
            return self._planned("write", send, zk_errors.NodeExistsError())

        def set_async(self, path: str, value: bytes, version: int = -1) -> Any:
            send = functools.partial(super().set_async, path, value, version)
            return self._planned("write", send, zk_errors.BadVersionError())

        def delete_async(self, path: str, version: int = -1) -> Any:
            send = functools.partial(super().delete_async, path, version)
            return self._planned("delete", send, zk_errors.BadVersionError())

        def get_children_async(self, path: str, *args: Any, **kw: Any) -> Any:
            send = functools.partial(super().get_children_async, path, *args, **kw)
            return self._planned("list", send, zk_errors.BadVersionError())

    client = FaultyClient(like.hosts)
    store = ZooKeeperStore(like.hosts, prefix=like.prefix, read_timeout=1.0, client=client)
    injector = Injector("zookeeper", store, plan)
    injector._closers.append(store.close)
    return injector


# -- etcd: a urllib3 pool whose requests fail ---------------------------------------------------


def _etcd_injector(like: ObjectStore) -> Injector:
    import json

    import urllib3

    from prioritylock.stores._etcd import EtcdStore

    assert isinstance(like, EtcdStore)
    plan = _Plan()

    def answer(status: int, body: dict[str, Any]) -> urllib3.HTTPResponse:
        return urllib3.HTTPResponse(body=json.dumps(body).encode(), status=status)

    class FaultyPool(urllib3.HTTPConnectionPool):
        def urlopen(self, method: str, url: str, body: Any = None, **kw: Any) -> Any:  # type: ignore[override]
            sent = json.loads(body or b"{}")
            if url.endswith("/range"):
                op = "list" if sent.get("keys_only") else "read"
            else:
                op = "delete" if "request_delete_range" in str(sent) else "write"
            fault = plan.take(op)
            if fault is None:
                return super().urlopen(method, url, body, **kw)
            if fault.before is not None:
                fault.before()
            if fault.deliver:
                super().urlopen(method, url, body, **kw)  # the server applies it; answer dropped
            if fault.lose == "timeout":
                raise urllib3.exceptions.ReadTimeoutError(self, url, "Read timed out.")
            if fault.lose == "reset":
                reset = ConnectionResetError(104, "Connection reset by peer")
                raise urllib3.exceptions.ProtocolError("Connection aborted.", reset)
            assert fault.status is not None
            if fault.status in (409, 412) and op != "read":
                return answer(200, {"header": {"revision": "1"}})  # the txn's condition failed
            return answer(fault.status, {"error": "injected", "code": 14, "message": "injected"})

    host, _colon, port = like.endpoint.rpartition(":")
    pool = FaultyPool(
        host, int(port), timeout=urllib3.Timeout(connect=2.0, read=1.0), retries=False
    )
    store = EtcdStore(like.endpoint, prefix=like.prefix, pool=pool)
    injector = Injector("etcd", store, plan)
    injector._closers.append(store.close)
    return injector


# -- any cloud: the fault proxy on the wire -------------------------------------------------------


def _raw_answer(status: int, body: bytes, headers: dict[str, str]) -> bytes:
    lines = [
        f"HTTP/1.1 {status} {http.HTTPStatus(status).phrase}",
        *(f"{name}: {value}" for name, value in headers.items()),
        f"Content-Length: {len(body)}",
    ]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


def _proxy_injector(request: pytest.FixtureRequest, kind: str, like: ObjectStore) -> Injector:
    """``like``'s bucket through a :class:`FaultProxy` whose chooser takes faults from a plan."""
    server: Any
    error_body: Callable[[int, str | None], tuple[bytes, dict[str, str]]]
    if kind.startswith("s3-"):
        from prioritylock.stores._s3 import S3Store

        assert isinstance(like, S3Store)
        server = request.getfixturevalue(f"{kind.removeprefix('s3-')}_server")
        upstream, error_body, bucket = server.endpoint_url, _s3_body, like.bucket

        def options(url: str) -> dict[str, Any]:
            return {"endpoint_url": url}

    elif kind == "gcs":
        from prioritylock.stores._gcs import GCSStore

        assert isinstance(like, GCSStore)
        server = request.getfixturevalue("fake_gcs_server")
        upstream, bucket = server.url, like.bucket

        def error_body(status: int, _code: str | None) -> tuple[bytes, dict[str, str]]:
            return gcs_error_body(status)

        def options(url: str) -> dict[str, Any]:
            return {"endpoint": url}

    elif kind == "azure":
        from azure.core.credentials import AzureNamedKeyCredential

        from prioritylock.stores._azure import AzureBlobStore
        from tests._servers.azure import ACCOUNT, ACCOUNT_KEY

        assert isinstance(like, AzureBlobStore)
        server = request.getfixturevalue("azurite_server")
        upstream, bucket = server.account_url, like.container
        account = upstream.split("://", 1)[1].partition("/")[2]

        def error_body(status: int, _code: str | None) -> tuple[bytes, dict[str, str]]:
            return _azure_body(status)

        def options(url: str) -> dict[str, Any]:
            credential = AzureNamedKeyCredential(ACCOUNT, ACCOUNT_KEY)
            return {"account_url": f"{url}/{account}", "credential": credential}

    else:
        raise ValueError(f"no proxy faults for store kind {kind!r}")
    plan = _Plan()

    def choose(method: str, target: str) -> Choice | None:
        fault = plan.take(_http_op(method, target))
        if fault is None:
            return None
        if fault.before is not None:
            fault.before()
        if fault.lose is not None:  # a reset: before forwarding, or after the server acted
            return Choice("drop" if fault.deliver else "reset")
        assert fault.status is not None
        answer = _raw_answer(fault.status, *error_body(fault.status, fault.code))
        return Choice("replace" if fault.deliver else "answer", answer)

    proxy = FaultProxy(upstream.split("://", 1)[1].split("/", 1)[0], seed=0)
    proxy.chooser = choose
    store: ObjectStore = server.store(bucket, like.prefix, **options(proxy.route(kind)))
    injector = Injector(kind, store, plan, via="proxy")
    injector._closers += [proxy.close, store.close]
    return injector


def open_injector(
    request: pytest.FixtureRequest,
    kind: str,
    like: ObjectStore,
    *,
    sdk_retries: int = 0,
    via: Via = "sdk",
) -> Injector:
    """A faulty store of ``kind`` on the bucket (container) and prefix of ``like``.

    :param sdk_retries: S3 only: the store's client retries each request this many times
        (a caller's client; the stores' own clients never retry).
    :param via: where the faults are injected: the SDK's HTTP boundary or the fault proxy.
    """
    if via == "proxy":
        if sdk_retries:
            raise ValueError("the proxy's store sends every request with SDK retries off")
        return _proxy_injector(request, kind, like)
    if kind.startswith("s3-"):
        return _s3_injector(request, kind, like, sdk_retries)
    if sdk_retries:
        raise ValueError(f"{kind}: the store sends every request with SDK retries off")
    if kind == "gcs":
        return _gcs_injector(request, like)
    if kind == "azure":
        return _azure_injector(request, like)
    if kind == "redis":
        return _redis_injector(like)
    if kind == "zookeeper":
        return _zookeeper_injector(like)
    if kind == "etcd":
        return _etcd_injector(like)
    raise ValueError(f"no SDK-boundary faults for store kind {kind!r}")
