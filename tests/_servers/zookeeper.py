"""ZooKeeper on 127.0.0.1 for the ZooKeeper store tests.

A pytest plugin (listed in ``tests/conftest.py``). The server starts once per session, lazily: only
when a test asks for ``zookeeper_server`` or ``zookeeper_store_factory``, and stops at session end,
even after failures. It is Debian's ZooKeeper 3.8 (``scripts/install-zookeeper``), standalone, its
data on disk; starting and stopping it (free port, logs, SIGTERM then SIGKILL, ``atexit``) is
:mod:`tools.emulators`. Each test gets a prefix znode of its own, made before the test (as a cloud
test's bucket is), so request counts are those of the test's own operations.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pytest

from tests._servers import StoreFactory, emulator, store_factory
from tools import emulators

if TYPE_CHECKING:
    from prioritylock.stores._zookeeper import ZooKeeperStore

__all__ = ["ZooKeeperServer", "zookeeper_server", "zookeeper_store_factory"]


@dataclass
class ZooKeeperServer:
    """A running ZooKeeper: where it is, how long it took to start."""

    running: emulators.Emulator

    @property
    def hosts(self) -> str:
        """``127.0.0.1:PORT``."""
        return self.running.endpoint

    @property
    def startup_seconds(self) -> float:
        return self.running.startup_s

    def url(self, prefix: str) -> str:
        return f"zk://{self.hosts}/{prefix.strip('/')}"

    def store(self, prefix: str, **options: Any) -> ZooKeeperStore:
        """A new :class:`ZooKeeperStore` (its own session) on this server."""
        from prioritylock.stores._zookeeper import ZooKeeperStore

        return ZooKeeperStore(self.hosts, prefix=prefix, **options)

    @contextlib.contextmanager
    def client(self) -> Iterator[Any]:
        """A plain kazoo client, started for the ``with`` block, then stopped and closed; its
        session outlives a restart on a loaded machine (60 s), and it tries to reconnect every
        0.1 s (kazoo's default backoff grows to a minute, and a call waits for the reconnect)."""
        from kazoo.client import KazooClient

        retry = {"max_tries": -1, "delay": 0.05, "max_delay": 0.1}
        client = KazooClient(self.hosts, timeout=60, connection_retry=retry)
        client.start(30)
        try:
            yield client
        finally:
            client.stop()
            client.close()

    def restart(self, down: Callable[[], None] = lambda: None) -> None:
        """Stop the server, call ``down``, start it again on the same port and data."""
        emulators.restart(self.running, down=down)


@pytest.fixture(scope="session")
def zookeeper_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperServer]:
    """ZooKeeper on 127.0.0.1 for the whole session."""
    with emulator("zookeeper", tmp_path_factory.mktemp("zookeeper")) as running:
        yield ZooKeeperServer(running)


@pytest.fixture
def zookeeper_store_factory(zookeeper_server: ZooKeeperServer) -> Iterator[StoreFactory]:
    """New :class:`ZooKeeperStore` clients on a fresh prefix znode (``/t-<random>/locks``)."""
    prefix = f"/t-{uuid.uuid4().hex[:12]}/locks"
    with zookeeper_server.client() as client:
        client.ensure_path(prefix)
    yield from store_factory(lambda: zookeeper_server.store(prefix))
