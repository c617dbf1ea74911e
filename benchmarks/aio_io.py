"""The asyncio I/O choice on S3: boto3 through a bounded thread pool against native async clients.

    python benchmarks/aio_io.py [--pairs 300] [--concurrent 32] [--json PATH]

Not wired into the library: this measures the candidates ``AsyncLock`` could use for S3, one
raw request pair at a time, on moto (started here on a free port, ``_servers.py``). A pair is the
lock's two requests: a conditional PUT (``If-Match`` the last ETag) and a GET of the same small
object. Candidates:

- ``boto3 + pool``: a botocore client configured as ``S3Store`` configures its own, called with
  ``loop.run_in_executor`` on a ``ThreadPoolExecutor`` of 32 threads (what ``AsyncLock`` does);
- ``aiobotocore``: the same botocore requests on aiohttp, awaited on the loop;
- ``obstore``: the Rust ``object_store`` crate's async API (``put_async``/``get_async``).

A candidate that is not installed is skipped with a message. aiobotocore pins botocore to
versions older than the project's boto3 needs, so install it into a separate virtualenv to run
this script (the figures of record name the versions used):

    python -m venv /tmp/aio-io
    /tmp/aio-io/bin/pip install aiobotocore boto3 obstore 'moto[server]'
    /tmp/aio-io/bin/python benchmarks/aio_io.py

For each candidate: latency of one pair at a time (median, p99), and ``--concurrent`` tasks each
making pairs on its own key at once: pairs per second and this process's CPU per pair (moto, on
the same cores, is the ceiling on throughput; the CPU is the client's own cost). Every PUT must
succeed and every GET must return the bytes and ETag just written, and a PUT at a stale ETag or a
create over an existing object must be refused, or the script fails.
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
    import obstore  # type: ignore[import-not-found, unused-ignore]
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

    async def put(name: str, data: bytes, version: str | None) -> str:
        mode: Any = "create" if version is None else {"e_tag": version}
        result = await obstore.put_async(store, name, data, mode=mode)
        return str(result["e_tag"])

    async def get(name: str) -> tuple[bytes, str]:
        result = await obstore.get_async(store, name)
        data = await result.bytes_async()
        return bytes(data), str(result.meta["e_tag"])

    yield Client("obstore", put, get)


CANDIDATES: tuple[tuple[str, str | None, Any], ...] = (
    ("boto3 + pool", "boto3", boto3_pool),
    ("aiobotocore", "aiobotocore", aiobotocore_client),
    ("obstore", "obstore", obstore_client),
)


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
    """A PUT at a stale ETag, and a create over an existing object, must both be refused."""
    for version in ('"0123456789abcdef0123456789abcdef"', None):
        try:
            await client.put(name, payload, version)
        except Exception:  # each SDK has its own "precondition failed"
            continue
        raise RuntimeError(f"{client.name}: a conditional PUT at a wrong version succeeded")


async def measure(client: Client, pairs: int, concurrent: int) -> dict[str, Any]:
    prefix = f"aio-io-{uuid.uuid4().hex[:8]}"
    payload = b'{"schema": 1, "owner": "bench", "fence": 1, "padding": "' + b"x" * 200 + b'"}'
    await _pairs(client, f"{prefix}/warm", 20, payload)
    await _check_conditional(client, f"{prefix}/warm", payload)
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
    endpoint: str, bucket: str, key: tuple[str, str], pairs: int, concurrent: int, rounds: int
) -> tuple[list[dict[str, Any]], list[str]]:
    """Every installed candidate, in ``rounds`` interleaved rounds (noise hits all alike)."""
    available: list[tuple[str, Any]] = []
    skipped: list[str] = []
    for name, module, factory in CANDIDATES:
        try:
            if module is not None:
                __import__(module)
        except ImportError:
            skipped.append(f"{name}: not installed (pip install {module}); skipped")
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
    parser.add_argument("--pairs", type=int, default=300, help="serial pairs per candidate")
    parser.add_argument("--concurrent", type=int, default=32, help="tasks at once")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    started = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    with (
        tempfile.TemporaryDirectory(prefix="prioritylock-aio-io-") as work,
        _servers.running(["s3-moto"], Path(work)) as running,
    ):
        moto = running["s3-moto"]
        bucket = moto.make_bucket()
        rows, skipped = asyncio.run(
            run_all(moto.endpoint, bucket, moto.key, args.pairs, args.concurrent, args.rounds)
        )
        moto_version = _version("moto")
    versions = {d: _version(d) for d in ("boto3", "botocore", "aiobotocore", "aiohttp", "obstore")}
    load_text = "?" if load is None else f"{load:.2f}"
    print(
        f"S3 on moto {moto_version}: one conditional PUT + one GET per pair (load average "
        f"{load_text} at the start; {', '.join(f'{k} {v}' for k, v in versions.items())})"
    )
    header = ["candidate", "1 at a time p50 ms", "p99 ms", f"{args.concurrent} at once pairs/s"]
    header += ["CPU ms/pair", "pair p50 ms"]
    print("  ".join(header))
    for r in rows:
        print(
            f"{r['candidate']:<14} {r['serial_ms_p50']:>8.2f} {r['serial_ms_p99']:>8.2f} "
            f"{r['concurrent_pairs_per_s']:>10.0f} {r['concurrent_cpu_ms_per_pair']:>8.3f} "
            f"{r['concurrent_pair_ms_p50']:>8.2f}"
        )
    for line in skipped:
        print(f"  {line}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        payload = {
            "date": started,
            "python": sys.version.split()[0],
            "load_at_start": load,
            "moto": moto_version,
            "versions": versions,
            "pairs": args.pairs,
            "rounds": args.rounds,
            "rows": rows,
            "skipped": skipped,
        }
        args.json.write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
