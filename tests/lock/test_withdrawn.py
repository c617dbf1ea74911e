"""A request the holder was told of and that was withdrawn (docs/priorities.md, docs/events.md):
the holder hears ``request_withdrawn`` after ``cleanup_requested``, and is never told of a
request once its window has closed. On both drivers."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import TypeVar

import pytest

from prioritylock import FakeClock, Heartbeat, PreemptionTimeout, signals
from prioritylock._listener import CleanupNotice
from prioritylock._wake import NOTICES
from prioritylock.stores import ObjectStore
from prioritylock.testing import DelegatingStore
from tests._soak import size
from tests.conftest import StoreFactory
from tests.lock.helpers import Recorder, make, receiving

pytestmark = [pytest.mark.timeout(30), pytest.mark.usefixtures("driver")]

T = TypeVar("T")


class Withdrawals(Recorder):
    def __init__(self, cleanup_blocks: threading.Event) -> None:
        super().__init__(cleanup_blocks)
        self.withdrawn = threading.Event()

    def on_request_withdrawn(self, notice: CleanupNotice) -> None:
        self._add("withdrawn", notice)
        self.withdrawn.set()


def test_the_holder_hears_the_request_it_was_told_of_withdrawn(
    memory_store_factory: StoreFactory,
) -> None:
    finish = threading.Event()
    rec = Withdrawals(cleanup_blocks=finish)
    holder = make(
        memory_store_factory(),
        owner="holder",
        priority=1,
        cleanup_timeout=10,
        watch_interval=0.05,
        listener=rec,
    )
    assert holder.try_lock()
    # Waits min(1 s, 10 s); the holder's window is that less the 0.5 s drift allowance.
    high = make(memory_store_factory(), owner="high", priority=9, waiting_timeout=1.0)
    try:
        with receiving(signals.request_withdrawn) as sent:
            with pytest.raises(PreemptionTimeout):
                high.try_lock()
            assert rec.withdrawn.wait(5), "the holder was not told the request was withdrawn"
        assert rec.names() == ["acquired", "cleanup", "withdrawn"]
        told, withdrawn = rec.calls[1][1], rec.calls[2][1]
        assert withdrawn == told and withdrawn.requestor_owner == "high"
        assert [s["notice"] for s in sent] == [told]
        assert holder.is_current_owner()  # it keeps the lock while its cleanup runs
    finally:
        finish.set()
    assert rec.cleanup_done.wait(5)


def test_a_holder_that_hears_after_its_window_closed_is_not_told(
    memory_store_factory: StoreFactory, caplog: pytest.LogCaptureFixture
) -> None:
    """Poll-bound (no in-process notice): the holder reads every 0.3 s, so it sees the request,
    but only after its window (0.7 s wait less the 0.5 s drift allowance, from its last read
    that showed none) has closed: it is not told at all, then or when the request goes."""
    NOTICES.enabled = False  # the conftest fixture turns them back on
    rec = Withdrawals(cleanup_blocks=threading.Event())
    holder = make(
        memory_store_factory(),
        owner="holder",
        priority=1,
        cleanup_timeout=10,
        watch_interval=0.3,
        listener=rec,
    )
    assert holder.try_lock()
    high = make(memory_store_factory(), owner="high", priority=9, waiting_timeout=0.7)
    with (
        caplog.at_level(logging.INFO, logger="prioritylock"),
        receiving(signals.cleanup_requested) as asked,
    ):
        with pytest.raises(PreemptionTimeout):
            high.try_lock()
        end = time.monotonic() + 5
        while "not announced" not in caplog.text and time.monotonic() < end:
            time.sleep(0.05)  # the log line is the only sign of a notice not given
        assert "heard of after the cleanup window closed" in caplog.text
        time.sleep(0.35)  # one more watch read, after the request was withdrawn
    assert asked == [] and rec.names() == ["acquired"]
    assert holder.is_current_owner()
    holder.unlock()


class _Replaced(DelegatingStore):
    """Sets :attr:`replaced` once a ``replace`` through it has returned (a requestor's request)."""

    def __init__(self, inner: ObjectStore) -> None:
        super().__init__(inner)
        self.replaced = threading.Event()

    def _forward(self, op: str, key: str, call: Callable[[], T]) -> T:
        result = call()
        if op == "replace":
            self.replaced.set()
        return result


def test_a_short_window_is_read_in_time_at_the_default_watch_interval(
    memory_store_factory: StoreFactory,
) -> None:
    """Poll-bound, with a 1 s cleanup timeout and the default 0.5 s drift allowance: the holder
    is owed a 0.5 s window from its last quiet read. A request that lands just before the next
    watch read (at the default interval, on a fake clock) is read with a third of that window
    left, told, and handed the lock. When the default was half the cleanup timeout, that read
    came as the window closed: the request was not announced, and ``prioritylock run`` (whose
    requestor then waits like any other) waited for a stubborn job forever."""
    NOTICES.enabled = False  # the conftest fixture turns them back on
    clock = FakeClock()
    scheduler = Heartbeat(clock, threaded=False)
    store = memory_store_factory()
    rec = Recorder()
    holder = make(
        store,
        owner="holder",
        priority=1,
        lease_timeout=3,
        cleanup_timeout=1,
        clock=clock,
        heartbeat=scheduler,
        listener=rec,
    )
    watch = holder.config.watch_interval
    assert watch == pytest.approx((1 - 0.5) * 2 / 3)
    assert holder.try_lock()
    clock.advance(watch * 0.9)
    assert scheduler.run_due() == pytest.approx(clock.monotonic() + watch * 0.1)
    requests = _Replaced(store)
    high = make(requests, owner="high", priority=9)  # waits min(30 s, 1 s), on the real clock
    got: list[bool] = []
    asking = threading.Thread(target=lambda: got.append(high.try_lock()), daemon=True)
    asking.start()
    assert requests.replaced.wait(5), "the request was never written"
    info = make(store, owner="observer").info()
    assert info is not None and info.requestor_owner == "high"
    clock.advance(watch * 0.1 + 1e-6)
    scheduler.run_due()  # the watch read: it shows the request
    asking.join(5)
    assert got == [True], "the holder was not told in time, so it never handed over"
    assert rec.names()[:2] == ["acquired", "cleanup"]
    assert rec.notices[0].deadline - clock.monotonic() == pytest.approx(0.5 - watch, abs=1e-5)
    high.unlock()


class Timed(Withdrawals):
    """Records how much of its window the holder had left when it was told."""

    def __init__(self, cleanup_blocks: threading.Event) -> None:
        super().__init__(cleanup_blocks)
        self.left: list[float] = []

    def on_cleanup_notification(self, notice: CleanupNotice) -> None:
        self.left.append(notice.deadline - time.monotonic())
        super().on_cleanup_notification(notice)


@pytest.mark.timeout(120)
@pytest.mark.soak
@pytest.mark.usefixtures("notices")
def test_a_request_written_in_this_process_is_announced_with_time_left_every_time(
    memory_store_factory: StoreFactory,
) -> None:
    """The holder's last quiet read is older than the window (0.8 s wait less the 0.5 s drift
    allowance) when the request lands, and it would read again only in 30 s: counted from that
    read, the window has closed. The request's notice says when it was sent (same process, same
    clock) and which version it made, so the holder counts from the write and is told, with
    time left, every time; then of the withdrawal."""
    for i in range(size(3, 20)):  # round 0 already fails without the rule
        finish = threading.Event()
        rec = Timed(cleanup_blocks=finish)
        path = f"jobs/window-{i}"
        holder = make(
            memory_store_factory(),
            path,
            owner="holder",
            priority=1,
            cleanup_timeout=10,
            watch_interval=30,
            listener=rec,
        )
        assert holder.try_lock()
        time.sleep(0.35)  # let the window counted from the holder's last read close
        high = make(memory_store_factory(), path, owner="high", priority=9, waiting_timeout=0.8)
        try:
            with pytest.raises(PreemptionTimeout):
                high.try_lock()
            assert rec.withdrawn.wait(5), f"round {i}: the holder never heard the withdrawal"
            assert rec.names() == ["acquired", "cleanup", "withdrawn"], f"round {i}"
            assert 0 < rec.left[0] <= 0.3, f"round {i}: told with {rec.left[0]:.3f} s left"
        finally:
            finish.set()
        assert rec.cleanup_done.wait(5)  # then, nobody waiting, the holder lets go
