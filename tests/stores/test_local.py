"""LocalStore beyond the contract: other processes, killed writers, its layout and its errors.

Child processes come from a forkserver that preloads this module, so each one starts in
milliseconds; they report to the test through pipes, events and barriers, never through sleeps.
The on-disk format (a header block and three checksummed slots, see
``prioritylock.stores._local``) is inspected and damaged through the module's own parsing helpers.
Unsynced writes and power losses: ``test_local_unsynced.py``.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import multiprocessing
import multiprocessing.context
import multiprocessing.synchronize
import os
import random
import shutil
import threading
import time
import traceback
import zlib
from collections.abc import Callable, Iterator
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import pytest

from prioritylock._errors import (
    ConditionFailed,
    ConfigError,
    StoreAccessError,
    StoreError,
    StoreUnavailable,
)
from prioritylock.stores import NOT_MODIFIED, LocalStore, Versioned, _local, _slots, open_store

PROCESSES = 8
ROUNDS = 40
KILLS = 40
CRASH_KEYS = ("crash/doc", "crash/nested/doc")
CHILD_SECONDS = 60.0

# -- the object file, seen from outside -------------------------------------------------------


def _object_file(store: LocalStore, key: str) -> Path:
    return Path(_local._key_paths(store.directory, key)[0])


def _slot_states(path: Path) -> list[tuple[str, int]]:
    """(state, sequence number) of every slot: "empty", "valid", or "torn" (header or data)."""
    raw = path.read_bytes()
    _, capacity, _ = _slots.HEADER.unpack(raw[: _slots.HEADER.size])
    states: list[tuple[str, int]] = []
    for position in range(_slots.SLOTS):
        start = _slots.slot_offset(position, capacity)
        slot = _slots.parse_slot(raw[start : start + _slots.SLOT_BYTES], position, capacity)
        if slot is None:
            states.append(("empty", 0))
        elif slot is _slots.TORN:
            states.append(("torn", 0))
        else:
            data = raw[start + _slots.SLOT_BYTES : start + _slots.SLOT_BYTES + slot.length]
            whole = zlib.crc32(data) == slot.data_crc
            states.append(("valid" if whole else "torn", slot.seq))
    return states


def _slot_data_offset(path: Path, newest: bool) -> int:
    """Where the data of the newest (or the oldest) valid slot starts in the file."""
    states = _slot_states(path)
    valid = sorted(
        (seq, position) for position, (state, seq) in enumerate(states) if state == "valid"
    )
    _, position = valid[-1] if newest else valid[0]
    raw = path.read_bytes()
    _, capacity, _ = _slots.HEADER.unpack(raw[: _slots.HEADER.size])
    return _slots.slot_offset(position, capacity) + _slots.SLOT_BYTES


def _empty_slot_offset(path: Path) -> int:
    """Where the first slot never written starts in the file."""
    raw = path.read_bytes()
    _, capacity, _ = _slots.HEADER.unpack(raw[: _slots.HEADER.size])
    position = [state for state, _ in _slot_states(path)].index("empty")
    return _slots.slot_offset(position, capacity)


def _flip(path: Path, offset: int) -> None:
    with path.open("r+b") as file:
        file.seek(offset)
        byte = file.read(1)
        file.seek(offset)
        file.write(bytes([byte[0] ^ 0x5A]))


# -- children (module level, so a forkserver child can find them) -----------------------------


def _race_worker(
    directory: str, index: int, barrier: multiprocessing.synchronize.Barrier, conn: Connection
) -> None:
    """Race ``ROUNDS`` creates, then ``ROUNDS`` compare-and-swaps, against the other workers.

    Sends ``("ok", creates, swaps)``: per round whether this worker won, and for swaps the
    version it read and the version it wrote; or ``("error", traceback)``.
    """
    try:
        store = LocalStore(directory)
        creates: list[bool] = []
        for round_ in range(ROUNDS):
            barrier.wait()
            try:
                store.create(f"race/create-{round_}", str(index).encode())
                creates.append(True)
            except ConditionFailed:
                creates.append(False)
        swaps: list[tuple[str, str | None]] = []
        for round_ in range(ROUNDS):
            barrier.wait()  # the previous round's swaps are done
            seen = store.read("race/cas")
            assert seen is not None
            barrier.wait()  # everyone has read before anyone swaps
            try:
                new = store.replace("race/cas", f"{round_}:{index}".encode(), seen.version)
                swaps.append((seen.version, new))
            except ConditionFailed:
                swaps.append((seen.version, None))
        conn.send(("ok", creates, swaps))
    except BaseException:
        barrier.abort()
        conn.send(("error", traceback.format_exc()))
        raise


def _payload(serial: int, smallest: int = 32 * 1024, spread: int = 96 * 1024) -> bytes:
    """A document that names itself: its serial repeated, 256 KiB to 1 MiB by default.

    Cheap to make, so the writer spends its time writing; any prefix of it, or a mix of two,
    differs from every payload.
    """
    repeats = smallest + (serial * 7919) % spread
    return serial.to_bytes(8, "big") * repeats


def _in_place_payload(serial: int) -> bytes:
    """64 to 192 KiB: always fits the slots of a file created with :data:`_LARGEST_IN_PLACE`."""
    return _payload(serial, smallest=8 * 1024, spread=16 * 1024)


_LARGEST_IN_PLACE = (8 + 16) * 1024 * 8


def _serial_of(key: str, found: Versioned | None) -> int:
    """The serial of a whole payload; fails the test on anything else (a torn or mixed read)."""
    assert found is not None, f"{key!r} is absent"
    serial = int.from_bytes(found.data[:8], "big")
    size = len(found.data)
    assert size % 8 == 0 and found.data == serial.to_bytes(8, "big") * (size // 8), (
        f"{key!r} holds {size} bytes that are not a complete payload (torn write)"
    )
    return serial


def _crash_writer(directory: str, first_serial: int, durable: bool, conn: Connection) -> None:
    """Create, replace (synced or not) and delete large documents until killed.

    After each write it sends ``"KEY VERSION SERIAL"`` (VERSION empty for a delete), so the test
    knows every version that was returned; the write in flight when it dies is never reported.
    Of each key's replaces, two in three are unsynced, in runs of two.
    """
    try:
        store = LocalStore(directory, durable=durable)
        serial = first_serial
        while True:
            for key in CRASH_KEYS:
                serial += 1
                found = store.read(key)
                if found is None:
                    version = store.create(key, _payload(serial))
                elif serial % 5 == 0:
                    store.delete(key, found.version)
                    version = ""
                elif (serial // 2) % 3:
                    version = store.replace_unsynced(key, _payload(serial), found.version)
                else:
                    version = store.replace(key, _payload(serial), found.version)
                conn.send_bytes(f"{key} {version} {serial}".encode())
    except BaseException:
        conn.send_bytes(b"error " + traceback.format_exc().encode())
        raise


def _in_place_writer(
    directory: str, key: str, stop: multiprocessing.synchronize.Event, conn: Connection
) -> None:
    """Replace ``key`` with growing serials, in place, until ``stop``; then send the count."""
    try:
        store = LocalStore(directory, durable=False)
        found = store.read(key)
        assert found is not None
        version, serial, writes = found.version, int.from_bytes(found.data[:8], "big"), 0
        while not stop.is_set():
            serial += 1
            version = store.replace(key, _in_place_payload(serial), version)
            writes += 1
        conn.send(("ok", writes))
    except BaseException:
        conn.send(("error", traceback.format_exc()))
        raise


def _hold_lock(directory: str, key: str, conn: Connection) -> None:
    """Take ``key``'s write lock, say so, and keep it until killed (or the test hangs up)."""
    store = LocalStore(directory)
    with store._locked(key, "hold"), contextlib.suppress(EOFError):
        conn.send_bytes(b"locked")
        conn.recv_bytes()  # never comes: the test kills us


