"""Every call that takes a deadline ends by it, whatever the store does (issue 22).

A store that can't be reached is a real S3Store aimed at 127.0.0.1: a closed port (connections
refused at once) or a black hole (a server of the test's own that accepts connections and never
answers). The store timeout is left long (10 s) where the caller's deadline is to win, and made
short where it is the bound; the slack allowed past a bound is ``SLACK``. A write the driver
stops waiting for is settled afterwards: a store that holds a create past its bound and then
lands it leaves no lease claimed.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from typing import Any, TypeVar

import attrs
import pytest

from prioritylock import LockTimeout, StoreUnavailable
from prioritylock._flows import TRY_STORE_TIMEOUT
from prioritylock.stores import MemoryStore, ObjectStore, S3Store
from prioritylock.stores._base import StoreCapabilities
from prioritylock.testing import DelegatingStore
from tests.lock.helpers import make

pytestmark = [pytest.mark.timeout(60), pytest.mark.usefixtures("driver")]

_T = TypeVar("_T")

#: How far past its bound a call may end on this machine (the issue's allowance).
SLACK = 2.0


class BlackHole:
    """A TCP server on 127.0.0.1 that accepts every connection and never answers."""

    def __init__(self) -> None:
        self._sock = socket.create_server(("127.0.0.1", 0), backlog=128)
        self._sock.settimeout(0.1)
        self.port = self._sock.getsockname()[1]
        self._held: list[socket.socket] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._accept, name="black-hole", daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _addr = self._sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self._held.append(conn)  # read nothing, answer nothing, close nothing

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        for conn in self._held:
            conn.close()
        self._sock.close()


def closed_port() -> int:
    """A port on 127.0.0.1 that nothing listens on (bound, then let go)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def black_hole() -> Iterator[BlackHole]:
    hole = BlackHole()
    yield hole
    hole.close()


def s3_at(port: int) -> S3Store:
    return S3Store(
        "bucket",
        "locks",
        endpoint_url=f"http://127.0.0.1:{port}",
        region="us-east-1",
        aws_access_key_id="test",
        aws_secret_access_key="test",
    )


@pytest.fixture(params=["closed-port", "black-hole"])
def unreachable(request: pytest.FixtureRequest, black_hole: BlackHole) -> S3Store:
    port = closed_port() if request.param == "closed-port" else black_hole.port
    return s3_at(port)


@pytest.fixture
def silent(request: pytest.FixtureRequest) -> bool:
    """Whether ``unreachable`` is the black hole (it never answers) rather than a closed port."""
    return "black-hole" in request.node.callspec.id


def timed(fn: Callable[[], _T]) -> tuple[_T | BaseException, float]:
    started = time.monotonic()
    try:
        result: _T | BaseException = fn()
    except Exception as exc:
        result = exc
    return result, time.monotonic() - started


def test_lock_timeout_ends_by_the_deadline(unreachable: S3Store) -> None:
    """The store timeout (10 s) is longer than the caller's: LockTimeout by the caller's."""
    lock = make(unreachable, store_timeout=10.0)
    try:
        raised, took = timed(lambda: lock.lock(timeout=2))
        assert isinstance(raised, LockTimeout), raised
        assert isinstance(raised.__cause__, StoreUnavailable)
        assert 2.0 <= took <= 2.0 + SLACK, took
    finally:
        lock.close()


def test_lock_zero_timeout_still_makes_one_attempt(unreachable: S3Store) -> None:
    lock = make(unreachable, store_timeout=10.0)
    try:
        raised, took = timed(lambda: lock.lock(timeout=0))
        assert isinstance(raised, LockTimeout), raised
        assert took <= SLACK, took
    finally:
        lock.close()


def test_try_lock_is_bounded(unreachable: S3Store, silent: bool) -> None:
    """try_lock stops retrying after min(store timeout, TRY_STORE_TIMEOUT); a request the
    store never answers is given up at the store timeout."""
    store_timeout = 3.0
    lock = make(unreachable, store_timeout=store_timeout)
    try:
        raised, took = timed(lock.try_lock)
        assert isinstance(raised, StoreUnavailable), raised
        assert took <= (store_timeout if silent else TRY_STORE_TIMEOUT) + SLACK, took
    finally:
        lock.close()


