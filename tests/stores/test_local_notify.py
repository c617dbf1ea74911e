"""LocalStore.watch_key: hints from the file system that a key may have changed.

Writers are other processes (a forkserver that preloads this module), told what to write through
pipes; the test waits on events, never on sleeps. That a callback did *not* come is shown by
ordering: inotify delivers the events of one instance in order, so once a later write's callback
came, every earlier event was dispatched.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import multiprocessing
import multiprocessing.context
import os
import shutil
import sys
import threading
import time
from collections.abc import Callable, Iterator
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import pytest

from prioritylock._errors import ConditionFailed, ConfigError
from prioritylock.stores import LocalStore, _fsnotify

pytestmark = [
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="inotify is Linux's"),
    pytest.mark.timeout(60),
]

WAIT = 5.0  # seconds a test waits for a callback before failing
FLOOD = 10_000


class Calls:
    """A callback that counts its calls and keeps the time of the first."""

    def __init__(self) -> None:
        self.count = 0
        self.first = 0.0
        self.event = threading.Event()

    def __call__(self) -> None:
        if not self.count:
            self.first = time.monotonic()
        self.count += 1
        self.event.set()

    def wait(self) -> bool:
        return self.event.wait(WAIT)


def writer(directory: str, conn: Connection) -> None:
    """In a child: run ``(op, key[, n])`` commands on a store, answering each with the
    monotonic time taken just before the write began."""
    store = LocalStore(directory)
    versions: dict[str, str] = {}
    while True:
        command = conn.recv()
        if command is None:
            return
        op, key, *rest = command
        started = time.monotonic()
        if op == "create":
            store.create(key, b"created")
        elif op == "replace":
            found = store.read(key)
            assert found is not None
            started = time.monotonic()
            store.replace(key, b"replaced", found.version)
        elif op == "delete":
            found = store.read(key)
            assert found is not None
            started = time.monotonic()
            store.delete(key, found.version)
        elif op == "race":  # replace, while this process's writers race for the key
            while True:
                found = store.read(key)
                assert found is not None
                started = time.monotonic()
                with contextlib.suppress(ConditionFailed):
                    store.replace_unsynced(key, b"raced", found.version)
                    break
        elif op == "flood":  # rest[0] writes spread over the keys key/0 .. key/99
            for i in range(rest[0]):
                name = f"{key}/{i % 100}"
                if name not in versions:
                    versions[name] = store.create(name, b"0")
                versions[name] = store.replace_unsynced(name, b"1", versions[name])
        conn.send(started)


@pytest.fixture(scope="module")
def mp_context() -> multiprocessing.context.ForkServerContext:
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload([__name__])
    return context


@pytest.fixture
def directory(tmp_path: Path) -> str:
    return str(tmp_path / "store")


@pytest.fixture
def store(directory: str) -> LocalStore:
    return LocalStore(directory)


@pytest.fixture
def other(
    mp_context: multiprocessing.context.ForkServerContext, directory: str, store: LocalStore
) -> Iterator[Callable[..., float]]:
    """Another process writing to the store: ``other(op, key, ...)`` returns when it wrote, with
    the monotonic time the write began."""
    conn, child_conn = mp_context.Pipe()
    process = mp_context.Process(target=writer, args=(directory, child_conn), daemon=True)
    process.start()

    def run(*command: Any) -> float:
        conn.send(command)
        assert conn.poll(60), "the writer process did not answer"
        started = conn.recv()
        assert isinstance(started, float)
        return started

    yield run
    conn.send(None)
    process.join(10)
    if process.is_alive():
        process.kill()
        process.join(10)
    process.close()


def notifier() -> _fsnotify._Notifier:
    found = _fsnotify._get()
    assert found is not None, "this machine has no inotify"
    return found


@pytest.mark.parametrize(
    ("setup", "op", "key"),
    [
        (False, "create", "key"),
        (False, "create", "a/b/c"),  # its directories don't exist yet
        (True, "replace", "key"),
        (True, "replace", "a/b/c"),
        (True, "delete", "a/b/c"),
    ],
)
def test_a_write_from_another_process_calls_back_within_50_ms(
    store: LocalStore, other: Callable[..., float], setup: bool, op: str, key: str
) -> None:
    if setup:
        store.create(key, b"before")
    calls = Calls()
    unsubscribe = store.watch_key(key, calls)
    try:
        started = other(op, key)
        assert calls.wait(), f"no callback for a {op} by another process"
        assert calls.first - started <= 0.050
    finally:
        unsubscribe()


def test_unsubscribe_stops_callbacks_and_removes_the_watch(
    store: LocalStore, other: Callable[..., float]
) -> None:
    before = notifier().watch_count()
    gone, probe = Calls(), Calls()
    stop_gone = store.watch_key("dir/gone", gone)
    stop_probe = store.watch_key("dir/probe", probe)
    assert notifier().watch_count() == before + 1  # one watch for the store directory
    other("create", "dir/gone")
    other("create", "dir/probe")
    assert gone.wait()
    assert probe.wait()
    assert notifier().watch_count() == before + 1  # moved down to dir.d/, shared
    stop_gone()
    stop_gone()  # idempotent
    gone.count, probe.event = 0, threading.Event()
    other("replace", "dir/gone")
    other("replace", "dir/probe")
    assert probe.wait()
    assert gone.count == 0
    stop_probe()
    assert notifier().watch_count() == before


def test_writes_to_other_keys_call_nobody_back_and_cost_little(
    store: LocalStore, other: Callable[..., float]
) -> None:
    store.create("flood/watched", b"0")
    watched, probe = Calls(), Calls()
    stops = [store.watch_key("flood/watched", watched), store.watch_key("flood/probe", probe)]
    other("flood", "flood", 100)  # the other keys' files exist: no IN_CREATE for them
    other("create", "flood/probe")
    assert probe.wait()
    watched.count, probe.event = 0, threading.Event()
    cpu = time.process_time()
    other("flood", "flood", FLOOD)
    other("replace", "flood/probe")
    assert probe.wait()
    cpu = time.process_time() - cpu
    for stop in stops:
        stop()
    assert watched.count == 0
    # Measured: 0.05 s for 10,000 writes; this process does nothing else meanwhile but wait on
    # a pipe.
    assert cpu < 0.5, f"{cpu:.2f} s of CPU for {FLOOD} writes to other keys"


def test_many_subscribers_share_one_thread_and_one_watch_per_directory(
    store: LocalStore, directory: str
) -> None:
    for d in range(10):
        store.create(f"many/{d}/seed", b"0")
    before, threads = notifier().watch_count(), threading.active_count()
    stops = [store.watch_key(f"many/{i % 10}/{i}", Calls()) for i in range(1000)]
    assert threading.active_count() == threads
    assert notifier()._thread.is_alive()
    assert notifier().watch_count() == before + 10
    # A second store on the same directory shares the notifier and its watches.
    stops.append(LocalStore(directory).watch_key("many/0/0", Calls()))
    assert notifier().watch_count() == before + 10
    for stop in stops:
        stop()
    assert notifier().watch_count() == before


def test_a_removed_directory_is_watched_again_when_it_comes_back(
    store: LocalStore, directory: str, other: Callable[..., float]
) -> None:
    store.create("tree/leaf/key", b"0")
    calls = Calls()
    unsubscribe = store.watch_key("tree/leaf/key", calls)
    try:
        shutil.rmtree(os.path.join(directory, "tree.d"))
        assert calls.wait()  # told: the key may have changed (it went)
        calls.event = threading.Event()
        other("create", "tree/leaf/key")
        assert calls.wait()
        calls.event = threading.Event()
        other("replace", "tree/leaf/key")
        assert calls.wait()
    finally:
        unsubscribe()


def test_a_callback_that_raises_is_logged_and_the_thread_goes_on(
    store: LocalStore, other: Callable[..., float], caplog: pytest.LogCaptureFixture
) -> None:
    def boom() -> None:
        raise RuntimeError("boom")

    calls = Calls()
    stops = [store.watch_key("k", boom), store.watch_key("k", calls)]
    with caplog.at_level(logging.ERROR, logger="prioritylock.stores"):
        other("create", "k")
        assert calls.wait()
        calls.event = threading.Event()
        other("replace", "k")
        assert calls.wait()
    for stop in stops:
        stop()
    assert "change callback raised" in caplog.text


@pytest.mark.parametrize("key", ["", "/a", "a//b", "x" * 300])
def test_an_invalid_key_is_refused(store: LocalStore, key: str) -> None:
    with pytest.raises(ConfigError):
        store.watch_key(key, Calls())


@pytest.fixture
def fresh(monkeypatch: pytest.MonkeyPatch) -> None:
    """The next watch makes the process's notifier anew; the real one comes back afterwards."""
    monkeypatch.setattr(_fsnotify, "_notifier", None)
    monkeypatch.setattr(_fsnotify, "_tried", False)


