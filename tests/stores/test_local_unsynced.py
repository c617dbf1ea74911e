"""LocalStore's unsynced replaces: no sync, and still neither a kill nor a power loss loses a
synced write or leaves the object unreadable.

A power loss is modelled in-process: every ``pwrite`` and ``fdatasync`` of the object file goes
through :class:`_Disk`, which keeps the file's bytes as of its last sync and its images after each
write since; a crash image takes each 512-byte sector from any one of those (so slots written
since the sync may be old, new, or torn, in any order), and is then read by a fresh store. A
sector is written whole or not at all (the format relies on that for its 12-byte record).
"""

from __future__ import annotations

import errno
import os
import random
import zlib
from collections.abc import Callable
from pathlib import Path

import pytest

from prioritylock._errors import StoreUnavailable
from prioritylock.stores import LocalStore, UnsyncedWriter, Versioned, _local, _slots
from tests._soak import size

pytestmark = pytest.mark.timeout(120)

KEY = "lease/doc"
SECTOR = 512
#: 60 seeded sequences in CI (about 7,500 crash images checked); 300 under scripts/soak.
SEQUENCES = size(60, 300)


def _path(store: LocalStore) -> Path:
    return Path(_local._key_paths(store.directory, KEY)[0])


class _File:
    """An object file parsed from outside: every slot (valid or not) and the record."""

    def __init__(self, raw: bytes) -> None:
        _, capacity, _ = _slots.HEADER.unpack(raw[: _slots.HEADER.size])
        self.raw = raw
        self.capacity = capacity
        self.record = _slots.parse_record(raw)
        self.slots: list[_slots.Slot | None] = []  # None: empty, torn, or its data is torn
        for position in range(_slots.SLOTS):
            start = _slots.slot_offset(position, capacity)
            slot = _slots.parse_slot(raw[start : start + _slots.SLOT_BYTES], position, capacity)
            if isinstance(slot, _slots.Slot):
                data = raw[start + _slots.SLOT_BYTES : start + _slots.SLOT_BYTES + slot.length]
                if zlib.crc32(data) != slot.data_crc:
                    slot = None
            self.slots.append(slot if isinstance(slot, _slots.Slot) else None)

    def position_of(self, seq: int) -> int | None:
        return next((s.position for s in self.slots if s is not None and s.seq == seq), None)

    @property
    def current(self) -> _slots.Slot:
        return max((s for s in self.slots if s is not None), key=lambda s: s.seq)

    def slot_bytes(self, position: int) -> bytes:
        start = _slots.slot_offset(position, self.capacity)
        return self.raw[start : start + self.capacity]


def _document(rng: random.Random, serial: int) -> bytes:
    """1 to 1500 bytes (a slot spans up to four sectors) that name ``serial``."""
    return serial.to_bytes(8, "big") * rng.randint(1, 190)


@pytest.fixture
def store(tmp_path: Path) -> LocalStore:
    return LocalStore(tmp_path / "store")


@pytest.fixture
def count_syncs(monkeypatch: pytest.MonkeyPatch) -> Callable[[], list[str]]:
    """Count every sync call from now on (the calls still happen)."""
    calls: list[str] = []
    for name in ("fsync", "fdatasync"):
        real = getattr(os, name)

        def spy(fd: int, _name: str = name, _real: Callable[[int], None] = real) -> None:
            calls.append(_name)
            _real(fd)

        monkeypatch.setattr(os, name, spy)

    def taken() -> list[str]:
        found = list(calls)
        calls.clear()
        return found

    return taken


# -- syncs ------------------------------------------------------------------------------------


def test_unsynced_replace_makes_no_sync_and_replace_exactly_one(
    store: LocalStore, count_syncs: Callable[[], list[str]]
) -> None:
    assert isinstance(store, UnsyncedWriter)
    version = store.create(KEY, b"first")
    inode = _path(store).stat().st_ino
    count_syncs()
    for serial in range(12):
        data = f"document {serial}".encode() * 20
        if serial % 3:
            version = store.replace_unsynced(KEY, data, version)
            assert count_syncs() == [], f"unsynced write {serial} synced"
        else:
            version = store.replace(KEY, data, version)
            assert count_syncs() == ["fdatasync"], f"write {serial}"
        assert store.read(KEY) == Versioned(data, version)
    assert _path(store).stat().st_ino == inode, "the writes were not in place"
    assert store.stats.replaces == 12


