"""The lock's behaviour on every store (the same tests through the parametrized store fixture)."""

from __future__ import annotations

import threading
import time

import pytest

from prioritylock import (
    ConfigError,
    LockHeld,
    LockLost,
    LockTimeout,
    NotLockOwner,
    PriorityLockError,
    signals,
)
from prioritylock.stores import ObjectStore
from tests.conftest import StoreFactory
from tests.lock.helpers import Recorder, make, receiving

pytestmark = [pytest.mark.timeout(60), pytest.mark.usefixtures("driver")]


def test_try_lock_takes_a_free_lock_and_shows_it(store: ObjectStore) -> None:
    lock = make(store, owner="worker-1", message="nightly compaction", lease_timeout=30)
    assert lock.info() is None
    assert lock.try_lock() is True
    try:
        assert lock.is_current_owner()
        assert lock.fencing_token == 1
        info = lock.info()
        assert info is not None and info.held
        assert (info.owner, info.message, info.fence, info.priority) == (
            "worker-1",
            "nightly compaction",
            1,
            0,
        )
        assert info.lease_timeout == 30
        assert info.last_event == "acquired"
    finally:
        lock.unlock()
    assert not lock.is_current_owner()
    info = lock.info()
    assert info is not None and not info.held and info.fence == 1 and info.last_event == "released"


def test_second_client_is_refused_then_gets_a_higher_fence(store_factory: StoreFactory) -> None:
    a = make(store_factory(), owner="a")
    b = make(store_factory(), owner="b")
    assert a.try_lock()
    assert b.try_lock() is False
    assert not b.is_current_owner()
    info = b.info()
    assert info is not None and info.owner == "a"
    with pytest.raises(LockTimeout) as caught:
        b.lock(timeout=0.2)
    assert isinstance(caught.value, TimeoutError)
    first_fence = a.fencing_token
    a.unlock()
    assert b.try_lock()
    assert b.fencing_token == first_fence + 1
    b.unlock()


def test_blocked_waiter_gets_the_lock_when_it_is_released(store_factory: StoreFactory) -> None:
    a = make(store_factory(), owner="a")
    b = make(store_factory(), owner="b", poll_interval=0.05)
    a.lock()
    got = threading.Event()
    errors: list[BaseException] = []

    def wait() -> None:
        try:
            b.lock(timeout=20)
            got.set()
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    t = threading.Thread(target=wait)
    t.start()
    assert not got.wait(0.2)  # still held by a
    a.unlock()
    t.join(20)
    assert not errors and got.is_set()
    assert b.fencing_token == 2
    b.unlock()


def test_lock_ids_are_unguessable_and_new_per_holding(store: ObjectStore) -> None:
    lock = make(store)
    ids = set()
    for _ in range(3):
        lock.lock()
        ids.add(lock.lock_id)
        assert len(lock.lock_id) >= 32
        lock.unlock()
    assert len(ids) == 3
    info = lock.info()
    assert info is not None
    assert all(i not in repr(info) for i in ids)  # the id is never shown to others


def test_ownership_errors(store_factory: StoreFactory) -> None:
    a = make(store_factory(), owner="a")
    b = make(store_factory(), owner="b")
    for call in (a.unlock, a.renew):
        with pytest.raises(NotLockOwner):
            call()
    with pytest.raises(NotLockOwner):
        _ = a.fencing_token
    with pytest.raises(NotLockOwner):
        _ = a.lock_id
    a.lock()
    with pytest.raises(LockHeld):
        a.try_lock()
    with pytest.raises(LockHeld):
        a.lock(timeout=0)
    with pytest.raises(NotLockOwner):
        b.unlock()  # b never held it: cannot release a's lock
    assert a.is_current_owner()
    a.unlock()
    with pytest.raises(NotLockOwner):
        a.unlock()


def test_with_block_and_close(store: ObjectStore) -> None:
    lock = make(store)
    with lock as held:
        assert held is lock and lock.is_current_owner()
        fence = lock.fencing_token
    assert not lock.is_current_owner()
    other = make(store, owner="other")
    with other:
        assert other.fencing_token == fence + 1
    lock.lock()
    lock.close()
    assert not lock.is_current_owner()
    assert other.try_lock()  # close released it
    other.unlock()
    with pytest.raises(ConfigError):
        lock.try_lock()


def test_with_block_keeps_the_body_exception(store: ObjectStore) -> None:
    lock = make(store)
    with pytest.raises(KeyError), lock:
        raise KeyError("boom")
    assert not lock.is_current_owner()
    assert lock.try_lock()
    lock.unlock()


def test_heartbeat_renews_while_held(store_factory: StoreFactory) -> None:
    a = make(store_factory(), owner="a", lease_timeout=1.0, renew_interval=0.2, max_clock_drift=0.1)
    b = make(store_factory(), owner="b", lease_timeout=1.0, max_clock_drift=0.1)
    with receiving(signals.renewed) as renewals:
        a.lock()
        end = time.monotonic() + 1.6  # 1.6 lease timeouts
        while time.monotonic() < end:
            assert a.is_current_owner()
            assert b.try_lock() is False
            time.sleep(0.1)
        assert len([r for r in renewals if r["sender"] is a]) >= 5
    info = a.info()
    assert info is not None and info.owner == "a" and info.renewed_at and info.acquired_at
    assert info.renewed_at > info.acquired_at
    a.unlock()


def test_explicit_renew_and_signals(store: ObjectStore) -> None:
    lock = make(store)
    with receiving(signals.acquired) as acq, receiving(signals.released) as rel:
        lock.lock()
        before = lock.info()
        lock.renew()
        after = lock.info()
        assert before is not None and after is not None
        assert after.renewed_at is not None and before.renewed_at is not None
        assert after.renewed_at >= before.renewed_at and after.fence == before.fence
        lock.unlock()
    assert [a["sender"] for a in acq] == [lock] and acq[0]["fence"] == 1
    assert [r["sender"] for r in rel] == [lock]


def test_a_raising_receiver_breaks_nothing(store: ObjectStore) -> None:
    def bad(sender: object, **kwargs: object) -> None:
        raise RuntimeError("receiver bug")

    signals.acquired.connect(bad, weak=False)
    try:
        lock = make(store)
        assert lock.try_lock()
        assert lock.is_current_owner()
        lock.unlock()
    finally:
        signals.acquired.disconnect(bad)


def test_force_unlock_is_recorded_and_the_holder_is_told(store_factory: StoreFactory) -> None:
    rec = Recorder()
    holder = make(
        store_factory(), owner="holder", listener=rec, watch_interval=0.05, cleanup_timeout=0
    )
    operator = make(store_factory(), owner="operator")
    holder.lock()
    fence = holder.fencing_token
    with pytest.raises(ConfigError):
        operator.force_unlock("")
    before = operator.force_unlock("holder host is dead")
    assert before is not None and before.owner == "holder"
    info = operator.info()
    assert info is not None and not info.held and info.fence == fence + 1
    assert (info.last_event, info.last_event_message, info.last_event_by) == (
        "force_unlock",
        "holder host is dead",
        "operator",
    )
    assert rec.lost.wait(5), "the holder must learn within a watch interval"
    assert rec.names().count("lost") == 1
    assert not holder.is_current_owner()
    with pytest.raises(LockLost) as caught:
        holder.unlock()
    assert caught.value.reason == "forced"
    assert isinstance(caught.value, PriorityLockError)
    assert operator.try_lock() and operator.fencing_token == fence + 2
    operator.unlock()
