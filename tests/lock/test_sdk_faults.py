"""Faults at the SDK boundary of every cloud store, and real Locks that must reconcile them.

``tests/lock/test_faults.py`` injects faults at the store seam (``FaultyStore``); here they are
injected *under* the store, where the SDK meets the network (``tests/lock/_cloud_faults.py``:
botocore event hooks for S3, a ``FaultyAdapter`` on the requests transport for GCS and Azure), so
each store's own error translation is part of what is tested, against the real server of every
cloud kind (moto, SeaweedFS, fake-gcs-server, Azurite; narrowed by ``PRIORITYLOCK_STORES``).

The lock under test talks through the faulty store; everybody else (rivals, the inspector that
checks the document at the end) has a clean client of its own on the same bucket. Scenarios:

(a) an acquire whose write lands but whose response is lost: the lock holds, exactly once;
(b) a failed condition (412; Azure's 409 on create) answering a write that landed, as an SDK
    retry of it would, and a real botocore retry (S3, whose store takes a caller's client);
(c) S3's 409 ``ConditionalRequestConflict``: a failed condition, re-read, the right outcome;
(d) 429/503 and then success: retried with backoff within the store timeout; past it, an error
    and nothing claimed;
(e) 500 on renewals: the holder keeps the lock if one lands before its deadline, else it loses it,
    is told once, and no second holder appears before that; and reads refused while writes land
    must not keep the holder from renewing;
(f) a release whose response is lost: the lease ends free and the next holder gets fence + 1.

Every test ends by reading the lease document with a clean client.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from prioritylock import (
    Heartbeat,
    Lock,
    LockBuilder,
    LockHeld,
    LockLost,
    StoreUnavailable,
    signals,
)
from prioritylock._lease import Lease, decode
from prioritylock.stores import ObjectStore
from scopes import LockScope
from tests.conftest import CLOUD_KINDS, StoreFactory, selected_kinds
from tests.lock._cloud_faults import Fault, Injector, open_injector
from tests.lock.helpers import Recorder

pytestmark = [pytest.mark.timeout(60)]

PATH = "faults/sdk"
S3_KINDS = [kind for kind in CLOUD_KINDS if kind.startswith("s3-")]
s3_only = pytest.mark.parametrize("store_kind", selected_kinds(S3_KINDS), indirect=True)


@pytest.fixture(params=selected_kinds(CLOUD_KINDS))
def store_kind(request: pytest.FixtureRequest) -> str:
    """The cloud kinds only (overrides the suite-wide fixture that also has memory and local)."""
    return str(request.param)


class Rig:
    """One test's faulty store, the clean clients around it, and the locks it made."""

    def __init__(self, kind: str, factory: StoreFactory, faults: Injector) -> None:
        self.kind = kind
        self.factory = factory
        self.faults = faults
        self.heartbeat = Heartbeat()
        self._locks: list[Lock] = []
        self._inspector: ObjectStore | None = None

    @property
    def store(self) -> ObjectStore:
        """The faulty store (its stats count every attempt it sent)."""
        return self.faults.store

    def lock(self, owner: str = "faulty", *, store: ObjectStore | None = None, **opts: Any) -> Lock:
        """A lock on the faulty store (or on ``store``)."""
        builder = (
            LockBuilder()
            .store(store or self.store)
            .path(PATH)
            .owner(owner)
            .poll_interval(0.05)
            .heartbeat(self.heartbeat)
        )
        for name, value in opts.items():
            getattr(builder, name)(value)
        lock = builder.build()
        self._locks.append(lock)
        return lock

    def rival(self, owner: str = "rival", **opts: Any) -> Lock:
        """A lock with a clean client of its own."""
        return self.lock(owner, store=self.factory(), **opts)

    def document(self) -> Lease | None:
        """The lease document as stored now, read with a clean client (no faults)."""
        if self._inspector is None:
            self._inspector = self.factory()
        key = LockScope.path(PATH).key
        found = self._inspector.read(key)
        return None if found is None else decode(key, found.data, name=key)

    def prepare(self, path: str) -> None:
        """``create``: no document; ``replace``: a free one at fence 1 (taken and released)."""
        if path == "replace":
            first = self.rival("first")
            assert first.try_lock()
            first.unlock()
            lease = self.document()
            assert lease is not None and lease.holder is None and lease.fence == 1

    def writes(self) -> int:
        stats = self.store.stats
        return stats.creates + stats.replaces

    def close(self) -> None:
        self.faults.clear()
        for lock in self._locks:
            with contextlib.suppress(Exception):
                lock.close()
        self.heartbeat.close()


