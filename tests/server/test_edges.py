"""The sidecar's edges: shutdown leaves no task unretrieved, a stream kept past its cleanup
window is not an error; a port in use, an open bind without a token and a components directory
without a lock store each refused in one line; HTTPS and gRPC over TLS."""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import gc
import ipaddress
import itertools
import json
import logging
import os
import signal
import socket
import ssl
import subprocess
import sys
import urllib.request
import uuid
import weakref
from pathlib import Path
from typing import Any

import grpc
import pytest
from dapr.proto.runtime.v1 import dapr_pb2_grpc, lock_pb2

from prioritylock._errors import ConfigError
from prioritylock.server._alpha2 import Alpha2Locks, Forbidden, Options, Stream
from prioritylock.server._config import ServeConfig
from prioritylock.server._http2 import UnlockRequest
from prioritylock.server._names import BadRequest, Names
from prioritylock.stores import open_store
from tools.emulators import free_port

pytestmark = pytest.mark.timeout(60)

_FORCED = "force unlock through prioritylock serve"


def test_a_release_nobody_waits_for_leaves_no_unretrieved_exception() -> None:
    """The stream handler waiting on a release is cancelled (its client went, then the service
    stopped) while the release is on its way, and the release finds the lock taken over: its
    LockNotFound must not end as "Task exception was never retrieved"."""
    reported: list[dict[str, Any]] = []

    async def scenario() -> weakref.ref[asyncio.Future[None]]:
        asyncio.get_running_loop().set_exception_handler(lambda _, ctx: reported.append(ctx))
        locks = Alpha2Locks(Names({"s": open_store(f"memory://{uuid.uuid4().hex}")}, "app"))
        try:
            held = await locks.lock("s", "r", Options(owner="stubborn"), stream=Stream())
            await locks.force_unlock("s", "r", "taken away", by="operator")
            ender = asyncio.create_task(locks.end(held))
            await asyncio.sleep(0)  # end() now waits on the release it started
            ender.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await ender
            assert held.ending is not None
            release = weakref.ref(held.ending)
            while not held.ending.done():
                await asyncio.sleep(0.01)
            await held.lock.aclose()
            return release
        finally:
            locks.close()

    release = asyncio.run(scenario())
    gc.collect()
    assert release() is None
    assert not [ctx for ctx in reported if "never retrieved" in str(ctx.get("message"))]


