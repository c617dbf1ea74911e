"""A new lock object reads conditionally against what another lock object of the process last
read or wrote (``_driver.DecodedCache``): when nothing changed, it takes the decoded lease
instead of the body. Still 2 requests for its first acquire, on every store; never a stale
decision."""

from __future__ import annotations

from typing import Any

import pytest

from prioritylock import _driver, _flows, _lease, _state
from prioritylock.stores import MemoryStore
from tests.conftest import StoreFactory
from tests.lock.helpers import make

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def decodes(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    calls: list[str] = []
    real = _lease.decode

    def counting(key: str, data: bytes, **kwargs: Any) -> Any:
        calls.append(key)
        return real(key, data, **kwargs)

    monkeypatch.setattr(_flows, "decode", counting)
    return calls


def test_a_fresh_lock_reuses_what_the_last_one_saw(
    store_factory: StoreFactory, decodes: list[str]
) -> None:
    store = store_factory()
    first = make(store, owner="first")
    assert first.try_lock()
    first.unlock()
    decodes.clear()
    store.stats.reset()

    fresh = make(store_factory(), owner="fresh")  # another store object on the same data
    fresh_stats = fresh.config.store.stats
    fresh_stats.reset()
    assert fresh.try_lock()
    assert fresh_stats.total == 2 and fresh_stats.reads == 1 and fresh_stats.replaces == 1
    assert fresh_stats.not_modified == 1, "the read should have been answered 'unchanged'"
    assert decodes == [], "the unchanged document was decoded again"
    fresh.unlock()


def test_a_change_since_is_read_whole(store_factory: StoreFactory, decodes: list[str]) -> None:
    store = store_factory()
    first = make(store, owner="first")
    assert first.try_lock()
    first.unlock()
    # Another process (here: a lock on a store object whose namespace the cache cannot see)
    # takes the lock: the cached version is stale.
    other = make(_Unnamed(store), owner="other")
    assert other.try_lock()
    decodes.clear()
    fresh = make(store_factory(), owner="fresh")
    assert not fresh.try_lock()  # it read the change, not the cached free document
    assert decodes, "the changed document must be decoded"
    info = fresh.info()
    assert info is not None and info.owner == "other"
    other.unlock()


def test_a_version_is_decoded_once_per_process(
    store_factory: StoreFactory, decodes: list[str]
) -> None:
    """Lock objects that had each read an older version, reading a new one another process
    wrote (a line of waiters woken by a release), decode it once between them."""
    store = store_factory()
    readers = [make(store_factory(), owner=f"reader{i}") for i in range(3)]
    holder = make(store, owner="holder")
    assert holder.try_lock()
    for reader in readers:
        assert reader.info() is not None  # each has seen the document: its own cached version
    other = make(_Unnamed(store), owner="other")  # another process's write, unseen here
    holder.unlock()
    assert other.try_lock()
    decodes.clear()
    for reader in readers:
        info = reader.info()
        assert info is not None and info.owner == "other"
    assert len(decodes) == 1, decodes
    other.unlock()


class _Unnamed:
    """A store without a ``namespace``: its lock objects share nothing through the cache."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def __getattr__(self, name: str) -> Any:
        if name == "namespace":
            raise AttributeError(name)
        return getattr(self._inner, name)


def test_stores_without_a_namespace_do_not_share(decodes: list[str]) -> None:
    inner = MemoryStore("unnamed")
    first = make(_Unnamed(inner), owner="first")
    assert first.try_lock()
    first.unlock()
    decodes.clear()
    fresh = make(_Unnamed(inner), owner="fresh")
    assert fresh.try_lock()
    assert len(decodes) == 1
    fresh.unlock()


def test_the_cache_is_bounded() -> None:
    cache = _driver.DecodedCache(size=4)
    seen = _state.Seen(None, None)
    for i in range(10):
        cache.put(("ns", f"k{i}"), seen)
        assert len(cache._items) <= 4
    assert cache.get(("ns", "k9")) is seen and cache.get(None) is None
