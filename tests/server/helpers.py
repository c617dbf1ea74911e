"""``prioritylock serve`` started as a user starts it: a subprocess on free ports, ready once its
health check answers, stopped with SIGTERM."""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

STARTUP_SECONDS = 30.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Service:
    """One running ``prioritylock serve`` process."""

    def __init__(
        self,
        stores: Mapping[str, str],
        *,
        app_id: str = "app1",
        env: Mapping[str, str] | None = None,
        token: str | None = None,
        components: Path | None = None,
        args: Sequence[str] = (),
    ) -> None:
        self.http_port = free_port()
        self.grpc_port = free_port()
        self.token = token
        command = [sys.executable, "-m", "prioritylock", "serve", "--app-id", app_id, *args]
        for name, url in stores.items():
            command += ["--store", f"{name}={url}"]
        if components is not None:
            command += ["--components", str(components)]
        command += ["--http-port", str(self.http_port), "--grpc-port", str(self.grpc_port)]
        full = {**os.environ, **(env or {})}
        full.pop("DAPR_API_TOKEN", None)
        if token is not None:
            full["DAPR_API_TOKEN"] = token
        self.proc = subprocess.Popen(
            command, env=full, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        self._wait_ready()

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + STARTUP_SECONDS
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                out, err = self.proc.communicate()
                raise AssertionError(f"serve exited {self.proc.returncode}: {out}{err}")
            try:
                status, _ = self.request("GET", "/v1.0/healthz/outbound")
            except OSError:
                status = 0
            if status == 204:
                return
            time.sleep(0.05)  # polling a process we don't control: no event to wait on
        raise AssertionError("serve did not become ready")

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
        request = urllib.request.Request(self.base + path, data=data, method=method)
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

    def stop(self) -> tuple[int, str, str]:
        """SIGTERM; (exit code, stdout, stderr)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        out, err = self.proc.communicate(timeout=20)
        return self.proc.returncode, out, err

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.communicate()


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
