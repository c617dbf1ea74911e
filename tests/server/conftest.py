"""Services under test: on the memory store and on an S3 emulator (moto); the tests where the store
matters also on Redis, ZooKeeper and etcd (:data:`ON_SERVERS`, through ``served``)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

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


@pytest.fixture
def service(served: tuple[dict[str, str], dict[str, str]]) -> Iterator[Service]:
    """A service with one store named ``locks`` (memory or moto)."""
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