def test_non_durable_unsynced_replace_is_replace(tmp_path: Path) -> None:
    store = LocalStore(tmp_path, durable=False)
    version = store.create(KEY, b"first")
    version = store.replace_unsynced(KEY, b"second", version)
    version = store.replace(KEY, b"third", version)
    assert store.read(KEY) == Versioned(b"third", version)
    state = _File(_path(store).read_bytes())
    assert state.record == 0, "a store that never syncs keeps no record"
    assert not any(s is not None and s.synced for s in state.slots)


# -- which slot a write overwrites ------------------------------------------------------------


@pytest.mark.parametrize("seed", range(4))
def test_writes_never_overwrite_the_current_slot_nor_the_newest_synced_one(
    store: LocalStore, seed: int
) -> None:
    """Runs of synced and unsynced writes, in every mix: each overwrites the one slot that holds
    neither the current document nor the newest synced one; the record names the newest synced
    write; a synced write's slot is flagged, an unsynced one's is not."""
    rng = random.Random(seed)
    kinds = ["synced", "unsynced", "unsynced", "synced", "unsynced", "synced", "synced"]
    kinds += [rng.choice(["synced", "unsynced"]) for _ in range(60)]
    version = store.create(KEY, b"created")
    path = _path(store)
    synced_seq = 1  # a create is synced
    for serial, kind in enumerate(kinds, start=2):
        before = _File(path.read_bytes())
        current = before.current
        kept = before.position_of(synced_seq)
        assert kept is not None, f"write {serial}: the newest synced write is gone"
        assert before.record == synced_seq
        data = _document(rng, serial)
        write = store.replace if kind == "synced" else store.replace_unsynced
        version = write(KEY, data, version)

        after = _File(path.read_bytes())
        changed = [
            p
            for p in range(_slots.SLOTS)
            if after.slot_bytes(p) != before.slot_bytes(p) or after.slots[p] != before.slots[p]
        ]
        assert len(changed) == 1, f"write {serial} changed slots {changed}"
        assert changed[0] not in (current.position, kept), (
            f"write {serial} ({kind}) overwrote slot {changed[0]}: current {current.position},"
            f" newest synced {kept}"
        )
        new = after.slots[changed[0]]
        assert new is not None and new == after.current and new.seq == serial
        assert new.synced == (kind == "synced")
        if kind == "synced":
            synced_seq = serial
        assert after.record == synced_seq
        assert store.read(KEY) == Versioned(data, version)


def test_headers_left_above_the_current_slot_are_overwritten_first_the_lowest_first(
    store: LocalStore,
) -> None:
    """A power loss can leave whole headers of writes whose data never reached the disk, above
    the current slot. The next writes take those slots, the lowest first, so that a sequence
    number never names two slots and such a header (even one flagged synced) never ends up below
    the current slot, where it would pass for a whole synced write."""
    version = store.create(KEY, b"synced, on disk")
    path = _path(store)
    cut_short = {
        1: _slots.pack_slot(3, b"\x03" * 16, b"a synced write, its data lost", synced=True),
        2: _slots.pack_slot(2, b"\x02" * 16, b"an unsynced write, its data lost", synced=False),
    }
    with path.open("r+b") as file:
        for position, blob in cut_short.items():
            file.seek(_slots.slot_offset(position, _slots.MIN_CAPACITY))
            file.write(blob[: _slots.SLOT_BYTES + 4])
    state = _File(path.read_bytes())
    assert [s is not None for s in state.slots] == [True, False, False]
    assert store.read(KEY) == Versioned(b"synced, on disk", version)

    version = store.replace_unsynced(KEY, b"lazy 2", version)
    state = _File(path.read_bytes())
    assert state.position_of(2) == 2, "the lower header first"
    version = store.replace_unsynced(KEY, b"lazy 3", version)
    state = _File(path.read_bytes())
    assert (state.position_of(1), state.position_of(3)) == (0, 1), "the synced slot is kept"
    assert not state.slots[1].synced  # type: ignore[union-attr]
    assert store.read(KEY) == Versioned(b"lazy 3", version)


# -- a record that lags -----------------------------------------------------------------------


class _Killed(BaseException):
    """The writer 'dies' here: nothing after this point of its write happens."""


