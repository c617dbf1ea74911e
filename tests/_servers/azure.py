"""Azurite (the Azure Blob emulator) on 127.0.0.1 for the Azure store tests.

A pytest plugin (listed in ``tests/conftest.py``). The server starts once per session, lazily: only
when a test asks for ``azurite_server`` or ``azure_store_factory``. Azurite is an npm package,
installed into the repository's own ``node_modules`` (git-ignored) by :data:`NPM_INSTALL`; without
it the tests that need it fail with that command. It runs in memory on a free port, in its own
process group, from a temporary working directory (Azurite 3.35 refuses ``--location`` together
with ``--inMemoryPersistence``, and writes nothing to disk without it); its output goes to a log
file whose tail is in the error when startup fails. It stops at session end, even after failures
(SIGTERM to the group, then SIGKILL), and at interpreter exit (``atexit``) if teardown never ran.

The account is Azurite's development account, whose key Microsoft publishes for emulators.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from prioritylock.stores import ObjectStore
from tests._servers.gcs import STORE_PREFIX, FaultyAdapter, http_get, start_emulator

if TYPE_CHECKING:
    from azure.storage.blob import ContainerClient

    from prioritylock.stores._azure import AzureBlobStore

__all__ = [
    "ACCOUNT",
    "ACCOUNT_KEY",
    "NPM_INSTALL",
    "AzuriteServer",
    "azure_error_body",
    "azure_store_factory",
    "azurite_server",
]

StoreFactory = Callable[[], ObjectStore]

AZURITE_VERSION = "3.35.0"
ROOT = Path(__file__).resolve().parents[2]
NPM_INSTALL = f"cd {ROOT} && npm install --no-save --no-audit --no-fund azurite@{AZURITE_VERSION}"
ACCOUNT = "devstoreaccount1"
# Azurite's well-known development key: public, documented by Microsoft, accepted only by emulators.
ACCOUNT_KEY = (
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
)


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
        from azure.core.credentials import AzureNamedKeyCredential
        from azure.core.pipeline.transport import RequestsTransport
        from azure.storage.blob import ContainerClient

        options: dict[str, Any] = {"retry_total": 0}
        if adapter is not None:
            session = requests.Session()
            session.mount("http://", adapter)
            options["transport"] = RequestsTransport(session=session, session_owner=True)
        return ContainerClient(
            self.account_url,
            container,
            credential=AzureNamedKeyCredential(ACCOUNT, key),
            **options,
        )

    def store(self, container: str, prefix: str = STORE_PREFIX, **options: Any) -> AzureBlobStore:
        """A new :class:`AzureBlobStore` with its own client on ``container`` of this server."""
        from prioritylock.stores._azure import AzureBlobStore

        if "client" not in options and "account_url" not in options:
            options.setdefault("connection_string", self.connection_string)
        return AzureBlobStore(container, prefix, **options)

    def create_container(self) -> str:
        """A new, empty container with a unique name."""
        container = f"plk-{uuid.uuid4().hex[:20]}"
        with self.container_client(container) as client:
            client.create_container()
        return container

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


def _azurite_binary() -> Path:
    """``node_modules/.bin/azurite-blob`` of the pinned version, or a failure saying what to run."""
    package = ROOT / "node_modules" / "azurite" / "package.json"
    binary = ROOT / "node_modules" / ".bin" / "azurite-blob"
    if not package.is_file() or not binary.exists():
        pytest.fail(f"Azurite is not installed; run: {NPM_INSTALL}", pytrace=False)
    version = json.loads(package.read_text()).get("version")
    if version != AZURITE_VERSION:
        pytest.fail(
            f"node_modules has Azurite {version}, the tests pin {AZURITE_VERSION}; run: "
            f"{NPM_INSTALL}",
            pytrace=False,
        )
    if shutil.which("node") is None:
        pytest.fail("Azurite needs Node.js (20 or later) on PATH", pytrace=False)
    return binary


@pytest.fixture(scope="session")
def azurite_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AzuriteServer]:
    """Azurite's blob service, in memory on 127.0.0.1, for the whole session."""
    binary = _azurite_binary()
    directory = tmp_path_factory.mktemp("azurite")

    def argv_for(port: int) -> list[str]:
        return [
            str(binary),
            *("--blobHost", "127.0.0.1", "--blobPort", str(port)),
            "--inMemoryPersistence",
            "--skipApiVersionCheck",  # the SDK speaks a newer API version than Azurite 3.35
            "--disableTelemetry",
            "--silent",
        ]

    def probe_for(port: int) -> Callable[[], bool]:
        def probe() -> bool:
            # Any answer from Azurite itself (it answers 400 on "/") means it is up.
            answer = http_get(f"http://127.0.0.1:{port}/")
            return answer is not None and "Azurite-Blob" in answer[1].get("server", "")

        return probe

    process, port, seconds = start_emulator("azurite", argv_for, probe_for, directory)
    try:
        yield AzuriteServer(f"http://127.0.0.1:{port}/{ACCOUNT}", seconds, process.log_path)
    finally:
        process.stop()


@pytest.fixture
def azure_store_factory(azurite_server: AzuriteServer) -> Iterator[StoreFactory]:
    """New :class:`AzureBlobStore` clients (prefix ``locks/``) on a fresh Azurite container."""
    container = azurite_server.create_container()
    opened: list[AzureBlobStore] = []

    def open_store() -> ObjectStore:
        store = azurite_server.store(container)
        opened.append(store)
        return store

    try:
        yield open_store
    finally:
        for store in opened:
            store.close()
        azurite_server.remove_container(container)
