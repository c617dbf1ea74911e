"""Dapr's lock conformance cases against a running service, over plain HTTP and over gRPC with
the official Dapr Python SDK (sync and asyncio), on the memory store and on S3 (moto)."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any, Protocol

import pytest

from tests.server.conftest import ON_SERVERS
from tests.server.helpers import Service

pytestmark = [
    pytest.mark.timeout(90),
    pytest.mark.filterwarnings("ignore:The Distributed Lock API is an Alpha"),
]


class Client(Protocol):
    def lock(self, store: str, resource: str, owner: str, expiry: int) -> bool: ...
    def unlock(self, store: str, resource: str, owner: str) -> int: ...


class HttpClient:
    def __init__(self, service: Service) -> None:
        self.service = service

    def lock(self, store: str, resource: str, owner: str, expiry: int) -> bool:
        return bool(self.service.lock(store, resource, owner, expiry))

    def unlock(self, store: str, resource: str, owner: str) -> int:
        return int(self.service.unlock(store, resource, owner))


class SdkClient:
    """``dapr.clients.DaprClient``: gRPC to the service, after waiting on its health check."""

    def __init__(self) -> None:
        from dapr.clients import DaprClient

        self.client = DaprClient()

    def lock(self, store: str, resource: str, owner: str, expiry: int) -> bool:
        return bool(self.client.try_lock(store, resource, owner, expiry).success)

    def unlock(self, store: str, resource: str, owner: str) -> int:
        return int(self.client.unlock(store, resource, owner).status.value)


class AioSdkClient:
    """``dapr.aio.clients.DaprClient``, driven from a loop of its own."""

    def __init__(self) -> None:
        from dapr.aio.clients import DaprClient

        self.loop = asyncio.new_event_loop()
        self.client = self.loop.run_until_complete(self._make(DaprClient))

    @staticmethod
    async def _make(factory: Callable[[], Any]) -> Any:
        return factory()

    def lock(self, store: str, resource: str, owner: str, expiry: int) -> bool:
        response = self.loop.run_until_complete(
            self.client.try_lock(store, resource, owner, expiry)
        )
        return bool(response.success)

    def unlock(self, store: str, resource: str, owner: str) -> int:
        response = self.loop.run_until_complete(self.client.unlock(store, resource, owner))
        return int(response.status.value)

    def close(self) -> None:
        self.loop.run_until_complete(self.client.close())
        self.loop.close()


CLIENTS = ["http", "grpc-sdk", "grpc-sdk-aio"]


@pytest.fixture(params=CLIENTS)
def client(
    request: pytest.FixtureRequest, service: Service, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Client]:
    monkeypatch.setenv("DAPR_RUNTIME_HOST", "127.0.0.1")
    monkeypatch.setenv("DAPR_HTTP_PORT", str(service.http_port))
    monkeypatch.setenv("DAPR_GRPC_PORT", str(service.grpc_port))
    monkeypatch.setenv("DAPR_HEALTH_TIMEOUT", "10")
    if request.param == "http":
        yield HttpClient(service)
    elif request.param == "grpc-sdk":
        sdk = SdkClient()
        yield sdk
        sdk.client.close()  # type: ignore[no-untyped-call]
    else:
        aio = AioSdkClient()
        yield aio
        aio.close()


@pytest.mark.parametrize(
    ("served", "client"),  # every client on memory and S3; the servers through HTTP
    [(s, c) for s in ON_SERVERS for c in CLIENTS if c == "http" or s in ("memory", "s3-moto")],
    indirect=True,
)
def test_conformance(client: Client, service: Service) -> None:
    resource, other = f"r-{uuid.uuid4().hex[:8]}", f"r-{uuid.uuid4().hex[:8]}"
    assert client.lock("locks", resource, "owner1", 30) is True  # lock
    assert client.lock("locks", other, "owner1", 30) is True  # a second key
    assert client.lock("locks", resource, "owner1", 30) is False  # same owner again: not reentrant
    assert client.lock("locks", resource, "owner2", 30) is False  # another owner
    assert client.unlock("locks", "never-locked", "owner1") == 1  # lock does not exist
    assert client.unlock("locks", resource, "owner2") == 2  # belongs to others
    assert client.unlock("locks", resource, "owner1") == 0  # by its owner
    assert client.unlock("locks", resource, "owner1") == 1  # already released
    assert client.lock("locks", resource, "owner2", 30) is True  # free again
    assert client.unlock("locks", other, "owner1") == 0


def test_expiry(client: Client, service: Service) -> None:
    resource = f"r-{uuid.uuid4().hex[:8]}"
    started = time.monotonic()
    assert client.lock("locks", resource, "owner1", 1) is True
    assert client.lock("locks", resource, "owner2", 1) is False
    while not client.lock("locks", resource, "owner2", 1):
        assert time.monotonic() - started < 5, "the 1 s lease did not run out in time"
        time.sleep(0.1)  # the lease runs on the service's clock: poll it as a client would
    assert time.monotonic() - started >= 1.0, "taken over before its expiry"
    # The first holder's lease ran out: its unlock finds the lock taken by another.
    assert client.unlock("locks", resource, "owner1") == 2


def test_expired_lease_is_free_at_first_sight(client: Client, service: Service) -> None:
    """A lease this service wrote is free as soon as it ran out, also for an owner that had
    never looked at it before."""
    resource = f"r-{uuid.uuid4().hex[:8]}"
    assert client.lock("locks", resource, "owner1", 1) is True
    time.sleep(1.1)  # let the 1 s lease run out: the passing of time is what is tested
    assert client.lock("locks", resource, "owner3", 1) is True
    assert client.unlock("locks", resource, "owner1") == 2
