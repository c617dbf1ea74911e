"""Bad input, tokens, store failures, restarts, app isolation and shutdown of ``serve``."""

from __future__ import annotations

import socket
import subprocess
import sys
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
import pytest
from dapr.proto.runtime.v1 import dapr_pb2_grpc, lock_pb2, metadata_pb2

import tools.service
from tests._servers.s3 import S3Server
from tests.server.helpers import Service
from tools.emulators import free_port

pytestmark = pytest.mark.timeout(90)

LOCK = "/v1.0-alpha1/lock/locks"
UNLOCK = "/v1.0-alpha1/unlock/locks"


@pytest.fixture(scope="module")
def mem() -> Iterator[Service]:
    running = Service({"locks": f"memory://{uuid.uuid4().hex}"}, token="s3cret-token")
    try:
        yield running
    finally:
        running.close()


def _stub(service: Service) -> tuple[grpc.Channel, dapr_pb2_grpc.DaprStub]:
    channel = grpc.insecure_channel(f"127.0.0.1:{service.grpc_port}")
    return channel, dapr_pb2_grpc.DaprStub(channel)  # type: ignore[no-untyped-call]


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        (b"{not json", 400, "ERR_MALFORMED_REQUEST"),
        (b"[1, 2]", 400, "ERR_MALFORMED_REQUEST"),
        (
            b'{"resourceId": "r", "lockOwner": "o", "expiryInSeconds": 0}',
            400,
            "ERR_MALFORMED_REQUEST",
        ),
        (
            b'{"resourceId": "r", "lockOwner": "o", "expiryInSeconds": -5}',
            400,
            "ERR_MALFORMED_REQUEST",
        ),
        (
            b'{"resourceId": "r", "lockOwner": "o", "expiryInSeconds": "x"}',
            400,
            "ERR_MALFORMED_REQUEST",
        ),
        (
            b'{"resourceId": "r", "lockOwner": "o", "expiryInSeconds": 1.5}',
            400,
            "ERR_MALFORMED_REQUEST",
        ),
        (
            b'{"resourceId": "r", "lockOwner": "o", "expiryInSeconds": "3_0"}',
            400,
            "ERR_MALFORMED_REQUEST",
        ),
        (
            b'{"resourceId": "r", "lockOwner": "o", "expiryInSeconds": " 30"}',
            400,
            "ERR_MALFORMED_REQUEST",
        ),
        (b'{"resourceId": "r", "lockOwner": "o"}', 400, "ERR_MALFORMED_REQUEST"),
        (
            b'{"resourceId": "", "lockOwner": "o", "expiryInSeconds": 5}',
            400,
            "ERR_MALFORMED_REQUEST",
        ),
        (
            b'{"resourceId": "r", "lockOwner": "", "expiryInSeconds": 5}',
            400,
            "ERR_MALFORMED_REQUEST",
        ),
        (
            b'{"resourceId": "a//b", "lockOwner": "o", "expiryInSeconds": 5}',
            400,
            "ERR_MALFORMED_REQUEST",
        ),
        (
            b'{"resourceId": "r", "lockOwner": 7, "expiryInSeconds": 5}',
            400,
            "ERR_MALFORMED_REQUEST",
        ),
        (
            b'{"resourceId": "r", "lockOwner": "o", "expiryInSeconds": 5}' + b" " * 70_000,
            413,
            "ERR_REQUEST_TOO_LARGE",
        ),
    ],
)
def test_bad_lock_requests(mem: Service, body: bytes, status: int, code: str) -> None:
    got, answer = mem.request("POST", LOCK, body)
    assert (got, answer["errorCode"]) == (status, code), answer
    assert mem.lock("locks", "after-bad-input", f"o-{uuid.uuid4().hex}", 1) in (True, False)
    assert mem.proc.poll() is None


