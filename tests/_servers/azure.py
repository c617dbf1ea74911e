"""Azurite (the Azure Blob emulator) on 127.0.0.1 for the Azure store tests.

A pytest plugin (listed in ``tests/conftest.py``). The server starts once per session, lazily: only
when a test asks for ``azurite_server`` or ``azure_store_factory``, and stops at session end, even
after failures. Azurite is an npm package, installed into the repository's own ``node_modules``
(git-ignored) by ``scripts/install-azurite``; without it the tests that need it fail saying so. It
runs in memory; starting and stopping it (free port, logs, SIGTERM then SIGKILL, ``atexit``) is
:mod:`tools.emulators`.

The account is Azurite's development account, whose key Microsoft publishes for emulators.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from tests._servers import StoreFactory, emulator, fresh_prefix, store_factory
from tests._servers.gcs import STORE_PREFIX, FaultyAdapter
from tools import sdk
from tools.emulators import AZURITE_ACCOUNT as ACCOUNT
from tools.emulators import AZURITE_KEY as ACCOUNT_KEY

if TYPE_CHECKING:
    from azure.storage.blob import ContainerClient

    from prioritylock.stores._azure import AzureBlobStore

__all__ = [
    "ACCOUNT",
    "ACCOUNT_KEY",
    "AzuriteServer",
    "azure_error_body",
    "azure_store_factory",
    "azurite_server",
]


@dataclass(frozen=True)
class AzuriteServer:
    """A running Azurite blob service: where it is and how long it took to start."""

    account_url: str
    startup_seconds: float
    log_path: Path

    @property
    def connection_string(self) -> str:
        return (
            f"DefaultEndpointsProtocol=http;AccountName={ACCOUNT};AccountKey={ACCOUNT_KEY};"
            f"BlobEndpoint={self.account_url};"
        )

    def container_client(
        self, container: str, *, adapter: FaultyAdapter | None = None, key: str = ACCOUNT_KEY
    ) -> ContainerClient:
        """A new ``ContainerClient`` with SDK retries off (HTTP through ``adapter`` if given)."""
        import requests
        from azure.core.pipeline.transport import RequestsTransport

        options: dict[str, Any] = {}
        if adapter is not None:
            session = requests.Session()
            session.mount("http://", adapter)
            options["transport"] = RequestsTransport(session=session, session_owner=True)
        return sdk.azure_container(self.account_url, container, key=key, **options)

    def store(self, container: str, prefix: str = STORE_PREFIX, **options: Any) -> AzureBlobStore:
        """A new :class:`AzureBlobStore` with its own client on ``container`` of this server."""
        from prioritylock.stores._azure import AzureBlobStore

        if "client" not in options and "account_url" not in options:
            options.setdefault("connection_string", self.connection_string)
        return AzureBlobStore(container, prefix, **options)

    def create_container(self) -> str:
        """A new, empty container with a unique name."""
        return sdk.create_bucket("azure", self.account_url)

    def remove_container(self, container: str) -> None:
        """Delete ``container`` and everything in it; best effort (the server may be gone)."""
        from azure.core.exceptions import AzureError

        with self.container_client(container) as client, contextlib.suppress(AzureError):
            client.delete_container()

    def blob_names(self, container: str) -> list[str]:
        """Every blob name in ``container``, straight from the server."""
        with self.container_client(container) as client:
            return sorted(str(blob.name) for blob in client.list_blobs())


def azure_error_body(status: int) -> tuple[bytes, dict[str, str]]:
    """A Blob-service error body and headers, as Azure sends them for ``status``."""
    code = {
        429: "TooManyRequests",
        500: "InternalError",
        503: "ServerBusy",
        401: "AuthenticationFailed",
        403: "AuthorizationFailure",
    }.get(status, "InjectedFault")
    body = (
        '<?xml version="1.0" encoding="utf-8"?>'
        f"<Error><Code>{code}</Code><Message>injected fault</Message></Error>"
    ).encode()
    return body, {"Content-Type": "application/xml", "x-ms-error-code": code}


@pytest.fixture(scope="session")
def azurite_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AzuriteServer]:
    """Azurite's blob service, in memory on 127.0.0.1, for the whole session."""
    with emulator("azure", tmp_path_factory.mktemp("azurite")) as running:
        yield AzuriteServer(running.endpoint, running.startup_s, running.log_path)


@pytest.fixture(scope="session")
def _azure_shared_container(azurite_server: AzuriteServer) -> str:
    return azurite_server.create_container()


@pytest.fixture
def azure_store_factory(
    azurite_server: AzuriteServer, _azure_shared_container: str
) -> Iterator[StoreFactory]:
    """New :class:`AzureBlobStore` clients on Azurite, on a fresh prefix (``t-RANDOM/locks/``) of
    a shared container."""
    prefix = fresh_prefix(STORE_PREFIX)
    yield from store_factory(lambda: azurite_server.store(_azure_shared_container, prefix))
