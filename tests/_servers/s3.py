"""S3 servers for the tests: moto (behaviour) and SeaweedFS (the atomicity proof), on 127.0.0.1.

A pytest plugin (listed in ``tests/conftest.py``). Each server starts once per session, lazily:
only when a test asks for ``moto_server``, ``seaweedfs_server`` or one of the store factories, and
stops at session end, even after failures. Starting and stopping (free ports, a retry after a lost
port race, logs, SIGTERM then SIGKILL, ``atexit``) is :mod:`tools.emulators`.

``s3_moto_store_factory`` and ``s3_seaweedfs_store_factory`` give each test a prefix of its own in
a bucket the session's tests share, and return a callable that opens a *new* :class:`S3Store` (its
own boto3 client) on it at each call.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from tests._servers import StoreFactory, emulator, fresh_prefix, store_factory
from tests.conftest import selected_kinds
from tools import sdk
from tools.emulators import Emulator

if TYPE_CHECKING:
    from prioritylock.stores._s3 import S3Store

__all__ = [
    "S3Server",
    "moto_server",
    "s3_moto_store_factory",
    "s3_seaweedfs_store_factory",
    "s3_server",
    "seaweedfs_server",
]

REGION = sdk.REGION
STORE_PREFIX = "locks/"

#: The S3 servers this run tests against ("moto", "seaweedfs"), and marks for tests of one.
SERVERS = [kind.removeprefix("s3-") for kind in selected_kinds(["s3-moto", "s3-seaweedfs"])]
needs_moto = pytest.mark.skipif("moto" not in SERVERS, reason="s3-moto not selected")
needs_seaweedfs = pytest.mark.skipif("seaweedfs" not in SERVERS, reason="s3-seaweedfs not selected")


@dataclass(frozen=True)
class S3Server:
    """A running S3 server: where it is, the credentials it accepts, how long it took to start."""

    name: str
    endpoint_url: str
    access_key_id: str
    secret_access_key: str
    startup_seconds: float
    log_path: Path
    region: str = REGION

    def client(self, **config: Any) -> Any:
        """A new boto3 S3 client for this server (no retries; botocore Config from ``config``)."""
        key = (self.access_key_id, self.secret_access_key)
        return sdk.s3_client(self.endpoint_url, key, self.region, **config)

    def store(self, bucket: str, prefix: str = STORE_PREFIX, **options: Any) -> S3Store:
        """A new :class:`S3Store` with its own client on ``bucket`` of this server."""
        from prioritylock.stores._s3 import S3Store

        settings: dict[str, Any] = {
            "endpoint_url": self.endpoint_url,
            "region": self.region,
            "addressing_style": "path",
            "aws_access_key_id": self.access_key_id,
            "aws_secret_access_key": self.secret_access_key,
            # SeaweedFS lets losers of a 16-way race wait several seconds: don't time them out.
            "read_timeout": 30.0,
        }
        settings.update(options)
        return S3Store(bucket, prefix, **settings)

    def create_bucket(self) -> str:
        """A new, empty bucket with a unique name."""
        return sdk.create_bucket(
            "s3-", self.endpoint_url, (self.access_key_id, self.secret_access_key)
        )

    def remove_bucket(self, bucket: str) -> None:
        """Delete ``bucket`` and everything in it; best effort (the server may be gone)."""
        import botocore.exceptions

        client = self.client()
        try:
            with contextlib.suppress(
                botocore.exceptions.BotoCoreError, botocore.exceptions.ClientError
            ):
                pages = client.get_paginator("list_objects_v2").paginate(Bucket=bucket)
                for page in pages:
                    keys = [{"Key": item["Key"]} for item in page.get("Contents", ())]
                    if keys:
                        client.delete_objects(
                            Bucket=bucket, Delete={"Objects": keys, "Quiet": True}
                        )
                client.delete_bucket(Bucket=bucket)
        finally:
            client.close()


@pytest.fixture(scope="session")
def moto_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    """moto in server mode: S3 behaviour (atomic only because its writes are serialised: see
    tools/emulators.py)."""
    with emulator("s3-moto", tmp_path_factory.mktemp("moto-server")) as running:
        yield s3_server("moto", running)


@pytest.fixture(scope="session")
def seaweedfs_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    """SeaweedFS ``weed mini`` (S3 gateway with atomic conditional writes), auth enforced."""
    with emulator("s3-seaweedfs", tmp_path_factory.mktemp("seaweedfs-server")) as running:
        yield s3_server("seaweedfs", running)


def s3_server(name: str, running: Emulator) -> S3Server:
    """The :class:`S3Server` view of a running S3 emulator (``name``: moto or seaweedfs)."""
    key_id, secret = running.key
    return S3Server(name, running.endpoint, key_id, secret, running.startup_s, running.log_path)


@pytest.fixture(scope="session")
def _moto_shared_bucket(moto_server: S3Server) -> str:
    return moto_server.create_bucket()


@pytest.fixture(scope="session")
def _seaweedfs_shared_bucket(seaweedfs_server: S3Server) -> str:
    return seaweedfs_server.create_bucket()


def _store_factory(server: S3Server, bucket: str) -> Iterator[StoreFactory]:
    prefix = fresh_prefix(STORE_PREFIX)
    yield from store_factory(lambda: server.store(bucket, prefix))


@pytest.fixture
def s3_moto_store_factory(
    moto_server: S3Server, _moto_shared_bucket: str
) -> Iterator[StoreFactory]:
    """New S3Store clients on moto, on a fresh prefix (``t-RANDOM/locks/``) of a shared bucket."""
    yield from _store_factory(moto_server, _moto_shared_bucket)


@pytest.fixture
def s3_seaweedfs_store_factory(
    seaweedfs_server: S3Server, _seaweedfs_shared_bucket: str
) -> Iterator[StoreFactory]:
    """New S3Store clients on SeaweedFS, on a fresh prefix (``t-RANDOM/locks/``) of a shared
    bucket."""
    yield from _store_factory(seaweedfs_server, _seaweedfs_shared_bucket)