def _hold_open_file(directory: str, key: str, conn: Connection) -> None:
    """Open ``key``'s file and keep it open while the test deletes and re-creates the key; then
    report what that old descriptor and this process's store see."""
    try:
        store = LocalStore(directory)
        fd = os.open(_local._key_paths(store.directory, key)[0], os.O_RDWR)
        seen = store.read(key)
        assert seen is not None
        conn.send(("opened", seen.version))
        conn.recv()  # the key was deleted and created again
        links = os.fstat(fd).st_nlink
        try:
            store.replace(key, b"from the old holder", seen.version)
            outcome = "replaced"
        except ConditionFailed:
            outcome = "refused"
        now = store.read(key)
        conn.send(("ok", links, outcome, now))
    except BaseException:
        conn.send(("error", traceback.format_exc()))
        raise


# -- fixtures ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def mp_context() -> multiprocessing.context.ForkServerContext:
    """A forkserver that has imported this module once: children start in milliseconds."""
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload([__name__])
    return context


@pytest.fixture
def spawn(
    mp_context: multiprocessing.context.ForkServerContext,
) -> Iterator[Callable[..., multiprocessing.context.ForkServerProcess]]:
    """Start a child running ``target(*args)``; every child is killed at teardown."""
    started: list[multiprocessing.context.ForkServerProcess] = []

    def start(target: Callable[..., None], *args: Any) -> multiprocessing.context.ForkServerProcess:
        process = mp_context.Process(target=target, args=args, daemon=True)
        process.start()
        started.append(process)
        return process

    yield start
    for process in started:
        if process.is_alive():
            process.kill()
        process.join(CHILD_SECONDS)
        process.close()


@pytest.fixture
def directory(tmp_path: Path) -> Path:
    return tmp_path / "store"


@pytest.fixture
def store(directory: Path) -> LocalStore:
    return LocalStore(directory)


# -- other processes --------------------------------------------------------------------------


@pytest.mark.timeout(120)
def test_processes_racing_create_and_swap_have_one_winner_per_round(
    mp_context: multiprocessing.context.ForkServerContext,
    spawn: Callable[..., multiprocessing.context.ForkServerProcess],
    store: LocalStore,
    directory: Path,
) -> None:
    first = store.create("race/cas", b"start")
    barrier = mp_context.Barrier(PROCESSES, timeout=CHILD_SECONDS)
    readers = []
    for index in range(PROCESSES):
        reader, writer = mp_context.Pipe(duplex=False)
        spawn(_race_worker, str(directory), index, barrier, writer)
        writer.close()
        readers.append(reader)
    reports = []
    for index, reader in enumerate(readers):
        assert reader.poll(CHILD_SECONDS), f"worker {index} sent no report"
        status, *body = reader.recv()
        assert status == "ok", f"worker {index} failed:\n{body[0]}"
        reports.append(body)

    for round_ in range(ROUNDS):
        winners = [i for i, (creates, _) in enumerate(reports) if creates[round_]]
        assert len(winners) == 1, f"create round {round_}: winners {winners}"
        found = store.read(f"race/create-{round_}")
        assert found is not None
        assert found.data == str(winners[0]).encode()

    expected_seen = first
    for round_ in range(ROUNDS):
        seen = {swaps[round_][0] for _, swaps in reports}
        assert seen == {expected_seen}, f"swap round {round_}: workers read {seen}"
        winners = [i for i, (_, swaps) in enumerate(reports) if swaps[round_][1] is not None]
        assert len(winners) == 1, f"swap round {round_}: winners {winners}"
        new_version = reports[winners[0]][1][round_][1]
        assert new_version is not None
        expected_seen = new_version
    final = store.read("race/cas")
    assert final is not None
    assert final.version == expected_seen
    assert final.data.startswith(f"{ROUNDS - 1}:".encode())