def test_expiry_as_a_string_of_digits_is_taken_as_dapr_takes_it(mem: Service) -> None:
    # Dapr's sidecar reads the body with protobuf's JSON mapping: an int32 may be a string.
    body = b'{"resourceId": "as-string", "lockOwner": "o", "expiryInSeconds": "30"}'
    assert mem.request("POST", LOCK, body) == (200, {"success": True})
    assert mem.lock("locks", "as-string", "another", 30) is False, "held, for 30 s"


def test_unknown_store_and_bad_unlock(mem: Service) -> None:
    status, body = mem.request(
        "POST",
        "/v1.0-alpha1/lock/nope",
        {"resourceId": "r", "lockOwner": "o", "expiryInSeconds": 5},
    )
    assert (status, body["errorCode"]) == (400, "ERR_LOCK_STORE_NOT_FOUND")
    assert body["message"] == "lock store nope not found"
    status, body = mem.request(
        "POST", "/v1.0-alpha1/unlock/nope", {"resourceId": "r", "lockOwner": "o"}
    )
    assert (status, body["errorCode"]) == (400, "ERR_LOCK_STORE_NOT_FOUND")
    status, body = mem.request("POST", UNLOCK, {"resourceId": "r", "lockOwner": ""})
    assert (status, body["errorCode"]) == (400, "ERR_MALFORMED_REQUEST")


def test_token_required_when_configured(mem: Service) -> None:
    body = {"resourceId": "tok", "lockOwner": "o", "expiryInSeconds": 5}
    status, answer = mem.request("POST", LOCK, body, token="wrong")
    assert status == 401, answer
    assert "s3cret-token" not in str(answer)
    status, _ = mem.request("GET", "/v1.0/healthz", token="wrong")
    assert status == 204  # health checks need no token, as in Dapr
    channel, stub = _stub(mem)
    with channel:
        request = lock_pb2.TryLockRequest(
            store_name="locks", resource_id="tok", lock_owner="o", expiry_in_seconds=5
        )
        with pytest.raises(grpc.RpcError) as caught:
            stub.TryLockAlpha1(request, metadata=[("dapr-api-token", "wrong")])
        assert caught.value.code() == grpc.StatusCode.UNAUTHENTICATED
        ok = stub.TryLockAlpha1(request, metadata=[("dapr-api-token", "s3cret-token")])
        assert ok.success is True


def test_grpc_invalid_argument_and_unimplemented(mem: Service) -> None:
    channel, stub = _stub(mem)
    token = [("dapr-api-token", "s3cret-token")]
    bad = [
        lock_pb2.TryLockRequest(
            store_name="locks", resource_id="", lock_owner="o", expiry_in_seconds=5
        ),
        lock_pb2.TryLockRequest(
            store_name="locks", resource_id="r", lock_owner="", expiry_in_seconds=5
        ),
        lock_pb2.TryLockRequest(
            store_name="locks", resource_id="r", lock_owner="o", expiry_in_seconds=0
        ),
        lock_pb2.TryLockRequest(
            store_name="nope", resource_id="r", lock_owner="o", expiry_in_seconds=5
        ),
    ]
    with channel:
        for request in bad:
            with pytest.raises(grpc.RpcError) as caught:
                stub.TryLockAlpha1(request, metadata=token)
            assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT, request
        with pytest.raises(grpc.RpcError) as caught:
            stub.UnlockAlpha1(
                lock_pb2.UnlockRequest(store_name="nope", resource_id="r", lock_owner="o"),
                metadata=token,
            )
        assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        with pytest.raises(grpc.RpcError) as caught:
            stub.GetMetadata(metadata_pb2.GetMetadataRequest(), metadata=token)
        assert caught.value.code() == grpc.StatusCode.UNIMPLEMENTED
        answer = stub.UnlockAlpha1(
            lock_pb2.UnlockRequest(store_name="locks", resource_id="never", lock_owner="o"),
            metadata=token,
        )
        assert answer.status == lock_pb2.UnlockResponse.LOCK_DOES_NOT_EXIST