@pytest.fixture
def rig(
    request: pytest.FixtureRequest, store_kind: str, store_factory: StoreFactory
) -> Iterator[Rig]:
    faults = open_injector(request, store_kind, store_factory())
    made = Rig(store_kind, store_factory, faults)
    try:
        yield made
    finally:
        made.close()
        faults.close()


@pytest.fixture
def retrying_rig(
    request: pytest.FixtureRequest, store_kind: str, store_factory: StoreFactory
) -> Iterator[Rig]:
    """A rig whose faulty store's client retries once (botocore's own retry, S3 only)."""
    faults = open_injector(request, store_kind, store_factory(), sdk_retries=1)
    made = Rig(store_kind, store_factory, faults)
    try:
        yield made
    finally:
        made.close()
        faults.close()


def _holder_id(lease: Lease | None) -> str | None:
    return None if lease is None or lease.holder is None else lease.holder.lock_id


def _assert_sole_holder(rig: Rig, lock: Lock, fence: int) -> None:
    """``lock`` holds at ``fence``, the document says so, and nobody else can take it."""
    assert lock.is_current_owner()
    assert lock.fencing_token == fence
    lease = rig.document()
    assert lease is not None
    assert _holder_id(lease) == lock.lock_id, f"the lease does not name this lock: {lease}"
    assert lease.fence == fence
    with pytest.raises(LockHeld):
        lock.try_lock()
    assert rig.rival("second").try_lock() is False


def _assert_free_then_next(rig: Rig, fence: int) -> None:
    """The document is free at ``fence`` (released, not dangling); the next holder gets + 1."""
    lease = rig.document()
    assert lease is not None
    assert lease.holder is None, f"the lease is still claimed: {lease}"
    assert lease.event is not None and lease.event.kind == "released"
    assert lease.fence == fence
    after = rig.rival("after")
    assert after.try_lock() is True
    assert after.fencing_token == fence + 1
    after.unlock()
    final = rig.document()
    assert final is not None and final.holder is None and final.fence == fence + 1


def _landed_then(kind: str, path: str, fault: str) -> Fault:
    """A fault that lets the write land and then fails its answer the ``fault`` way."""
    if fault == "timeout":
        return Fault(lose="timeout", deliver=True)
    if fault == "reset":
        return Fault(lose="reset", deliver=True)
    if fault == "condition":
        # What an SDK retry of a landed write gets back: 412; Azure answers a create with 409.
        return Fault(status=409 if kind == "azure" and path == "create" else 412, deliver=True)
    return Fault(status=int(fault), deliver=True)


# -- (a) an acquire that lands but whose response is lost ------------------------------------------


@pytest.mark.parametrize("fault", ["timeout", "reset", "503"])
@pytest.mark.parametrize("path", ["create", "replace"])
def test_acquire_that_landed_but_lost_its_response_holds_exactly_once(
    rig: Rig, path: str, fault: str
) -> None:
    rig.prepare(path)
    fence = 1 if path == "create" else 2
    lock = rig.lock()
    rig.faults.fail("write", _landed_then(rig.kind, path, fault))
    rig.store.stats.reset()

    assert lock.try_lock() is True
    assert rig.faults.injected("write") == 1
    assert rig.writes() == 1, "the lock wrote again instead of recognising its own write"
    _assert_sole_holder(rig, lock, fence)

    lock.unlock()
    _assert_free_then_next(rig, fence)


