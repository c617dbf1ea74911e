"""The LocalStore's object file format alone: encoding and decoding slots, headers and records,
checksums, and which slot a write takes. No files: bytes in, bytes out."""

from __future__ import annotations

import zlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from prioritylock.stores import _slots
from prioritylock.stores._slots import (
    BLOCK,
    EMPTY_SLOT,
    HEADER,
    MIN_CAPACITY,
    RECORD_AT,
    SLOT_BYTES,
    SLOTS,
    SMALL_HEADER,
    TORN,
    FormatError,
    Slot,
    capacity_for,
    free_slot,
    header_capacity,
    new_file,
    pack_header,
    pack_record,
    pack_slot,
    parse_record,
    parse_slot,
    slot_offset,
)

pytestmark = [pytest.mark.timeout(60)]

VERSION = bytes(range(16))


@given(
    seq=st.integers(1, 2**64 - 1),
    version=st.binary(min_size=16, max_size=16),
    data=st.binary(max_size=2 * MIN_CAPACITY),
    synced=st.booleans(),
)
def test_a_packed_slot_parses_back(seq: int, version: bytes, data: bytes, synced: bool) -> None:
    capacity = capacity_for(len(data))
    blob = pack_slot(seq, version, data, synced=synced)
    assert blob[SLOT_BYTES:] == data
    slot = parse_slot(blob[:SLOT_BYTES], 2, capacity)
    assert slot == Slot(seq, 2, version, len(data), zlib.crc32(data), synced)


def test_a_slot_that_fails_its_checksum_is_torn_and_zeros_were_never_written() -> None:
    head = pack_slot(7, VERSION, b"doc", synced=False)[:SLOT_BYTES]
    for at in range(SLOT_BYTES):  # any one flipped byte of the header
        flipped = bytearray(head)
        flipped[at] ^= 0x40
        assert parse_slot(bytes(flipped), 0, MIN_CAPACITY) is TORN, at
    assert parse_slot(EMPTY_SLOT, 0, MIN_CAPACITY) is None
    assert parse_slot(b"", 0, MIN_CAPACITY) is None  # past the end of a short file: zeros
    assert parse_slot(head[:20], 0, MIN_CAPACITY) is TORN  # cut short


def test_a_slot_longer_than_its_capacity_is_torn() -> None:
    data = b"x" * (MIN_CAPACITY - SLOT_BYTES + 1)
    head = pack_slot(1, VERSION, data, synced=True)[:SLOT_BYTES]
    assert parse_slot(head, 0, MIN_CAPACITY) is TORN
    assert isinstance(parse_slot(head, 0, 2 * MIN_CAPACITY), Slot)


@given(seq=st.integers(0, 2**64 - 1))
def test_a_record_parses_back_and_a_damaged_one_is_none(seq: int) -> None:
    buf = bytes(RECORD_AT) + pack_record(seq)
    assert parse_record(buf) == seq
    damaged = bytearray(buf)
    damaged[RECORD_AT + 3] ^= 1
    assert parse_record(bytes(damaged)) is None
    assert parse_record(buf[:-1]) is None


@given(length=st.integers(0, 10**7))
def test_capacity_holds_the_document_twice_in_whole_blocks(length: int) -> None:
    capacity = capacity_for(length)
    assert capacity >= MIN_CAPACITY and capacity % BLOCK == 0
    assert capacity >= 2 * (SLOT_BYTES + length)
    assert capacity - BLOCK < max(MIN_CAPACITY, 2 * (SLOT_BYTES + length))
    assert [slot_offset(i, capacity) for i in range(SLOTS)] == [
        BLOCK,
        BLOCK + capacity,
        BLOCK + 2 * capacity,
    ]


@pytest.mark.parametrize("synced", [True, False])
def test_a_new_file_holds_the_document_in_slot_zero(synced: bool) -> None:
    data = b'{"schema": 1}'
    capacity = capacity_for(len(data))
    file = new_file(capacity, 5, VERSION, data, synced=synced)
    assert header_capacity(file) == capacity
    assert parse_record(file) == (5 if synced else 0)  # only a synced file names its write
    slot = parse_slot(file[BLOCK : BLOCK + SLOT_BYTES], 0, capacity)
    assert isinstance(slot, Slot) and (slot.seq, slot.synced) == (5, synced)
    assert file[BLOCK + SLOT_BYTES : BLOCK + SLOT_BYTES + slot.length] == data


def test_header_capacity_tells_damaged_older_and_foreign_files_apart() -> None:
    assert header_capacity(SMALL_HEADER) == MIN_CAPACITY
    assert header_capacity(pack_header(8 * BLOCK)) == 8 * BLOCK

    def problem(buf: bytes) -> tuple[str, str]:
        with pytest.raises(FormatError) as caught:
            header_capacity(buf)
        return caught.value.kind, caught.value.layout

    flipped = bytearray(pack_header(8 * BLOCK))
    flipped[9] ^= 1
    assert problem(bytes(flipped)) == ("damaged", "")
    assert problem(pack_header(BLOCK + 1)) == ("damaged", "")  # not whole blocks
    two_slots = HEADER.pack(b"\x89PLOCK1\n", BLOCK, 0)
    assert problem(two_slots) == ("older", "two slots")
    assert problem(b"0123456789abcdef" * 2 + b"\nold bytes") == (
        "older",
        "a version line, then the bytes",
    )
    assert problem(b'{"schema": 1}') == ("foreign", "")
    assert problem(b"") == ("foreign", "")


def _free(top: int, slots: list[Slot | _slots.Torn | None], kept: int | None) -> int:
    found = slots[top]
    assert isinstance(found, Slot)
    return free_slot(slots, found, kept)


