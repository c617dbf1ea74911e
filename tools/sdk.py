"""The cloud SDKs' own clients for the emulators of :mod:`tools.emulators`, configured as the
stores configure theirs (no SDK retries; S3 path-style addressing): what the tests inspect and
damage a store's objects with, and what the benchmarks measure a store against. Each SDK is
imported when its client is first asked for. Also :func:`create_bucket` and
:func:`store_url`, a bucket's store URL.
"""

from __future__ import annotations

import contextlib
import threading
import uuid
from typing import TYPE_CHECKING, Any

from tools.emulators import AZURITE_ACCOUNT, AZURITE_KEY

if TYPE_CHECKING:
    from azure.storage.blob import ContainerClient

__all__ = [
    "GCS_PROJECT",
    "REGION",
    "azure_container",
    "create_bucket",
    "gcs_client",
    "s3_client",
    "store_url",
]

REGION = "us-east-1"
GCS_PROJECT = "prioritylock-test"

_session: Any = None
_session_lock = threading.Lock()


def store_url(emulator: str, endpoint: str, bucket: str, prefix: str) -> str:
    """The store URL of ``prefix`` in ``bucket`` on the emulator ``emulator`` (a name of
    :data:`tools.emulators.EMULATORS`) at ``endpoint``; credentials come from the environment."""
    if emulator.startswith("s3-"):
        return f"s3://{bucket}/{prefix}?endpoint={endpoint}&region={REGION}&addressing=path"
    if emulator == "gcs":
        return f"gs://{bucket}/{prefix}"
    return f"az://{bucket}/{prefix}?endpoint={endpoint}"


def create_bucket(emulator: str, endpoint: str, key: tuple[str, str] = ("", "")) -> str:
    """A new, empty bucket (container) with a unique name on the emulator ``emulator`` at
    ``endpoint`` (``key``: S3's access key id and secret)."""
    name = f"plk-{uuid.uuid4().hex[:20]}"
    if emulator.startswith("s3-"):
        with contextlib.closing(s3_client(endpoint, key)) as client:
            client.create_bucket(Bucket=name)
    elif emulator == "gcs":
        with contextlib.closing(gcs_client(endpoint)) as client:
            client.create_bucket(name)
    else:
        with azure_container(endpoint, name) as container:
            container.create_container()
    return name


def s3_client(endpoint: str, key: tuple[str, str], region: str = REGION, **config: Any) -> Any:
    """A new boto3 S3 client (``key``: access key id and secret), with one attempt per call and
    path-style addressing unless ``config`` (botocore ``Config`` options) says otherwise."""
    global _session
    import boto3
    import botocore.config

    options: dict[str, Any] = {
        "retries": {"total_max_attempts": 1, "mode": "standard"},
        "s3": {"addressing_style": "path"},
    }
    options.update(config)
    with _session_lock:  # boto3 sessions are not thread-safe; a warm one is ~10x faster
        if _session is None:
            _session = boto3.session.Session()
        return _session.client(
            "s3",
            endpoint_url=endpoint,
            region_name=region,
            aws_access_key_id=key[0],
            aws_secret_access_key=key[1],
            config=botocore.config.Config(**options),
        )


def gcs_client(endpoint: str, *, http: Any = None) -> Any:
    """A new anonymous ``storage.Client`` (``http``: its requests session), without the
    background requests the store turns off too."""
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    from prioritylock.stores._gcs import _disable_background_requests

    client = storage.Client(
        project=GCS_PROJECT,
        credentials=AnonymousCredentials(),  # type: ignore[no-untyped-call]
        client_options={"api_endpoint": endpoint},
        _http=http,
    )
    _disable_background_requests(client)
    return client


def azure_container(
    account_url: str, container: str, *, key: str = AZURITE_KEY, **options: Any
) -> ContainerClient:
    """A new ``ContainerClient`` on Azurite's development account (``key``: its account key),
    SDK retries off; ``options`` go to the client."""
    from azure.core.credentials import AzureNamedKeyCredential
    from azure.storage.blob import ContainerClient

    credential = AzureNamedKeyCredential(AZURITE_ACCOUNT, key)
    return ContainerClient(account_url, container, credential=credential, retry_total=0, **options)
