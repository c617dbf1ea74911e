"""StoreContract: the tests every ObjectStore must pass, for your own store too.

Subclass it in a test module and provide a ``store`` fixture (one open client on an empty or
private namespace); provide ``store_factory`` too (a callable returning a *new* client on the same
namespace) so the race tests give each thread its own client::

    from prioritylock.testing import StoreContract

    class TestMyStore(StoreContract):
        @pytest.fixture
        def store_factory(self, tmp_path):
            return lambda: MyStore(tmp_path)

        @pytest.fixture
        def store(self, store_factory):
            client = store_factory()
            yield client
            client.close()

Every test writes under its own random key prefix, so a shared namespace works as well; each test
sends a few dozen requests at most, so the suite stays quick against emulators and real clouds.
The tests assert with messages of their own: they read well without pytest's assert rewriting.
"""

from __future__ import annotations

import importlib.util
import random
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any, ClassVar, TypeVar

import pytest

from prioritylock._errors import ConditionFailed, ConfigError
from prioritylock.stores._base import (
    NOT_MODIFIED,
    ConditionalReader,
    ObjectStore,
    StoreCapabilities,
    Versioned,
)

__all__ = ["StoreContract"]

_T = TypeVar("_T")
_Test = TypeVar("_Test", bound=Callable[..., Any])

RACERS = 16
"""Threads, each with its own client, in the race tests."""

_RACE_SECONDS = 60.0
_BINARY = {
    "empty": b"",
    "all-byte-values": bytes(range(256)),
    "60KiB": random.Random(0x5EED).randbytes(60 * 1024),
    "newlines": b"\n\r\n\x00\n",
}
_INVALID_KEYS = {
    "empty": "",
    "absolute": "/abs",
    "empty-segment": "a//b",
    "trailing-slash": "a/",
    "dot": ".",
    "dotdot": "..",
    "dotdot-segment": "a/../b",
    "nul": "a\x00b",
    "newline": "a\nb",
    "del": "a\x7fb",
    "backslash": "a\\b",
    "too-long": "k" * 1025,
}
_INVALID_PREFIXES = {
    "absolute": "/abs",
    "dotdot": "a/../b",
    "empty-segment": "a//b",
    "nul": "a\x00",
}


_REPEATING_VERSIONS = (
    "this store's versions may repeat (content hashes, or a node's version restarted when it is"
    " created again); lease writes carry a nonce and the lock never deletes its documents"
)
_HAVE_TIMEOUT = importlib.util.find_spec("pytest_timeout") is not None


def _timeout(seconds: float) -> Callable[[_Test], _Test]:
    """``pytest.mark.timeout`` when pytest-timeout is installed, else nothing (no unknown mark)."""
    if not _HAVE_TIMEOUT:
        return lambda test: test
    mark: Callable[[_Test], _Test] = pytest.mark.timeout(seconds)
    return mark


def _new_base() -> str:
    return f"contract-{uuid.uuid4().hex[:16]}/"


def _read_present(store: ObjectStore, key: str) -> Versioned:
    found = store.read(key)
    assert found is not None, f"read({key!r}) returned None for an object that exists"
    return found


def _expect_condition_failed(key: str, call: Callable[[], object], what: str) -> None:
    with pytest.raises(ConditionFailed) as caught:
        call()
    assert caught.value.key == key, (
        f"{what}: ConditionFailed names key {caught.value.key!r}, expected {key!r}"
    )


def _expect_unchanged(store: ObjectStore, key: str, before: Versioned, what: str) -> None:
    after = store.read(key)
    assert after == before, f"{what} changed the object: was {before!r}, now {after!r}"


def _conditional(store: ObjectStore) -> ConditionalReader:
    """``store`` as a :class:`ConditionalReader`; the test is skipped for a store without one."""
    if not isinstance(store, ConditionalReader):
        pytest.skip(f"{type(store).__name__} has no read_if_changed (an optional operation)")
    return store