@pytest.mark.usefixtures("fresh")
@pytest.mark.parametrize("why", ["env", "no-library", "instance-limit"])
def test_without_notification_watch_does_nothing_harmful(
    store: LocalStore, why: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    if why == "env":
        monkeypatch.setenv("PRIORITYLOCK_FSNOTIFY", "0")
    elif why == "no-library":
        monkeypatch.setitem(sys.modules, "inotify_simple", None)
    else:
        import inotify_simple  # type: ignore[import-untyped]

        def refuse(*args: Any, **kwargs: Any) -> None:
            raise OSError(errno.EMFILE, "Too many open files")

        monkeypatch.setattr(inotify_simple, "INotify", refuse)
    threads = threading.active_count()
    calls = Calls()
    with caplog.at_level(logging.WARNING, logger="prioritylock.stores"):
        unsubscribe = store.watch_key("key", calls)
        store.watch_key("other", calls)()
    version = store.create("key", b"0")
    store.replace("key", b"1", version)
    unsubscribe()
    unsubscribe()
    assert not _fsnotify.active()
    assert threading.active_count() == threads
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == (why == "instance-limit")


class WatchLimited:
    """A real inotify instance that refuses more than ``limit`` watches, as the kernel does."""

    def __init__(self, limit: int) -> None:
        import inotify_simple

        self.inner = inotify_simple.INotify()
        self.limit = limit
        self.watches: set[int] = set()

    def add_watch(self, path: str, mask: int) -> int:
        if len(self.watches) >= self.limit:
            raise OSError(errno.ENOSPC, "No space left on device")
        wd = int(self.inner.add_watch(path, mask))
        self.watches.add(wd)
        return wd

    def rm_watch(self, wd: int) -> None:
        self.watches.discard(wd)
        self.inner.rm_watch(wd)

    def read(self) -> Any:
        return self.inner.read()


def test_past_the_watch_limit_keys_are_polled_with_one_warning(
    store: LocalStore, other: Callable[..., float], caplog: pytest.LogCaptureFixture
) -> None:
    for d in range(3):
        store.create(f"limit/{d}/key", b"0")
    limited = _fsnotify._Notifier(WatchLimited(limit=1))
    calls = [Calls() for _ in range(3)]
    root = store.directory
    with caplog.at_level(logging.WARNING, logger="prioritylock.stores"):
        stops = [
            limited.watch(root, os.path.join(root, "limit.d", f"{d}.d", "key.obj"), calls[d])
            for d in range(3)
        ]
    assert limited.watch_count() == 1
    assert len([r for r in caplog.records if "watch limit" in r.message]) == 1
    other("replace", "limit/0/key")
    assert calls[0].wait()
    for stop in stops:
        stop()
    assert limited.watch_count() == 0


def test_a_queue_overflow_calls_back_every_subscriber_whose_key_changed(
    store: LocalStore, other: Callable[..., float]
) -> None:
    store.create("overflow/watched", b"0")
    store.create("overflow/still", b"0")
    calls, still = Calls(), Calls()
    stops = [store.watch_key("overflow/watched", calls), store.watch_key("overflow/still", still)]
    with open("/proc/sys/fs/inotify/max_queued_events") as limit:
        queued = int(limit.read())
    try:
        # Holding the notifier's lock stalls its thread after one read: the kernel's queue fills
        # with events for other keys (one per write, each for another file than the last), and
        # the watched key's own event, last, is lost.
        with notifier()._lock:
            other("flood", "overflow", queued + 1000)
            other("replace", "overflow/watched")
        assert calls.wait()
        # The overflow reached every subscriber; one whose key is unchanged is not called.
        store.replace("overflow/still", b"1", _version(store, "overflow/still"))  # own: none
        calls.event.clear()  # before the write: its callback may come before other() returns
        other("replace", "overflow/watched")  # ordered after the overflow's dispatch
        assert calls.wait()
        assert still.count == 0
    finally:
        for stop in stops:
            stop()


def _version(store: LocalStore, key: str) -> str:
    found = store.read(key)
    assert found is not None
    return found.version


def test_this_process_s_own_writes_call_nobody_back(
    store: LocalStore, other: Callable[..., float]
) -> None:
    """The process told its own locks in-process; the file-system hint of its own write would
    only cost a read (a renewal would cost two requests, not one). Dropped unread: the store's
    check of a hint (a read of the file's version) never runs for one."""
    store.create("own/probe", b"0")
    version = store.create("own/key", b"0")
    calls, probe = Calls(), Calls()
    stops = [store.watch_key("own/key", calls), store.watch_key("own/probe", probe)]
    checked: list[str] = []
    peek = store._peek

    def counted_peek(key: str, path: str) -> str | None:
        checked.append(key)
        return peek(key, path)

    store._peek = counted_peek  # type: ignore[method-assign]
    try:
        for i in range(20):
            version = store.replace("own/key", b"%d" % i, version)
            version = store.replace_unsynced("own/key", b"u%d" % i, version)
        store.delete("own/key", version)
        store.create("own/key", b"again")
        _settle(other, "own/probe", probe)  # every callback for the writes above was made
        # 42 writes, back to back, each one event or more: every one is between its marks.
        assert calls.count == 0, f"{calls.count} of 42 own writes called back"
        assert "own/key" not in checked, f"{checked.count('own/key')} own hints were read"
        other("replace", "own/key")  # another process's write: at once
        assert calls.wait()
    finally:
        for stop in stops:
            stop()


def test_another_process_s_write_under_an_own_one_still_calls_back(
    store: LocalStore, other: Callable[..., float]
) -> None:
    """A foreign write that this process then overwrote (one stalled read of events holds
    both): never dropped, though the file now shows this process's version."""
    version = store.create("hidden/key", b"0")
    calls = Calls()
    stop = store.watch_key("hidden/key", calls)
    try:
        with notifier()._lock:  # the thread waits with both events
            other("replace", "hidden/key")
            store.replace("hidden/key", b"own", _version(store, "hidden/key"))
            assert _version(store, "hidden/key") != version
        assert calls.wait()
    finally:
        stop()


def _settle(other: Callable[..., float], key: str, probe: Calls) -> None:
    """Return once every callback for the events queued so far was made: ``probe`` watches
    ``key``. The first write's callback comes with the read that held those events, maybe
    before theirs; the second write is made after that read, so its callback comes after them."""
    for _ in range(2):
        probe.event.clear()
        other("replace", key)
        assert probe.wait()


def _between(store: LocalStore, other: Callable[..., float], key: str, op: str) -> None:
    """An own write, the other process's ``op`` on ``key``, an own write."""
    found = store.read(key)
    assert found is not None
    if op == "create":  # own delete, their create, own replace
        store.delete(key, found.version)
        other("create", key)
        store.replace(key, b"own", _version(store, key))
    elif op == "delete":  # own replace, their delete, own create
        store.replace(key, b"own", found.version)
        other("delete", key)
        store.create(key, b"own")
    else:  # own replace, their replace, own replace
        store.replace_unsynced(key, b"own", found.version)
        other("replace", key)
        store.replace_unsynced(key, b"own", _version(store, key))


@pytest.mark.parametrize("op", ["replace", "delete", "create"])
def test_another_process_s_write_between_own_writes_always_calls_back(
    store: LocalStore, other: Callable[..., float], op: str
) -> None:
    """Own writes' events are dropped, and the kernel merges an event into an identical one
    queued just before it: another process's write between two own ones is heard every time,
    with the notifier's thread stalled (one read holds all their events) or not."""
    key, probe_key = f"between/{op}", f"between/{op}-probe"
    store.create(key, b"0")
    store.create(probe_key, b"0")
    calls, probe = Calls(), Calls()
    stops = [store.watch_key(key, calls), store.watch_key(probe_key, probe)]
    try:
        for stalled in (True, False) * 5:
            _settle(other, probe_key, probe)
            calls.count, calls.event = 0, threading.Event()
            with notifier()._lock if stalled else contextlib.nullcontext():
                _between(store, other, key, op)
            assert calls.wait(), f"another process's {op} between own writes was not heard"
    finally:
        for stop in stops:
            stop()


@pytest.mark.usefixtures("fresh")
def test_when_the_marks_go_own_writes_are_checked_and_others_still_heard(
    store: LocalStore, other: Callable[..., float]
) -> None:
    """The marks' directory removed (a cleaner of temporary files): no bracket is trusted any
    more; own writes' hints are checked by reading, and another process's write is heard."""
    version = store.create("gone/key", b"0")
    calls = Calls()
    stop = store.watch_key("gone/key", calls)
    marks = notifier()._mark_dir
    assert marks is not None
    try:
        shutil.rmtree(marks)
        for i in range(5):  # the first finds the marks gone, if the notifier did not first
            version = store.replace("gone/key", b"%d" % i, version)
        other("replace", "gone/key")
        assert calls.wait()
        assert notifier()._mark_dir is None
    finally:
        stop()


def test_another_process_s_writes_are_heard_among_a_stream_of_own_ones(
    store: LocalStore, other: Callable[..., float]
) -> None:
    """Threads of this process write the key without pause (their events dropped, each
    between its marks, theirs interleaved with the other keys' and each other's); every write
    of another process among them is heard."""
    key, probe_key = "stream/key", "stream/probe"
    for name in (key, probe_key, "stream/other"):
        store.create(name, b"0")
    calls, probe = Calls(), Calls()
    stops = [store.watch_key(key, calls), store.watch_key(probe_key, probe)]
    done = threading.Event()
    written = [0]

    def write(name: str) -> None:
        while not done.is_set():
            found = store.read(name)
            assert found is not None
            with contextlib.suppress(ConditionFailed):
                store.replace_unsynced(name, b"own", found.version)
                written[0] += 1

    threads = [threading.Thread(target=write, args=(k,)) for k in (key, key, "stream/other")]
    for thread in threads:
        thread.start()
    try:
        for _ in range(10):
            _settle(other, probe_key, probe)
            calls.event.clear()
            other("race", key)
            assert calls.wait(), "another process's write among own ones was not heard"
    finally:
        done.set()
        for thread in threads:
            thread.join(WAIT)
        for stop in stops:
            stop()
    assert written[0] > 0


def test_the_marks_of_a_process_gone_are_swept(tmp_path: Path) -> None:
    """A killed process leaves its marks' directory; the next notifier made removes it, and
    leaves a live process's (locked) and anything else alone."""
    for name in ("prioritylock-marks-gone", "prioritylock-marks-alive", "other"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "0").touch()
    alive = _fsnotify._locked_dir(str(tmp_path / "prioritylock-marks-alive"), fcntl.LOCK_EX)
    try:
        _fsnotify._sweep_marks(str(tmp_path))
    finally:
        os.close(alive)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["other", "prioritylock-marks-alive"]
    marks = notifier()._mark_dir
    assert marks is not None
    with pytest.raises(BlockingIOError):  # this process's own are locked while it lives
        _fsnotify._locked_dir(marks, fcntl.LOCK_EX | fcntl.LOCK_NB)