# -- (b) a failed condition after a write that landed (an SDK retry) -------------------------------


@pytest.mark.parametrize("path", ["create", "replace", "renew"])
def test_condition_failed_answering_a_write_that_landed_is_recognised_by_nonce(
    rig: Rig, path: str
) -> None:
    lock = rig.lock()
    if path == "renew":
        assert lock.try_lock()
        fence = 1
        beat = _beat_of(rig)
    else:
        rig.prepare(path)
        fence = 1 if path == "create" else 2
    rig.faults.fail("write", _landed_then(rig.kind, path, "condition"))
    rig.store.stats.reset()

    if path == "renew":
        lock.renew()  # no LockLost: the 412 answered our own landed write
        assert _beat_of(rig) == beat + 1
    else:
        assert lock.try_lock() is True
    assert rig.faults.injected("write") == 1
    assert rig.writes() == 1
    _assert_sole_holder(rig, lock, fence)

    lock.unlock()
    _assert_free_then_next(rig, fence)


def _beat_of(rig: Rig) -> int:
    lease = rig.document()
    assert lease is not None and lease.holder is not None
    return lease.holder.beat


@s3_only
@pytest.mark.parametrize("path", ["create", "replace", "renew", "release"])
def test_botocore_retry_of_a_landed_write_answered_412_is_reconciled(
    retrying_rig: Rig, path: str
) -> None:
    """A caller's boto3 client that retries: the first attempt lands and its answer is lost,
    botocore retries, and the server answers the retry 412 (the object changed: by us)."""
    rig = retrying_rig
    lock = rig.lock()
    if path in ("renew", "release"):
        assert lock.try_lock()
        fence = 1
    else:
        rig.prepare(path)
        fence = 1 if path == "create" else 2
    rig.faults.fail("write", Fault(lose="timeout", deliver=True))
    rig.store.stats.reset()
    passed = rig.faults.passed("write")

    if path == "release":
        lock.unlock()
    elif path == "renew":
        lock.renew()
    else:
        assert lock.try_lock() is True
    assert rig.faults.injected("write") == 1
    assert rig.faults.passed("write") == passed + 1, "botocore did not retry the write"
    assert rig.writes() == 2, "two attempts of one write, and no third"
    if path == "release":
        assert not lock.is_current_owner()
        _assert_free_then_next(rig, fence)
        return
    _assert_sole_holder(rig, lock, fence)
    lock.unlock()
    _assert_free_then_next(rig, fence)


# -- (c) S3's 409 ConditionalRequestConflict -------------------------------------------------------


@s3_only
@pytest.mark.parametrize("path", ["create", "replace"])
@pytest.mark.parametrize("case", ["nothing-landed", "ours-landed", "a-rival-won"])
def test_s3_conditional_request_conflict_is_a_failed_condition_then_re_read(
    rig: Rig, path: str, case: str
) -> None:
    rig.prepare(path)
    fence = 1 if path == "create" else 2
    lock = rig.lock()
    rival = rig.rival()
    rival_won: list[bool] = []
    if case == "a-rival-won":
        # The rival's write lands while ours is in flight; S3 answers ours 409.
        fault = Fault(status=409, before=lambda: rival_won.append(rival.try_lock()))
    else:
        fault = Fault(status=409, deliver=case == "ours-landed")
    rig.faults.fail("write", fault)
    rig.store.stats.reset()

    got = lock.try_lock()
    assert rig.faults.injected("write") == 1
    if case == "a-rival-won":
        assert rival_won == [True]
        assert got is False
        assert not lock.is_current_owner()
        assert rig.writes() == 1, "the lock wrote again over the rival's lease"
        lease = rig.document()
        assert lease is not None and _holder_id(lease) == rival.lock_id
        assert lease.fence == fence
        rival.unlock()
    else:
        assert got is True
        # Nothing landed: the lock re-read, saw the same document, and wrote again.
        assert rig.writes() == (1 if case == "ours-landed" else 2)
        _assert_sole_holder(rig, lock, fence)
        lock.unlock()
    _assert_free_then_next(rig, fence)


