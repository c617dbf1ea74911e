"""Which writes the lock lets a store leave unsynced (``UnsyncedWriter``): those that keep the
fence, and raises within a fence reservation made by a synced write in this boot of the machine
(``_reserve``; test_reserve models the power losses). Creating the document, a raise past the
reservation and break-glass raises (force unlock) are synced."""

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
        # (kind, fence before, fence after, reserved fence before, event after)
        self.writes: list[tuple[str, int | None, int, int | None, str]] = []

    def _note(self, kind: str, key: str, data: bytes) -> None:
        found = self.read(key)
        self.stats.reset()
        old = None if found is None else json.loads(found.data)
        new = json.loads(data)
        fence = None if old is None else int(old["fence"])
        reserved = None if old is None or "reserve" not in old else int(old["reserve"]["fence"])
        event = new["event"]["kind"] if new["event"] else ""
        self.writes.append((kind, fence, int(new["fence"]), reserved, event))

    def create(self, key: str, data: bytes) -> str:
        self._note("create", key, data)
        return super().create(key, data)

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

    kinds = [w[0] for w in store.writes]
    assert kinds[0] == "create" and "unsynced" in kinds and "synced" in kinds, kinds
    raised_unsynced = 0
    for kind, before, after, reserved, event in store.writes:
        if kind == "unsynced" and before is not None and after != before:
            assert reserved is not None and before < after <= reserved, store.writes
            assert event not in ("force_unlock", "override", "forceful_takeover"), store.writes
            raised_unsynced += 1
    # Renew and release of a held lock went unsynced; so did the acquisitions within the
    # reservation the create made (re-acquire, preemption, b, the takeover), not the force unlock.
    assert store.writes[1][0] == "unsynced" and store.writes[2][0] == "unsynced"
    assert raised_unsynced == 4, store.writes
    assert store.writes[-1][0] == "synced" and store.writes[-1][4] == "force_unlock"
