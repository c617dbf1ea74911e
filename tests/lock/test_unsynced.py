"""Which writes the lock lets a store leave unsynced (``UnsyncedWriter``): only those that keep
the fence. A write that raises the fence (acquire, handover, preemption, takeover, force unlock)
must be synced, or a power loss could hand out a fence a holder already used."""

from __future__ import annotations

import json
from typing import Any

import pytest

from prioritylock import FakeClock, Heartbeat, Lock
from prioritylock.stores import MemoryStore, UnsyncedWriter
from tests.lock.helpers import make

pytestmark = pytest.mark.timeout(60)


class SyncRecordingStore(MemoryStore):
    """A MemoryStore that offers unsynced replaces and records each write's kind and fences."""

    def __init__(self) -> None:
        super().__init__("sync-recording")
        self.writes: list[tuple[str, int | None, int]] = []  # (kind, fence before, fence after)

    def _fence_now(self, key: str) -> int | None:
        found = self.read(key)
        self.stats.reset()
        return None if found is None else int(json.loads(found.data)["fence"])

    def _note(self, kind: str, key: str, data: bytes) -> None:
        self.writes.append((kind, self._fence_now(key), int(json.loads(data)["fence"])))

    def create(self, key: str, data: bytes) -> str:
        version = super().create(key, data)
        self.writes.append(("create", None, int(json.loads(data)["fence"])))
        return version

    def replace(self, key: str, data: bytes, version: str) -> str:
        self._note("synced", key, data)
        return super().replace(key, data, version)

    def replace_unsynced(self, key: str, data: bytes, version: str) -> str:
        self._note("unsynced", key, data)
        return super().replace(key, data, version)


def test_only_writes_that_keep_the_fence_go_unsynced() -> None:
    store = SyncRecordingStore()
    assert isinstance(store, UnsyncedWriter)
    clock = FakeClock()
    hb = Heartbeat(clock, threaded=False)

    def lock(owner: str, **opts: Any) -> Lock:
        return make(store, owner=owner, clock=clock, heartbeat=hb, **opts)

    a = lock("a", lease_timeout=3, cleanup_timeout=0)
    assert a.try_lock()  # create
    a.renew()  # unsynced
    a.unlock()  # unsynced
    assert a.try_lock()  # fence + 1: synced
    # A higher priority takes it at once (holder's cleanup 0): fence + 1, synced.
    urgent = lock("urgent", priority=5)
    assert urgent.try_lock()
    urgent.unlock()
    # A holder that stops renewing; a rival takes over after the lease: fence + 1, synced.
    b = lock("b", lease_timeout=2)
    assert b.try_lock()
    rival = lock("rival")
    assert not rival.try_lock()
    clock.advance(2.6)
    assert rival.try_lock()
    # An operator frees it: fence + 1, synced.
    lock("operator").force_unlock("test")

    kinds = [kind for kind, _, _ in store.writes]
    assert "unsynced" in kinds and "synced" in kinds, kinds
    for kind, before, after in store.writes:
        if kind == "unsynced":
            assert after == before, store.writes
        if before is not None and after > before:
            assert kind == "synced", store.writes
    # Renew and release of a held lock went unsynced.
    assert store.writes[1][0] == "unsynced" and store.writes[2][0] == "unsynced"