# -- (d) throttling and 5xx, then success ----------------------------------------------------------


@pytest.mark.parametrize("status", [429, 503])
def test_throttled_then_served_is_retried_with_backoff_within_the_store_timeout(
    rig: Rig, status: int
) -> None:
    rig.prepare("replace")
    lock = rig.lock(store_timeout=5.0)
    rig.faults.fail("read", Fault(status=status), times=2)
    rig.faults.fail("write", Fault(status=status), times=2)
    rig.store.stats.reset()

    began = time.monotonic()
    assert lock.try_lock() is True
    took = time.monotonic() - began
    assert rig.faults.injected("read") == 2
    assert rig.faults.injected("write") == 2
    assert rig.faults.pending() == 0
    assert rig.store.stats.replaces == 3, "each refused attempt counts, then one that landed"
    # Backoff: the four pauses are at least 10, 20, 10 and 20 ms; all within the store timeout.
    assert 0.05 <= took < 5.0, took
    _assert_sole_holder(rig, lock, 2)

    rig.faults.fail("write", Fault(status=status), times=2)
    lock.unlock()  # the release is retried the same way
    assert rig.faults.injected("write") == 4
    _assert_free_then_next(rig, 2)


@pytest.mark.parametrize("path", ["create", "replace"])
def test_throttled_past_the_store_timeout_raises_and_claims_nothing(rig: Rig, path: str) -> None:
    rig.prepare(path)
    lock = rig.lock(store_timeout=1.0)
    rig.faults.fail("write", Fault(status=503), times=None)

    began = time.monotonic()
    with pytest.raises(StoreUnavailable):
        lock.try_lock()
    took = time.monotonic() - began
    assert 1.0 <= took < 4.0, took
    assert rig.faults.injected("write") >= 2
    assert not lock.is_current_owner()
    lease = rig.document()
    if path == "create":
        assert lease is None, f"a refused create left a document: {lease}"
    else:
        assert lease is not None and lease.holder is None and lease.fence == 1
        assert lease.event is not None and lease.event.kind == "released"
    rival = rig.rival()
    assert rival.try_lock() is True
    assert rival.fencing_token == (1 if path == "create" else 2)
    rival.unlock()


# -- (e) 500 on renewals ---------------------------------------------------------------------------


class _Renewals:
    """Counts the ``renewed`` signals one lock sends; lets a test wait for the next one."""

    def __init__(self, lock: Lock) -> None:
        self._lock = lock
        self._cond = threading.Condition()
        self.count = 0

    def __call__(self, sender: Any, **_kwargs: Any) -> None:
        if sender is self._lock:
            with self._cond:
                self.count += 1
                self._cond.notify_all()

    def wait_for(self, count: int, timeout: float) -> bool:
        with self._cond:
            return self._cond.wait_for(lambda: self.count >= count, timeout)


@contextlib.contextmanager
def _connected(signal: Any, receiver: Callable[..., None]) -> Iterator[None]:
    signal.connect(receiver, weak=False)
    try:
        yield
    finally:
        signal.disconnect(receiver)


@pytest.mark.parametrize(
    "fault",
    ["500-then-landed", "landed-then-500", "reads-and-writes-500"],
)
def test_renewals_failing_for_a_while_keep_the_lock_if_one_lands_in_time(
    rig: Rig, fault: str
) -> None:
    recorder = Recorder()
    lock = rig.lock(lease_timeout=3.0, renew_interval=1.0, listener=recorder)
    renewals = _Renewals(lock)
    with _connected(signals.renewed, renewals):
        began = time.monotonic()
        assert lock.try_lock()
        fence = lock.fencing_token
        if fault == "500-then-landed":
            rig.faults.fail("write", Fault(status=500), times=5)
        elif fault == "landed-then-500":
            rig.faults.fail("write", Fault(status=500, deliver=True))
        else:
            rig.faults.fail("write", Fault(status=500), times=3)
            rig.faults.fail("read", Fault(status=500), times=3)
        assert renewals.wait_for(1, timeout=6.0), "the heartbeat never renewed"
        renewed_by = time.monotonic() - began
    assert rig.faults.pending() == 0
    assert renewed_by < 3.0, f"renewed only after {renewed_by:.2f} s, past the 3 s lease"
    assert "lost" not in recorder.names()
    assert lock.is_current_owner()
    lease = rig.document()
    assert lease is not None and _holder_id(lease) == lock.lock_id
    assert lease.holder is not None and lease.holder.beat >= 1
    assert lease.fence == fence
    assert rig.rival().try_lock() is False
    lock.unlock()
    assert recorder.names().count("lost") == 0
    _assert_free_then_next(rig, fence)


