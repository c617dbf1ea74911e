"""S3Store's native async path (obstore): how ``AsyncLock`` sends reads, creates and replaces.

The same contract as the boto3 path, shown three ways: the store contract run through the native
path on moto and SeaweedFS; every canned error answer (a stub S3 server of our own on 127.0.0.1)
and every transport failure translated to the very error the boto3 path gives; and an
``AsyncLock`` whose held lease never sends a request through boto3.
"""

from __future__ import annotations

import contextlib
import http.server
import logging
import re
import socket
import threading
import traceback
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from prioritylock import (
    ConditionFailed,
    ConfigError,
    LockBuilder,
    PriorityLockError,
    StoreAccessError,
    StoreError,
    StoreUnavailable,
)
from prioritylock.stores import ObjectStore, ReadResult, Versioned, open_store
from prioritylock.stores._s3 import S3Store
from prioritylock.testing import StoreContract
from tests._helpers.fault_proxy import FaultPlan, FaultProxy
from tests._servers.s3 import S3Server, needs_moto, needs_seaweedfs
from tests.lock.drivers import LOOP

pytestmark = [pytest.mark.timeout(60)]

NATIVE_OPS = ("read", "read_if_changed", "create", "replace")
WRITES = ("create", "replace")


class NativePath:
    """An ``ObjectStore`` whose reads, creates and replaces go through ``inner``'s native async
    client (on the suite's event loop thread), as ``AsyncLock`` sends them; the rest through
    ``inner`` itself."""

    def __init__(self, inner: S3Store) -> None:
        self.inner = inner

    def _native(self, op: str, *args: Any) -> Any:
        pending = self.inner._call_async(op, *args)
        assert pending is not None, f"{self.inner!r} has no native {op}"

        async def call() -> Any:
            return await pending

        return LOOP.run(call())

    def read(self, key: str) -> Versioned | None:
        found: Versioned | None = self._native("read", key)
        return found

    def read_if_changed(self, key: str, version: str) -> ReadResult:
        found: ReadResult = self._native("read_if_changed", key, version)
        return found

    def create(self, key: str, data: bytes) -> str:
        return str(self._native("create", key, data))

    def replace(self, key: str, data: bytes, version: str) -> str:
        return str(self._native("replace", key, data, version))

    def delete(self, key: str, version: str) -> None:
        self.inner.delete(key, version)

    def list(self, prefix: str) -> list[str]:
        return self.inner.list(prefix)

    def close(self) -> None:
        self.inner.close()

    @property
    def stats(self) -> Any:
        return self.inner.stats

    @property
    def capabilities(self) -> Any:
        return self.inner.capabilities

    @property
    def namespace(self) -> str:
        return self.inner.namespace

    def __repr__(self) -> str:
        return f"NativePath({self.inner!r})"


# -- fixtures -------------------------------------------------------------------------------------


class TestNativeContract(StoreContract):
    """Every contract test, through the native path, on moto and SeaweedFS."""

    @pytest.fixture
    def store_factory(self, server: S3Server, bucket: str) -> Callable[[], ObjectStore]:
        return lambda: NativePath(server.store(bucket, async_io="native"))

    @pytest.fixture
    def store(self, store_factory: Callable[[], ObjectStore]) -> Iterator[ObjectStore]:
        opened = store_factory()
        yield opened
        opened.close()


# -- a stub S3 server of our own -------------------------------------------------------------------