def test_store_failure_is_500_without_secrets(moto_server: S3Server) -> None:
    url = (
        f"s3://plk-no-such-bucket/locks?endpoint={moto_server.endpoint_url}"
        "&region=us-east-1&addressing=path"
    )
    env = {
        "AWS_ACCESS_KEY_ID": moto_server.access_key_id,
        "AWS_SECRET_ACCESS_KEY": moto_server.secret_access_key,
    }
    # Without --no-store-check it would not start (tests/server/test_store_check.py).
    service = Service({"locks": url}, env=env, args=["--no-store-check"], health="/v1.0/healthz")
    try:
        status, body = service.request(
            "POST", LOCK, {"resourceId": "r", "lockOwner": "o", "expiryInSeconds": 5}
        )
        assert (status, body["errorCode"]) == (500, "ERR_TRY_LOCK"), body
        status, body = service.request("POST", UNLOCK, {"resourceId": "r", "lockOwner": "o"})
        assert (status, body["errorCode"]) == (500, "ERR_UNLOCK"), body
        assert service.request("GET", "/v1.0/healthz")[0] == 204  # still serving
    finally:
        code, out = service.stop()
    assert code == 0, out
    for text in (out, str(body)):
        assert moto_server.secret_access_key not in text
        assert "endpoint=" not in text


def test_restart_keeps_alpha1_leases_and_sigterm_exits_cleanly(tmp_path: Path) -> None:
    stores = {"locks": (tmp_path / "store").as_uri()}
    first = Service(stores)
    try:
        assert first.lock("locks", "job", "owner1", 60) is True
    finally:
        code, out = first.stop()
    assert code == 0, out
    assert "ready" in out
    second = Service(stores)
    try:
        assert second.lock("locks", "job", "owner1", 60) is False  # still held, not reentrant
        assert second.lock("locks", "job", "owner2", 60) is False
        assert second.unlock("locks", "job", "owner2") == 2
        assert second.unlock("locks", "job", "owner1") == 0  # its owner, after a restart
        assert second.lock("locks", "job", "owner2", 60) is True
    finally:
        assert second.stop()[0] == 0


def test_two_replicas_and_two_apps_on_one_store(tmp_path: Path) -> None:
    stores = {"locks": (tmp_path / "store").as_uri()}
    a1, a2, b = (
        Service(stores, app_id="a"),
        Service(stores, app_id="a"),
        Service(stores, app_id="b"),
    )
    try:
        assert a1.lock("locks", "job", "owner1", 60) is True
        assert a2.lock("locks", "job", "owner2", 60) is False  # the same app's lock
        assert b.lock("locks", "job", "owner2", 60) is True  # another app: another key
        assert a2.unlock("locks", "job", "owner1") == 0  # unlocked by its owner on a replica
        assert a2.lock("locks", "job", "owner3", 60) is True
        assert a1.unlock("locks", "job", "owner1") == 2  # a1 remembers owner1; the store doesn't
        assert a2.unlock("locks", "job", "owner3") == 0
        assert a1.lock("locks", "job", "owner2", 60) is True  # a1 asks the store, not its memory
        assert a2.lock("locks", "job", "owner1", 60) is False
        assert a2.unlock("locks", "job", "owner1") == 2
        assert a2.unlock("locks", "job", "owner2") == 0
    finally:
        for service in (a1, a2, b):
            service.close()


def test_concurrent_tries_one_winner(mem: Service) -> None:
    resource = f"race-{uuid.uuid4().hex[:8]}"
    with ThreadPoolExecutor(16) as pool:
        results = list(
            pool.map(lambda n: mem.lock("locks", resource, f"owner{n % 4}", 30), range(32))
        )
    assert results.count(True) == 1, results


