"""What the ``prioritylock`` logger tells an operator: at INFO each change of holder, with the
lock's key, the owner and the fence; at WARNING the break-glass paths and losses."""

from __future__ import annotations

import logging

import pytest

from prioritylock import LockLost
from prioritylock.stores import MemoryStore
from tests.conftest import StoreFactory
from tests.lock.helpers import builder, make

pytestmark = [pytest.mark.timeout(60), pytest.mark.usefixtures("driver")]

KEY = "'v1/path/jobs/test'"


def messages(caplog: pytest.LogCaptureFixture, level: int) -> list[str]:
    return [
        r.getMessage() for r in caplog.records if r.name == "prioritylock" and r.levelno == level
    ]


def test_operators_read_who_holds_what_with_which_fence(
    store_factory: StoreFactory, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="prioritylock")
    worker = make(store_factory(), owner="worker-1")
    assert worker.try_lock()
    worker.unlock()
    assert worker.try_lock()
    ops = builder(store_factory(), owner="oncall").emergency_override("INC-7").build()
    assert ops.try_lock()
    with pytest.raises(LockLost):
        worker.renew()  # the worker hears it lost the lock
    freed = make(store_factory(), owner="ops").force_unlock("stuck", by="alice")
    assert freed is not None
    info = messages(caplog, logging.INFO)
    warnings = messages(caplog, logging.WARNING)
    assert f"prioritylock: {KEY} acquired by worker-1, fence 1 (acquired)" in info
    assert f"prioritylock: {KEY} released by worker-1, fence 1" in info
    assert f"prioritylock: {KEY} acquired by worker-1, fence 2 (acquired)" in info
    assert f"prioritylock: {KEY} acquired by oncall, fence 3 (override)" in warnings
    assert f"prioritylock: {KEY} lost by worker-1, fence 2 (overridden)" in warnings
    assert any(
        m.startswith(
            f"prioritylock: {KEY} force-unlocked by alice (was 'oncall', fence 3; now "
            "fence 4): stuck"
        )
        for m in warnings
    ), warnings
    for lock in (worker, ops):
        lock.close()  # no heartbeat outlives the test (ops's may not have heard the unlock yet)


def test_a_locks_store_requests_are_logged_only_while_debug_is_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A lock calls its store's methods without their DEBUG wrapper while DEBUG is off
    (``_runner.StoreCalls.plain``), and with it once DEBUG is turned on, lock made or not."""
    lock = make(MemoryStore("logged"))
    caplog.set_level(logging.INFO, logger="prioritylock.stores")
    assert lock.try_lock()
    lock.unlock()
    assert not [r for r in caplog.records if r.name == "prioritylock.stores"]
    caplog.set_level(logging.DEBUG, logger="prioritylock.stores")
    assert lock.try_lock()
    lock.unlock()
    lines = [r.getMessage() for r in caplog.records if r.name == "prioritylock.stores"]
    assert len(lines) == 2 and all(" replace " in line for line in lines), lines