class _Stub:
    """Answers every request with one canned S3 error (or never, or by closing the connection),
    on 127.0.0.1; counts the requests it read."""

    def __init__(self) -> None:
        self.status, self.code = 503, "SlowDown"
        self.body: bytes | None = None  # instead of the S3 error document
        self.mode = "answer"  # or "hang", "close"
        self.requests = 0
        self.release = threading.Event()
        stub = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _any(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                if length:
                    self.rfile.read(length)
                stub.requests += 1
                if stub.mode == "hang":
                    stub.release.wait(10)
                    self.close_connection = True
                    return
                if stub.mode == "close":
                    self.close_connection = True
                    return
                body = stub.body
                if body is None:
                    body = (
                        f'<?xml version="1.0" encoding="UTF-8"?><Error><Code>{stub.code}</Code>'
                        "<Message>canned by the test</Message></Error>"
                    ).encode()
                self.send_response(stub.status)
                self.send_header("Content-Type", "application/xml")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(body)

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _any  # noqa: N815

            def log_message(self, *_args: Any) -> None:
                pass

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        self.endpoint = f"http://127.0.0.1:{self._server.server_address[1]}"

    def close(self) -> None:
        self.release.set()
        self._server.shutdown()
        self._server.server_close()


@pytest.fixture(scope="module")
def stub() -> Iterator[_Stub]:
    running = _Stub()
    yield running
    running.close()


def _stub_store(endpoint: str, async_io: str, **options: Any) -> S3Store:
    return S3Store(
        "plk-stub",
        "locks/",
        endpoint_url=endpoint,
        region="us-east-1",
        addressing_style="path",
        aws_access_key_id="AKIDPLKSTUB",
        aws_secret_access_key="plk-stub-secret",
        async_io=async_io,
        **options,
    )


def _attempt(store: S3Store | NativePath, op: str) -> PriorityLockError:
    calls: dict[str, Callable[[], object]] = {
        "read": lambda: store.read("doc"),
        "read_if_changed": lambda: store.read_if_changed("doc", '"0123"'),
        "create": lambda: store.create("doc", b"after"),
        "replace": lambda: store.replace("doc", b"after", '"0123"'),
    }
    with pytest.raises(PriorityLockError) as caught:
        calls[op]()
    return caught.value


def _same_error(endpoint: str, op: str, **options: Any) -> tuple[PriorityLockError, S3Store]:
    """``op`` through boto3 and through the native path: the two errors must be the same."""
    sync, native = (
        _stub_store(endpoint, "threads", **options),
        _stub_store(endpoint, "native", **options),
    )
    try:
        expected = _attempt(sync, op)
        got = _attempt(NativePath(native), op)
    finally:
        sync.close()
    assert type(got) is type(expected), f"native {got!r}, boto3 {expected!r}"
    # The same words, but for the client's own exception class at the end of a transport error.
    assert _gist(got) == _gist(expected)
    assert getattr(got, "outcome_unknown", None) == getattr(expected, "outcome_unknown", None)
    assert native.stats.total == 1, f"the native path made {native.stats!r}"
    return got, native


ANSWERS = [
    (503, "SlowDown"),
    (429, "TooManyRequests"),
    (500, "InternalError"),
    (502, "BadGateway"),
    (501, "NotImplemented"),
    (409, "ConditionalRequestConflict"),
    (403, "AccessDenied"),
    (403, "SignatureDoesNotMatch"),
    (404, "NoSuchBucket"),
    (400, "InvalidArgument"),
    (412, "PreconditionFailed"),
]


@pytest.mark.parametrize("op", NATIVE_OPS)
@pytest.mark.parametrize(("status", "code"), ANSWERS, ids=[f"{s}-{c}" for s, c in ANSWERS])
def test_every_answer_is_the_error_boto3_gives_after_one_attempt(
    stub: _Stub, op: str, status: int, code: str
) -> None:
    if status == 412 and op not in WRITES:
        pytest.skip("a read is not sent a condition that can fail")
    stub.mode, stub.status, stub.code = "answer", status, code
    before = stub.requests
    got, _native = _same_error(stub.endpoint, op)
    assert stub.requests - before == 2, "one attempt each, boto3 and native: no retries"
    if isinstance(got, ConditionFailed):
        assert op in WRITES and status in (409, 412)
    elif status in (429, 500, 502, 503):
        assert isinstance(got, StoreUnavailable)
        assert got.outcome_unknown is (op in WRITES)
        assert code in str(got)
    elif status == 403:
        assert isinstance(got, StoreAccessError)
        assert "plk-stub-secret" not in _everything_said(got)


def test_a_missing_object_and_a_missing_bucket_are_told_apart(stub: _Stub) -> None:
    """Both are 404s (obstore raises FileNotFoundError for either): only the code tells."""
    stub.mode, stub.status, stub.code = "answer", 404, "NoSuchKey"
    native = NativePath(_stub_store(stub.endpoint, "native"))
    try:
        assert native.read("doc") is None
        stub.code = "NoSuchBucket"
        with pytest.raises(PriorityLockError, match="NoSuchBucket"):
            native.read("doc")
    finally:
        native.close()


@pytest.mark.parametrize(
    "body", [b"<html><body>Not Found</body></html>", b""], ids=["html", "empty"]
)
def test_a_404_that_is_not_s3s_is_an_error_not_an_absent_object(stub: _Stub, body: bytes) -> None:
    """A proxy's or a wrong path's 404 has no NoSuchKey: reading it as "absent" would tell a
    waiter the lease is gone."""
    stub.mode, stub.status, stub.body = "answer", 404, body
    try:
        sync, native = _stub_store(stub.endpoint, "threads"), _stub_store(stub.endpoint, "native")
        try:
            expected = _attempt(sync, "read")
            got = _attempt(NativePath(native), "read")
        finally:
            sync.close()
            native.close()
    finally:
        stub.body = None
    assert type(got) is type(expected) is StoreError, (got, expected)
    assert "HTTP 404" in str(got)


def test_an_echoed_session_token_is_never_said(
    stub: _Stub, caplog: pytest.LogCaptureFixture
) -> None:
    """AWS answers a refused signature with the canonical request, session token included;
    obstore's error carries the whole answer. Ours is chained to a summary instead."""
    token = "plk-token-" + uuid.uuid4().hex
    stub.mode, stub.status = "answer", 403
    stub.body = (
        "<Error><Code>SignatureDoesNotMatch</Code><Message>no</Message><CanonicalRequest>GET\n"
        f"/plk-stub/locks/doc\n\nhost:127.0.0.1\nx-amz-security-token:{token}\n"
        "</CanonicalRequest></Error>"
    ).encode()
    caplog.set_level(logging.DEBUG)
    native = NativePath(_stub_store(stub.endpoint, "native", aws_session_token=token))
    try:
        for op in NATIVE_OPS:
            error = _attempt(native, op)
            assert isinstance(error, StoreAccessError), repr(error)
            said = _everything_said(error) + repr(error.__context__)
            assert "SignatureDoesNotMatch" in said
            assert token not in said
        assert token not in caplog.text
    finally:
        stub.body = None
        native.close()


@needs_moto
def test_aws_variables_that_boto3_ignores_change_nothing(
    moto_server: S3Server, stub: _Stub, monkeypatch: pytest.MonkeyPatch
) -> None:
    """obstore reads AWS_* variables that boto3 doesn't (or reads differently): they must not
    send the native requests elsewhere, unsigned, or without conditions."""
    for name in ("AWS_ENDPOINT", "AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"):
        monkeypatch.setenv(name, stub.endpoint)  # where nothing succeeds
    monkeypatch.setenv("AWS_SKIP_SIGNATURE", "true")
    monkeypatch.setenv("AWS_CONDITIONAL_PUT", "disabled")
    monkeypatch.setenv("AWS_VIRTUAL_HOSTED_STYLE_REQUEST", "true")
    stub.mode, stub.status, stub.code = "answer", 503, "SlowDown"
    before = stub.requests
    bucket = moto_server.create_bucket()
    native = NativePath(moto_server.store(bucket, async_io="native"))
    try:
        first = native.create("doc", b"one")
        with pytest.raises(ConditionFailed):
            native.create("doc", b"again")
        second = native.replace("doc", b"two", first)
        assert native.read("doc") == Versioned(b"two", second)
    finally:
        native.close()
        moto_server.remove_bucket(bucket)
    assert stub.requests == before, "a native request went where the environment said"


def test_where_boto3_would_behave_otherwise_the_store_keeps_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """On AWS without a region boto3 follows S3's redirects to the bucket's region, and obstore
    would not: the store stays on boto3 ("auto"), or refuses ("native")."""
    for name in ("AWS_REGION", "AWS_DEFAULT_REGION", "AWS_PROFILE", "AWS_ENDPOINT_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent/prioritylock-test")
    keys = {"aws_access_key_id": "AKIDPLK", "aws_secret_access_key": "plk-secret"}
    auto = S3Store("plk-bucket", **keys)  # type: ignore[arg-type]
    try:
        assert auto._native_io() is None
    finally:
        auto.close()
    with pytest.raises(ConfigError, match="region"):
        S3Store("plk-bucket", async_io="native", **keys)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("bucket", "addressing", "endpoint"),
    [
        ("plk-bucket", None, "https://plk-bucket.s3.eu-west-1.amazonaws.com"),
        ("plk.dotted", None, "https://s3.eu-west-1.amazonaws.com"),  # TLS can't name it
        ("plk-bucket", "path", "https://s3.eu-west-1.amazonaws.com"),
    ],
)
def test_aws_addressing_follows_boto3(bucket: str, addressing: str | None, endpoint: str) -> None:
    store = S3Store(
        bucket,
        region="eu-west-1",
        addressing_style=addressing,
        aws_access_key_id="AKIDPLK",
        aws_secret_access_key="plk-secret",
        async_io="native",
    )
    try:
        native = store._native_io()
        assert native is not None
        config = native._store.config  # type: ignore[attr-defined]
        assert config["endpoint"] == endpoint
        assert "plk-secret" not in str(config)
    finally:
        store.close()


