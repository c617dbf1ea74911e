"""One client of the full lock API, two transports: the conformance suite (test_alpha2.py) runs
every test through :class:`HttpClient` (``/v1.0-alpha2``, NDJSON streams) and
:class:`GrpcClient` (``prioritylock.v1.LockService``).

Both answer as the HTTP API does: ``(status, body)``, with a gRPC status read as the HTTP status
the docs pair it with and the ``ErrorInfo`` reason as ``errorCode``; stream events are the
NDJSON events (a gRPC stream that ends with an error status reads as an ``error`` event).
"""

from __future__ import annotations

import contextlib
import http.client
import json
import queue
import socket
import threading
import time
from collections.abc import Iterator, Mapping
from typing import Any, Protocol

import grpc
from google.protobuf import json_format
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from prioritylock.server._alpha2 import parse_duration
from prioritylock.server._proto import lock_pb2, lock_pb2_grpc
from tests.server.helpers import LockStream, Service

__all__ = ["TRANSPORTS", "Client", "GrpcClient", "HttpClient", "Stream", "open_client"]

OPERATOR_HEADER = "prioritylock-operator-token"
TRANSPORTS = ("http", "grpc")

#: The status codes of the gRPC API, as the HTTP statuses of the same errors (docs/serve.md).
HTTP_STATUS = {
    grpc.StatusCode.OK: 200,
    grpc.StatusCode.INVALID_ARGUMENT: 400,
    grpc.StatusCode.UNAUTHENTICATED: 401,
    grpc.StatusCode.PERMISSION_DENIED: 403,
    grpc.StatusCode.NOT_FOUND: 404,
    grpc.StatusCode.ABORTED: 409,
    grpc.StatusCode.RESOURCE_EXHAUSTED: 413,
    grpc.StatusCode.INTERNAL: 500,
    grpc.StatusCode.UNAVAILABLE: 503,
}


class Stream(Protocol):
    @property
    def status(self) -> int: ...

    def event(self, *, pings: bool = False) -> dict[str, Any] | None: ...

    def close(self) -> None: ...


class Client(Protocol):
    """What a test asks of the full lock API, whatever carries it."""

    transport: str
    #: The ``api`` label its calls are counted under in the metrics.
    api: str
    #: The API token it sends (the service's by default).
    token: str | None

    def lock(
        self, resource: str, *, operator: str | None = None, **body: Any
    ) -> tuple[int, Any]: ...

    def hang_up_waiting(self, resource: str, **body: Any) -> None: ...

    def unlock(self, resource: str, lock_id: str) -> tuple[int, Any]: ...

    def renew(self, resource: str, lock_id: str) -> tuple[int, Any]: ...

    def info(self, resource: str) -> tuple[int, Any]: ...

    def list(self, prefix: str) -> tuple[int, Any]: ...

    def force_unlock(
        self, resource: str, *, operator: str | None = None, **body: Any
    ) -> tuple[int, Any]: ...

    def stream(
        self, resource: str, body: dict[str, Any] | None = None, *, operator: str | None = None
    ) -> Stream: ...

    def close(self) -> None: ...


class HttpClient:
    transport = "http"
    api = "alpha2"

    def __init__(self, service: Service, store: str = "locks", prefix: str = "") -> None:
        self.service = service
        self.base = f"/v1.0-alpha2/lock/{store}"
        self.store = store
        self.token = service.token
        self.prefix = prefix

    def request(self, method: str, path: str, body: Any = None, **kwargs: Any) -> tuple[int, Any]:
        return self.service.request(method, path, body, token=self.token or "", **kwargs)

    def _headers(self, operator: str | None) -> dict[str, str]:
        return {} if operator is None else {OPERATOR_HEADER: operator}

    def lock(self, resource: str, *, operator: str | None = None, **body: Any) -> tuple[int, Any]:
        return self.request(
            "POST",
            f"{self.base}/{self.prefix}{resource}",
            body,
            headers=self._headers(operator),
            timeout=30,
        )

    def hang_up_waiting(self, resource: str, **body: Any) -> None:
        """Ask for the lock, blocking, and hang up while it waits."""
        conn = http.client.HTTPConnection("127.0.0.1", self.service.http_port, timeout=10)
        conn.request("POST", f"{self.base}/{self.prefix}{resource}", body=json.dumps(body))
        time.sleep(0.3)  # the request reaches its wait (nothing observable to wait on)
        assert conn.sock is not None
        conn.sock.shutdown(socket.SHUT_RDWR)
        conn.close()

    def unlock(self, resource: str, lock_id: str) -> tuple[int, Any]:
        return self.request("DELETE", f"{self.base}/{self.prefix}{resource}", {"lockID": lock_id})

    def renew(self, resource: str, lock_id: str) -> tuple[int, Any]:
        path = f"{self.base}/{self.prefix}{resource}/renew"
        return self.request("POST", path, {"lockID": lock_id})

    def info(self, resource: str) -> tuple[int, Any]:
        status, body = self.request("GET", f"{self.base}/{self.prefix}{resource}")
        return status, strip(body, self.prefix) if status == 200 else body

    def list(self, prefix: str) -> tuple[int, Any]:
        status, body = self.request("GET", f"{self.base}?prefix={self.prefix}{prefix}")
        if status != 200:
            return status, body
        return status, [strip(row, self.prefix) for row in body["locks"]]

    def force_unlock(
        self, resource: str, *, operator: str | None = None, **body: Any
    ) -> tuple[int, Any]:
        return self.request(
            "DELETE",
            f"{self.base}/{self.prefix}{resource}",
            {"force": True, **body},
            headers=self._headers(operator),
        )

    def stream(
        self, resource: str, body: dict[str, Any] | None = None, *, operator: str | None = None
    ) -> Stream:
        return _HttpStream(
            LockStream(
                self.service,
                self.store,
                self.prefix + resource,
                body,
                headers=self._headers(operator),
            )
        )

    def close(self) -> None:
        pass


