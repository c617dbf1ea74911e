"""LocalStore's quick path (``_try_nowait``): the call the asyncio lock makes on its event loop.

It either makes the call exactly as the method would (same result or error, counted once, logged
once) or refuses with ``WOULD_BLOCK`` having written, counted and logged nothing: whenever the
call would wait for a lock another thread or process holds, or for the disk (a sync).
"""

from __future__ import annotations

import errno
import fcntl
import logging
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from prioritylock._errors import ConditionFailed, ConfigError, StoreUnavailable
from prioritylock.stores import NOT_MODIFIED, LocalStore, Versioned, _local, _slots
from prioritylock.stores._base import WOULD_BLOCK

pytestmark = pytest.mark.timeout(60)

KEY = "lease/doc"


@pytest.fixture
def store(tmp_path: Path) -> LocalStore:
    return LocalStore(tmp_path / "store", lock_timeout=2.0)


@pytest.fixture
def lazy(tmp_path: Path) -> LocalStore:
    return LocalStore(tmp_path / "lazy", lock_timeout=2.0, durable=False)


@pytest.fixture
def syncs(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every sync from now on (the calls still happen)."""
    calls: list[str] = []
    for name in ("fsync", "fdatasync"):
        real = getattr(os, name)

        def spy(fd: int, _name: str = name, _real: Callable[[int], None] = real) -> None:
            calls.append(_name)
            _real(fd)

        monkeypatch.setattr(os, name, spy)
    return calls


@pytest.fixture
def store_log(caplog: pytest.LogCaptureFixture) -> Callable[[], list[str]]:
    """The store's DEBUG lines since the last call."""
    caplog.set_level(logging.DEBUG, logger="prioritylock.stores")

    def taken() -> list[str]:
        lines = [r.getMessage() for r in caplog.records if r.name == "prioritylock.stores"]
        caplog.clear()
        return lines

    return taken


def _object_file(store: LocalStore, key: str = KEY) -> Path:
    return Path(_local._key_paths(store.directory, key)[0])


def _stripe(store: LocalStore, key: str = KEY) -> threading.Lock:
    return _local._STRIPES[hash((store.directory, key)) % len(_local._STRIPES)]


def test_an_uncontended_call_is_made_once_counted_and_logged_without_a_sync(
    store: LocalStore, syncs: list[str], store_log: Callable[[], list[str]]
) -> None:
    version = store.create(KEY, b"one")
    syncs.clear()
    store_log()
    before = store.stats.snapshot()

    found = store._try_nowait("read", KEY)
    assert found == Versioned(b"one", version)
    assert store._try_nowait("read_if_changed", KEY, version) is NOT_MODIFIED
    new = store._try_nowait("replace_unsynced", KEY, b"two", version)
    assert isinstance(new, str)
    assert new != version
    assert store.read(KEY) == Versioned(b"two", new)

    after = store.stats.snapshot()
    assert after["reads"] - before["reads"] == 3  # two quick reads and the check
    assert after["replaces"] - before["replaces"] == 1
    assert store.stats.not_modified == 1
    assert syncs == []
    lines = store_log()
    assert len(lines) == 4, lines
    assert [line.split(" ")[1] for line in lines] == [
        "read",
        "read_if_changed",
        "replace_unsynced",
        "read",
    ]


def test_a_failed_condition_is_raised_counted_and_logged_once(
    store: LocalStore, store_log: Callable[[], list[str]]
) -> None:
    store.create(KEY, b"one")
    before = store.stats.replaces
    store_log()
    with pytest.raises(ConditionFailed):
        store._try_nowait("replace_unsynced", KEY, b"two", "00" * 16)
    assert store.stats.replaces == before + 1
    assert len(store_log()) == 1


def test_an_invalid_key_raises_uncounted_like_the_method(store: LocalStore) -> None:
    with pytest.raises(ConfigError):
        store._try_nowait("read", "")
    with pytest.raises(ConfigError):
        store.read("")
    assert store.stats.total == 0


@pytest.mark.parametrize("op", ["create", "replace", "delete"])
def test_writes_of_a_durable_store_that_sync_are_refused_untouched(
    store: LocalStore, syncs: list[str], store_log: Callable[[], list[str]], op: str
) -> None:
    version = store.create(KEY, b"one")
    raw = _object_file(store).read_bytes()
    syncs.clear()
    store_log()
    before = store.stats.snapshot()
    args = {
        "create": (KEY + "-new", b"x"),
        "replace": (KEY, b"two", version),
        "delete": (KEY, version),
    }[op]
    assert store._try_nowait(op, *args) is WOULD_BLOCK
    assert _object_file(store).read_bytes() == raw
    assert not _object_file(store, KEY + "-new").exists()
    assert store.stats.snapshot() == before
    assert syncs == []
    assert store_log() == []


def test_a_non_durable_store_makes_every_write_on_the_quick_path(lazy: LocalStore) -> None:
    version = lazy._try_nowait("create", KEY, b"one")
    assert isinstance(version, str)
    version = lazy._try_nowait("replace", KEY, b"two", version)
    assert lazy.read(KEY) == Versioned(b"two", version)  # type: ignore[arg-type]
    assert lazy._try_nowait("delete", KEY, version) is None
    assert lazy.read(KEY) is None
    snap = lazy.stats.snapshot()
    assert (snap["creates"], snap["replaces"], snap["deletes"]) == (1, 1, 1)


def test_a_document_outgrowing_its_file_is_refused_untouched(
    store: LocalStore, syncs: list[str]
) -> None:
    version = store.create(KEY, b"small")
    raw = _object_file(store).read_bytes()
    syncs.clear()
    big = b"x" * (len(raw) * 2)
    assert store._try_nowait("replace_unsynced", KEY, big, version) is WOULD_BLOCK
    assert _object_file(store).read_bytes() == raw
    assert store.stats.replaces == 0
    assert syncs == []
    store.replace_unsynced(KEY, big, version)  # the method itself writes the larger file
    assert syncs, "a new file is synced"


class _Killed(BaseException):
    pass


def test_a_record_that_needs_repair_is_refused_untouched(
    store: LocalStore, monkeypatch: pytest.MonkeyPatch, syncs: list[str]
) -> None:
    """A synced write whose record update never happened (its writer killed) must be synced
    before the next write: the quick path leaves that to the method."""
    version = store.create(KEY, b"created")
    real_pwrite = os.pwrite

    def die_at_the_record(fd: int, data: bytes, offset: int) -> int:
        if offset == _slots.RECORD_AT:
            raise _Killed
        return real_pwrite(fd, data, offset)

    monkeypatch.setattr(os, "pwrite", die_at_the_record)
    with pytest.raises(_Killed):
        store.replace(KEY, b"synced, record lost", version)
    monkeypatch.setattr(os, "pwrite", real_pwrite)
    found = store.read(KEY)
    assert found is not None
    raw = _object_file(store).read_bytes()
    syncs.clear()
    replaces = store.stats.replaces

    assert store._try_nowait("replace_unsynced", KEY, b"lazy", found.version) is WOULD_BLOCK
    assert _object_file(store).read_bytes() == raw
    assert syncs == []
    assert store.stats.replaces == replaces
    store.replace_unsynced(KEY, b"lazy", found.version)
    assert syncs == ["fdatasync"]  # the repair


def test_a_stripe_held_by_another_thread_refuses_writes_at_once(
    store: LocalStore, store_log: Callable[[], list[str]]
) -> None:
    version = store.create(KEY, b"one")
    raw = _object_file(store).read_bytes()
    store_log()
    stripe = _stripe(store)
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        with stripe:
            held.set()
            release.wait(30)

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert held.wait(10)
        before = store.stats.snapshot()
        patient = LocalStore(store.directory, lock_timeout=30.0)  # shares the stripes
        started = time.monotonic()
        assert patient._try_nowait("replace_unsynced", KEY, b"two", version) is WOULD_BLOCK
        assert time.monotonic() - started < 5.0, "it waited for the stripe"
        assert store._try_nowait("replace_unsynced", KEY, b"two", version) is WOULD_BLOCK
        # A read takes no lock when it meets no write in flight.
        assert store._try_nowait("read", KEY) == Versioned(b"one", version)
        after = store.stats.snapshot()
        assert after["replaces"] == before["replaces"]
        assert after["reads"] == before["reads"] + 1
        assert _object_file(store).read_bytes() == raw
        assert len(store_log()) == 1  # the read
    finally:
        release.set()
        holder.join(10)
    new = store._try_nowait("replace_unsynced", KEY, b"two", version)
    assert store.read(KEY) == Versioned(b"two", new)  # type: ignore[arg-type]


def test_an_flock_held_elsewhere_refuses_writes_and_locked_reads(
    store: LocalStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another open file description holding the key's flock stands for another process (flock
    belongs to the description, so it excludes this process's own calls the same way)."""
    version = store.create(KEY, b"one")
    lock_path = _local._key_paths(store.directory, KEY)[1]
    fd = os.open(lock_path, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        before = store.stats.snapshot()
        assert store._try_nowait("replace_unsynced", KEY, b"two", version) is WOULD_BLOCK
        # A read that kept meeting a slot in flight takes the lock shared: refused too.
        monkeypatch.setattr(_local, "_LOCK_FREE_ATTEMPTS", 0)
        assert store._try_nowait("read", KEY) is WOULD_BLOCK
        assert store.stats.snapshot() == before
        with pytest.raises(StoreUnavailable, match="held the key's lock"):
            LocalStore(store.directory, lock_timeout=0.05).replace_unsynced(
                KEY, b"two", version
            )  # the method itself waits for it, up to lock_timeout
    finally:
        os.close(fd)
    assert store._try_nowait("read", KEY) == Versioned(b"one", version)


def test_an_io_error_on_the_quick_path_is_the_methods_error(
    store: LocalStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    version = store.create(KEY, b"one")
    replaces = store.stats.replaces

    def fail(fd: int, data: bytes, offset: int) -> int:
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(os, "pwrite", fail)
    with pytest.raises(StoreUnavailable, match=KEY) as caught:
        store._try_nowait("replace_unsynced", KEY, b"two", version)
    assert not caught.value.outcome_unknown
    assert store.stats.replaces == replaces + 1


def test_calls_it_does_not_know_are_left_to_the_method(store: LocalStore) -> None:
    assert store._try_nowait("list", "") is WOULD_BLOCK
    assert store.stats.total == 0