@pytest.mark.parametrize("op", NATIVE_OPS)
def test_a_dropped_connection_is_a_lost_answer(stub: _Stub, op: str) -> None:
    """The server read the request and closed the connection: a write may have landed."""
    stub.mode = "close"
    try:
        got, _native = _same_error(stub.endpoint, op)
    finally:
        stub.mode = "answer"
    assert isinstance(got, StoreUnavailable)
    assert got.outcome_unknown is (op in WRITES)


@pytest.mark.parametrize("op", NATIVE_OPS)
def test_nothing_listening_is_never_sent(op: str) -> None:
    got, _native = _same_error(f"http://127.0.0.1:{_unused_port()}", op, connect_timeout=2.0)
    assert isinstance(got, StoreUnavailable)
    assert got.outcome_unknown is False, "a refused connection sent nothing"
    assert ": connection refused (" in str(got), got


@pytest.mark.parametrize("op", ["read", "create"])
def test_an_answer_that_never_comes_times_out_as_a_lost_answer(stub: _Stub, op: str) -> None:
    stub.mode = "hang"
    stub.release.clear()
    native = NativePath(_stub_store(stub.endpoint, "native", connect_timeout=0.5, read_timeout=0.5))
    try:
        error = _attempt(native, op)
    finally:
        stub.release.set()
        stub.mode = "answer"
        native.close()
    assert isinstance(error, StoreUnavailable)
    assert error.outcome_unknown is (op in WRITES)


