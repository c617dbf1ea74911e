"""``prioritylock serve`` as the tests drive it: :class:`Service` adds a client's calls to the
shared :class:`tools.service.Service`, and :class:`LockStream` is a client's NDJSON lock stream."""

from __future__ import annotations

import contextlib
import http.client
import json
import socket
import urllib.error
import urllib.request
from collections.abc import Mapping
from typing import Any

from tools import service


class Service(service.Service):
    """One running ``prioritylock serve`` process (:class:`tools.service.Service`), with a
    client's calls: HTTP requests carrying its token, and alpha1 lock and unlock."""

    def request(
        self,
        method: str,
        path: str,
        body: bytes | dict[str, Any] | None = None,
        *,
        token: str | None = None,
        headers: Mapping[str, str] | None = None,
        timeout: float = 10.0,
    ) -> tuple[int, Any]:
        """(status, decoded JSON body or None)."""
        data = json.dumps(body).encode() if isinstance(body, dict) else body
        request = urllib.request.Request(self.url + path, data=data, method=method)
        request.add_header("Content-Type", "application/json")
        for name, value in (headers or {}).items():
            request.add_header(name, value)
        token = self.token if token is None else token
        if token:
            request.add_header("dapr-api-token", token)
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                raw = response.read()
                status = response.status
        except urllib.error.HTTPError as exc:
            raw = exc.read()
            status = exc.code
        return status, (json.loads(raw) if raw else None)

    def lock(self, store: str, resource: str, owner: str, expiry: int = 30) -> Any:
        status, body = self.request(
            "POST",
            f"/v1.0-alpha1/lock/{store}",
            {"resourceId": resource, "lockOwner": owner, "expiryInSeconds": expiry},
        )
        assert status == 200, body
        return body["success"]

    def unlock(self, store: str, resource: str, owner: str) -> Any:
        status, body = self.request(
            "POST", f"/v1.0-alpha1/unlock/{store}", {"resourceId": resource, "lockOwner": owner}
        )
        assert status == 200, body
        return body["status"]


class LockStream:
    """A client's NDJSON lock stream (``POST /v1.0-alpha2/lock/...`` with Accept ndjson)."""

    def __init__(
        self,
        service: Service,
        store: str,
        resource: str,
        body: dict[str, Any] | None = None,
        *,
        headers: Mapping[str, str] | None = None,
        timeout: float = 20.0,
    ) -> None:
        self.conn = http.client.HTTPConnection("127.0.0.1", service.http_port, timeout=timeout)
        sent = {"Accept": "application/x-ndjson", "Content-Type": "application/json"}
        if service.token:
            sent["dapr-api-token"] = service.token
        sent.update(headers or {})
        self.conn.request(
            "POST",
            f"/v1.0-alpha2/lock/{store}/{resource}",
            body=json.dumps(body or {}),
            headers=sent,
        )
        self.response = self.conn.getresponse()
        self.status = self.response.status

    def event(self, *, pings: bool = False) -> dict[str, Any] | None:
        """The next event (pings skipped unless asked for); None when the stream has ended."""
        while True:
            line = self.response.readline()
            if not line:
                return None
            event: dict[str, Any] = json.loads(line)
            if pings or event.get("type") != "ping":
                return event

    def close(self) -> None:
        """Hang up, as a client that is done (or dies) does."""
        sock = self.conn.sock
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        self.conn.close()
