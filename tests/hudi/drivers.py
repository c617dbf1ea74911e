"""Both Hudi table lock drivers behind one face, so the same tests run on ``HudiTableLock`` and
on ``AsyncHudiTableLock``.

``AsyncFace`` drives an :class:`~prioritylock.AsyncHudiTableLock` from plain test code: each call
runs as a coroutine on the test session's event loop thread (``tests.lock.drivers.LOOP``) and
returns or raises what the coroutine did. :func:`hudi_lock` makes either, by ``driver``.
"""

from __future__ import annotations

import threading
from typing import Any, Protocol

from prioritylock import AsyncHudiTableLock, HudiLockInfo, HudiTableLock
from prioritylock.stores import ObjectStore
from tests.lock.drivers import LOOP

DRIVERS = ["sync", "async"]


class HudiFace(Protocol):
    """What the tests call on a Hudi table lock, whichever the driver."""

    @property
    def owner_id(self) -> str: ...

    def try_lock(self) -> bool: ...

    def lock(
        self, timeout: float | None = None, *, cancel: threading.Event | None = None
    ) -> None: ...

    def unlock(self) -> None: ...

    def renew(self) -> None: ...

    def info(self) -> HudiLockInfo | None: ...

    def force_unlock(self, *, if_owner: str, if_valid_until_ms: int) -> HudiLockInfo: ...

    def is_current_owner(self) -> bool: ...

    def close(self) -> None: ...


class AsyncFace:
    """An ``AsyncHudiTableLock`` called as a ``HudiTableLock`` is."""

    def __init__(self, lock: AsyncHudiTableLock) -> None:
        self.inner = lock

    @property
    def owner_id(self) -> str:
        return self.inner.owner_id

    def try_lock(self) -> bool:
        return LOOP.run(self.inner.try_lock())

    def lock(self, timeout: float | None = None, *, cancel: threading.Event | None = None) -> None:
        assert cancel is None, "an asyncio wait is ended by cancelling its task"
        LOOP.run(self.inner.lock(timeout))

    def unlock(self) -> None:
        LOOP.run(self.inner.unlock())

    def renew(self) -> None:
        LOOP.run(self.inner.renew())

    def info(self) -> HudiLockInfo | None:
        return LOOP.run(self.inner.info())

    def force_unlock(self, *, if_owner: str, if_valid_until_ms: int) -> HudiLockInfo:
        return LOOP.run(
            self.inner.force_unlock(if_owner=if_owner, if_valid_until_ms=if_valid_until_ms)
        )

    def is_current_owner(self) -> bool:
        return self.inner.is_current_owner()

    def close(self) -> None:
        LOOP.run(self.inner.aclose())


def hudi_lock(driver: str, store: ObjectStore, **options: Any) -> HudiFace:
    """A Hudi table lock on ``store`` for ``driver`` ("sync" or "async"); ``options`` are the
    constructor's (a ``scheduler`` only for the sync one)."""
    if driver == "sync":
        return HudiTableLock(store, **options)
    options.pop("scheduler", None)
    return AsyncFace(AsyncHudiTableLock(store, **options))
