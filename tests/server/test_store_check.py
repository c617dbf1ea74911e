"""``prioritylock serve`` checks its stores: it refuses to start on a store that fails its first
read (exit 4, naming the store and the fix); with ``--no-store-check`` it serves, says so through
the outbound health (HTTP and gRPC) until the store answers, and a lock request that fails on the
store answers with the error's class and the fix. No secret ever reaches an answer or the log.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import grpc
import pytest
from google.rpc import error_details_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_status import rpc_status

from prioritylock import StoreAccessError
from prioritylock.client import Client
from prioritylock.v1 import lock_pb2, lock_pb2_grpc
from tests._servers.s3 import S3Server
from tests.server.helpers import LockStream, Service
from tools import sdk

pytestmark = pytest.mark.timeout(60)

#: Secrets the service is given; none may appear in an answer or in what the service writes.
SECRET_KEY = "wJalrXUtnFEMI-secret-access-key"
COMPONENT_SECRET = "component-secret-value-7f3a"


def _env(server: S3Server) -> dict[str, str]:
    return {"AWS_ACCESS_KEY_ID": server.access_key_id, "AWS_SECRET_ACCESS_KEY": SECRET_KEY}


def _components(tmp_path: Path, url: str) -> Path:
    """A component directory whose lock store has a secret among its metadata (as Dapr's
    store components carry keys)."""
    (tmp_path / "lockstore.yaml").write_text(
        "apiVersion: dapr.io/v1alpha1\nkind: Component\nmetadata:\n  name: locks\n"
        "spec:\n  type: lock.prioritylock\n  version: v1\n  metadata:\n"
        f"  - name: url\n    value: {json.dumps(url)}\n"
        f"  - name: secretKey\n    value: {COMPONENT_SECRET}\n"
    )
    return tmp_path


def _no_secret(text: str) -> None:
    assert SECRET_KEY not in text
    assert COMPONENT_SECRET not in text


def _until(check: Callable[[], bool], what: str, within: float = 15.0) -> None:
    """Poll a service we don't control (a subprocess): there is no event to wait on."""
    deadline = time.monotonic() + within
    while not check():
        assert time.monotonic() < deadline, f"not {what} within {within:g} s"
        time.sleep(0.1)


@pytest.fixture(scope="module")
def moto(moto_server: S3Server) -> S3Server:
    return moto_server


def _missing(moto: S3Server) -> tuple[str, str]:
    """(bucket that does not exist, the store URL of a prefix in it)."""
    bucket = f"plk-missing-{uuid.uuid4().hex[:12]}"
    return bucket, sdk.store_url("s3-moto", moto.endpoint_url, bucket, "locks")


def test_serve_refuses_a_store_that_fails_its_first_read(moto: S3Server, tmp_path: Path) -> None:
    _, url = _missing(moto)
    done = subprocess.run(
        [sys.executable, "-m", "prioritylock", "serve", "--app-id", "app1",
         "--components", str(_components(tmp_path, url)),
         "--http-port", "0", "--grpc-port", "0"],
        env={**os.environ, **_env(moto)},
        capture_output=True,
        text=True,
        timeout=50,
        check=False,
    )  # fmt: skip
    assert done.returncode == 4, done.stderr
    assert "ready" not in done.stdout
    error = done.stderr.strip().splitlines()[-1]
    assert error.startswith("prioritylock: serve: lock store locks (s3://plk-missing-"), error
    assert "NoSuchBucket" in error and "the bucket does not exist" in error
    assert "--no-store-check" in error
    _no_secret(done.stdout + done.stderr)


def _grpc_error(call: Callable[[], object]) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as caught:
        call()
    return caught.value


def test_no_store_check_serves_and_reports_the_store_until_it_answers(
    moto: S3Server, tmp_path: Path
) -> None:
    bucket, url = _missing(moto)
    service = Service(
        {},
        env=_env(moto),
        components=_components(tmp_path, url),
        args=["--no-store-check"],
        health="/v1.0/healthz",
    )
    try:
        # The process is up, but not ready for the apps: Dapr's SDKs wait on the outbound check.
        assert service.request("GET", "/v1.0/healthz")[0] == 204
        status, body = service.request("GET", "/v1.0/healthz/outbound")
        assert (status, body["errorCode"]) == (500, "ERR_OUTBOUND_HEALTH_NOT_READY")
        with grpc.insecure_channel(f"127.0.0.1:{service.grpc_port}") as channel:
            health = health_pb2_grpc.HealthStub(channel)

            def serving(name: str = "") -> bool:
                answer = health.Check(health_pb2.HealthCheckRequest(service=name), timeout=10)
                return bool(answer.status == health_pb2.HealthCheckResponse.SERVING)

            assert not serving()
            assert not serving("prioritylock.v1.LockService")

            # Every front end answers a store failure with its class and the fix.
            answers: list[str] = []
            alpha1 = {"resourceId": "r", "lockOwner": "o", "expiryInSeconds": 30}
            status, body = service.request("POST", "/v1.0-alpha1/lock/locks", alpha1)
            assert (status, body["errorCode"]) == (500, "ERR_TRY_LOCK")
            answers.append(body["message"])
            status, body = service.request("POST", "/v1.0-alpha2/lock/locks/r", {})
            assert (status, body["errorCode"]) == (500, "ERR_LOCK")
            answers.append(body["message"])
            stream = LockStream(service, "locks", "r")
            try:
                event = stream.event()
            finally:
                stream.close()
            assert event is not None and event["type"] == "error"
            answers.append(event["message"])
            stub = lock_pb2_grpc.LockServiceStub(channel)  # type: ignore[no-untyped-call]
            failed = _grpc_error(
                lambda: next(
                    iter(stub.Lock(lock_pb2.LockRequest(store_name="locks", resource_id="r")))
                )
            )
            assert failed.code() == grpc.StatusCode.INTERNAL
            answers.append(str(failed.details()))
            status_proto = rpc_status.from_call(failed)
            assert status_proto is not None
            info = error_details_pb2.ErrorInfo()
            status_proto.details[0].Unpack(info)
            assert info.metadata["error"] == "StoreAccessError"
            # The Python client raises the library's error for it.
            with (
                Client(f"127.0.0.1:{service.grpc_port}") as client,
                pytest.raises(StoreAccessError, match="the bucket does not exist"),
            ):
                client.acquire("locks", "r", timeout=0)
            for answer in answers:
                assert "StoreAccessError in lock store locks" in answer, answer
                assert "the bucket does not exist" in answer, answer
                _no_secret(answer)

            # The store comes into being: the health checks turn ready, and locks work.
            moto.client().create_bucket(Bucket=bucket)
            _until(lambda: service.request("GET", "/v1.0/healthz/outbound")[0] == 204, "ready")
            assert serving() and serving("prioritylock.v1.LockService")
            got = stub.Acquire(
                lock_pb2.LockRequest(store_name="locks", resource_id="r", immediate=True),
                timeout=10,
            )
            assert got.fence == 1
        code, output = service.stop()
        assert code == 0, output
        assert "lock store locks answers" in output
        _no_secret(output)
    finally:
        service.close()
        with contextlib.suppress(Exception):  # absent if the test failed before making it
            moto.remove_bucket(bucket)


def test_redact_hides_what_a_url_may_carry() -> None:
    from prioritylock.server._health import redact

    text = "read at https://user:pw@host:9000/x?sig=abc&se=1 failed; s3://bucket/locks kept"
    assert redact(text) == "read at https://***@host:9000/x?*** failed; s3://bucket/locks kept"