@pytest.mark.timeout(180)
def test_writer_killed_at_random_moments_never_leaves_a_torn_document(
    mp_context: multiprocessing.context.ForkServerContext,
    spawn: Callable[..., multiprocessing.context.ForkServerProcess],
    store: LocalStore,
    directory: Path,
) -> None:
    """SIGKILL lands anywhere: in a slot's pwrite, its fdatasync, a new file before its rename.

    After each kill every key reads as a whole payload (or absent), and exactly as the writer's
    last returned write left it, except the key of the one write in flight, which may read as
    that write; no version ever names two documents. The writer is durable every other round,
    and mixes synced and unsynced replaces. The test goes on (bounded) until some kill tore a
    slot in place.
    """
    rng = random.Random(20240607)
    returned: dict[str, tuple[str, int]] = {}  # every version a write returned -> (key, serial)
    seen: dict[str, int] = {}  # every version read -> the serial of its document
    now: dict[str, str | None] = dict.fromkeys(CRASH_KEYS)  # each key's version, None: absent
    torn_in_place = iteration = latest = 0
    while iteration < KILLS or (torn_in_place == 0 and iteration < 10 * KILLS):
        iteration += 1
        reader, writer = mp_context.Pipe(duplex=False)
        durable = iteration % 2 == 0
        child = spawn(_crash_writer, str(directory), iteration * 1_000_000, durable, writer)
        writer.close()
        for _ in range(rng.randint(1, 4)):
            assert reader.poll(CHILD_SECONDS), f"writer {iteration} stopped writing"
            latest = _note_write(returned, now, reader.recv_bytes())
        # Not synchronisation: a random pause picks where in its next write the child dies.
        time.sleep(rng.uniform(0, 0.006))
        child.kill()
        child.join(CHILD_SECONDS)
        with contextlib.suppress(EOFError):  # writes it finished after our last recv
            while reader.poll(0):
                latest = _note_write(returned, now, reader.recv_bytes())
        reader.close()
        assert child.exitcode == -9, f"writer {iteration} ended on its own: {child.exitcode}"

        assert set(store.list("")) <= set(CRASH_KEYS), store.list("")
        in_flight = []
        for key in CRASH_KEYS:
            path = _object_file(store, key)
            with contextlib.suppress(FileNotFoundError):
                torn_in_place += any(state == "torn" for state, _ in _slot_states(path))
            found = store.read(key)
            version = None if found is None else found.version
            if version != now[key]:
                in_flight.append(key)
                now[key] = version
            if found is None:
                continue
            serial = _serial_of(key, found)
            assert seen.setdefault(found.version, serial) == serial, (
                f"version {found.version} named two documents"
            )
            if found.version in returned:
                assert returned[found.version] == (key, serial)
            elif key in in_flight:
                assert serial == latest + 1, f"{key!r} reads as serial {serial}, after {latest}"
        # A returned write never disappears: only the write in flight may have changed a key.
        assert len(in_flight) <= 1, f"{in_flight} changed since the writer's last report"

    for key in CRASH_KEYS:  # temp files go with a delete or create, torn slots with a write
        found = store.read(key)
        if found is not None:
            store.delete(key, found.version)
        version = store.replace(key, b"again", store.create(key, b"after"))
        assert store.read(key) == Versioned(b"again", version)
        states = sorted(state for state, _ in _slot_states(_object_file(store, key)))
        assert states == ["empty", "valid", "valid"]
    assert not list(directory.rglob("*.tmp")), "temp files survived a later create"
    assert torn_in_place > 0, "no kill tore a slot; the test proved nothing about in-place writes"
    assert len(returned) > KILLS


def _note_write(
    returned: dict[str, tuple[str, int]], now: dict[str, str | None], report: bytes
) -> int:
    """Record a write the writer reported; return its serial."""
    assert not report.startswith(b"error "), f"the writer failed:\n{report.decode()}"
    key, version, serial = report.decode().split(" ")
    if version:  # a delete returns none
        assert version not in returned, f"version {version} returned twice"
        returned[version] = (key, int(serial))
    now[key] = version or None
    return int(serial)


def _version(store: LocalStore, key: str) -> str:
    found = store.read(key)
    assert found is not None
    return found.version


