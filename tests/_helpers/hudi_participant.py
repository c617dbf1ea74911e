"""A Java-style participant in Hudi's table lock, for the mixed-writer tests (its own process).

It follows Apache Hudi's ``StorageBasedLockProvider`` step by step, as read in apache/hudi at
commit 00c846f1c9387ac1b1ae69e2bc5b8dde28467d43
(``hudi-client/hudi-client-common/.../client/transaction/lock/StorageBasedLockProvider.java``) and
its storage clients (``hudi-aws/.../S3StorageLockClient.java`` at the same commit,
``hudi-azure/.../AzureStorageLockClient.java`` at 652891b64e17b1f758763cef44f3bdee4e231f7b,
and the GCS client's ``ifGenerationMatch``). It talks to the store through the cloud SDK
directly, not through prioritylock, and writes the document the way Jackson does, so it is an
independent implementation of the other side:

- ``try_lock``: read the lock file (an unknown error: not acquired); if it exists and is still
  valid (not ``expired`` and the wall clock not past ``validUntil`` + 500 ms), not acquired; else
  write ``{expired: false, validUntil: now + validity, owner}`` with ``If-None-Match: *`` when
  there was no file, ``If-Match: <etag>`` (GCS: ``ifGenerationMatch``) otherwise; a 412 means
  another writer won; then start the heartbeat.
- heartbeat (``renewLock``) every renew interval: the same write with a fresh ``validUntil``,
  ``If-Match`` the holder's version; a 412 ("acquired by others") stops it; any other error is
  let pass until the next beat.
- ``unlock``: stop the heartbeat, then ``tryExpireCurrentLock``: write ``expired: true`` with the
  held ``validUntil``, ``If-Match`` the holder's version.

Timings are fractions of a second here (Hudi takes whole seconds, validity at least 10 s): the
algorithm is the same, scaled down so the tests stay short.

Usage: ``python -m tests._helpers.hudi_participant '<json>'`` with keys ``backend`` (``s3``,
``gcs``, ``azure``), ``endpoint``, ``bucket``, ``key``, ``mode`` (``contend``, ``crash``,
``watch``), ``validity``, ``renew``, ``retry``, ``hold`` and ``seconds`` (how long to run once
ready) as each mode needs. Output: one JSON object per line on stdout, ``ready`` first.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
import uuid
from typing import Any

DRIFT_MS = 500  # StorageBasedLockProvider.CLOCK_DRIFT_BUFFER_MS


class PreconditionFailed(Exception):
    """The storage client's ACQUIRED_BY_OTHERS."""


class Unknown(Exception):
    """The storage client's UNKNOWN_ERROR (429, 5xx, 409 conflict, a lost connection)."""


def jackson(expired: bool, valid_until: int, owner: str) -> bytes:
    """StorageLockFile.toByteArray: compact, creator order."""
    return (
        '{"expired":'
        + ("true" if expired else "false")
        + ',"validUntil":'
        + str(valid_until)
        + ',"owner":'
        + json.dumps(owner, ensure_ascii=False)
        + "}"
    ).encode()


class S3Client:
    def __init__(self, cfg: dict[str, Any]) -> None:
        import boto3
        import botocore.config

        self.bucket, self.key = cfg["bucket"], cfg["key"]
        self.s3 = boto3.client(
            "s3",
            endpoint_url=cfg["endpoint"],
            region_name="us-east-1",
            aws_access_key_id=cfg.get("access_key", "testing"),
            aws_secret_access_key=cfg.get("secret_key", "testing"),
            config=botocore.config.Config(
                retries={"total_max_attempts": 1},
                s3={"addressing_style": "path"},
                connect_timeout=cfg.get("timeout", 2),
                read_timeout=cfg.get("timeout", 2),
            ),
        )

    def read(self) -> tuple[bytes, str] | None:
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            got = self.s3.get_object(Bucket=self.bucket, Key=self.key)
            return got["Body"].read(), got["ETag"]
        except ClientError as exc:
            if exc.response["ResponseMetadata"]["HTTPStatusCode"] == 404:
                return None
            raise Unknown(str(exc)) from exc
        except BotoCoreError as exc:
            raise Unknown(str(exc)) from exc

    def write(self, body: bytes, etag: str | None) -> str:
        from botocore.exceptions import BotoCoreError, ClientError

        cond = {"IfNoneMatch": "*"} if etag is None else {"IfMatch": etag}
        try:
            put = self.s3.put_object(Bucket=self.bucket, Key=self.key, Body=body, **cond)
            return str(put["ETag"])
        except ClientError as exc:
            if exc.response["ResponseMetadata"]["HTTPStatusCode"] == 412:
                raise PreconditionFailed from exc
            raise Unknown(str(exc)) from exc
        except BotoCoreError as exc:
            raise Unknown(str(exc)) from exc


