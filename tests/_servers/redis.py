"""redis-server on 127.0.0.1 for the Redis store tests.

A pytest plugin (listed in ``tests/conftest.py``). The server starts once per session, lazily: only
when a test asks for ``redis_server`` or ``redis_store_factory``, and stops at session end, even
after failures. It is Debian's ``redis-server`` (``scripts/install-redis``), run with a throwaway
password and its append-only file synced on every write; starting and stopping it (free port,
logs, SIGTERM then SIGKILL, ``atexit``) is :mod:`tools.emulators`. Each test gets a key prefix of
its own in database 0.
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
    from prioritylock.stores._redis import RedisStore

__all__ = ["RedisServer", "redis_server", "redis_store_factory"]


@dataclass
class RedisServer:
    """A running redis-server: where it is, its password, how long it took to start."""

    running: emulators.Emulator

    @property
    def port(self) -> int:
        return int(self.running.endpoint.rsplit(":", 1)[1])

    @property
    def password(self) -> str:
        return self.running.key[1]

    @property
    def startup_seconds(self) -> float:
        return self.running.startup_s

    def url(self, prefix: str = "", db: int = 0, *, password: str | None = None) -> str:
        """``redis://:PASSWORD@127.0.0.1:PORT/DB?prefix=PREFIX``."""
        secret = self.password if password is None else password
        query = f"?prefix={prefix}" if prefix else ""
        return f"redis://:{secret}@127.0.0.1:{self.port}/{db}{query}"

    def store(self, prefix: str, **options: Any) -> RedisStore:
        """A new :class:`RedisStore` (its own connections) on this server."""
        from prioritylock.stores._redis import RedisStore

        options.setdefault("password", self.password)
        return RedisStore("127.0.0.1", self.port, prefix=prefix, **options)

    def client(self) -> Any:
        """A plain redis-py client of database 0."""
        import redis

        return redis.Redis(port=self.port, password=self.password)

    def restart(self, down: Callable[[], None] = lambda: None) -> None:
        """Stop the server (it syncs its append-only file), call ``down``, start it again."""
        emulators.restart(self.running, down=down)


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """redis-server on 127.0.0.1, with AOF and a password, for the whole session."""
    with emulator("redis", tmp_path_factory.mktemp("redis-server")) as running:
        yield RedisServer(running)


@pytest.fixture
def redis_store_factory(redis_server: RedisServer) -> Iterator[StoreFactory]:
    """New :class:`RedisStore` clients on a fresh key prefix (``t-<random>/locks/``)."""
    prefix = f"t-{uuid.uuid4().hex[:12]}/locks/"
    yield from store_factory(lambda: redis_server.store(prefix))