@pytest.mark.timeout(120)
def test_lock_free_reads_in_another_process_see_whole_documents_in_order(
    mp_context: multiprocessing.context.ForkServerContext,
    spawn: Callable[..., multiprocessing.context.ForkServerProcess],
    store: LocalStore,
    directory: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A reader racing in-place writes of 64-192 KiB meets slots in flight and never returns
    one: every read is a whole document, and no read is older than the one before it."""
    met_in_flight = 0
    settle = LocalStore._settle

    def counting(self: LocalStore, *args: Any, **kwargs: Any) -> Any:
        nonlocal met_in_flight
        found = settle(self, *args, **kwargs)
        met_in_flight += found is _local._UNSETTLED
        return found

    monkeypatch.setattr(LocalStore, "_settle", counting)  # in this process only
    key = "race/in-place"
    store.create(key, bytes(_LARGEST_IN_PLACE))
    first = store.replace(key, _in_place_payload(1), _version(store, key))
    inode = _object_file(store, key).stat().st_ino
    stop = mp_context.Event()
    reader, writer = mp_context.Pipe(duplex=False)
    spawn(_in_place_writer, str(directory), key, stop, writer)
    writer.close()

    last, reads, deadline = 1, 0, time.monotonic() + 60
    try:
        while (met_in_flight < 20 or last < 200) and time.monotonic() < deadline:
            found = store.read(key)
            serial = _serial_of(key, found)
            assert serial >= last, f"read serial {serial} after {last}: a read went back in time"
            last, reads = serial, reads + 1
    finally:
        stop.set()
    assert reader.poll(CHILD_SECONDS), "the writer sent no report"
    status, body = reader.recv()
    assert status == "ok", f"the writer failed:\n{body}"
    assert met_in_flight > 0, f"{reads} reads never met a write in flight; proved nothing"
    assert _object_file(store, key).stat().st_ino == inode, "the writes were not in place"
    assert _version(store, key) != first


@pytest.mark.timeout(60)
def test_killed_lock_holder_does_not_block_later_writes(
    mp_context: multiprocessing.context.ForkServerContext,
    spawn: Callable[..., multiprocessing.context.ForkServerProcess],
    store: LocalStore,
    directory: Path,
) -> None:
    ours, theirs = mp_context.Pipe()
    holder = spawn(_hold_lock, str(directory), "held/key", theirs)
    theirs.close()
    assert ours.poll(CHILD_SECONDS), "the lock holder never took the lock"
    assert ours.recv_bytes() == b"locked"

    impatient = LocalStore(directory, lock_timeout=0.05)
    with pytest.raises(StoreUnavailable, match="lock") as caught:
        impatient.create("held/key", b"blocked")
    assert not caught.value.outcome_unknown
    assert store.read("held/key") is None

    holder.kill()
    holder.join(CHILD_SECONDS)
    assert holder.exitcode == -9
    ours.close()
    assert impatient.create("held/key", b"free") != ""  # the lock file stays; the lock doesn't
    assert len(list((directory / ".locks").iterdir())) == 1


@pytest.mark.timeout(60)
def test_reader_meeting_a_slot_in_flight_waits_for_its_writer(
    mp_context: multiprocessing.context.ForkServerContext,
    spawn: Callable[..., multiprocessing.context.ForkServerProcess],
    store: LocalStore,
    directory: Path,
) -> None:
    """A half-written slot while another process holds the key's lock is a write in flight:
    the reader neither returns it nor guesses the slot before it; it waits for the lock."""
    key = "held/doc"
    version = store.create(key, b"whole")
    path = _object_file(store, key)
    ours, theirs = mp_context.Pipe()
    holder = spawn(_hold_lock, str(directory), key, theirs)
    theirs.close()
    assert ours.poll(CHILD_SECONDS), "the lock holder never took the lock"
    assert ours.recv_bytes() == b"locked"
    # What the holder's pwrite would have left so far: the new slot's header, half its data.
    blob = _slots.pack_slot(2, b"\x01" * 16, b"new document, of which half arrived", synced=True)
    with path.open("r+b") as file:
        file.seek(_empty_slot_offset(path))
        file.write(blob[: _slots.SLOT_BYTES + 12])

    impatient = LocalStore(directory, lock_timeout=0.05)
    with pytest.raises(StoreUnavailable, match="lock"):
        impatient.read(key)
    with pytest.raises(StoreUnavailable, match="lock"):
        impatient.read_if_changed(key, "0" * 32)

    holder.kill()  # it died mid-write: the half slot is a remnant, the whole one the document
    holder.join(CHILD_SECONDS)
    ours.close()
    assert store.read(key) == Versioned(b"whole", version)
    assert store.read_if_changed(key, version) is NOT_MODIFIED
    newer = store.replace(key, b"next", version)
    assert store.read(key) == Versioned(b"next", newer)
    assert [state for state, _ in _slot_states(path)] == ["valid", "valid", "empty"]


@pytest.mark.timeout(60)
def test_delete_while_another_process_holds_the_file_open(
    mp_context: multiprocessing.context.ForkServerContext,
    spawn: Callable[..., multiprocessing.context.ForkServerProcess],
    store: LocalStore,
    directory: Path,
) -> None:
    """Its descriptor points at the unlinked file; nothing it does through the store reaches
    that ghost, and the key's new object stays untouched."""
    key = "open/doc"
    old = store.replace(key, b"old", store.create(key, b"first"))
    ours, theirs = mp_context.Pipe()
    spawn(_hold_open_file, str(directory), key, theirs)
    theirs.close()
    assert ours.poll(CHILD_SECONDS), "the child never opened the file"
    status, version = ours.recv()
    assert (status, version) == ("opened", old)

    store.delete(key, old)
    new = store.create(key, b"new")
    ours.send("go")
    assert ours.poll(CHILD_SECONDS), "the child sent no report"
    status, *body = ours.recv()
    assert status == "ok", f"the child failed:\n{body[0]}"
    links, outcome, seen = body
    assert links == 0, "the child's descriptor should point at the unlinked file"
    assert outcome == "refused", "a replace at the deleted object's version succeeded"
    assert seen == Versioned(b"new", new)
    assert store.read(key) == Versioned(b"new", new)


def test_read_overlapping_a_delete_and_create_returns_one_whole_document(
    store: LocalStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reader that opened the file before a delete reads the old file whole (its read overlaps
    the delete), never a mix of the old object and the new one."""
    key = "overlap/doc"
    old = store.create(key, b"old document")
    opened, go = threading.Event(), threading.Event()
    real_pread = os.pread

    def pread(fd: int, length: int, offset: int) -> bytes:
        if threading.current_thread() is reader and not opened.is_set():
            opened.set()
            assert go.wait(30)
        return real_pread(fd, length, offset)

    results: list[object] = []
    reader = threading.Thread(target=lambda: results.append(store.read(key)), daemon=True)
    monkeypatch.setattr(os, "pread", pread)
    reader.start()
    assert opened.wait(30)
    store.delete(key, old)
    new = store.create(key, b"new document")
    go.set()
    reader.join(30)
    assert results == [Versioned(b"old document", old)]
    assert store.read(key) == Versioned(b"new document", new)


@pytest.mark.timeout(60)
def test_reads_see_whole_snapshots_while_another_thread_writes(store: LocalStore) -> None:
    written: dict[str, bytes] = {store.create("snap", b"v0"): b"v0"}
    seen: list[Versioned] = []
    done = threading.Event()

    def write() -> None:
        try:
            version = next(iter(written))
            for serial in range(1, 200):
                data = f"v{serial}".encode() * (serial % 17) * (1 + 400 * (serial % 3 == 0))
                version = store.replace("snap", data, version)
                written[version] = data
        finally:
            done.set()

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    while not done.is_set():
        found = store.read("snap")
        assert found is not None
        seen.append(found)
    writer.join(30)
    assert len(written) == 200
    for found in seen:
        assert written.get(found.version) == found.data, f"read mixed two writes: {found!r}"


# -- in-place writes and the slots ------------------------------------------------------------


def test_durable_replace_writes_in_place_with_one_sync(
    store: LocalStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    version = store.create("k", b"first")
    path = _object_file(store, "k")
    before = path.stat()
    calls: list[str] = []
    for name in ("fsync", "fdatasync", "replace", "rename"):
        real = getattr(os, name)

        def spy(*args: Any, _name: str = name, _real: Callable[..., Any] = real) -> Any:
            calls.append(_name)
            return _real(*args)

        monkeypatch.setattr(os, name, spy)
    for serial in range(4):
        version = store.replace("k", f"document {serial}".encode() * 50, version)
        assert calls == ["fdatasync"], f"write {serial} made {calls}"
        calls.clear()
    after = path.stat()
    assert (after.st_ino, after.st_size) == (before.st_ino, before.st_size)
    assert store.read("k") == Versioned(b"document 3" * 50, version)


def test_non_durable_replace_does_not_sync(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = LocalStore(tmp_path, durable=False)
    version = store.create("k", b"first")
    for name in ("fsync", "fdatasync"):
        monkeypatch.setattr(os, name, lambda fd: pytest.fail("a durable=False write synced"))
    version = store.replace("k", b"second", version)
    assert store.read("k") == Versioned(b"second", version)


def test_document_outgrowing_its_slots_moves_to_a_larger_file(store: LocalStore) -> None:
    version = store.create("grow", b"small")
    path = _object_file(store, "grow")
    small = path.stat()
    big = bytes(range(256)) * 400  # 100 KiB: more than a 4 KiB slot
    version = store.replace("grow", big, version)
    grown = path.stat()
    assert grown.st_ino != small.st_ino and grown.st_size > 2 * len(big)
    assert store.read("grow") == Versioned(big, version)
    version = store.replace("grow", b"small again", version)
    assert path.stat().st_ino == grown.st_ino, "slots never shrink: a smaller write stays in place"
    assert store.read("grow") == Versioned(b"small again", version)
    assert store.list("") == ["grow"]


def test_versions_are_unique_across_writes_deletes_and_creates(store: LocalStore) -> None:
    versions = []
    for _ in range(20):
        version = store.create("v", b"same")
        versions.append(version)
        for _ in range(3):
            version = store.replace("v", b"same", version)
            versions.append(version)
        store.delete("v", version)
    assert len(set(versions)) == len(versions)
    assert all(len(v) == 32 and set(v) <= set("0123456789abcdef") for v in versions)


def _parsed_tip(store: LocalStore, key: str) -> _slots.Tip:
    """The tip of ``key``'s file, parsed from its bytes from outside (its current slot whole)."""
    raw = _object_file(store, key).read_bytes()
    slots = [_slots.slot_offset(position, _slots.MIN_CAPACITY) for position in range(3)]
    record = raw[_slots.RECORD_AT : _slots.RECORD_AT + _slots.RECORD.size]
    heads = (record, *(raw[at : at + _slots.SLOT_BYTES] for at in slots))
    parsed = _slots.layout(heads, _slots.MIN_CAPACITY)
    return _slots.tip(parsed, parsed.written[0])


@pytest.mark.parametrize("durable", [True, False])
def test_the_tip_a_store_keeps_is_the_one_parsed_from_its_file(
    tmp_path: Path, durable: bool
) -> None:
    """After each write, synced or not, what the store keeps of the file (its tip, from which the
    next write works out where to go without parsing) is what parsing the file gives."""
    store = LocalStore(tmp_path, durable=durable)
    version = store.create("k", b"first")
    kept = []
    for serial in range(12):
        write = store.replace if serial % 4 == 3 else store.replace_unsynced
        version = write("k", b"document %d" % serial, version)
        tip = store._keys["k"].tip
        kept.append(tip is not None)
        assert tip is None or tip == _parsed_tip(store, "k"), serial
        assert store.read("k") == Versioned(b"document %d" % serial, version)
    # The two writes that fill a new file's slots leave it to be parsed; from then on every
    # write works its tip out.
    assert kept == [False, False] + [True] * 10


def test_a_tip_whose_headers_another_writer_changed_is_not_trusted(directory: Path) -> None:
    """Two stores on one directory, each keeping the tip its last write left: a write by the
    other changes the headers, so the tip is not used: the stale version fails, and reads and
    writes see the other's document."""
    first, second = LocalStore(directory), LocalStore(directory)
    version = first.create("k", b"one")
    for serial in range(4):
        version = first.replace_unsynced("k", b"first %d" % serial, version)
    theirs = second.replace_unsynced("k", b"second", version)
    with pytest.raises(ConditionFailed):
        first.replace_unsynced("k", b"stale", version)
    assert first.read("k") == Versioned(b"second", theirs)
    mine = first.replace_unsynced("k", b"first again", theirs)
    assert second.read("k") == Versioned(b"first again", mine)
    assert first._keys["k"].tip == _parsed_tip(first, "k")


def test_a_forked_child_makes_versions_its_parent_never_makes(store: LocalStore) -> None:
    """The random half of a version is drawn again in a forked child: the child's writes and its
    parent's never make one version (which would let a write go unseen: versions are the
    conditions of writes)."""
    version = store.create("fork", b"parent")
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: one write, its version to the parent
        try:
            os.write(write_end, store.replace("fork", b"child", version).encode())
        finally:
            os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as pipe:
        theirs = pipe.read().decode()
    os.waitpid(pid, 0)
    ours = store.replace("fork", b"parent again", theirs)
    assert len(theirs) == len(ours) == 32
    assert len({version, theirs, ours}) == 3
    assert theirs[:16] != ours[:16] == version[:16]  # the random halves


def test_read_if_changed_reads_only_the_slot_headers_of_an_unchanged_object(
    store: LocalStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    big = b"x" * 200_000
    version = store.create("big", big)
    sizes: list[int] = []
    real_pread = os.pread

    def pread(fd: int, length: int, offset: int) -> bytes:
        sizes.append(length)
        return real_pread(fd, length, offset)

    monkeypatch.setattr(os, "pread", pread)
    assert store.read_if_changed("big", version) is NOT_MODIFIED
    assert sum(sizes) <= _slots.FIRST_READ + 2 * _slots.SLOT_BYTES, sizes
    sizes.clear()
    assert store.read_if_changed("big", "0" * 32) == Versioned(big, version)
    assert sum(sizes) >= len(big)
    assert (store.stats.reads, store.stats.not_modified) == (2, 1)


def test_slot_left_half_written_is_skipped_then_overwritten(store: LocalStore) -> None:
    """What a writer killed inside its pwrite leaves: the new slot's header and part of its data."""
    version = store.replace("k", b"current", store.create("k", b"before"))
    path = _object_file(store, "k")
    blob = _slots.pack_slot(3, b"\x02" * 16, b"the next document, cut short", synced=True)
    with path.open("r+b") as file:
        file.seek(_empty_slot_offset(path))
        file.write(blob[: len(blob) - 5])
    assert [state for state, _ in _slot_states(path)] == ["valid", "valid", "torn"]

    assert store.read("k") == Versioned(b"current", version)
    assert store.read_if_changed("k", version) is NOT_MODIFIED
    assert store.read_if_changed("k", "0" * 32) == Versioned(b"current", version)
    newer = store.replace("k", b"next", version)
    assert store.read("k") == Versioned(b"next", newer)
    assert _slot_states(path) == [("valid", 1), ("valid", 2), ("valid", 3)]


def test_damaged_older_slot_is_ignored(store: LocalStore) -> None:
    version = store.replace("k", b"current", store.create("k", b"before"))
    path = _object_file(store, "k")
    _flip(path, _slot_data_offset(path, newest=False))
    assert store.read("k") == Versioned(b"current", version)
    for serial in range(3):  # the second overwrites the damaged slot
        version = store.replace("k", b"next %d" % serial, version)
        assert store.read("k") == Versioned(b"next %d" % serial, version)
    assert [state for state, _ in _slot_states(path)] == ["valid"] * 3


@pytest.mark.parametrize("where", ["data", "header"])
def test_damaged_newest_slot_raises_instead_of_rolling_back(store: LocalStore, where: str) -> None:
    """The record says the newest write had completed, so the slot before it is not the object:
    reading it would roll a lease (and its fence) back. Nothing is overwritten."""
    before = store.create("k", b"before")
    version = store.replace("k", b"current", before)
    path = _object_file(store, "k")
    data_at = _slot_data_offset(path, newest=True)
    _flip(path, data_at if where == "data" else data_at - _slots.SLOT_BYTES + 3)
    damaged = path.read_bytes()

    calls: dict[str, Callable[[], object]] = {
        "read": lambda: store.read("k"),
        "read_if_changed": lambda: store.read_if_changed("k", before),
        "create": lambda: store.create("k", b"x"),
        "replace": lambda: store.replace("k", b"x", version),
        "replace_unsynced": lambda: store.replace_unsynced("k", b"x", version),
        "replace at the older version": lambda: store.replace("k", b"x", before),
        "delete": lambda: store.delete("k", version),
    }
    for name, call in calls.items():
        with pytest.raises(StoreError, match=r"'k'.*damaged") as caught:
            call()
        assert not isinstance(caught.value, StoreUnavailable), name
    assert path.read_bytes() == damaged


def test_damaged_newest_slot_of_a_non_durable_store_reads_the_slot_before(tmp_path: Path) -> None:
    """Without syncs no record is kept (after an OS crash it could name a write that never
    reached the disk), so damage can't be told from an unfinished write: documented."""
    store = LocalStore(tmp_path, durable=False)
    before = store.create("k", b"before")
    version = store.replace("k", b"current", before)
    before = store.replace("k", b"older", version)
    version = store.replace("k", b"newest", before)
    path = _object_file(store, "k")
    _flip(path, _slot_data_offset(path, newest=True))
    assert store.read("k") == Versioned(b"older", before)


def test_damaged_header_or_record_raises(store: LocalStore) -> None:
    version = store.create("h", b"x")
    store.create("r", b"x")
    _flip(_object_file(store, "h"), 10)  # the slot capacity
    _flip(_object_file(store, "r"), _slots.RECORD_AT + 2)
    for key in ("h", "r"):
        with pytest.raises(StoreError, match="damaged") as caught:
            store.read(key)
        assert not isinstance(caught.value, StoreUnavailable)
    with pytest.raises(StoreError, match="damaged"):
        store.replace("h", b"y", version)


@pytest.mark.parametrize(
    ("start", "layout"),
    [
        (b"0123456789abcdef0123456789abcdef\n" + b'{"schema": 1}', "a version line"),
        (b"\x89PLOCK1\n" + bytes(4096 * 3 - 8), "two slots"),
    ],
)
def test_files_of_older_formats_get_a_clear_error(
    store: LocalStore, directory: Path, start: bytes, layout: str
) -> None:
    (directory / "old.obj").write_bytes(start)
    assert store.list("") == ["old"]
    calls: dict[str, Callable[[], object]] = {
        "read": lambda: store.read("old"),
        "read_if_changed": lambda: store.read_if_changed("old", "0123456789abcdef" * 2),
        "create": lambda: store.create("old", b"x"),
        "replace": lambda: store.replace("old", b"x", "0123456789abcdef" * 2),
        "replace_unsynced": lambda: store.replace_unsynced("old", b"x", "0123456789abcdef" * 2),
        "delete": lambda: store.delete("old", "0123456789abcdef" * 2),
    }
    for name, call in calls.items():
        with pytest.raises(
            StoreError, match=rf"'old'.*older prioritylock \({layout}.*delete"
        ) as caught:
            call()
        assert not isinstance(caught.value, StoreUnavailable), name
    assert (directory / "old.obj").read_bytes() == start


def test_leftover_temp_files_are_ignored_and_cleaned_by_create_and_delete(
    store: LocalStore, directory: Path
) -> None:
    version = store.create("a/b", b"real")
    torn = directory / "a.d" / "b.obj.tmp"  # a document outgrowing its file, killed
    torn.write_bytes(b"\x89PLOCK1\nhalf of a file")
    orphan = directory / "new.obj.tmp"  # a create killed before its rename
    orphan.write_bytes(b"junk")

    assert store.list("") == ["a/b"]
    assert store.read("a/b") == Versioned(b"real", version)
    assert store.read("new") is None

    newer = store.replace("a/b", b"newer", version)  # in place: the temp file is not its business
    assert store.read("a/b") == Versioned(b"newer", newer)
    store.create("new", b"made")
    assert not orphan.exists()
    store.delete("a/b", newer)
    assert not torn.exists(), "delete leaves no temp file behind"


# -- layout -----------------------------------------------------------------------------------


def test_layout_keeps_look_alike_keys_apart(store: LocalStore, directory: Path) -> None:
    keys = sorted(
        [
            "x",
            "x.obj",
            "x.d",
            "x.d/y",
            "x/y",
            "x/y.obj",
            "x.obj/y",
            ".locks",
            ".locks/x",
            "..x",
            "x..",
            "x.tmp",
            "x.obj.tmp",
        ]
    )
    for key in keys:
        store.create(key, key.encode())
    assert store.list("") == keys
    for key in keys:
        found = store.read(key)
        assert found is not None
        assert found.data == key.encode()
    root = directory.resolve()
    for path in directory.rglob("*"):
        assert path.resolve().is_relative_to(root)
    assert (directory / ".locks").is_dir()
    assert (directory / "x.d" / "y.obj").is_file()


def test_files_not_written_by_the_store_are_skipped_or_refused(
    store: LocalStore, directory: Path
) -> None:
    (directory / "README").write_text("notes")
    (directory / ".obj").write_bytes(b"no segment")
    (directory / "plain.obj").write_bytes(b"no version header")
    assert store.list("") == ["plain"]
    with pytest.raises(StoreError, match="plain") as caught:
        store.read("plain")
    assert not isinstance(caught.value, StoreUnavailable)
    with pytest.raises(StoreError, match="plain"):
        store.replace("plain", b"x", "0" * 32)


def test_store_directory_is_created_and_made_absolute(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    store = LocalStore("deep/store")
    assert store.directory == str(tmp_path / "deep" / "store")
    assert (tmp_path / "deep" / "store" / ".locks").is_dir()
    assert str(tmp_path) in repr(store)
    caps = store.capabilities
    assert (caps.shared_across_processes, caps.shared_across_hosts, caps.conditional_delete) == (
        True,
        False,
        True,
    )


def test_overlong_key_segment_is_refused_before_any_request(store: LocalStore) -> None:
    with pytest.raises(ConfigError, match="segment"):
        store.create("a/" + "s" * 250, b"x")
    assert store.stats.total == 0
    store.create("a/" + "s" * 200, b"x")  # long keys are fine in shorter segments


# -- errors -----------------------------------------------------------------------------------


def test_directory_that_is_a_file_is_a_config_error(tmp_path: Path) -> None:
    afile = tmp_path / "afile"
    afile.write_text("")
    with pytest.raises(ConfigError, match="not a directory"):
        LocalStore(afile)
    with pytest.raises(ConfigError, match="not a directory"):
        LocalStore(afile / "below")
    with pytest.raises(ConfigError, match="lock_timeout"):
        LocalStore(tmp_path, lock_timeout=0)


def test_removed_store_directory_gives_access_errors(store: LocalStore, directory: Path) -> None:
    version = store.create("k", b"x")
    shutil.rmtree(directory)
    calls: dict[str, Callable[[], object]] = {
        "read": lambda: store.read("k"),
        "create": lambda: store.create("k", b"y"),
        "replace": lambda: store.replace("k", b"y", version),
        "delete": lambda: store.delete("k", version),
    }
    for name, call in calls.items():
        with pytest.raises(StoreAccessError, match=r"'k'.*missing"):
            call()
        assert not directory.exists(), f"{name} recreated the store directory"
    with pytest.raises(StoreAccessError, match="missing"):
        store.list("")
    directory.write_text("now a file")
    with pytest.raises(StoreAccessError):
        store.read("k")


def test_lock_directory_removed_between_writes_is_recreated(
    store: LocalStore, directory: Path
) -> None:
    """Every write opens its key's lock file anew: one whose directory was removed by hand
    (between two writes, or two reads that wait for a write) is made again."""
    version = store.replace("k", b"y", store.create("k", b"x"))
    for call in ("replace", "read under the lock", "nowait"):
        shutil.rmtree(directory / ".locks")
        if call == "replace":
            version = store.replace("k", b"z", version)
        elif call == "nowait":
            version = store._try_nowait("replace_unsynced", "k", b"w", version)  # type: ignore[assignment]
        else:
            with store._locked("k", "read"):
                pass
        assert len(list((directory / ".locks").iterdir())) == 1, call
    assert store.read("k") == Versioned(b"w", version)


def test_lock_file_opens_read_only_for_a_reader_without_write_access(
    store: LocalStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A process with read access alone can still wait out a write in flight: its shared flock
    is taken on the lock file opened read-only (the permissions are modelled: tests run as
    root)."""
    version = store.create("k", b"x")
    real_open = os.open
    opened: list[int] = []

    def read_only(path: str, flags: int, mode: int = 0o777, **kwargs: Any) -> int:
        if "/.locks/" in str(path):
            if flags & (os.O_RDWR | os.O_CREAT):
                raise PermissionError(errno.EACCES, "Permission denied", path)
            opened.append(flags)
        return real_open(path, flags, mode, **kwargs)

    monkeypatch.setattr(os, "open", read_only)
    with store._locked("k", "read", fcntl.LOCK_SH):
        assert opened == [os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW]
    assert store.read("k") == Versioned(b"x", version)


def test_permission_error_is_an_access_error(
    store: LocalStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    version = store.create("k", b"x")
    real_open = os.open

    def refuse_writing(path: str, flags: int, mode: int = 0o777, **kwargs: Any) -> int:
        if str(path).endswith(".obj") and flags & os.O_RDWR:
            raise PermissionError(errno.EACCES, "Permission denied", path)
        return real_open(path, flags, mode, **kwargs)

    monkeypatch.setattr(os, "open", refuse_writing)
    with pytest.raises(StoreAccessError, match="'k'") as caught:
        store.replace("k", b"y", version)
    assert isinstance(caught.value, PermissionError)
    assert isinstance(caught.value.__cause__, PermissionError)
    assert store.read("k") == Versioned(b"x", version)  # reading needs read access only


@pytest.mark.skipif(os.geteuid() == 0, reason="root ignores file permissions")
def test_read_only_directory_is_an_access_error(store: LocalStore, directory: Path) -> None:
    directory.chmod(0o555)
    try:
        with pytest.raises(StoreAccessError, match="'k'"):
            store.create("k", b"x")
    finally:
        directory.chmod(0o755)


def _fail(*args: object) -> None:
    raise OSError(errno.EIO, "Input/output error")


def test_io_error_writing_the_slot_did_not_land(
    store: LocalStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    version = store.create("k", b"x")
    monkeypatch.setattr(os, "pwrite", _fail)
    with pytest.raises(StoreUnavailable, match="'k'") as caught:
        store.replace("k", b"y", version)
    assert not caught.value.outcome_unknown
    monkeypatch.undo()
    assert store.read("k") == Versioned(b"x", version)


def test_io_error_syncing_the_slot_may_have_landed(
    store: LocalStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The slot is whole in the page cache, so readers may see it: the outcome is unknown."""
    version = store.create("k", b"x")
    monkeypatch.setattr(os, "fdatasync", _fail)
    with pytest.raises(StoreUnavailable, match="'k'") as caught:
        store.replace("k", b"y", version)
    assert caught.value.outcome_unknown
    monkeypatch.undo()
    found = store.read("k")
    assert found is not None and found.data == b"y"


def test_io_error_before_a_new_file_is_renamed_did_not_land(
    store: LocalStore, directory: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    version = store.create("k", b"x")
    monkeypatch.setattr(os, "fsync", _fail)
    with pytest.raises(StoreUnavailable, match="'k'") as caught:
        store.replace("k", b"y" * 10_000, version)  # too large for the slots: a new file
    assert not caught.value.outcome_unknown
    with pytest.raises(StoreUnavailable, match="'n'") as caught:
        store.create("n", b"x")
    assert not caught.value.outcome_unknown
    monkeypatch.undo()
    assert store.read("k") == Versioned(b"x", version)
    assert store.read("n") is None
    assert not list(directory.glob("*.tmp"))


def test_io_error_at_the_rename_may_have_landed(
    store: LocalStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    def fail(src: str, dst: str) -> None:
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(os, "replace", fail)
    with pytest.raises(StoreUnavailable, match="'k'") as caught:
        store.create("k", b"x")
    assert caught.value.outcome_unknown


def test_non_durable_store_keeps_the_contract_basics(tmp_path: Path) -> None:
    store = open_store(f"file://{tmp_path}/nd?durable=false")
    assert isinstance(store, LocalStore) and "durable=False" in repr(store)
    first = store.create("k", b"one")
    second = store.replace("k", b"one", first)
    assert first != second
    with pytest.raises(ConditionFailed):
        store.replace("k", b"two", first)
    assert store.read("k") == Versioned(b"one", second)
    with pytest.raises(ConfigError, match="durable"):
        open_store(f"file://{tmp_path}/nd?durable=maybe")
