"""etcd on 127.0.0.1 for the etcd store tests.

A pytest plugin (listed in ``tests/conftest.py``). The server starts once per session, lazily: only
when a test asks for ``etcd_server`` or ``etcd_store_factory``, and stops at session end, even
after failures. It is Debian's etcd 3.4 (``scripts/install-etcd``), one member, its data on disk;
starting and stopping it (free ports, logs, SIGTERM then SIGKILL, ``atexit``) is
:mod:`tools.emulators`. Each test gets a key prefix of its own (etcd needs nothing made first).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pytest

from tests._servers import StoreFactory, emulator, store_factory
from tools import emulators

if TYPE_CHECKING:
    from prioritylock.stores._etcd import EtcdStore

__all__ = ["EtcdServer", "etcd_server", "etcd_store_factory"]


@dataclass
class EtcdServer:
    """A running etcd: where it is, how long it took to start."""

    running: emulators.Emulator

    @property
    def endpoint(self) -> str:
        """``127.0.0.1:PORT``."""
        return self.running.endpoint

    @property
    def startup_seconds(self) -> float:
        return self.running.startup_s

    def url(self, prefix: str) -> str:
        return f"etcd://{self.endpoint}/{prefix.strip('/')}"

    def store(self, prefix: str, **options: Any) -> EtcdStore:
        """A new :class:`EtcdStore` (its own connection pool) on this server."""
        from prioritylock.stores._etcd import EtcdStore

        return EtcdStore(self.endpoint, prefix=prefix, **options)

    def restart(self, down: Callable[[], None] = lambda: None) -> None:
        """Stop the server, call ``down``, start it again on the same ports and data."""
        emulators.restart(self.running, down=down)


@pytest.fixture(scope="session")
def etcd_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EtcdServer]:
    """etcd on 127.0.0.1 for the whole session."""
    with emulator("etcd", tmp_path_factory.mktemp("etcd")) as running:
        yield EtcdServer(running)


@pytest.fixture
def etcd_store_factory(etcd_server: EtcdServer) -> Iterator[StoreFactory]:
    """New :class:`EtcdStore` clients on a fresh key prefix (``t-<random>/locks/``)."""
    prefix = f"t-{uuid.uuid4().hex[:12]}/locks"
    yield from store_factory(lambda: etcd_server.store(prefix))
