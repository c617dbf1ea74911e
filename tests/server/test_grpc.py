"""What only the gRPC front end has: health, reflection, and hostile clients (garbage bytes on
both services, oversized messages, a client that opens many streams and vanishes).

The vanishing client opens 200 streams here; ``PRIORITYLOCK_GRPC_STREAMS=10000 pytest
tests/server/test_grpc.py -k vanishes`` runs the full 10,000 on demand.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Iterator

import grpc
import pytest
from dapr.proto.runtime.v1 import lock_pb2 as dapr_lock_pb2
from google.protobuf import descriptor_pool
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import (
    ProtoReflectionDescriptorDatabase,
)

from prioritylock.server._proto import lock_pb2, lock_pb2_grpc
from tests.server.helpers import Service

pytestmark = pytest.mark.timeout(120)

STREAMS = int(os.environ.get("PRIORITYLOCK_GRPC_STREAMS", "200"))
SEED = int(os.environ.get("PRIORITYLOCK_GRPC_SEED", "23"))


@pytest.fixture(scope="module")
def svc() -> Iterator[Service]:
    running = Service({"locks": f"memory://{uuid.uuid4().hex}"}, args=["--ping-interval", "1"])
    try:
        yield running
    finally:
        running.close()


@pytest.fixture(scope="module")
def channel(svc: Service) -> Iterator[grpc.Channel]:
    with grpc.insecure_channel(f"127.0.0.1:{svc.grpc_port}") as opened:
        yield opened


def _stub(channel: grpc.Channel) -> lock_pb2_grpc.LockServiceStub:
    return lock_pb2_grpc.LockServiceStub(channel)  # type: ignore[no-untyped-call]


def _serving(channel: grpc.Channel, resource: str) -> None:
    """The service still takes and releases a lock."""
    stub = _stub(channel)
    got = stub.Acquire(
        lock_pb2.LockRequest(store_name="locks", resource_id=resource, immediate=True), timeout=10
    )
    stub.Unlock(
        lock_pb2.UnlockRequest(store_name="locks", resource_id=resource, lock_id=got.lock_id),
        timeout=10,
    )


def test_health_and_reflection(channel: grpc.Channel) -> None:
    health = health_pb2_grpc.HealthStub(channel)
    for service in ("", "prioritylock.v1.LockService", "dapr.proto.runtime.v1.Dapr"):
        answer = health.Check(health_pb2.HealthCheckRequest(service=service), timeout=10)
        assert answer.status == health_pb2.HealthCheckResponse.SERVING, service
    # What grpcurl does: learn the services and their messages from the server alone.
    database = ProtoReflectionDescriptorDatabase(channel)
    assert "prioritylock.v1.LockService" in database.get_services()
    pool = descriptor_pool.DescriptorPool(database)
    service = pool.FindServiceByName("prioritylock.v1.LockService")
    assert service.methods_by_name["Lock"].server_streaming
    assert (
        pool.FindMessageTypeByName("prioritylock.v1.LockRequest").fields_by_name["ttl"].number == 3
    )


# 12 payloads that are not the request messages (random bytes, truncated varints, wrong wire
# types, a length past the end), as a hostile or broken client sends them.
_rng = random.Random(SEED)
GARBAGE = [
    b"\xff",
    b"\x0a\xff\xff\xff\xff",
    b"\x12\x05ab",
    b"\x08\x80\x80\x80\x80\x80\x80\x80\x80\x80\x80\x01",
    b"\x0f",
    b"\x12\xff\xff\xff\xff\x0f" + b"x" * 10,
    b"\x1a\x02\xff\xfe",
    *(bytes(_rng.randrange(256) for _ in range(_rng.randrange(1, 64))) for _ in range(5)),
]


@pytest.mark.parametrize(
    "method",
    [
        "/dapr.proto.runtime.v1.Dapr/TryLockAlpha1",
        "/dapr.proto.runtime.v1.Dapr/UnlockAlpha1",
        "/prioritylock.v1.LockService/Acquire",
        "/prioritylock.v1.LockService/Unlock",
    ],
)
def test_garbage_is_invalid_argument(svc: Service, channel: grpc.Channel, method: str) -> None:
    call = channel.unary_unary(method)
    codes = []
    for payload in GARBAGE:
        try:
            call(payload, timeout=10)
        except grpc.RpcError as exc:
            codes.append(exc.code())
        else:
            codes.append(grpc.StatusCode.OK)
    # Some garbage parses (protobuf skips unknown fields): then the empty fields are refused.
    assert set(codes) <= {grpc.StatusCode.INVALID_ARGUMENT}, codes
    _serving(channel, "after-garbage")


def test_garbage_to_the_lock_stream(channel: grpc.Channel) -> None:
    call = channel.unary_stream("/prioritylock.v1.LockService/Lock")
    for payload in GARBAGE:
        with pytest.raises(grpc.RpcError) as caught:
            list(call(payload, timeout=10))
        assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT


def test_garbage_is_logged_quietly() -> None:
    """Each malformed request is one line at INFO, never a traceback."""
    running = Service({"locks": "memory://quiet"})
    try:
        with grpc.insecure_channel(f"127.0.0.1:{running.grpc_port}") as opened:
            for method in (
                "/dapr.proto.runtime.v1.Dapr/TryLockAlpha1",
                "/prioritylock.v1.LockService/Lock",
            ):
                for payload in GARBAGE[:3]:
                    with pytest.raises(grpc.RpcError):
                        list(opened.unary_stream(method)(payload, timeout=10))
        code, out = running.stop()
    finally:
        running.close()
    assert code == 0, out
    assert "Traceback" not in out and "ERROR" not in out, out
    assert out.count("that are not a ") == 6, out


def test_oversized_messages_are_refused(channel: grpc.Channel) -> None:
    """Larger than the request size limit (64 KiB): refused before it is parsed."""
    stub = _stub(channel)
    huge = lock_pb2.LockRequest(store_name="locks", resource_id="big", owner="x" * 100_000)
    with pytest.raises(grpc.RpcError) as caught:
        stub.Acquire(huge, timeout=10)
    assert caught.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    with pytest.raises(grpc.RpcError) as caught:
        list(stub.Lock(huge, timeout=10))
    assert caught.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    alpha1 = channel.unary_unary(
        "/dapr.proto.runtime.v1.Dapr/TryLockAlpha1",
        request_serializer=dapr_lock_pb2.TryLockRequest.SerializeToString,
    )
    with pytest.raises(grpc.RpcError) as caught:
        alpha1(dapr_lock_pb2.TryLockRequest(store_name="locks", resource_id="x" * 100_000))
    assert caught.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    # a string within the message limit but too long for a lease field: a bad argument
    long_owner = lock_pb2.LockRequest(store_name="locks", resource_id="big", owner="x" * 300)
    with pytest.raises(grpc.RpcError) as caught:
        stub.Acquire(long_owner, timeout=10)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    _serving(channel, "after-oversized")


def test_a_slow_reader_holds_up_nobody(channel: grpc.Channel) -> None:
    """A client that reads nothing of its stream for a while: others are served meanwhile, it
    then finds its events in order, and its end releases the lock."""
    stub = _stub(channel)
    call = stub.Lock(lock_pb2.LockRequest(store_name="locks", resource_id="slow"))
    time.sleep(2.5)  # unread: the lock, then pings every second, wait in the transport
    _serving(channel, "beside-the-slow-reader")
    kinds = [next(call).WhichOneof("lock_server_stream") for _ in range(2)]
    assert kinds == ["lock_acquired", "ping"]
    call.cancel()
    deadline = time.monotonic() + 5
    while (got := _try(stub, "slow")) is None:
        assert time.monotonic() < deadline, "not released"
        time.sleep(0.05)  # the release follows the cancel on the service's own time
    stub.Unlock(lock_pb2.UnlockRequest(store_name="locks", resource_id="slow", lock_id=got))


# A client that opens STREAMS lock streams over one channel, says so, and waits to be killed.
_VANISHING = textwrap.dedent(
    """
    import asyncio, sys
    import grpc
    from prioritylock.server._proto import lock_pb2, lock_pb2_grpc

    async def main(port, names):
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = lock_pb2_grpc.LockServiceStub(channel)
            calls = [
                stub.Lock(lock_pb2.LockRequest(store_name="locks", resource_id=name))
                for name in names
            ]
            async def acquired(call):
                async for message in call:
                    if message.WhichOneof("lock_server_stream") == "lock_acquired":
                        return
                raise SystemExit("stream ended before lock_acquired")
            await asyncio.gather(*(acquired(call) for call in calls))
            print("holding", len(calls), flush=True)
            await asyncio.sleep(3600)

    asyncio.run(main(int(sys.argv[1]), sys.stdin.read().split()))
    """
)


@pytest.mark.timeout(max(120, STREAMS // 20))
def test_a_client_with_many_streams_vanishes() -> None:
    """Every lock of a client that dies holding STREAMS streams is released, and the service
    keeps serving."""
    running = Service({"locks": f"memory://{uuid.uuid4().hex}"}, args=["--ping-interval", "5"])
    rng = random.Random(SEED)
    names = [f"v{rng.randrange(10**9)}-{n}" for n in range(STREAMS)]
    client = subprocess.Popen(
        [sys.executable, "-c", _VANISHING, str(running.grpc_port)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert client.stdin is not None and client.stdout is not None
        client.stdin.write(" ".join(names))
        client.stdin.close()
        line = client.stdout.readline()
        assert line == f"holding {STREAMS}\n", line
        with grpc.insecure_channel(f"127.0.0.1:{running.grpc_port}") as opened:
            stub = _stub(opened)
            sample = rng.sample(names, min(20, STREAMS))
            for name in sample:
                with pytest.raises(grpc.RpcError) as caught:
                    stub.Acquire(
                        lock_pb2.LockRequest(store_name="locks", resource_id=name, immediate=True),
                        timeout=10 + STREAMS / 200,  # just after a burst the service is busy
                    )
                assert caught.value.code() == grpc.StatusCode.ABORTED
            client.send_signal(signal.SIGKILL)  # gone without a word: its connection drops
            client.wait(timeout=10)
            deadline = time.monotonic() + 5 + STREAMS / 500
            for free, name in enumerate(names):  # every one is released, soon
                while (got := _try(stub, name)) is None:
                    assert time.monotonic() < deadline, f"{free} of {STREAMS} released"
                    time.sleep(0.05)  # the service notices the hang-up on its own time
                stub.Unlock(
                    lock_pb2.UnlockRequest(store_name="locks", resource_id=name, lock_id=got),
                    timeout=10,
                )
            _serving(opened, "after-vanishing")
    finally:
        if client.poll() is None:
            client.kill()
        client.wait(timeout=10)
        for pipe in (client.stdout, client.stderr):
            if pipe is not None:
                pipe.close()
        running.close()


def _try(stub: lock_pb2_grpc.LockServiceStub, resource: str) -> str | None:
    """The lock id of an immediate Acquire, or None when the lock is held."""
    try:
        got = stub.Acquire(
            lock_pb2.LockRequest(store_name="locks", resource_id=resource, immediate=True),
            timeout=10 + STREAMS / 200,
        )
    except grpc.RpcError as exc:
        if exc.code() != grpc.StatusCode.ABORTED:
            raise
        return None
    return str(got.lock_id)