@pytest.mark.parametrize("down", ["writes", "reads-and-writes"])
def test_renewals_failing_past_the_deadline_lose_the_lock_and_tell_the_holder_once(
    rig: Rig, down: str
) -> None:
    """The store refuses the holder's requests (500) until its lease is over, while a rival with
    a clean client waits: the holder loses the lock at its deadline, its listener is told once,
    and the rival takes over only after the holder was told.

    With reads refused too, this fails at the time of writing: ``Lock._write`` settles the
    failed renewal by reading back with ``Lock._read``, which retries until ``store_timeout``
    from now (10 s by default), not until the holding's deadline; the heartbeat notices the
    expiry only after that, ~10.5 s after the acquire, long after the rival took over (~2.3 s).
    """
    lease_timeout, drift = 2.0, 0.3
    recorder = Recorder()
    lock = rig.lock(
        lease_timeout=lease_timeout, renew_interval=0.5, max_clock_drift=drift, listener=recorder
    )
    rival = rig.rival(max_clock_drift=drift)
    lost: list[tuple[float, Any]] = []
    taken: list[float] = []
    failed: list[BaseException] = []

    def on_lost(sender: Any, **kwargs: Any) -> None:
        if sender is lock:
            lost.append((time.monotonic(), kwargs.get("reason")))

    def wait_for_it() -> None:
        try:
            rival.lock(timeout=10.0)
            taken.append(time.monotonic())
        except BaseException as exc:
            failed.append(exc)

    waiter = threading.Thread(target=wait_for_it, name="rival", daemon=True)
    with _connected(signals.lock_lost, on_lost):
        began = time.monotonic()  # the lease's clock starts no earlier than this
        assert lock.try_lock()
        fence = lock.fencing_token
        rig.faults.fail("write", Fault(status=500), times=None)
        if down == "reads-and-writes":
            rig.faults.fail("read", Fault(status=500), times=None)
        waiter.start()
        try:
            # Told at the deadline, give or take scheduling. Ask the lock nothing before: its
            # is_current_owner() would notice the expiry itself and tell the listener.
            told = recorder.lost.wait(timeout=lease_timeout + drift + 1.0)
            told_after = time.monotonic() - began
            assert rig.faults.injected("write") >= 1, "the heartbeat never tried to renew"
            assert told, (
                f"{told_after:.2f} s after the acquire, the holder of a {lease_timeout:g} s lease"
                f" was still not told it was lost ({down} refused with 500); the rival took over"
                f" {taken[0] - began:.2f} s after the acquire"
                if taken
                else f"{told_after:.2f} s after the acquire, the holder of a {lease_timeout:g} s"
                f" lease was still not told it was lost ({down} refused with 500)"
            )
            assert not lock.is_current_owner()
            with pytest.raises(LockLost):
                _ = lock.fencing_token
        finally:
            waiter.join(timeout=15.0)
        assert not failed, f"the rival failed: {failed!r}"
        assert taken, "the rival never took over the expired lease"
        assert taken[0] - began >= lease_timeout, "taken over before the holder's lease ended"
        assert lost[0][0] <= taken[0], "the rival held the lock before the holder was told"
        rig.faults.clear()
        with pytest.raises(LockLost):
            lock.renew()
        lock.close()
    assert recorder.names().count("lost") == 1
    assert [reason for _, reason in lost] == ["expired"]
    lease = rig.document()
    assert lease is not None and _holder_id(lease) == rival.lock_id
    assert lease.fence == fence + 1
    assert lease.event is not None and lease.event.kind == "expired_takeover"
    rival.unlock()
    _assert_free_then_next(rig, fence + 1)