def test_a_stream_kept_past_its_cleanup_window_is_not_an_error(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Keeping the stream open past the window is the client's documented choice: the service
    says so at WARNING, and nothing is logged as an error."""

    async def scenario() -> list[str]:
        locks = Alpha2Locks(Names({"s": open_store(f"memory://{uuid.uuid4().hex}")}, "app"))
        stream = Stream()
        try:
            held = await locks.lock(
                # A window past the 0.5 s drift allowance: a shorter one is never announced.
                "s",
                "r",
                Options(owner="stubborn", cleanup_timeout=0.8),
                stream=stream,
            )
            boss = await locks.lock(
                "s", "r", Options(owner="boss", priority=9, forceful=True, waiting_timeout=1.0)
            )
            seen: list[str] = []
            while not seen or seen[-1] != "Lost":
                event = await asyncio.wait_for(stream.events.get(), 10)
                seen.append(type(event).__name__)
            for done in (held, boss):
                with contextlib.suppress(Exception):
                    await locks.end(done)
                await done.lock.aclose()
            return seen
        finally:
            locks.close()

    with caplog.at_level(logging.INFO):
        seen = asyncio.run(scenario())
    assert seen == ["CleanupRequested", "Lost"]
    assert "kept the lock past its cleanup window" in caplog.text
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []


# -- starting up: ports, exposure, TLS, components -------------------------------------------------


def _serve(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``prioritylock serve`` expected to refuse to start: its exit code and output."""
    command = [sys.executable, "-m", "prioritylock", "serve", "--app-id", "a", *args]
    full = {k: v for k, v in os.environ.items() if k != "DAPR_API_TOKEN"}
    return subprocess.run(
        command,
        env={**full, **(env or {})},
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


def _one_line(done: subprocess.CompletedProcess[str], code: int) -> str:
    assert done.returncode == code, done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1, lines  # no traceback, no gRPC log line
    return lines[0]


@pytest.mark.parametrize("flag", ["--http-port", "--grpc-port"])
def test_a_port_in_use_is_named_with_its_flag(flag: str) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        ports = {"--http-port": "0", "--grpc-port": "0", flag: port}
        done = _serve("--store", "x=memory://x", *itertools.chain(*ports.items()))
    line = _one_line(done, 10)
    assert f"127.0.0.1:{port} (address already in use)" in line
    assert f"choose another port with {flag}" in line


def test_listening_beyond_loopback_needs_a_token_or_the_override() -> None:
    line = _one_line(_serve("--store", "x=memory://x", "--host", "0.0.0.0"), 3)
    assert "--host 0.0.0.0: refusing to listen beyond this machine without an API token" in line
    assert "--allow-no-token" in line and "DAPR_API_TOKEN" in line
    ServeConfig(stores={}, app_id="a", host="0.0.0.0", api_token="t")  # a token: allowed
    ServeConfig(stores={}, app_id="a", host="0.0.0.0", allow_no_token=True)  # said explicitly
    ServeConfig(stores={}, app_id="a", host="::1")  # loopback
    with pytest.raises(ConfigError, match="give both"):
        ServeConfig(stores={}, app_id="a", tls_cert="cert.pem")


def test_components_without_a_prioritylock_component(tmp_path: Path) -> None:
    (tmp_path / "redis.yaml").write_text(
        "apiVersion: dapr.io/v1alpha1\nkind: Component\nmetadata:\n  name: statestore\n"
        "spec:\n  type: state.redis\n  version: v1\n  metadata: []\n",
        encoding="utf-8",
    )
    line = _one_line(_serve("--components", str(tmp_path)), 3)
    assert "no prioritylock component" in line
    assert "found only state.redis (redis.yaml)" in line
    assert "'lock.prioritylock'" in line


def _certificate(directory: Path) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 and localhost, and its key (PEM files)."""
    x509 = pytest.importorskip("cryptography.x509")
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_file, key_file = directory / "cert.pem", directory / "key.pem"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_file, key_file


def test_tls_round_trip_on_http_and_grpc(tmp_path: Path) -> None:
    cert, key = _certificate(tmp_path)
    http_port, grpc_port = free_port(), free_port()
    command = [
        *(sys.executable, "-m", "prioritylock", "serve", "--app-id", "a"),
        *("--store", f"locks=memory://{uuid.uuid4().hex}"),
        *("--http-port", str(http_port), "--grpc-port", str(grpc_port)),
        *("--tls-cert", str(cert), "--tls-key", str(key)),
    ]
    env = {k: v for k, v in os.environ.items() if k != "DAPR_API_TOKEN"}
    proc = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert proc.stdout is not None
        ready = proc.stdout.readline().decode()  # the service says so once it listens
        assert "HTTP over TLS" in ready and "gRPC over TLS" in ready, ready
        context = ssl.create_default_context(cafile=str(cert))
        body = json.dumps({"resourceId": "r", "lockOwner": "o", "expiryInSeconds": 30})
        request = urllib.request.Request(
            f"https://127.0.0.1:{http_port}/v1.0-alpha1/lock/locks",
            data=body.encode(),
            method="POST",
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, context=context, timeout=10) as answer:
            assert json.loads(answer.read()) == {"success": True}
        with pytest.raises(OSError):  # plain HTTP is not served
            urllib.request.urlopen(f"http://127.0.0.1:{http_port}/v1.0/healthz", timeout=10)
        credentials = grpc.ssl_channel_credentials(root_certificates=cert.read_bytes())
        with grpc.secure_channel(f"localhost:{grpc_port}", credentials) as channel:
            stub = dapr_pb2_grpc.DaprStub(channel)  # type: ignore[no-untyped-call]
            got = stub.TryLockAlpha1(
                lock_pb2.TryLockRequest(
                    store_name="locks", resource_id="r", lock_owner="p", expiry_in_seconds=30
                ),
                timeout=10,
            )
            assert got.success is False  # the HTTPS call holds it
            freed = stub.UnlockAlpha1(
                lock_pb2.UnlockRequest(store_name="locks", resource_id="r", lock_owner="o"),
                timeout=10,
            )
            assert freed.status == lock_pb2.UnlockResponse.SUCCESS
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=20)
    assert proc.returncode == 0, err


@pytest.mark.parametrize(
    ("body", "operator", "expected"),
    [
        ({"lockID": "abc"}, False, UnlockRequest("abc")),
        ({"force": True}, True, UnlockRequest(None, True, _FORCED, "operator")),
        ({"force": True, "message": "m", "by": "ann"}, True, UnlockRequest(None, True, "m", "ann")),
        ({"force": False, "lockID": "abc"}, True, UnlockRequest("abc")),
        ({}, False, BadRequest),
        ({"lockID": ""}, False, BadRequest),
        ({"force": "yes"}, True, BadRequest),
        ({"force": True, "lockID": "abc"}, True, BadRequest),
        ({"force": True, "by": 7}, True, BadRequest),
        ({"force": True}, False, Forbidden),
    ],
)
def test_what_an_unlock_asks(
    body: dict[str, Any], operator: bool, expected: UnlockRequest | type[Exception]
) -> None:
    if isinstance(expected, UnlockRequest):
        assert UnlockRequest.parse(body, operator=operator) == expected
    else:
        with pytest.raises(expected):
            UnlockRequest.parse(body, operator=operator)
