"""The cloud SDKs' own clients for the emulators of :mod:`tools.emulators`, configured as the
stores configure theirs (no SDK retries; S3 path-style addressing): what the tests inspect and
damage a store's objects with, and what the benchmarks measure a store against (:func:`raw_client`:
the SDK's own GET and conditional PUT). Each SDK is imported when its client is first asked for.
Also :func:`create_bucket` and :func:`store_url`, a bucket's store URL.
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
    "raw_client",
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


# -- raw clients: a store's own cost, made directly with the SDK -----------------------------------


def raw_client(emulator: str, endpoint: str, bucket: str, key: tuple[str, str]) -> Raw:
    """A new SDK client on ``bucket`` (arguments as :func:`create_bucket`'s), configured as the
    store configures its own: ``put(key, data, version)`` creates (``version`` None) or replaces
    only at ``version`` and returns the new version; ``get(key)`` returns the object's bytes and
    version; ``close()``."""
    if emulator.startswith("s3-"):
        return _RawS3(endpoint, bucket, key)
    return _RawGCS(endpoint, bucket) if emulator == "gcs" else _RawAzure(endpoint, bucket)


class _RawS3:
    def __init__(self, endpoint: str, bucket: str, key: tuple[str, str]) -> None:
        self._bucket, self._client = bucket, s3_client(endpoint, key)
        self.close = self._client.close

    def put(self, key: str, data: bytes, version: str | None) -> str:
        condition = {"IfNoneMatch": "*"} if version is None else {"IfMatch": version}
        response = self._client.put_object(Bucket=self._bucket, Key=key, Body=data, **condition)
        return str(response["ETag"])

    def get(self, key: str) -> tuple[bytes, str]:
        response = self._client.get_object(Bucket=self._bucket, Key=key)
        with contextlib.closing(response["Body"]) as body:
            return bytes(body.read()), str(response["ETag"])


class _RawGCS:
    def __init__(self, endpoint: str, bucket: str) -> None:
        self._bucket = (client := gcs_client(endpoint)).bucket(bucket)
        self.close = client.close

    def put(self, key: str, data: bytes, version: str | None) -> str:
        blob, match = self._bucket.blob(key), 0 if version is None else int(version)
        blob.upload_from_string(
            data, "application/octet-stream", if_generation_match=match, retry=None
        )
        return str(blob.generation)

    def get(self, key: str) -> tuple[bytes, str]:
        blob = self._bucket.blob(key)
        return bytes(blob.download_as_bytes(retry=None)), str(blob.generation)


class _RawAzure:
    def __init__(self, account_url: str, container: str) -> None:
        self._container = azure_container(account_url, container)
        self.close = self._container.close

    def put(self, key: str, data: bytes, version: str | None) -> str:
        from azure.core import MatchConditions
        from azure.storage.blob import BlobType

        conditions: dict[str, Any] = {"match_condition": MatchConditions.IfMissing}
        if version is not None:
            conditions = {"match_condition": MatchConditions.IfNotModified, "etag": version}
        result = self._container.get_blob_client(key).upload_blob(
            data,
            BlobType.BLOCKBLOB,
            len(data),
            overwrite=version is not None,
            retry_total=0,
            **conditions,
        )
        return str(result["etag"])

    def get(self, key: str) -> tuple[bytes, str]:
        downloader = self._container.get_blob_client(key).download_blob(retry_total=0)
        return bytes(downloader.readall()), str(downloader.properties.etag)


Raw = _RawS3 | _RawGCS | _RawAzure