class GCSClient:
    def __init__(self, cfg: dict[str, Any]) -> None:
        from google.auth.credentials import AnonymousCredentials
        from google.cloud import storage

        client = storage.Client(
            project="test",
            credentials=AnonymousCredentials(),  # type: ignore[no-untyped-call]
            client_options={"api_endpoint": cfg["endpoint"]},
        )
        self.bucket, self.key = client.bucket(cfg["bucket"]), cfg["key"]

    def read(self) -> tuple[bytes, str] | None:
        from google.api_core import exceptions

        # A fresh Blob per request: one that has read remembers its generation and would pin it.
        self.blob = self.bucket.blob(self.key)
        try:
            data = self.blob.download_as_bytes(retry=None, timeout=2)
        except exceptions.NotFound:
            return None
        except Exception as exc:
            raise Unknown(str(exc)) from exc
        return data, str(self.blob.generation)

    def write(self, body: bytes, generation: str | None) -> str:
        from google.api_core import exceptions

        match = 0 if generation is None else int(generation)
        self.blob = self.bucket.blob(self.key)
        try:
            self.blob.upload_from_string(body, if_generation_match=match, retry=None, timeout=2)
        except exceptions.PreconditionFailed as exc:
            raise PreconditionFailed from exc
        except Exception as exc:
            raise Unknown(str(exc)) from exc
        return str(self.blob.generation)


class AzureClient:
    def __init__(self, cfg: dict[str, Any]) -> None:
        from azure.core.credentials import AzureNamedKeyCredential
        from azure.storage.blob import BlobClient

        self.blob = BlobClient(
            cfg["endpoint"],
            cfg["bucket"],
            cfg["key"],
            credential=AzureNamedKeyCredential(cfg["account"], cfg["account_key"]),
            retry_total=0,
        )

    def read(self) -> tuple[bytes, str] | None:
        from azure.core.exceptions import ResourceNotFoundError

        try:
            got = self.blob.download_blob()
            return got.readall(), str(got.properties.etag)
        except ResourceNotFoundError:
            return None
        except Exception as exc:
            raise Unknown(str(exc)) from exc

    def write(self, body: bytes, etag: str | None) -> str:
        from azure.core import MatchConditions
        from azure.core.exceptions import AzureError, HttpResponseError

        try:
            if etag is None:
                done = self.blob.upload_blob(
                    body, overwrite=True, match_condition=MatchConditions.IfMissing
                )
            else:
                done = self.blob.upload_blob(
                    body, overwrite=True, etag=etag, match_condition=MatchConditions.IfNotModified
                )
        except HttpResponseError as exc:
            if exc.status_code == 412:
                raise PreconditionFailed from exc
            raise Unknown(str(exc)) from exc  # 409 on a racing create: Hudi's UNKNOWN_ERROR too
        except AzureError as exc:
            raise Unknown(str(exc)) from exc
        return str(done["etag"])