class _HttpStream:
    def __init__(self, stream: LockStream) -> None:
        self._stream = stream
        self.status = stream.status

    def event(self, *, pings: bool = False) -> dict[str, Any] | None:
        return self._stream.event(pings=pings)

    def close(self) -> None:
        self._stream.close()
        self._stream.response.close()


def _seconds(value: Any) -> float:
    if isinstance(value, str) and value.startswith("-"):
        return -parse_duration(value[1:], "duration")  # to send what the service must refuse
    return parse_duration(value, "duration")


_DURATIONS = {
    "ttl": "ttl",
    "cleanupTimeout": "cleanup_timeout",
    "waitingTimeout": "waiting_timeout",
    "timeout": "timeout",
}


def lock_request(store: str, resource: str, body: Mapping[str, Any]) -> lock_pb2.LockRequest:
    """The LockRequest of an HTTP API body (durations as Go strings or seconds)."""
    request = lock_pb2.LockRequest(store_name=store, resource_id=resource)
    for name, value in body.items():
        if name in _DURATIONS:
            getattr(request, _DURATIONS[name]).FromNanoseconds(round(_seconds(value) * 1e9))
        else:
            setattr(request, name, value)
    return request


def strip(record: dict[str, Any], prefix: str) -> dict[str, Any]:
    """A lease record as it reads without the client's resource id prefix."""
    if not prefix:
        return record
    return {
        name: value.replace(prefix, "", 1)
        if name in ("resourceId", "path", "key", "name") and isinstance(value, str)
        else value
        for name, value in record.items()
    }


def _number(value: Any) -> Any:
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def _record(info: lock_pb2.LockInfo) -> dict[str, Any]:
    record = json_format.MessageToDict(info.record)
    return {name: _number(value) for name, value in record.items()}


def _error(exc: grpc.RpcError) -> tuple[int, dict[str, Any]]:
    code = exc.code()
    body: dict[str, Any] = {"errorCode": None, "message": exc.details()}
    status = rpc_status.from_call(exc)
    if status is not None:
        for detail in status.details:
            info = error_details_pb2.ErrorInfo()
            if detail.Unpack(info):
                body["errorCode"] = info.reason
    return HTTP_STATUS.get(code, 599), body


class GrpcClient:
    transport = "grpc"
    api = "grpc"

    def __init__(self, service: Service, store: str = "locks", prefix: str = "") -> None:
        self.store = store
        self.prefix = prefix
        self.channel = grpc.insecure_channel(f"127.0.0.1:{service.grpc_port}")
        self.stub = lock_pb2_grpc.LockServiceStub(self.channel)  # type: ignore[no-untyped-call]
        self.token = service.token

    def metadata(self, operator: str | None = None) -> list[tuple[str, str]]:
        sent = []
        if self.token:
            sent.append(("dapr-api-token", self.token))
        if operator is not None:
            sent.append((OPERATOR_HEADER, operator))
        return sent

    def _call(self, method: Any, request: Any, operator: str | None = None) -> Any:
        return method(request, metadata=self.metadata(operator), timeout=30)

    def lock(self, resource: str, *, operator: str | None = None, **body: Any) -> tuple[int, Any]:
        request = lock_request(self.store, self.prefix + resource, body)
        try:
            got = self._call(self.stub.Acquire, request, operator)
        except grpc.RpcError as exc:
            return _error(exc)
        return 200, {"lockID": got.lock_id, "fence": got.fence}

    def hang_up_waiting(self, resource: str, **body: Any) -> None:
        """Ask for the lock, blocking, and cancel the call while it waits."""
        request = lock_request(self.store, self.prefix + resource, body)
        waiting = self.stub.Acquire.future(request, metadata=self.metadata())
        time.sleep(0.3)  # the request reaches its wait (nothing observable to wait on)
        waiting.cancel()

    def unlock(self, resource: str, lock_id: str) -> tuple[int, Any]:
        request = lock_pb2.UnlockRequest(
            store_name=self.store, resource_id=self.prefix + resource, lock_id=lock_id
        )
        try:
            self._call(self.stub.Unlock, request)
        except grpc.RpcError as exc:
            return _error(exc)
        return 204, None

    def renew(self, resource: str, lock_id: str) -> tuple[int, Any]:
        request = lock_pb2.RenewRequest(
            store_name=self.store, resource_id=self.prefix + resource, lock_id=lock_id
        )
        try:
            got = self._call(self.stub.Renew, request)
        except grpc.RpcError as exc:
            return _error(exc)
        return 200, {"lockID": got.lock_id, "fence": got.fence}

    def info(self, resource: str) -> tuple[int, Any]:
        request = lock_pb2.InfoRequest(store_name=self.store, resource_id=self.prefix + resource)
        try:
            got = self._call(self.stub.Info, request)
        except grpc.RpcError as exc:
            return _error(exc)
        return 200, strip(_record(got), self.prefix)

    def list(self, prefix: str) -> tuple[int, Any]:
        request = lock_pb2.ListRequest(store_name=self.store, prefix=self.prefix + prefix)
        try:
            got = self._call(self.stub.List, request)
        except grpc.RpcError as exc:
            return _error(exc)
        return 200, [strip(_record(row), self.prefix) for row in got.locks]

    def force_unlock(
        self, resource: str, *, operator: str | None = None, **body: Any
    ) -> tuple[int, Any]:
        request = lock_pb2.ForceUnlockRequest(
            store_name=self.store, resource_id=self.prefix + resource, **body
        )
        try:
            got = self._call(self.stub.ForceUnlock, request, operator)
        except grpc.RpcError as exc:
            return _error(exc)
        return 200, {"forced": got.forced}

    def stream(
        self, resource: str, body: dict[str, Any] | None = None, *, operator: str | None = None
    ) -> Stream:
        call = self.stub.Lock(
            lock_request(self.store, self.prefix + resource, body or {}),
            metadata=self.metadata(operator),
        )
        return GrpcStream(call)

    def close(self) -> None:
        self.channel.close()