def test_failing_reads_do_not_keep_a_holder_from_renewing(rig: Rig) -> None:
    """Reads refused (500) while writes land: the holder's watch reads fail, but its renewals
    (compare-and-swap on the version it knows; no read needed) must still go out in time.

    Fails at the time of writing: ``Lock._watch`` reads with ``Lock._read``, which retries until
    ``store_timeout`` (10 s) while the heartbeat task holds the lock's I/O; the renewal due at
    1 s never runs, and the 3 s lease is lost (about 10 s after the acquire) although every
    renewal would have landed.
    """
    recorder = Recorder()
    lock = rig.lock(lease_timeout=3.0, renew_interval=1.0, watch_interval=0.25, listener=recorder)
    renewals = _Renewals(lock)
    with _connected(signals.renewed, renewals):
        began = time.monotonic()
        assert lock.try_lock()
        fence = lock.fencing_token
        rig.faults.fail("read", Fault(status=500), times=None)
        renewed = renewals.wait_for(1, timeout=3.0)
        renewed_after = time.monotonic() - began
        read_faults = rig.faults.injected("read")
        rig.faults.clear()
    assert read_faults >= 1, "the holder never watched"
    assert renewed, (
        f"no renewal {renewed_after:.2f} s after the acquire (lease 3 s, renew every 1 s) while"
        f" only reads failed ({read_faults} refused): a failing watch read held up the renewal"
    )
    assert "lost" not in recorder.names()
    assert lock.is_current_owner()
    lease = rig.document()
    assert lease is not None and _holder_id(lease) == lock.lock_id and lease.fence == fence
    lock.unlock()
    _assert_free_then_next(rig, fence)


# -- (f) a release whose response is lost ----------------------------------------------------------


@pytest.mark.parametrize("fault", ["timeout", "reset", "condition", "503"])
def test_release_that_landed_but_lost_its_response_leaves_the_lock_free(
    rig: Rig, fault: str
) -> None:
    recorder = Recorder()
    lock = rig.lock(listener=recorder)
    assert lock.try_lock()
    fence = lock.fencing_token
    rig.faults.fail("write", _landed_then(rig.kind, "replace", fault))
    rig.store.stats.reset()

    lock.unlock()  # no error: the lock read the document back and found its own release
    assert rig.faults.injected("write") == 1
    assert rig.writes() == 1, "the release was written twice"
    assert not lock.is_current_owner()
    assert recorder.names().count("released") == 1
    assert "lost" not in recorder.names()
    _assert_free_then_next(rig, fence)


def test_release_that_cannot_land_in_time_is_retried_until_the_lock_is_free(rig: Rig) -> None:
    lock = rig.lock(store_timeout=1.0)
    assert lock.try_lock()
    fence = lock.fencing_token
    rig.faults.fail("write", Fault(status=503), times=None)
    with pytest.raises(StoreUnavailable):
        lock.unlock()
    assert not lock.is_current_owner()
    lease = rig.document()
    assert lease is not None and _holder_id(lease) is not None, "nothing landed yet"

    rig.faults.clear()  # the store recovers; the background retry lands the release
    waiter = rig.rival("waiter", poll_interval=0.1)
    began = time.monotonic()
    waiter.lock(timeout=10.0)
    assert time.monotonic() - began < 10.0  # well before the 30 s lease could have expired
    assert waiter.fencing_token == fence + 1
    lease = rig.document()
    assert lease is not None and _holder_id(lease) == waiter.lock_id
    assert lease.event is not None and lease.event.kind == "acquired"
    waiter.unlock()
    _assert_free_then_next(rig, fence + 1)
