"""The uncontended round a driver makes itself (``LockBase._start_acquire``/``_start_release``,
on stores it calls in place) writes what the flows write, with the same requests: the same
lock driven both ways (the other way: its store calls handed to the driver as any other flow's)
leaves the same documents behind, nonces and lock ids aside. (An AsyncLock on a LocalStore
makes no round itself: its store calls may wait. Both its stories run the flow.)"""

from __future__ import annotations

import json
from typing import Any

import pytest

from prioritylock import FakeClock, Heartbeat, Lock
from prioritylock import _flows as flows
from prioritylock.stores import LocalStore, MemoryStore, ObjectStore
from tests.lock.helpers import make

pytestmark = [pytest.mark.timeout(30), pytest.mark.usefixtures("driver")]

KEY = "v1/path/jobs/test"


def _runner(lock: Lock) -> Any:
    return getattr(lock, "inner", lock)  # an AsyncLock behind the sync API, or the Lock


def _document(store: ObjectStore) -> dict[str, Any]:
    """The lease document, its one-off values (nonces, lock ids) blanked out."""
    found = store.read(KEY)
    assert found is not None
    doc: dict[str, Any] = json.loads(found.data)
    doc["nonce"] = "-"
    if "prior" in doc:
        doc["prior"] = "-"
    if doc["holder"] is not None:
        doc["holder"]["lock_id"] = "-"
        if "hint" in doc["holder"]:  # where this acquisition hears hints: its own token
            doc["holder"]["hint"] = "-"
    return doc


def _story(store: ObjectStore, quick: bool, monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Take and release the lock three times, the second time after another lock object of
    the process wrote the document in between (the round's write then fails its condition)."""
    monkeypatch.setattr(flows, "spread_draw", lambda: 0.0)
    clock = FakeClock()
    opts: dict[str, Any] = {"clock": clock, "heartbeat": Heartbeat(clock, threaded=False)}
    lock = make(store, **opts)
    other = make(store, owner="other", **opts)
    _runner(lock)._straight = quick and _runner(lock)._straight
    told: list[Any] = []
    try:
        for turn in range(3):
            if turn == 1:
                assert other.try_lock()  # after our release: what we know is stale now
                other.unlock()
            stats = store.stats
            stats.reset()
            clock.advance(1.0)
            assert lock.try_lock()
            snapshot = stats.snapshot()
            told.append((_document(store), snapshot))
            stats.reset()
            clock.advance(1.0)
            lock.unlock()
            snapshot = stats.snapshot()
            told.append((_document(store), snapshot))
    finally:
        lock.close()
        other.close()
    return told


@pytest.mark.parametrize("kind", ["memory", "local"])
def test_the_drivers_round_writes_what_the_flow_writes(
    kind: str, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    def store(name: str) -> ObjectStore:
        return MemoryStore() if kind == "memory" else LocalStore(tmp_path / name)

    quick = _story(store("quick"), True, monkeypatch)
    flowed = _story(store("flowed"), False, monkeypatch)
    assert quick == flowed
    # The story itself: the first acquire reads and creates; the second's write fails its
    # condition (the other's release came between), so it reads and writes again.
    assert [snapshot["total"] for _doc, snapshot in quick] == [2, 1, 3, 1, 1, 1]