def test_grpc_message_too_large(mem: Service) -> None:
    channel, stub = _stub(mem)
    request = lock_pb2.TryLockRequest(
        store_name="locks", resource_id="r" * 70_000, lock_owner="o", expiry_in_seconds=5
    )
    with channel, pytest.raises(grpc.RpcError) as caught:
        stub.TryLockAlpha1(request, metadata=[("dapr-api-token", "s3cret-token")])
    assert caught.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert mem.request("GET", "/v1.0/healthz")[0] == 204


@pytest.mark.filterwarnings("ignore:The Distributed Lock API is an Alpha")
def test_sdk_with_token_and_with_block(mem: Service, monkeypatch: pytest.MonkeyPatch) -> None:
    from dapr.clients import DaprClient

    monkeypatch.setenv("DAPR_RUNTIME_HOST", "127.0.0.1")
    monkeypatch.setenv("DAPR_HTTP_PORT", str(mem.http_port))
    monkeypatch.setenv("DAPR_GRPC_PORT", str(mem.grpc_port))
    monkeypatch.setenv("DAPR_API_TOKEN", "s3cret-token")
    resource = f"sdk-{uuid.uuid4().hex[:8]}"
    with DaprClient() as client:
        with client.try_lock("locks", resource, "owner1", 30) as lock:
            assert lock.success
            assert not client.try_lock("locks", resource, "owner2", 30).success
        # Leaving the with-block unlocked it.
        assert client.unlock("locks", resource, "owner1").status.value == 1
    monkeypatch.setenv("DAPR_API_TOKEN", "wrong")
    with DaprClient() as client, pytest.raises(grpc.RpcError) as caught:
        client.try_lock("locks", resource, "owner1", 30)
    assert caught.value.code() == grpc.StatusCode.UNAUTHENTICATED


def test_missing_extra_is_one_clear_line(tmp_path: Path) -> None:
    code = (
        "import sys; sys.modules['aiohttp'] = None\n"
        "from prioritylock.cli import main\n"
        "sys.exit(main(['serve', '--app-id', 'a', '--store', 'x=memory://x']))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=30, check=False
    )
    assert done.returncode == 3, done.stderr
    assert "pip install 'prioritylock[server]'" in done.stderr
    assert len(done.stderr.splitlines()) == 1


def test_the_service_imports_neither_the_cli_nor_the_testing_helpers() -> None:
    """Every module of ``prioritylock.server`` loads without ``prioritylock.cli`` or
    ``prioritylock.testing`` (what they share lives in neutral private modules)."""
    code = (
        "import importlib, pkgutil, sys, prioritylock.server as s\n"
        "for m in pkgutil.walk_packages(s.__path__, 'prioritylock.server.'):\n"
        "    importlib.import_module(m.name)\n"
        "print(sorted(m for m in sys.modules if m.startswith(('prioritylock.cli', "
        "'prioritylock.testing'))))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.strip() == "[]"


@pytest.mark.parametrize(
    ("method", "path", "status", "code"),
    [
        ("GET", "/no/such/route", 404, "ERR_NOT_FOUND"),
        ("POST", "/v1.0-alpha2/lock/locks/r/nope", 404, "ERR_NOT_FOUND"),
        ("PUT", LOCK, 405, "ERR_METHOD_NOT_ALLOWED"),
        ("GET", UNLOCK, 405, "ERR_METHOD_NOT_ALLOWED"),
    ],
)
def test_unknown_routes_answer_json(
    mem: Service, method: str, path: str, status: int, code: str
) -> None:
    got, answer = mem.request(method, path, b"{}")
    assert (got, answer["errorCode"]) == (status, code), answer
    assert answer["message"]


def test_a_port_taken_between_its_pick_and_the_start_is_picked_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        picks = iter([free_port(), port])  # the first start's gRPC port is already bound
        monkeypatch.setattr(tools.service, "free_port", lambda: next(picks, None) or free_port())
        running = Service({"locks": f"memory://{uuid.uuid4().hex}"})
        try:
            assert running.grpc_port != port
            assert running.proc.poll() is None
        finally:
            running.close()