def _expect_one_read(store: ObjectStore, not_modified: int, what: str) -> None:
    """Since the last reset: one request, a read, ``not_modified`` of them answered unchanged."""
    snapshot = store.stats.snapshot()
    assert (snapshot["reads"], snapshot["total"]) == (1, 1), (
        f"{what} is one read request, counted as {store.stats!r}"
    )
    assert store.stats.not_modified == not_modified, (
        f"{what}: stats.not_modified is {store.stats.not_modified}, expected {not_modified}"
    )


def _run_racers(body: Callable[[int, threading.Barrier], _T]) -> list[_T | Exception]:
    """Run ``body(i, barrier)`` in :data:`RACERS` threads; their results or exceptions, in order.

    Each body calls ``barrier.wait()`` right before its racing request, so the requests leave
    together. Bounded: a store that hangs fails the test instead of hanging it.
    """
    barrier = threading.Barrier(RACERS, timeout=_RACE_SECONDS)
    outcomes: dict[int, _T | Exception] = {}

    def run(index: int) -> None:
        try:
            outcomes[index] = body(index, barrier)
        except Exception as exc:  # judged by the test, not lost in the thread
            if not isinstance(exc, ConditionFailed):
                barrier.abort()  # the others stop waiting for this one
            outcomes[index] = exc

    threads = [
        threading.Thread(target=run, args=(i,), name=f"contract-racer-{i}", daemon=True)
        for i in range(RACERS)
    ]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + _RACE_SECONDS
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    hung = [t.name for t in threads if t.is_alive()]
    assert not hung, f"store requests still running after {_RACE_SECONDS}s: {hung}"
    return [outcomes[i] for i in range(RACERS)]


def _split_outcomes(outcomes: list[_T | Exception], what: str) -> tuple[list[int], list[_T]]:
    """Indexes and results of the winners; every loser must have lost with ConditionFailed."""
    winners: list[int] = []
    results: list[_T] = []
    for index, outcome in enumerate(outcomes):
        if isinstance(outcome, ConditionFailed):
            continue
        if isinstance(outcome, Exception):
            raise AssertionError(
                f"{what}: racer {index} failed with {outcome!r} instead of winning or"
                " raising ConditionFailed"
            ) from outcome
        winners.append(index)
        results.append(outcome)
    return winners, results


