"""Services under test: on the memory store and on an S3 emulator (moto); the tests where the store
matters also on Redis, ZooKeeper and etcd (:data:`ON_SERVERS`, through ``served``).

Starting ``prioritylock serve`` takes a second or more of a worker (its imports): a service a
test only talks to is shared by the module's tests on the same store (:class:`SharedServices`),
each test keeping to resource ids of its own; a test whose assertions need a service of its own
(its counts, its shutdown) starts one (``fresh_service``)."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Hashable, Iterator

import pytest

from tests._servers.s3 import S3Server
from tests.conftest import selected_kinds
from tests.server.helpers import Service
from tools import sdk

#: ``served``'s stores for a test where the store matters: mark it
#: ``@pytest.mark.parametrize("served", ON_SERVERS, indirect=True)``.
ON_SERVERS = selected_kinds(["memory", "s3-moto", "redis", "zookeeper", "etcd"])

pytest.importorskip("aiohttp")
pytest.importorskip("dapr")


def _s3_url(server: S3Server, bucket: str) -> str:
    return sdk.store_url("s3-moto", server.endpoint_url, bucket, f"locks-{uuid.uuid4().hex[:8]}")


@pytest.fixture(scope="module")
def s3_bucket_for_server(moto_server: S3Server) -> Iterator[str]:
    bucket = moto_server.create_bucket()
    yield bucket
    moto_server.remove_bucket(bucket)


def _s3_env(server: S3Server) -> dict[str, str]:
    return {
        "AWS_ACCESS_KEY_ID": server.access_key_id,
        "AWS_SECRET_ACCESS_KEY": server.secret_access_key,
    }


@pytest.fixture(params=["memory", "s3-moto"])
def served(request: pytest.FixtureRequest) -> tuple[dict[str, str], dict[str, str]]:
    """(stores, environment) of a service with one store named ``locks``, a fresh namespace
    per test: on the memory store, and on S3 (moto) (or those :data:`ON_SERVERS` names)."""
    prefix = f"locks-{uuid.uuid4().hex[:8]}"
    if request.param == "memory":
        return {"locks": f"memory://{prefix}"}, {}
    if request.param in ("redis", "zookeeper", "etcd"):
        return {"locks": request.getfixturevalue(f"{request.param}_server").url(prefix)}, {}
    server: S3Server = request.getfixturevalue("moto_server")
    bucket: str = request.getfixturevalue("s3_bucket_for_server")
    return {"locks": _s3_url(server, bucket)}, _s3_env(server)


class SharedServices:
    """Services started on first use and kept until the module's end, by a key naming what they
    serve and how."""

    def __init__(self) -> None:
        self._running: dict[Hashable, Service] = {}

    def get(self, key: Hashable, start: Callable[[], Service]) -> Service:
        """The running service of ``key``, or the one ``start`` starts (again, if it exited)."""
        running = self._running.get(key)
        if running is None or running.proc.poll() is not None:
            running = self._running[key] = start()
        return running

    def close(self) -> None:
        for running in self._running.values():
            running.close()


@pytest.fixture(scope="module")
def shared_services() -> Iterator[SharedServices]:
    services = SharedServices()
    try:
        yield services
    finally:
        services.close()


def served_kind(request: pytest.FixtureRequest) -> str:
    """The store ``served`` gives the test (``memory``, ``s3-moto``, ...)."""
    return str(request.node.callspec.params["served"])


@pytest.fixture
def service(
    request: pytest.FixtureRequest,
    served: tuple[dict[str, str], dict[str, str]],
    shared_services: SharedServices,
) -> Service:
    """A service with one store named ``locks`` (memory or moto), shared by the module's tests on
    that store: each test uses resource ids of its own."""
    stores, env = served
    return shared_services.get(served_kind(request), lambda: Service(stores, env=env))


@pytest.fixture
def fresh_service(served: tuple[dict[str, str], dict[str, str]]) -> Iterator[Service]:
    """A service of its own with one store named ``locks`` (memory or moto)."""
    stores, env = served
    running = Service(stores, env=env)
    try:
        yield running
    finally:
        running.close()


@pytest.fixture
def s3_env(moto_server: S3Server) -> dict[str, str]:
    return _s3_env(moto_server)


@pytest.fixture
def s3_url(moto_server: S3Server, s3_bucket_for_server: str) -> str:
    return _s3_url(moto_server, s3_bucket_for_server)
