"""The S3 servers' fixtures shared by the S3 store tests (``test_s3.py``, ``test_s3_native.py``),
and ``stores``, the stores a test opens, closed at its end."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from prioritylock.stores import ObjectStore
from tests._servers.s3 import SERVERS, S3Server


@pytest.fixture(params=SERVERS)
def server(request: pytest.FixtureRequest) -> S3Server:
    """Each selected S3 server (moto, SeaweedFS) in turn."""
    found: S3Server = request.getfixturevalue(f"{request.param}_server")
    return found


@pytest.fixture
def bucket(server: S3Server) -> Iterator[str]:
    """A fresh bucket on ``server``, removed afterwards."""
    name = server.create_bucket()
    yield name
    server.remove_bucket(name)


@pytest.fixture
def stores() -> Iterator[list[ObjectStore]]:
    """A list for the stores a test opens (appended to it): each is closed at the test's end."""
    opened: list[ObjectStore] = []
    yield opened
    for store in opened:
        store.close()


# The TLS servers' fixtures (tests/_servers/tls.py), for test_tls.py.
from tests._servers.tls import (  # noqa: E402, F401
    etcd_tls_server,
    redis_tls_server,
    test_ca,
    zookeeper_tls_server,
)
