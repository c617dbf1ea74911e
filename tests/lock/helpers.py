"""Small helpers shared by the lock tests."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, cast

from blinker import Signal

from prioritylock import Lock, LockBuilder, LockListener
from prioritylock._listener import CleanupNotice
from prioritylock.stores import ObjectStore
from tests.lock.drivers import SyncFace


def builder(
    store: ObjectStore, path: str = "jobs/test", owner: str = "client", **opts: Any
) -> LockBuilder:
    b = LockBuilder().store(store).path(path).owner(owner)
    for name, value in opts.items():
        getattr(b, name)(value)
    return b


#: Which driver ``make`` builds: "sync" (Lock) or "async" (AsyncLock behind a SyncFace); set by
#: the ``driver`` fixture (tests/lock/conftest.py).
DRIVER = ["sync"]


def make(
    store: ObjectStore,
    path: str = "jobs/test",
    owner: str = "client",
    *,
    driver: str | None = None,
    **opts: Any,
) -> Lock:
    """A lock of ``driver`` (default: the current one): a Lock, or an AsyncLock with the Lock
    API (SyncFace)."""
    b = builder(store, path, owner, **opts)
    if (driver or DRIVER[0]) == "async":
        return cast(Lock, SyncFace(b))
    return b.build()


class Recorder(LockListener):
    """Records every listener call; events let tests wait without sleeping."""

    def __init__(self, cleanup_blocks: threading.Event | None = None) -> None:
        self.calls: list[tuple[str, Any]] = []
        self.lost = threading.Event()
        self.cleanup = threading.Event()
        self.denied = threading.Event()
        self.cleanup_done = threading.Event()
        self.notices: list[CleanupNotice] = []
        self._cleanup_blocks = cleanup_blocks
        self._lock = threading.Lock()

    def _add(self, name: str, value: Any) -> None:
        with self._lock:
            self.calls.append((name, value))

    def names(self) -> list[str]:
        with self._lock:
            return [n for n, _ in self.calls]

    def on_acquired(self, lock: Lock, info: Any) -> None:
        self._add("acquired", info)

    def on_released(self, lock: Lock) -> None:
        self._add("released", None)

    def on_lock_lost(self, lock: Lock, reason: str) -> None:
        self._add("lost", reason)
        self.lost.set()

    def on_cleanup_notification(self, notice: CleanupNotice) -> None:
        self._add("cleanup", notice)
        self.notices.append(notice)
        self.cleanup.set()
        if self._cleanup_blocks is not None:
            self._cleanup_blocks.wait(30)
        self.cleanup_done.set()

    def on_denied(self, lock: Lock, info: Any) -> None:
        self._add("denied", info)
        self.denied.set()


@contextmanager
def receiving(signal: Signal) -> Iterator[list[dict[str, Any]]]:
    """Collect what a signal sends while the block runs."""
    got: list[dict[str, Any]] = []

    def receiver(sender: Any, **kwargs: Any) -> None:
        got.append({"sender": sender, **kwargs})

    signal.connect(receiver, weak=False)
    try:
        yield got
    finally:
        signal.disconnect(receiver)