class Provider:
    """StorageBasedLockProvider's acquire, heartbeat and release, over one storage client."""

    def __init__(self, client: Any, validity: float, renew: float) -> None:
        self.client = client
        self.owner = str(uuid.uuid4())
        self.validity_ms = int(validity * 1000)
        self.renew = renew
        self.current: tuple[bool, int, str] | None = None  # (expired, validUntil, version)
        self.mu = threading.Lock()
        self.stop = threading.Event()
        self.beat: threading.Thread | None = None

    @staticmethod
    def now_ms() -> int:
        return int(time.time() * 1000)

    def try_lock(self) -> bool:
        try:
            found = self.client.read()
        except Unknown:
            return False
        prior: str | None = None
        if found is not None:
            doc = json.loads(found[0])
            valid = not doc["expired"] and not self.now_ms() > doc["validUntil"] + DRIFT_MS
            if valid:
                return False
            prior = found[1]
        valid_until = self.now_ms() + self.validity_ms
        try:
            version = self.client.write(jackson(False, valid_until, self.owner), prior)
        except (PreconditionFailed, Unknown):
            return False
        with self.mu:
            self.current = (False, valid_until, version)
        self.stop.clear()
        self.beat = threading.Thread(target=self.heartbeat, daemon=True)
        self.beat.start()
        return True

    def heartbeat(self) -> None:
        while not self.stop.wait(self.renew):
            with self.mu:
                if self.current is None:
                    return
                valid_until = self.now_ms() + self.validity_ms
                try:
                    version = self.client.write(
                        jackson(False, valid_until, self.owner), self.current[2]
                    )
                except PreconditionFailed:
                    emit(event="renew-lost", owner=self.owner)
                    return
                except Unknown:
                    continue
                self.current = (False, valid_until, version)

    def unlock(self) -> None:
        self.stop.set()
        if self.beat is not None:
            self.beat.join()
        with self.mu:
            if self.current is None:
                return
            _, valid_until, version = self.current
            try:
                self.client.write(jackson(True, valid_until, self.owner), version)
            except (PreconditionFailed, Unknown) as exc:
                emit(event="release-failed", owner=self.owner, error=type(exc).__name__)
            self.current = None


def emit(**fields: Any) -> None:
    sys.stdout.write(json.dumps(fields) + "\n")
    sys.stdout.flush()


def main(cfg: dict[str, Any]) -> None:
    backends: dict[str, Any] = {"s3": S3Client, "gcs": GCSClient, "azure": AzureClient}
    client = backends[cfg["backend"]](cfg)
    emit(event="ready")  # the SDK is imported and its client made: the clock starts now
    mode, until = cfg["mode"], time.time() + cfg.get("seconds", 0.0)
    if mode == "watch":  # a Java-style reader: Hudi's validity check on every read
        while time.time() < until:
            began = Provider.now_ms()  # the read happened between began and at
            try:
                found = client.read()
            except Unknown as exc:
                emit(event="read-failed", error=str(exc)[:200])
                time.sleep(cfg.get("retry", 0.02))
                continue
            at = Provider.now_ms()
            if found is None:
                emit(event="read", start=began, at=at, free=True, owner=None)
            else:
                doc = json.loads(found[0])
                free = doc["expired"] or at > doc["validUntil"] + DRIFT_MS
                emit(event="read", start=began, at=at, free=free, owner=doc["owner"])
            time.sleep(cfg.get("retry", 0.02))
        return
    provider = Provider(client, cfg["validity"], cfg["renew"])
    if mode == "crash":  # take the lock, then die as kill -9 would: no release, no shutdown hook
        while not provider.try_lock():
            time.sleep(cfg.get("retry", 0.05))
        assert provider.current is not None
        emit(event="acquired", owner=provider.owner, validUntil=provider.current[1])
        os._exit(0)
    while time.time() < until:  # contend: lock, hold a while, release, again
        if not provider.try_lock():
            time.sleep(cfg.get("retry", 0.05))
            continue
        start = time.time()
        time.sleep(cfg.get("hold", 0.1))
        end = time.time()
        provider.unlock()
        emit(event="held", owner=provider.owner, start=start, end=end)


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