@needs_moto
@pytest.mark.parametrize("op", WRITES)
def test_a_write_that_lands_and_loses_its_answer_is_outcome_unknown(
    moto_server: S3Server, op: str
) -> None:
    """Through a proxy that forwards the request, lets moto apply it, then cuts the answer."""
    bucket = moto_server.create_bucket()
    proxy = FaultProxy(moto_server.endpoint_url.removeprefix("http://"), seed=1)
    direct = moto_server.store(bucket)
    try:
        version = direct.create("doc", b"before")
        cut = NativePath(
            moto_server.store(bucket, endpoint_url=proxy.route("native"), async_io="native")
        )
        proxy.plan = FaultPlan(drop=1.0)
        write: Callable[[], str] = (
            (lambda: cut.create("new", b"after"))
            if op == "create"
            else (lambda: cut.replace("doc", b"after", version))
        )
        with pytest.raises(StoreUnavailable) as caught:
            write()
        assert caught.value.outcome_unknown is True
        assert proxy.snapshot().get("dropped after forwarding", 0) == 1, proxy.snapshot()
        landed = direct.read("new" if op == "create" else "doc")
        assert landed is not None and landed.data == b"after", "the write landed"
        cut.close()
    finally:
        proxy.close()
        direct.close()
        moto_server.remove_bucket(bucket)