def event_of(message: lock_pb2.LockServerStream) -> dict[str, Any]:
    """A LockServerStream message as the NDJSON event it stands for."""
    kind = message.WhichOneof("lock_server_stream")
    if kind == "ping":
        return {"type": "ping"}
    if kind == "lock_acquired":
        got = message.lock_acquired
        return {"type": "lock-acquired", "lockID": got.lock_id, "fence": got.fence}
    if kind == "cleanup_requested":
        asked = message.cleanup_requested
        return {
            "type": "cleanup-requested",
            "deadline": asked.deadline.ToJsonString(),
            "secondsLeft": asked.time_left.ToNanoseconds() / 1e9,
            "requestor": _requestor_of(asked),
        }
    if kind == "request_withdrawn":
        return {"type": "request-withdrawn", "requestor": _requestor_of(message.request_withdrawn)}
    if kind == "lost":
        return {"type": "lost", "reason": message.lost.reason}
    raise AssertionError(f"unexpected message {message}")


def _requestor_of(message: Any) -> dict[str, Any]:
    asker = message.requestor
    return {
        "owner": asker.owner,
        "priority": asker.priority,
        "message": asker.message,
        "forceful": asker.forceful,
    }


class GrpcStream:
    """A ``Lock`` call read by a thread, so that a test can wait on it with a timeout."""

    def __init__(self, call: Any, timeout: float = 20.0) -> None:
        self.call = call
        self.timeout = timeout
        self._events: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self._first: dict[str, Any] | None = None
        self._status: int | None = None

    def _read(self) -> None:
        try:
            for message in self.call:
                self._events.put(event_of(message))
        except grpc.RpcError as exc:
            if exc.code() != grpc.StatusCode.CANCELLED:
                status, body = _error(exc)
                self._events.put(
                    {"type": "error", "error": body["errorCode"], "message": body["message"]}
                )
                self._events.put({"type": "_status", "status": status})
        finally:
            self._events.put(None)

    def _next(self) -> dict[str, Any] | None:
        if self._first is not None:
            first, self._first = self._first, None
            return first
        return self._events.get(timeout=self.timeout)

    @property
    def status(self) -> int:
        """200 once the stream began; the error's status when it ended before any message."""
        if self._status is None:
            first = self._events.get(timeout=self.timeout)
            if first is not None and first["type"] == "error":
                after = self._events.get(timeout=self.timeout)
                assert after is not None
                self._status = after["status"]
            else:
                self._first, self._status = first, 200
        return self._status

    def event(self, *, pings: bool = False) -> dict[str, Any] | None:
        while True:
            event = self._next()
            if event is None:
                self._events.put(None)  # ended: it stays ended
                return None
            if event["type"] == "_status":
                continue
            if pings or event["type"] != "ping":
                return event

    def close(self) -> None:
        """Hang up: cancel the call, as a client that is done (or dies) does."""
        self.call.cancel()


@contextlib.contextmanager
def open_client(
    transport: str, service: Service, store: str = "locks", prefix: str = ""
) -> Iterator[Client]:
    """A client of ``service``; with ``prefix``, every resource id it is given gets it in front
    (and loses it again in what it answers), so that tests can share a service."""
    client: Client
    if transport == "http":
        client = HttpClient(service, store, prefix)
    else:
        client = GrpcClient(service, store, prefix)
    try:
        yield client
    finally:
        client.close()