def _slot(seq: int, position: int, *, synced: bool = False) -> Slot:
    return Slot(seq, position, VERSION, 0, 0, synced)


def test_a_write_takes_neither_the_current_nor_the_kept_slot() -> None:
    slots: list[Slot | _slots.Torn | None] = [_slot(3, 0), _slot(4, 1), _slot(2, 2)]
    assert _free(1, slots, None) == 2  # the older of the two others
    assert _free(1, slots, 2) == 0
    never = [_slot(1, 0), None, TORN]
    assert _free(0, never, None) == 1  # never written (or torn) first
    assert _free(0, never, 1) == 2


def test_an_unfinished_write_above_the_current_slot_is_taken_first() -> None:
    # Slots 1 and 2 hold whole headers above the current one: writes cut short. The lowest is
    # overwritten, so the next write's sequence number never stands in two slots.
    slots: list[Slot | _slots.Torn | None] = [_slot(5, 0), _slot(7, 1), _slot(6, 2)]
    assert _free(0, slots, None) == 2
    # ... before an older whole write, and before a slot never written.
    older: list[Slot | _slots.Torn | None] = [_slot(5, 0), _slot(6, 1), _slot(3, 2)]
    assert _free(0, older, None) == 1
    empty: list[Slot | _slots.Torn | None] = [_slot(5, 0), None, _slot(6, 2)]
    assert _free(0, empty, None) == 2


_HEADS = st.one_of(
    st.none(),  # never written
    st.just(TORN),
    st.tuples(st.integers(1, 9), st.booleans()),  # a whole header: seq, synced
)


def _head(slot: tuple[int, bool] | _slots.Torn | None, position: int) -> bytes:
    if slot is None:
        return EMPTY_SLOT
    if slot is TORN:
        return pack_slot(5, VERSION, b"torn", synced=False)[: SLOT_BYTES - 1] + b"\xff"
    assert isinstance(slot, tuple)
    seq, synced = slot
    return pack_slot(seq, bytes([position]) * 16, b"data %d" % seq, synced=synced)[:SLOT_BYTES]


def _tip(raw: list[bytes]) -> _slots.Tip | None:
    """The tip of a file with these headers, as a read finds it: the newest whole header, when
    it is not below the record (its data taken as whole)."""
    parsed = _slots.layout(tuple(raw), MIN_CAPACITY)
    if parsed.record is None or not parsed.written or parsed.written[0].seq < parsed.record:
        return None
    return _slots.tip(parsed, parsed.written[0])


@given(
    heads=st.lists(_HEADS, min_size=SLOTS, max_size=SLOTS),
    record=st.integers(0, 9),
    durable=st.booleans(),
    writes=st.lists(st.booleans(), min_size=1, max_size=8),  # each write: synced or not
)
def test_a_writers_run_of_tips_is_the_one_parsed_from_its_bytes(
    heads: list[tuple[int, bool] | _slots.Torn | None],
    record: int,
    durable: bool,
    writes: list[bool],
) -> None:
    """Writes as a LocalStore makes them, one after another over the current slot where its tip
    says, the record moved as it moves it: every tip it works out (``write_over``) is the one
    parsed from the file's new headers, whatever the file held before; and every tip found says
    what the file's parsed headers say (its plan is :func:`plan`'s, ``usual`` as defined)."""
    raw = [pack_record(record), *(_head(slot, at) for at, slot in enumerate(heads))]
    known = _tip(raw)
    for serial, synced in enumerate(writes):
        if known is None:
            return
        parsed = _slots.layout(tuple(raw), MIN_CAPACITY)
        top = parsed.written[0]
        assert (known.kept, known.at, known.free) == _slots.plan(parsed.slots, known.record, top)
        assert (known.seq, known.position, known.version) == (
            top.seq,
            top.position,
            top.version.hex(),
        )
        whole = len(parsed.written) == SLOTS
        assert known.usual == (whole and known.record == known.kept <= top.seq)
        if durable and known.kept > known.record:
            raw[0] = pack_record(known.kept)  # LocalStore._move_record
        version = b"%16d" % serial
        blob, after = _slots.write_over(known, version, version.hex(), b"w" * serial, synced)
        assert blob == _slots.pack_slot(known.seq + 1, version, b"w" * serial, synced=synced)
        raw[1 + known.free] = blob[:SLOT_BYTES]
        if synced:
            raw[0] = pack_record(known.seq + 1)
        parsed_after = _tip(raw)
        if known.usual:
            assert after == parsed_after
        else:
            assert after is None
        known = parsed_after


def test_a_new_files_tip_is_derived_from_its_third_write_on() -> None:
    """From a new file (one slot written), two writes fill the slots; from then on every
    write's tip is derived, synced or not, and is the parsed one."""
    buf = new_file(MIN_CAPACITY, 1, VERSION, b"first", synced=True)
    raw = [buf[RECORD_AT : RECORD_AT + 12], buf[BLOCK : BLOCK + SLOT_BYTES], EMPTY_SLOT, EMPTY_SLOT]
    known = _tip(raw)
    derived = []
    for serial in range(12):
        assert known is not None
        version, synced = b"%16d" % serial, serial % 3 == 2
        blob, after = _slots.write_over(known, version, version.hex(), b"doc", synced)
        raw[1 + known.free] = blob[:SLOT_BYTES]
        if synced:
            raw[0] = pack_record(known.seq + 1)
        derived.append(after is not None)
        known = _tip(raw)
        assert after is None or after == known
    assert derived == [False, False] + [True] * 10
