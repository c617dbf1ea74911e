"""DelegatingStore forwards the whole seam, optional operations as the inner store has them."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import pytest

from prioritylock import LockBuilder
from prioritylock.stores import (
    NOT_MODIFIED,
    ConditionalReader,
    LocalStore,
    MemoryStore,
    ObjectStore,
    StoreCapabilities,
    StoreStats,
    UnsyncedWriter,
    Versioned,
)
from prioritylock.testing import DelegatingStore, StoreContract
from prioritylock.testing.faults import FaultyStore

pytestmark = [pytest.mark.timeout(30)]

_T = TypeVar("_T")


class Recording(DelegatingStore):
    """The one-method wrapper the docstring promises: notes each request it forwards."""

    def __init__(self, inner: ObjectStore) -> None:
        super().__init__(inner)
        self.ops: list[tuple[str, str]] = []

    def _forward(self, op: str, key: str, call: Callable[[], _T]) -> _T:
        self.ops.append((op, key))
        return call()


class PlainStore:
    """A store with the five operations only: no read_if_changed, no replace_unsynced."""

    def __init__(self) -> None:
        self._inner = MemoryStore()

    stats = property(lambda self: self._inner.stats)
    capabilities = property(lambda self: self._inner.capabilities)
    namespace = property(lambda self: self._inner.namespace)

    def read(self, key: str) -> Versioned | None:
        return self._inner.read(key)

    def create(self, key: str, data: bytes) -> str:
        return self._inner.create(key, data)

    def replace(self, key: str, data: bytes, version: str) -> str:
        return self._inner.replace(key, data, version)

    def delete(self, key: str, version: str) -> None:
        self._inner.delete(key, version)

    def list(self, prefix: str) -> list[str]:
        return self._inner.list(prefix)

    def close(self) -> None:
        pass


def test_every_operation_goes_through_forward_to_the_inner_store() -> None:
    inner = MemoryStore()
    store = Recording(inner)
    first = store.create("a/doc", b"one")
    assert store.read("a/doc") == Versioned(b"one", first)
    assert store.read_if_changed("a/doc", first) is NOT_MODIFIED
    second = store.replace("a/doc", b"two", first)
    assert inner.read("a/doc") == Versioned(b"two", second)
    assert store.list("a/") == ["a/doc"]
    store.delete("a/doc", second)
    assert inner.read("a/doc") is None
    assert store.ops == [
        ("create", "a/doc"),
        ("read", "a/doc"),
        ("read_if_changed", "a/doc"),
        ("replace", "a/doc"),
        ("list", "a/"),
        ("delete", "a/doc"),
    ]


def test_stats_capabilities_and_namespace_are_the_inner_stores() -> None:
    inner = MemoryStore()
    store = Recording(inner)
    assert store.stats is inner.stats and isinstance(store.stats, StoreStats)
    assert store.capabilities == inner.capabilities
    assert isinstance(store.capabilities, StoreCapabilities)
    assert store.namespace == inner.namespace
    assert isinstance(store, ObjectStore) and isinstance(store, ConditionalReader)
    assert repr(store) == f"Recording({inner!r})"


def test_replace_unsynced_only_where_the_inner_store_has_it(tmp_path: Path) -> None:
    assert not isinstance(Recording(MemoryStore()), UnsyncedWriter)
    local = Recording(LocalStore(tmp_path))
    assert isinstance(local, UnsyncedWriter) and isinstance(local, Recording)
    assert type(local).__name__ == "Recording"
    version = local.create("doc", b"one")
    assert isinstance(local, UnsyncedWriter)
    newer = local.replace_unsynced("doc", b"two", version)
    assert local.ops[-1] == ("replace_unsynced", "doc")
    assert LocalStore(tmp_path).read("doc") == Versioned(b"two", newer)


def test_a_lock_on_a_wrapped_local_store_skips_the_syncs_it_would_skip(tmp_path: Path) -> None:
    store = Recording(LocalStore(tmp_path))
    lock = LockBuilder().store(store).path("jobs/a").owner("me").build()
    try:
        assert lock.try_lock()
        lock.unlock()  # a release keeps the fence: written unsynced, as on the bare store
    finally:
        lock.close()
    assert any(op == "replace_unsynced" for op, _ in store.ops), store.ops


def test_a_store_without_read_if_changed_gets_a_read_and_a_comparison() -> None:
    inner = PlainStore()
    store = Recording(inner)
    version = store.create("doc", b"one")
    inner.stats.reset()
    assert store.read_if_changed("doc", version) is NOT_MODIFIED
    assert store.read_if_changed("doc", "other") == Versioned(b"one", version)
    assert store.read_if_changed("absent", version) is None
    assert inner.stats.reads == 3 and inner.stats.total == 3


def test_faulty_store_is_a_delegating_store(tmp_path: Path) -> None:
    faulty = FaultyStore(LocalStore(tmp_path))
    assert isinstance(faulty, DelegatingStore) and isinstance(faulty, UnsyncedWriter)
    version = faulty.create("doc", b"one")
    faulty.inject("replace", "lost_response")
    with pytest.raises(Exception, match="response lost"):
        faulty.replace_unsynced("doc", b"two", version)  # faulted as the replace it is
    assert faulty.read("doc") is not None and faulty.stats.replaces == 1


class TestDelegatingStoreContract(StoreContract):
    """A wrapper passes the store contract as its inner store does."""

    @pytest.fixture
    def store_factory(self) -> Callable[[], ObjectStore]:
        shared = MemoryStore()
        return lambda: Recording(shared)

    @pytest.fixture
    def store(self, store_factory: Callable[[], ObjectStore]) -> Iterator[ObjectStore]:
        store = store_factory()
        yield store
        store.close()