def test_info_ends_by_the_store_timeout(black_hole: BlackHole) -> None:
    """The SDK's own read timeout is 10 s; the store timeout (1 s) ends the call."""
    lock = make(s3_at(black_hole.port), store_timeout=1.0)
    try:
        raised, took = timed(lock.info)
        assert isinstance(raised, StoreUnavailable), raised
        assert took <= 1.0 + SLACK, took
    finally:
        lock.close()


# -- a write the driver stopped waiting for ------------------------------------------------------


class LateCreates(DelegatingStore):
    """A memory store that says it is a network store (so the drivers bound its calls) and holds
    every create until :attr:`gate` opens, then lands it."""

    def __init__(self, inner: ObjectStore) -> None:
        super().__init__(inner)
        self.gate = threading.Event()
        self.creating = threading.Event()  # a create has reached the store and waits at the gate
        self.landed = threading.Event()
        self.settled = threading.Event()  # a replace after the late create landed

    @property
    def capabilities(self) -> StoreCapabilities:
        caps = self.inner.capabilities
        return attrs.evolve(caps, shared_across_processes=True, shared_across_hosts=True)

    def _forward(self, op: str, key: str, call: Callable[[], Any]) -> Any:
        if op == "create":
            self.creating.set()
            assert self.gate.wait(30)
            result = call()
            self.landed.set()
            return result
        result = call()
        if op.startswith("replace") and self.landed.is_set():
            self.settled.set()
        return result


def test_abandoned_write_is_settled() -> None:
    store = LateCreates(MemoryStore())
    lock = make(store, owner="late", store_timeout=10.0, lease_timeout=30.0)
    other = make(store, owner="other", lease_timeout=30.0)
    try:
        raised, took = timed(lambda: lock.lock(timeout=1))
        assert isinstance(raised, LockTimeout), raised
        assert took <= 1.0 + SLACK, took
        store.gate.set()  # the create lands now: a lease claimed by the acquire that gave up
        assert store.landed.wait(10)
        assert store.settled.wait(10), "the late claim was not taken back"
        info = other.info()
        assert info is not None and not info.held
        assert other.try_lock() is True
    finally:
        store.gate.set()
        other.close()
        lock.close()


class _AnswerAsTimeRunsOut(Future[Any]):
    """A store call's future whose bounded wait reports that time ran out although the call
    has ended: the race of an answer that arrives just as the wait's time is up."""

    def result(self, timeout: float | None = None) -> Any:
        if timeout is not None:
            raise TimeoutError
        return super().result()


class _Inline:
    """An executor that runs each call at once, into an :class:`_AnswerAsTimeRunsOut`."""

    def submit(self, call: Callable[[], Any]) -> Future[Any]:
        future: Future[Any] = _AnswerAsTimeRunsOut()
        try:
            future.set_result(call())
        except BaseException as exc:
            future.set_exception(exc)
        return future


def test_an_answer_that_arrives_as_the_wait_runs_out_is_the_outcome(
    driver: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bounded call that ended as its wait ran out gives its own answer (a bare TimeoutError
    reached lock()'s caller in a loaded CI run); the asyncio driver's twin of this is the same
    rule in ``LoopRunner._call``."""
    if driver != "sync":
        pytest.skip("the threaded driver's wait on its worker pool")
    from prioritylock import _lock

    monkeypatch.setattr(_lock, "_call_pool", _Inline)
    store = LateCreates(MemoryStore())
    store.gate.set()
    lock = make(store, owner="racer", store_timeout=5.0)
    try:
        assert lock.try_lock() is True  # not TimeoutError: the create's answer is the outcome
        assert lock.is_current_owner()
        lock.unlock()
    finally:
        lock.close()