# -- the asyncio lock on the native path ---------------------------------------------------------


@needs_moto
@pytest.mark.parametrize("async_io", ["native", "threads"])
def test_an_async_lock_sends_its_requests_natively_unless_told_not_to(
    moto_server: S3Server, async_io: str
) -> None:
    bucket = moto_server.create_bucket()
    store = moto_server.store(bucket, async_io=async_io)
    through_boto3: list[str] = []

    def seen(request: Any, **_kwargs: Any) -> None:
        through_boto3.append(request.method)

    store.client.meta.events.register("before-send.s3", seen)

    async def cycle() -> int:
        lock = LockBuilder().store(store).path("jobs/native").lease_timeout(30).build_async()
        assert await lock.try_lock()
        fence = lock.fencing_token
        await lock.renew()
        await lock.unlock()
        again = LockBuilder().store(store).path("jobs/native").build_async()
        async with again:
            assert again.fencing_token is not None and again.fencing_token > (fence or 0)
        await lock.aclose()
        await again.aclose()
        return store.stats.total

    try:
        total = LOOP.run(cycle())
        assert total >= 5
        if async_io == "native":
            assert through_boto3 == [], f"boto3 sent {through_boto3}"
        else:
            assert len(through_boto3) == total
    finally:
        store.close()
        moto_server.remove_bucket(bucket)


# -- configuration and credentials ---------------------------------------------------------------


def test_async_io_is_checked() -> None:
    with pytest.raises(ConfigError, match="async_io must be one of"):
        _stub_store("http://127.0.0.1:9", "sometimes")
    client: Any = object()
    with pytest.raises(ConfigError, match="its own client"):
        S3Store("plk-stub", client=client, async_io="native")


def test_the_url_option_chooses_the_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDPLKURL")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "plk-url-secret")
    base = "s3://plk-stub/locks?endpoint=http://127.0.0.1:9&region=us-east-1&addressing=path"
    threads = open_store(base + "&async_io=threads")
    native = open_store(base + "&async_io=native")
    try:
        assert isinstance(threads, S3Store) and isinstance(native, S3Store)
        assert threads._call_async("read", "doc") is None
        pending = native._call_async("read", "doc")
        assert pending is not None
        with contextlib.suppress(StoreUnavailable):
            LOOP.run(_awaited(pending))
    finally:
        threads.close()
        native.close()
    with pytest.raises(ConfigError, match="async_io"):
        open_store(base + "&async_io=fast")


def test_deletes_and_lists_stay_on_boto3(stub: _Stub) -> None:
    native = _stub_store(stub.endpoint, "native")
    try:
        assert native._call_async("delete", "doc", '"0"') is None
        assert native._call_async("list", "") is None
    finally:
        native.close()


@needs_seaweedfs
def test_refused_credentials_never_show_the_secret(
    seaweedfs_server: S3Server, caplog: pytest.LogCaptureFixture
) -> None:
    """SeaweedFS checks signatures: a wrong secret is refused, and nothing says it."""
    bucket = seaweedfs_server.create_bucket()
    secret = "plk-secret-" + uuid.uuid4().hex
    caplog.set_level(logging.DEBUG)
    refused = NativePath(
        seaweedfs_server.store(bucket, aws_secret_access_key=secret, async_io="native")
    )
    try:
        for op in NATIVE_OPS:
            error = _attempt(refused, op)
            assert isinstance(error, StoreAccessError), repr(error)
            assert "SignatureDoesNotMatch" in str(error)
            assert secret not in _everything_said(error)
        assert secret not in repr(refused.inner) and secret not in str(vars(refused.inner))
        assert secret not in caplog.text
    finally:
        refused.close()
        seaweedfs_server.remove_bucket(bucket)


# -- helpers --------------------------------------------------------------------------------------


async def _awaited(pending: Any) -> Any:
    return await pending


def _gist(error: BaseException) -> str:
    return re.sub(r" \(\w+\)$", "", str(error))


def _everything_said(exc: BaseException) -> str:
    return "".join(traceback.format_exception(exc)) + repr(exc) + repr(exc.__cause__)


def _unused_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])
