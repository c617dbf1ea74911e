"""``prioritylock serve`` started as a user starts it: a subprocess on free ports, ready once its
health check answers, stopped with SIGTERM. For our own tests (``tests/server``) and benchmarks
(``benchmarks/``) only, like :mod:`tools.emulators`.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TypeVar

from tools.emulators import free_port, http_get

__all__ = ["PORT_ATTEMPTS", "STARTUP_S", "STOP_GRACE", "Service", "ServiceError"]

#: How long the service may take to answer its health check.
STARTUP_S = 30.0
#: How long it may take to exit after SIGTERM before it gets SIGKILL.
STOP_GRACE = 20.0
#: How many times it is started on new ports when one it was given was taken meanwhile.
PORT_ATTEMPTS = 3

_S = TypeVar("_S", bound="Service")


class ServiceError(RuntimeError):
    """The service did not start, or answered what it must not."""


class Service:
    """One running ``prioritylock serve`` process serving ``stores`` (name -> URL), with ``args``
    added to its command line (e.g. ``--ping-interval``).

    Its environment is this process's with ``env`` added (an emulator's credentials reach it),
    and ``DAPR_API_TOKEN`` set to ``token`` (unset without one). Its output, stdout and stderr,
    goes to an unnamed temporary file (a pipe nobody reads could fill and block it). It is ready
    once ``GET health`` answers 204 (``/v1.0/healthz`` for a service whose stores may not answer).

    :raises ServiceError: it exited, or did not answer within :data:`STARTUP_S`.
    """

    def __init__(
        self,
        stores: Mapping[str, str],
        *,
        app_id: str = "app1",
        env: Mapping[str, str] | None = None,
        token: str | None = None,
        components: Path | None = None,
        args: Sequence[str] = (),
        health: str = "/v1.0/healthz/outbound",
    ) -> None:
        self.token = token
        self._health = health
        command = [sys.executable, "-m", "prioritylock", "serve", "--app-id", app_id, *args]
        command += [f"--store={name}={url}" for name, url in stores.items()]
        if components is not None:
            command += ["--components", str(components)]
        full = {k: v for k, v in {**os.environ, **(env or {})}.items() if k != "DAPR_API_TOKEN"}
        if token is not None:
            full["DAPR_API_TOKEN"] = token
        for attempt in range(1, PORT_ATTEMPTS + 1):
            # Free when picked, but another process (a parallel test) may bind one first.
            self.http_port, self.grpc_port = free_port(), free_port()
            self.url = f"http://127.0.0.1:{self.http_port}"
            ports = ["--http-port", str(self.http_port), "--grpc-port", str(self.grpc_port)]
            self._log = tempfile.TemporaryFile(prefix="prioritylock-serve-")  # noqa: SIM115
            self._written = ""
            self.proc = subprocess.Popen(
                [*command, *ports], env=full, stdout=self._log, stderr=subprocess.STDOUT
            )
            try:
                self._wait_ready()
                return
            except ServiceError:
                self.close()
                if attempt == PORT_ATTEMPTS or "address already in use" not in self.output():
                    raise
            except BaseException:
                self.close()
                raise

    @property
    def pid(self) -> int:
        return self.proc.pid

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + STARTUP_S
        while (http_get(self.url + self._health) or (0,))[0] != 204:
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise ServiceError(f"serve not ready in {STARTUP_S:g} s: {self.output()}")
            time.sleep(0.05)  # polling a process we don't control: no event to wait on
        if self.proc.poll() is not None:  # the answer came from another process on the port
            raise ServiceError(f"serve exited ({self.proc.returncode}): {self.output()}")

    def output(self, tail: int | None = 2000) -> str:
        """What the service has written so far: the last ``tail`` characters, or all."""
        if not self._log.closed:  # read without moving the offset the service writes at
            fd = self._log.fileno()
            self._written = os.pread(fd, os.fstat(fd).st_size, 0).decode(errors="replace")
        return self._written if tail is None else self._written[-tail:]

    def stop(self) -> tuple[int, str]:
        """SIGTERM, then SIGKILL if it has not exited within :data:`STOP_GRACE`: its exit code
        and all it wrote."""
        if self.proc.poll() is None:
            self.proc.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=STOP_GRACE)
        self.close()
        return self.proc.returncode, self.output(tail=None)

    def close(self) -> None:
        """SIGKILL if it is still running; what it wrote stays readable (:meth:`output`)."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        if not self._log.closed:
            self.output()
            self._log.close()

    def __enter__(self: _S) -> _S:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
