"""A release whose answer is lost after it landed is a release, not a loss.

The holder's release (or handover) lands, another client takes the lock at once, and only then
does the holder's write answer, with an unknown outcome: a lost response, or the 412 that an SDK
retry of the landed write gets. Reading back shows another holder; the next holder's document
proves how the previous holding ended, so ``unlock()`` returns and nobody is told of a loss.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TypeVar

import pytest

from prioritylock import ConditionFailed, Heartbeat, LockLost, StoreUnavailable
from prioritylock.stores import ObjectStore
from prioritylock.testing.faults import FaultyStore
from tests.conftest import StoreFactory
from tests.lock.helpers import Recorder, builder, make

T = TypeVar("T")

pytestmark = [pytest.mark.timeout(60), pytest.mark.usefixtures("driver")]


class AnswerLate(FaultyStore):
    """The next replace that lands runs ``between`` (another client acting on the new
    document) before it answers, and then answers with ``fault`` instead of its version."""

    def __init__(self, inner: ObjectStore) -> None:
        super().__init__(inner, rate=0.0)
        self.armed: tuple[Callable[[], None], str] | None = None
        self.fired = 0

    def _forward(self, op: str, key: str, call: Callable[[], T]) -> T:
        result = super()._forward(op, key, call)  # a refused write raises and stays armed
        if op not in ("replace", "replace_unsynced") or self.armed is None:
            return result
        between, fault = self.armed
        self.armed = None
        between()
        self.fired += 1
        if fault == "lost":
            raise StoreUnavailable("injected: the answer was lost", outcome_unknown=True)
        raise ConditionFailed(key, "injected: 412 on an SDK retry of a write that landed")


@pytest.mark.parametrize("fault", ["lost", "412"])
def test_a_release_that_landed_is_reported_as_done(store_factory: StoreFactory, fault: str) -> None:
    store = AnswerLate(store_factory())
    rec = Recorder()
    holder = make(store, owner="holder", listener=rec)
    waiter = builder(store_factory(), owner="waiter").build()
    assert holder.try_lock()
    fence = holder.fencing_token
    taken: list[bool] = []
    store.armed = (lambda: taken.append(waiter.try_lock()), fault)
    holder.unlock()  # must not raise LockLost('superseded')
    assert store.fired == 1 and taken == [True]
    assert not holder.is_current_owner()
    assert waiter.fencing_token == fence + 1
    time.sleep(0.05)  # listener calls go through the notifier thread; a loss would show here
    assert "lost" not in rec.names()
    assert rec.names() == ["acquired", "released"]
    info = waiter.info()
    assert info is not None and info.owner == "waiter" and info.last_event == "acquired"
    waiter.unlock()


@pytest.mark.parametrize("fault", ["lost", "412"])
def test_a_handover_that_landed_is_reported_as_done(
    store_factory: StoreFactory, fault: str
) -> None:
    store = AnswerLate(store_factory())
    rec = Recorder()
    holder = make(store, owner="holder", listener=rec, watch_interval=0.05)
    assert holder.try_lock()
    urgent = builder(
        store_factory(), owner="urgent", priority=5, waiting_timeout=20, poll_interval=0.02
    ).build()
    got: list[bool] = []
    asking = threading.Thread(target=lambda: got.append(urgent.try_lock()))
    # The holder's listener would hand over by itself on the cleanup notice: keep the cleanup
    # from returning until the holder has unlocked (a manual handover).
    rec_cleanup_may_return = threading.Event()
    rec._cleanup_blocks = rec_cleanup_may_return
    asking.start()
    assert rec.cleanup.wait(10), "the holder never heard the request"
    store.armed = (lambda: asking.join(10), fault)
    try:
        holder.unlock()  # the handover lands, the requestor confirms it, then the answer fails
    finally:
        rec_cleanup_may_return.set()
    asking.join(10)
    assert store.fired == 1 and got == [True]
    assert urgent.is_current_owner() and urgent.fencing_token == 2
    assert not holder.is_current_owner()
    time.sleep(0.05)
    assert "lost" not in rec.names()
    info = urgent.info()
    assert info is not None and info.owner == "urgent" and info.last_event == "handover"
    urgent.unlock()


def test_a_release_that_did_not_land_is_still_a_loss(store_factory: StoreFactory) -> None:
    """The proof is specific to our own write: a lease taken from us (forced free by an
    operator, then taken by another client) before our release is still reported as lost."""
    rec = Recorder()
    # The holder's heartbeat stays still (stepped by hand, never here): it must not hear of the
    # force unlock before its release (a notice would tell it at once).
    holder = make(
        store_factory(), owner="holder", listener=rec, heartbeat=Heartbeat(threaded=False)
    )
    other = builder(store_factory(), owner="other").build()
    assert holder.try_lock()
    other.force_unlock("operator: stuck", by="ops")
    assert other.try_lock()
    with pytest.raises(LockLost) as lost:
        holder.unlock()
    assert lost.value.reason == "superseded"
    assert rec.lost.wait(5)
    other.unlock()