class StoreContract:
    """The contract of :class:`~prioritylock.stores.ObjectStore`, as pytest tests.

    Needs a ``store`` fixture; uses ``store_factory`` (new client, same namespace) when there is
    one, else shares ``store`` between the racing threads.
    """

    pytestmark: ClassVar[list[pytest.MarkDecorator]] = (
        [pytest.mark.timeout(30)] if _HAVE_TIMEOUT else []
    )

    @pytest.fixture
    def racing_clients(
        self, request: pytest.FixtureRequest, store: ObjectStore
    ) -> Iterator[list[ObjectStore]]:
        """:data:`RACERS` clients of the namespace: new ones from ``store_factory`` if provided."""
        try:
            factory: Callable[[], ObjectStore] = request.getfixturevalue("store_factory")
        except pytest.FixtureLookupError:
            yield [store] * RACERS
            return
        clients: list[ObjectStore] = []
        try:
            for _ in range(RACERS):
                clients.append(factory())
            yield clients
        finally:
            closed: set[int] = {id(store)}
            for client in clients:
                if id(client) not in closed:
                    closed.add(id(client))
                    client.close()

    # -- the store itself ---------------------------------------------------------------------

    def test_is_an_object_store(self, store: ObjectStore) -> None:
        assert isinstance(store, ObjectStore), f"{store!r} lacks ObjectStore methods"
        assert isinstance(store.capabilities, StoreCapabilities)
        assert repr(store)

    def test_clients_of_one_namespace_say_so(
        self, store: ObjectStore, request: pytest.FixtureRequest
    ) -> None:
        namespace = store.namespace
        assert isinstance(namespace, str) and namespace, f"namespace is {namespace!r}"
        try:
            factory: Callable[[], ObjectStore] = request.getfixturevalue("store_factory")
        except pytest.FixtureLookupError:
            return
        other = factory()
        try:
            assert other.namespace == namespace, (
                f"two clients of one namespace name it {namespace!r} and {other.namespace!r}"
            )
        finally:
            if other is not store:
                other.close()

    # -- read and create ----------------------------------------------------------------------

    def test_read_absent_returns_none(self, store: ObjectStore) -> None:
        key = _new_base() + "absent"
        assert store.read(key) is None, f"read of absent {key!r} did not return None"

    def test_create_then_read_returns_bytes_and_version(self, store: ObjectStore) -> None:
        key = _new_base() + "doc"
        version = store.create(key, b"hello")
        assert isinstance(version, str), f"create returned {version!r}, not a str version"
        assert version, "create returned an empty version"
        found = _read_present(store, key)
        assert type(found.data) is bytes, f"read returned {type(found.data).__name__}, not bytes"
        assert found.data == b"hello", f"read returned {found.data!r}, created b'hello'"
        assert found.version == version, (
            f"read reports version {found.version!r}, create returned {version!r}"
        )

    def test_create_existing_fails_and_leaves_object_unchanged(self, store: ObjectStore) -> None:
        key = _new_base() + "doc"
        store.create(key, b"first")
        before = _read_present(store, key)
        _expect_condition_failed(key, lambda: store.create(key, b"second"), "create on existing")
        _expect_unchanged(store, key, before, "a failed create")

    # -- replace ------------------------------------------------------------------------------

    def test_replace_with_current_version(self, store: ObjectStore) -> None:
        key = _new_base() + "doc"
        first = store.create(key, b"one")
        second = store.replace(key, b"two", first)
        assert isinstance(second, str), f"replace returned {second!r}, not a str version"
        assert second != first, "replace returned the version the object had before"
        found = _read_present(store, key)
        assert found == Versioned(b"two", second), f"after replace, read returned {found!r}"

    def test_replace_with_stale_version_fails(self, store: ObjectStore) -> None:
        key = _new_base() + "doc"
        stale = store.create(key, b"one")
        store.replace(key, b"two", stale)
        before = _read_present(store, key)
        _expect_condition_failed(
            key, lambda: store.replace(key, b"three", stale), "replace with a stale version"
        )
        _expect_unchanged(store, key, before, "a failed replace")

    def test_replace_absent_fails(self, store: ObjectStore) -> None:
        base = _new_base()
        other = store.create(base + "other", b"x")
        key = base + "absent"
        _expect_condition_failed(
            key, lambda: store.replace(key, b"data", other), "replace of an absent object"
        )
        assert store.read(key) is None, "a failed replace created the object"

    # -- delete -------------------------------------------------------------------------------

    def test_delete_with_current_version(self, store: ObjectStore) -> None:
        key = _new_base() + "doc"
        version = store.create(key, b"data")
        store.delete(key, version)
        assert store.read(key) is None, "object still readable after delete"
        store.create(key, b"again")  # the key is free again

    def test_delete_with_stale_version_fails(self, store: ObjectStore) -> None:
        """Conditional delete: a store with ``conditional_delete`` must refuse a stale version."""
        key = _new_base() + "doc"
        stale = store.create(key, b"one")
        store.replace(key, b"two", stale)
        before = _read_present(store, key)
        _expect_condition_failed(
            key, lambda: store.delete(key, stale), "delete with a stale version"
        )
        _expect_unchanged(store, key, before, "a failed delete")

    def test_delete_absent_fails(self, store: ObjectStore) -> None:
        base = _new_base()
        other = store.create(base + "other", b"x")
        key = base + "absent"
        _expect_condition_failed(key, lambda: store.delete(key, other), "delete of absent")
        assert _read_present(store, base + "other").data == b"x"

    # -- versions never repeat ----------------------------------------------------------------

    def test_version_changes_when_rewriting_identical_bytes(self, store: ObjectStore) -> None:
        """ABA: content-hash versions (plain S3 ETags) would let a stale writer win here."""
        key = _new_base() + "doc"
        if not store.capabilities.unique_versions:
            pytest.skip(_REPEATING_VERSIONS)
        versions = [store.create(key, b"same")]
        for _ in range(2):
            versions.append(store.replace(key, b"same", versions[-1]))
        assert len(set(versions)) == len(versions), f"versions repeat: {versions}"
        _expect_condition_failed(
            key,
            lambda: store.replace(key, b"other", versions[0]),
            "replace with the version of identical older bytes",
        )
        assert _read_present(store, key) == Versioned(b"same", versions[-1])

    def test_version_is_new_after_delete_and_create(self, store: ObjectStore) -> None:
        key = _new_base() + "doc"
        if not store.capabilities.unique_versions:
            pytest.skip(_REPEATING_VERSIONS)
        first = store.create(key, b"same")
        store.delete(key, first)
        second = store.create(key, b"same")
        assert second != first, f"create after delete reused version {first!r}"
        _expect_condition_failed(
            key,
            lambda: store.replace(key, b"other", first),
            "replace with the version of a deleted incarnation",
        )
        assert _read_present(store, key) == Versioned(b"same", second)

    # -- conditional reads (ConditionalReader, optional) --------------------------------------

    def test_read_if_changed_on_an_unchanged_object_is_not_modified(
        self, store: ObjectStore
    ) -> None:
        reader = _conditional(store)
        key = _new_base() + "doc"
        version = store.create(key, b"same")
        store.stats.reset()
        found = reader.read_if_changed(key, version)
        assert found is NOT_MODIFIED, f"read_if_changed at the current version returned {found!r}"
        _expect_one_read(store, 1, "read_if_changed of an unchanged object")

    def test_read_if_changed_after_a_replace_returns_the_new_object(
        self, store: ObjectStore
    ) -> None:
        reader = _conditional(store)
        key = _new_base() + "doc"
        first = store.create(key, b"one")
        second = store.replace(key, b"two", first)
        store.stats.reset()
        found = reader.read_if_changed(key, first)
        assert found == Versioned(b"two", second), f"after a replace, it returned {found!r}"
        _expect_one_read(store, 0, "read_if_changed of a replaced object")
        assert reader.read_if_changed(key, second) is NOT_MODIFIED, "not at the new version"

    def test_read_if_changed_of_an_absent_object_is_none(self, store: ObjectStore) -> None:
        reader = _conditional(store)
        base = _new_base()
        other = store.create(base + "other", b"x")
        gone = store.create(base + "gone", b"x")
        store.delete(base + "gone", gone)
        store.stats.reset()
        found = reader.read_if_changed(base + "absent", other)
        assert found is None, f"read_if_changed of a key never created returned {found!r}"
        _expect_one_read(store, 0, "read_if_changed of an absent object")
        found = reader.read_if_changed(base + "gone", gone)
        assert found is None, f"read_if_changed at a deleted object's version returned {found!r}"

    def test_read_if_changed_sees_a_delete_and_create_again(self, store: ObjectStore) -> None:
        """ABA across delete/create: never "unchanged" (content-hash versions: new bytes only)."""
        reader = _conditional(store)
        key = _new_base() + "doc"
        first = store.create(key, b"first")
        store.delete(key, first)
        data = b"first" if store.capabilities.unique_versions else b"second"
        second = store.create(key, data)
        found = reader.read_if_changed(key, first)
        assert found is not NOT_MODIFIED, "the object created again read as not modified"
        assert found == Versioned(data, second), f"it returned {found!r}"

    def test_read_if_changed_at_a_version_never_seen_returns_the_object(
        self, store: ObjectStore
    ) -> None:
        reader = _conditional(store)
        key = _new_base() + "doc"
        version = store.create(key, b"data")
        for unknown in ("1", '"0x8D000000000001"', "never-a-version", "", "é \n"):
            if unknown == version:
                continue
            store.stats.reset()
            found = reader.read_if_changed(key, unknown)
            assert found == Versioned(b"data", version), (
                f"read_if_changed at version {unknown!r} returned {found!r}"
            )
            _expect_one_read(store, 0, f"read_if_changed at version {unknown!r}")

    # -- list ---------------------------------------------------------------------------------

    def test_list_by_prefix(self, store: ObjectStore) -> None:
        base = _new_base()
        names = ["a", "a.b", "a/b", "a/b/c", "ab", "b", "b/a"]
        for name in names:
            store.create(base + name, name.encode())
        expected = {
            "": names,
            "a": ["a", "a.b", "a/b", "a/b/c", "ab"],
            "a/": ["a/b", "a/b/c"],
            "a/b": ["a/b", "a/b/c"],
            "a/b/": ["a/b/c"],
            "b": ["b", "b/a"],
            "c": [],
        }
        for suffix, wanted in expected.items():
            listed = store.list(base + suffix)
            assert listed == [base + n for n in wanted], (
                f"list({base + suffix!r}) returned {listed}, expected {[base + n for n in wanted]}"
            )

    def test_list_empty_prefix_lists_everything_sorted(self, store: ObjectStore) -> None:
        base = _new_base()
        keys = [base + "z", base + "m/n", base + "a"]
        for key in keys:
            store.create(key, b"")
        listed = store.list("")
        assert listed == sorted(listed), f"list('') is not sorted: {listed}"
        missing = set(keys) - set(listed)
        assert not missing, f"list('') lacks {sorted(missing)}"

    def test_list_forgets_deleted_keys(self, store: ObjectStore) -> None:
        base = _new_base()
        kept = store.create(base + "kept", b"")
        gone = store.create(base + "gone/child", b"")
        store.delete(base + "gone/child", gone)
        assert store.list(base) == [base + "kept"], f"list after delete: {store.list(base)}"
        assert kept

    # -- data and keys ------------------------------------------------------------------------

    @pytest.mark.parametrize("payload", list(_BINARY.values()), ids=list(_BINARY))
    def test_binary_data_round_trips(self, store: ObjectStore, payload: bytes) -> None:
        key = _new_base() + "doc"
        version = store.create(key, payload)
        found = _read_present(store, key)
        assert found.data == payload, f"created {len(payload)} bytes, read {found.data[:40]!r}..."
        reversed_payload = payload[::-1]
        version = store.replace(key, reversed_payload, version)
        assert _read_present(store, key) == Versioned(reversed_payload, version)
        version = store.replace(key, b"", version)
        assert _read_present(store, key) == Versioned(b"", version)

    def test_keys_with_url_and_unicode_characters(self, store: ObjectStore) -> None:
        """Keys are not URLs: a store must escape ``%``, ``?``, ``#``, ``+``, spaces, unicode."""
        base = _new_base()
        names = sorted(["a b", "c+d", "e%20f", "g?h=1&i", "j#k", "l~m", "ñ/ü", "鍵"])
        for name in names:
            store.create(base + name, name.encode())
        for name in names:
            found = _read_present(store, base + name)
            assert found.data == name.encode(), f"key {base + name!r} read back {found.data!r}"
        listed = store.list(base)
        assert listed == [base + n for n in names], f"list({base!r}) returned {listed}"

    def test_long_keys(self, store: ObjectStore) -> None:
        base = _new_base()
        key = base + "/".join(f"{i:02d}" + "s" * 61 for i in range(7))  # over 450 bytes
        version = store.create(key, b"deep")
        assert _read_present(store, key) == Versioned(b"deep", version)
        assert store.list(base) == [key]

    @pytest.mark.parametrize("key", list(_INVALID_KEYS.values()), ids=list(_INVALID_KEYS))
    def test_invalid_keys_are_refused_before_any_request(
        self, store: ObjectStore, key: str
    ) -> None:
        before = store.stats.snapshot()
        calls: dict[str, Callable[[], object]] = {
            "read": lambda: store.read(key),
            "create": lambda: store.create(key, b"x"),
            "replace": lambda: store.replace(key, b"x", "1"),
            "delete": lambda: store.delete(key, "1"),
        }
        if isinstance(store, ConditionalReader):
            reader = store
            calls["read_if_changed"] = lambda: reader.read_if_changed(key, "1")
        for name, call in calls.items():
            with pytest.raises(ConfigError):
                call()
            assert store.stats.snapshot() == before, f"{name}({key!r}) sent a request"

    @pytest.mark.parametrize(
        "prefix", list(_INVALID_PREFIXES.values()), ids=list(_INVALID_PREFIXES)
    )
    def test_invalid_prefixes_are_refused_before_any_request(
        self, store: ObjectStore, prefix: str
    ) -> None:
        before = store.stats.snapshot()
        with pytest.raises(ConfigError):
            store.list(prefix)
        assert store.stats.snapshot() == before, f"list({prefix!r}) sent a request"

    # -- stats --------------------------------------------------------------------------------

    def test_stats_count_each_request_kind(self, store: ObjectStore) -> None:
        key = _new_base() + "doc"
        store.stats.reset()
        assert store.stats.total == 0, f"reset left {store.stats!r}"
        store.read(key)
        version = store.create(key, b"1")
        store.read(key)
        version = store.replace(key, b"2", version)
        store.list(key)
        store.delete(key, version)
        expected = {
            "reads": 2,
            "creates": 1,
            "replaces": 1,
            "deletes": 1,
            "lists": 1,
            "total": 6,
        }
        assert store.stats.snapshot() == expected, f"after one of each: {store.stats!r}"
        assert store.stats.writes == 3

    def test_stats_count_failed_conditional_requests(self, store: ObjectStore) -> None:
        base = _new_base()
        key = base + "doc"
        stale = store.create(key, b"1")
        store.replace(key, b"2", stale)
        store.stats.reset()
        with pytest.raises(ConditionFailed):
            store.create(key, b"3")
        with pytest.raises(ConditionFailed):
            store.replace(key, b"3", stale)
        with pytest.raises(ConditionFailed):
            store.delete(base + "absent", stale)
        snapshot = store.stats.snapshot()
        assert (snapshot["creates"], snapshot["replaces"], snapshot["deletes"]) == (1, 1, 1), (
            f"each failed request counts once: {store.stats!r}"
        )

    # -- clients and races --------------------------------------------------------------------

    def test_new_client_sees_the_same_objects(
        self, store: ObjectStore, racing_clients: list[ObjectStore]
    ) -> None:
        key = _new_base() + "doc"
        other = racing_clients[0]
        version = store.create(key, b"from store")
        assert other.read(key) == Versioned(b"from store", version), "other client sees stale data"
        newer = other.replace(key, b"from other", version)
        assert store.read(key) == Versioned(b"from other", newer), "store sees stale data"
        _expect_condition_failed(
            key, lambda: store.replace(key, b"late", version), "replace after another client's"
        )

    @_timeout(_RACE_SECONDS + 30)
    def test_concurrent_create_has_one_winner(
        self, store: ObjectStore, racing_clients: list[ObjectStore]
    ) -> None:
        key = _new_base() + "doc"

        def race(index: int, barrier: threading.Barrier) -> str:
            client = racing_clients[index]
            barrier.wait()
            return client.create(key, f"racer {index}".encode())

        winners, versions = _split_outcomes(_run_racers(race), "racing create")
        assert len(winners) == 1, f"{len(winners)} of {RACERS} racing creates won: {winners}"
        found = _read_present(store, key)
        assert found == Versioned(f"racer {winners[0]}".encode(), versions[0]), (
            f"the object is {found!r}, not what the winner (racer {winners[0]}) wrote"
        )

    @_timeout(_RACE_SECONDS + 30)
    def test_concurrent_replace_has_one_winner(
        self, store: ObjectStore, racing_clients: list[ObjectStore]
    ) -> None:
        key = _new_base() + "doc"
        store.create(key, b"start")

        def race(index: int, barrier: threading.Barrier) -> str:
            client = racing_clients[index]
            seen = _read_present(client, key)
            barrier.wait()  # everyone has read the same version before anyone writes
            return client.replace(key, f"racer {index}".encode(), seen.version)

        winners, versions = _split_outcomes(_run_racers(race), "racing replace")
        assert len(winners) == 1, f"{len(winners)} of {RACERS} racing replaces won: {winners}"
        found = _read_present(store, key)
        assert found == Versioned(f"racer {winners[0]}".encode(), versions[0]), (
            f"the object is {found!r}, not what the winner (racer {winners[0]}) wrote"
        )