def test_record_lagging_after_a_killed_synced_write_is_repaired_before_the_next_write(
    store: LocalStore, monkeypatch: pytest.MonkeyPatch, count_syncs: Callable[[], list[str]]
) -> None:
    """Killed between its sync and its record update, a synced write leaves a flagged slot newer
    than the record. The next write, even an unsynced one, syncs first and moves the record to
    it, so the lazy writes that follow keep that slot, not the one the record named."""
    version = store.create(KEY, b"created")
    version = store.replace_unsynced(KEY, b"lazy", version)
    real_pwrite = os.pwrite

    def die_at_the_record(fd: int, data: bytes, offset: int) -> int:
        if offset == _slots.RECORD_AT:
            raise _Killed
        return real_pwrite(fd, data, offset)

    monkeypatch.setattr(os, "pwrite", die_at_the_record)
    with pytest.raises(_Killed):
        store.replace(KEY, b"synced, record lost", version)
    monkeypatch.setattr(os, "pwrite", real_pwrite)
    path = _path(store)
    lagging = _File(path.read_bytes())
    assert (lagging.record, lagging.current.seq, lagging.current.synced) == (1, 3, True)
    found = store.read(KEY)
    assert found is not None and found.data == b"synced, record lost"

    count_syncs()
    version = store.replace_unsynced(KEY, b"lazy 1", found.version)
    assert count_syncs() == ["fdatasync"], "the repair syncs once"
    assert _File(path.read_bytes()).record == 3
    for serial in range(2, 6):
        version = store.replace_unsynced(KEY, b"lazy %d" % serial, version)
        assert count_syncs() == [], "repaired once, the record no longer lags"
        assert _File(path.read_bytes()).position_of(3) is not None, "slot 3 was overwritten"


def test_io_error_writing_the_record_may_have_landed_and_is_repaired(
    store: LocalStore, monkeypatch: pytest.MonkeyPatch, count_syncs: Callable[[], list[str]]
) -> None:
    version = store.create(KEY, b"created")
    real_pwrite = os.pwrite

    def fail_at_the_record(fd: int, data: bytes, offset: int) -> int:
        if offset == _slots.RECORD_AT:
            raise OSError(errno.EIO, "Input/output error")
        return real_pwrite(fd, data, offset)

    monkeypatch.setattr(os, "pwrite", fail_at_the_record)
    with pytest.raises(StoreUnavailable, match=KEY) as caught:
        store.replace(KEY, b"synced", version)
    assert caught.value.outcome_unknown
    monkeypatch.setattr(os, "pwrite", real_pwrite)
    found = store.read(KEY)
    assert found is not None and found.data == b"synced"
    count_syncs()
    store.replace_unsynced(KEY, b"lazy", found.version)
    assert count_syncs() == ["fdatasync"]
    assert _File(_path(store).read_bytes()).record == 2


