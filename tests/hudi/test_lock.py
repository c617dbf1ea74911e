"""HudiTableLock against a store: Hudi's requests, budget and rules (fake clocks, no threads)."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest

from prioritylock import (
    ConditionFailed,
    CorruptLease,
    FakeClock,
    LockBuilder,
    LockHeld,
    LockLost,
    LockTimeout,
    NotLockOwner,
)
from prioritylock import _hudi as hudi
from prioritylock._hudi_lock import KEY, force_unlock, read_info
from prioritylock._scheduler import Scheduler
from prioritylock.stores import MemoryStore, ObjectStore
from prioritylock.testing.faults import FaultyStore
from tests.hudi.drivers import HudiFace, hudi_lock

pytestmark = pytest.mark.timeout(30)

V, RENEW, DRIFT = 60.0, 6.0, 0.5


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def store() -> FaultyStore:
    return FaultyStore(MemoryStore())


def make(store: ObjectStore, clock: FakeClock, driver: str = "sync", **kw: float) -> HudiFace:
    options: dict[str, float] = {
        "lease_timeout": V,
        "renew_interval": RENEW,
        "max_clock_drift": DRIFT,
        "poll_interval": 1.0,
        "store_timeout": 2.0,
        **kw,
    }
    return hudi_lock(driver, store, clock=clock, heartbeat=False, **options)


def doc(store: ObjectStore) -> hudi.HudiLockData:
    seen = store.read(KEY)
    assert seen is not None
    return hudi.decode(seen.data, key=KEY)


def now_ms(clock: FakeClock) -> int:
    return int(clock.time() * 1000)


def requests(store: FaultyStore, action: Callable[[], object]) -> dict[str, int]:
    store.stats.reset()
    action()
    return {k: v for k, v in store.stats.snapshot().items() if v and k != "total"}


def test_acquire_renew_release_write_hudis_document_within_hudis_budget(
    driver: str, store: FaultyStore, clock: FakeClock
) -> None:
    a = make(store, clock, driver)
    assert requests(store, lambda: assert_true(a.try_lock())) == {"reads": 1, "creates": 1}
    assert doc(store) == hudi.HudiLockData(False, now_ms(clock) + 60_000, a.owner_id)
    clock.advance(RENEW)
    assert requests(store, a.renew) == {"replaces": 1}
    assert doc(store).valid_until_ms == now_ms(clock) + 60_000
    assert requests(store, a.unlock) == {"replaces": 1}
    assert doc(store) == hudi.HudiLockData(True, now_ms(clock) + 60_000, a.owner_id)
    # Taking it again over a released document: read, then If-Match the version read.
    assert requests(store, lambda: assert_true(a.try_lock())) == {"reads": 1, "replaces": 1}


def assert_true(value: bool) -> None:
    assert value


def test_a_held_lock_is_not_taken_until_hudis_rule_frees_it(
    driver: str, store: FaultyStore, clock: FakeClock
) -> None:
    a, b = make(store, clock, driver), make(store, clock, driver)
    assert a.try_lock()
    with pytest.raises(LockHeld):
        a.try_lock()
    assert requests(store, lambda: assert_true(not b.try_lock())) == {"reads": 1}
    clock.advance(V - DRIFT - 0.001)
    assert a.is_current_owner()
    clock.advance(0.001)
    assert not a.is_current_owner()  # the holder lets go first, on its own clock ...
    clock.advance(DRIFT)  # at validUntil
    assert not b.try_lock()  # ... and Hudi's rule still holds the lock up to validUntil + drift
    clock.advance(DRIFT)
    assert not b.try_lock()
    clock.advance(0.002)
    assert b.try_lock()
    with pytest.raises(LockLost):
        a.unlock()
    assert doc(store).owner == b.owner_id


def test_a_renewed_holder_believes_for_the_validity_less_the_drift_from_its_renewal(
    driver: str, store: FaultyStore, clock: FakeClock
) -> None:
    a = make(store, clock, driver)
    assert a.try_lock()
    clock.advance(RENEW)
    a.renew()
    clock.advance(V - DRIFT - 0.001)
    assert a.is_current_owner()
    clock.advance(0.001)
    assert not a.is_current_owner()
    with pytest.raises(LockLost):
        a.unlock()


def test_a_released_lock_is_taken_at_once(
    driver: str, store: FaultyStore, clock: FakeClock
) -> None:
    a, b = make(store, clock, driver), make(store, clock, driver)
    assert a.try_lock()
    a.unlock()
    assert b.try_lock()
    with pytest.raises(NotLockOwner):
        a.unlock()


def test_a_holder_never_looks_free_to_hudis_readers_while_it_believes_it_holds(
    driver: str,
    store: FaultyStore,
) -> None:
    master = FakeClock()
    holder_clock = FakeClock(master=master, wall_offset=master.wall_offset - DRIFT / 2)
    a = make(store, holder_clock, driver)
    assert a.try_lock()
    next_renew = holder_clock.monotonic() + RENEW
    for step in range(2000):
        master.advance(0.1)
        if holder_clock.monotonic() >= next_renew and step < 1000:
            a.renew()
            next_renew += RENEW
        if not a.is_current_owner():
            break
        # A reader whose wall clock runs up to the drift ahead of the holder's.
        reader_ms = int((master.time() + DRIFT / 2) * 1000)
        assert not hudi.is_free(doc(store), reader_ms, int(DRIFT * 1000))
    assert step > 1000  # it held through the renewals, then lapsed when they stopped


@pytest.mark.parametrize("by", ["force_unlock", "another writer"])
def test_renewal_over_a_lock_taken_by_others_is_lost(
    driver: str, store: FaultyStore, clock: FakeClock, by: str
) -> None:
    lost: list[str] = []
    # on_lost is told from the scheduler's notifier thread: a manual scheduler tells it inline.
    manual = Scheduler(clock, threaded=False)
    a = hudi_lock(
        driver,
        store,
        clock=clock,
        heartbeat=False,
        lease_timeout=V,
        on_lost=lost.append,
        scheduler=manual,
    )
    assert a.try_lock()
    seen = doc(store)
    force_unlock(store, if_owner=seen.owner, if_valid_until_ms=seen.valid_until_ms, clock=clock)
    if by == "another writer":
        assert make(store, clock, driver).try_lock()
    with pytest.raises(LockLost):
        a.renew()
    reason = "forced" if by == "force_unlock" else "acquired by others"
    assert lost == [reason] and not a.is_current_owner()
    with pytest.raises(LockLost):
        a.unlock()


def test_a_holder_forced_free_hears_it_at_its_release_like_a_lease_holder(
    driver: str, store: FaultyStore, clock: FakeClock
) -> None:
    """The release reads back a refused write: a force unlock (whose validUntil is a millisecond
    short of the holder's) is not taken for the holder's own release."""
    lost: list[str] = []
    manual = Scheduler(clock, threaded=False)  # tells on_lost inline
    a = hudi_lock(
        driver,
        store,
        clock=clock,
        heartbeat=False,
        lease_timeout=V,
        on_lost=lost.append,
        scheduler=manual,
    )
    assert a.try_lock()
    seen = doc(store)
    force_unlock(store, if_owner=seen.owner, if_valid_until_ms=seen.valid_until_ms, clock=clock)
    assert a.is_current_owner()  # no read yet: it can't know
    with pytest.raises(LockLost) as raised:
        a.unlock()
    assert raised.value.reason == "forced" and lost == ["forced"]
    assert not a.is_current_owner() and doc(store) == hudi.forced(seen)


@pytest.mark.parametrize("fault", ["lost_response", "precondition_after_success"])
@pytest.mark.parametrize("op", ["create", "replace"])
def test_writes_whose_outcome_is_unknown_are_read_back(
    driver: str, store: FaultyStore, clock: FakeClock, fault: str, op: str
) -> None:
    a = make(store, clock, driver)
    if op == "replace":
        assert a.try_lock()
        a.unlock()
    store.inject(op, fault)
    assert a.try_lock()
    assert doc(store).owner == a.owner_id and a.is_current_owner()
    store.inject("replace", fault)
    a.renew()
    store.inject("replace", fault)
    a.unlock()
    assert doc(store).expired


def test_throttling_is_retried_within_the_store_timeout(
    driver: str, store: FaultyStore, clock: FakeClock
) -> None:
    a = make(store, clock, driver)
    store.inject("read", "unavailable", times=2)
    store.inject("create", "unavailable", times=2)
    assert a.try_lock()
    assert store.injected["unavailable"] == 4


def test_a_dangling_lock_is_recovered_by_the_guarded_force_unlock(
    driver: str, store: FaultyStore, clock: FakeClock
) -> None:
    # A Java writer's release got a 429 and was never retried (apache/hudi#18438).
    dangling = hudi.HudiLockData(False, now_ms(clock) + 3_600_000, "java-writer-uuid")
    store.create(KEY, hudi.encode(dangling))
    a = make(store, clock, driver)
    assert not a.try_lock()
    info = read_info(store, clock=clock)
    assert info is not None and not info.free and info.time_left == pytest.approx(3600.5)
    with pytest.raises(ConditionFailed):
        force_unlock(store, if_owner="someone-else", if_valid_until_ms=dangling.valid_until_ms)
    assert doc(store) == dangling  # nothing written
    done = a.force_unlock(if_owner=info.owner, if_valid_until_ms=info.valid_until_ms)
    assert done.expired and done.free and doc(store) == hudi.forced(dangling)
    assert a.try_lock()


def test_a_corrupt_document_is_left_untouched(
    driver: str, store: FaultyStore, clock: FakeClock
) -> None:
    store.create(KEY, b'{"owner":"x"}')
    with pytest.raises(CorruptLease):
        make(store, clock, driver).try_lock()
    seen = store.read(KEY)
    assert seen is not None and seen.data == b'{"owner":"x"}'


def test_lock_waits_and_times_out(driver: str, store: FaultyStore, clock: FakeClock) -> None:
    a, b = make(store, clock, driver), make(store, clock, driver)
    assert a.try_lock()
    start = clock.monotonic()
    with pytest.raises(LockTimeout):
        b.lock(timeout=10)
    assert clock.monotonic() - start == pytest.approx(10)
    b.lock(timeout=V + 5)  # a is gone without releasing: b takes it after validUntil + drift
    assert b.is_current_owner()


def test_priority_changes_nothing_a_java_holder_cant_be_asked(store: FaultyStore) -> None:
    java = hudi.acquired("java-uuid", 1_000, 60_000)
    store.create(KEY, hudi.encode(java))
    builder = LockBuilder.hudi_table(store).priority(100).forceful()
    urgent = builder.clock(FakeClock(wall_offset=0.0, start=1.0)).build()
    assert not urgent.try_lock()  # waits like anyone until the Java lease lapses


def test_the_heartbeat_renews_on_the_process_scheduler(store: FaultyStore) -> None:
    a = LockBuilder.hudi_table(store).lease_timeout(2.0).renew_interval(0.05).build()
    renewed = threading.Event()
    assert a.try_lock()
    first = doc(store).valid_until_ms
    for _ in range(400):
        if doc(store).valid_until_ms > first:
            renewed.set()
            break
        renewed.wait(0.01)
    assert renewed.is_set() and a.is_current_owner()
    a.unlock()
    assert doc(store).expired
