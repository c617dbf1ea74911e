"""``prioritylock serve`` as the benchmarks start it: a subprocess on free ports of 127.0.0.1,
ready once ``GET /v1.0/healthz/outbound`` answers 204, stopped with SIGTERM (killed if it
lingers), its CPU, memory and open files read from ``/proc``."""

from __future__ import annotations

import http.client
import json
import os
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from _harness import process_cpu_s
from _servers import free_port, http_get

STARTUP_S = 30.0


class ServiceError(RuntimeError):
    """The service did not start, or answered what it must not."""


class Service:
    """One ``prioritylock serve`` process serving ``stores`` (name -> URL), with ``extra_args``
    added to its command line (e.g. ``--ping-interval``).

    Its output goes to a file in ``log_dir`` (a pipe nobody reads could fill and block it); the
    environment is this process's, so an emulator's credentials reach it.
    """

    def __init__(
        self, stores: Mapping[str, str], log_dir: Path, extra_args: Sequence[str] = ()
    ) -> None:
        self.http_port, self.grpc_port = free_port(), free_port()
        self.url = f"http://127.0.0.1:{self.http_port}"
        args = [sys.executable, "-m", "prioritylock", "serve", "--app-id", "bench", *extra_args]
        args += [f"--store={name}={url}" for name, url in stores.items()]
        args += ["--http-port", str(self.http_port), "--grpc-port", str(self.grpc_port)]
        log_dir.mkdir(parents=True, exist_ok=True)
        self._log = log_dir / f"serve-{self.http_port}.log"
        env = {k: v for k, v in os.environ.items() if k != "DAPR_API_TOKEN"}
        with self._log.open("w") as log:
            self.proc = subprocess.Popen(args, env=env, stdout=log, stderr=subprocess.STDOUT)
        try:
            self._wait_ready()
        except BaseException:
            self.close()
            raise

    @property
    def pid(self) -> int:
        return self.proc.pid

    def connection(self) -> http.client.HTTPConnection:
        """A new HTTP/1.1 connection to the service (kept alive between requests)."""
        return http.client.HTTPConnection("127.0.0.1", self.http_port, timeout=10)

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + STARTUP_S
        while (http_get(f"{self.url}/v1.0/healthz/outbound") or (0,))[0] != 204:
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise ServiceError(f"serve not ready in {STARTUP_S:g} s: {self.output()}")
            time.sleep(0.05)  # polling a process we don't control: no event to wait on

    def cpu_s(self) -> float:
        """CPU seconds the service has used so far."""
        return process_cpu_s(self.pid)

    def rss_kib(self) -> int:
        """The service's resident memory (``VmRSS``), KiB."""
        status = Path(f"/proc/{self.pid}/status").read_text(encoding="ascii")
        return int(status.split("VmRSS:", 1)[1].split()[0])

    def open_fds(self) -> int:
        """How many file descriptors the service has open."""
        return len(os.listdir(f"/proc/{self.pid}/fd"))

    def output(self, tail: int | None = 2000) -> str:
        """What the service wrote (its log): the last ``tail`` characters, or all."""
        text = self._log.read_text(errors="replace")
        return text if tail is None else text[-tail:]

    def close(self) -> None:
        """SIGTERM, then SIGKILL if it has not exited within 20 s."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def __enter__(self) -> Service:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def post_json(conn: http.client.HTTPConnection, path: str, body: Mapping[str, Any]) -> Any:
    """POST ``body`` on ``conn``; the decoded answer of a 200, else :class:`ServiceError`."""
    conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
    response = conn.getresponse()
    raw = response.read()
    if response.status != 200:
        raise ServiceError(f"POST {path}: {response.status} {raw[:200]!r}")
    return json.loads(raw)