def test_failed_repair_sync_writes_nothing(
    store: LocalStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    version = store.create(KEY, b"created")
    real_pwrite = os.pwrite

    def die_at_the_record(fd: int, data: bytes, offset: int) -> int:
        if offset == _slots.RECORD_AT:
            raise _Killed
        return real_pwrite(fd, data, offset)

    monkeypatch.setattr(os, "pwrite", die_at_the_record)
    with pytest.raises(_Killed):
        store.replace(KEY, b"synced", version)
    monkeypatch.setattr(os, "pwrite", real_pwrite)
    found = store.read(KEY)
    assert found is not None
    before = _path(store).read_bytes()

    def fail(fd: int) -> None:
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(os, "fdatasync", fail)
    with pytest.raises(StoreUnavailable, match=KEY) as caught:
        store.replace_unsynced(KEY, b"lazy", found.version)
    assert not caught.value.outcome_unknown
    assert _path(store).read_bytes() == before


# -- power loss -------------------------------------------------------------------------------


class _Disk:
    """One object file as a disk holds it: its bytes at the last sync, and its images after each
    write since, any of which the page cache may have written back, sector by sector."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.synced = path.read_bytes()
        self.since: list[bytes] = []  # the file after each write since the last sync
        self.on_call: Callable[[], None] = lambda: None  # before and after each call

    def pwrite(self, real: Callable[[int, bytes, int], int]) -> Callable[[int, bytes, int], int]:
        def pwrite(fd: int, data: bytes, offset: int) -> int:
            self.on_call()
            written = real(fd, data, offset)
            self.since.append(self.path.read_bytes())
            self.on_call()
            return written

        return pwrite

    def fdatasync(self, fd: int) -> None:
        self.on_call()
        self.synced = self.path.read_bytes()  # the whole file: earlier writes go along
        self.since.clear()
        self.on_call()

    def crash_image(self, rng: random.Random) -> bytes:
        images = [self.synced, *self.since]
        if rng.random() < 0.25:
            return rng.choice(images)  # written back in order, up to some point
        image = bytearray(self.synced)
        for start in range(0, len(image), SECTOR):
            image[start : start + SECTOR] = rng.choice(images)[start : start + SECTOR]
        return bytes(image)

    def reboot(self, image: bytes) -> None:
        self.path.write_bytes(image)
        self.synced, self.since = image, []


class _Sequence:
    """Drives one store through random writes (synced or not, some killed at a random system
    call, some followed by a power loss) and checks crash images taken at random system calls
    (once the write is over: its thread holds the key's lock until then)."""

    def __init__(self, directory: Path, rng: random.Random) -> None:
        self.rng = rng
        self.store = LocalStore(directory / "live")
        self.crash = LocalStore(directory / "crash")
        first = _document(rng, 0)
        self.version = self.store.create(KEY, first)
        self.written = {self.version: (0, first)}  # every version written -> (serial, data)
        self.last_synced = 0  # the serial of the newest synced write that returned
        self.serial = 0
        self.in_flight: bytes | None = None
        self.images: list[bytes] = []  # crash images taken during the write in flight
        self.kill_at = -1  # the system call (counted in the write) at which the writer dies
        self.calls = 0
        self.disk = _Disk(_path(self.store))
        self.disk.on_call = self.on_call
        self.checked = self.reboots = self.kills = 0

    def on_call(self) -> None:
        if self.rng.random() < 0.5:
            self.images.append(self.disk.crash_image(self.rng))
        self.calls += 1
        if self.calls == self.kill_at:
            raise _Killed

    def check(self, image: bytes, last_synced: int) -> Versioned:
        """What a power loss with the disk holding ``image`` leaves: a whole document, at the
        newest synced write that had returned or later."""
        path = _path(self.crash)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(image)
        found = self.crash.read(KEY)  # raises if damaged or unreadable
        assert found is not None
        if found.version in self.written:
            serial, data = self.written[found.version]
            assert found.data == data
            assert serial >= last_synced, (
                f"a power loss rolled the object back to write {serial}, before the synced"
                f" write {last_synced}"
            )
        else:
            assert found.data == self.in_flight, "an unknown document"
        self.checked += 1
        return found

    def write(self) -> None:
        synced = self.rng.random() < 0.3
        self.serial += 1
        data = _document(self.rng, self.serial)
        self.in_flight, self.calls = data, 0
        self.kill_at = self.rng.randint(1, 12) if self.rng.random() < 0.15 else -1
        last_synced = self.last_synced  # what a power loss during this write must keep
        try:
            write = self.store.replace if synced else self.store.replace_unsynced
            version = write(KEY, data, self.version)
        except _Killed:
            self.kills += 1
            found = self.store.read(KEY)
            assert found is not None
            if found.version != self.version:  # it had landed: no kill undoes a write
                assert found.data == data
                self.written[found.version] = (self.serial, data)
                self.version = found.version
        else:
            self.written[version] = (self.serial, data)
            self.version = version
            if synced:
                self.last_synced = self.serial
        for image in self.images:
            self.check(image, last_synced)
        self.in_flight, self.kill_at, self.images = None, -1, []
        found = self.store.read(KEY)
        assert found is not None and found.version == self.version, "a rollback without a crash"

    def power_loss(self) -> None:
        found = self.check(self.disk.crash_image(self.rng), self.last_synced)
        self.disk.reboot(_path(self.crash).read_bytes())
        self.reboots += 1
        assert self.store.read(KEY) == found
        self.version = found.version


@pytest.mark.soak
@pytest.mark.timeout(300)
def test_power_loss_at_any_moment_leaves_a_whole_object_no_older_than_the_last_synced_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Seeded sequences of 5 to 40 writes, 30% synced; some writers die at a random system
    call; crash images at random system calls are checked, and some become the disk the next
    writes go on (a power loss and a reboot), so later power losses meet records that lag."""
    rng = random.Random(20241122)
    totals = {"checked": 0, "reboots": 0, "kills": 0}
    for index in range(SEQUENCES):
        sequence = _Sequence(tmp_path / str(index), rng)
        monkeypatch.setattr(os, "pwrite", sequence.disk.pwrite(os.pwrite))
        monkeypatch.setattr(os, "fdatasync", sequence.disk.fdatasync)
        for _ in range(rng.randint(5, 40)):
            sequence.write()
            if rng.random() < 0.1:
                sequence.power_loss()
        sequence.power_loss()
        monkeypatch.undo()
        for name in totals:
            totals[name] += getattr(sequence, name)
    assert totals["checked"] > 25 * SEQUENCES, totals
    assert totals["reboots"] > 2 * SEQUENCES and totals["kills"] > SEQUENCES // 2, totals
