"""The LocalStore's object file format, pure: slots, headers, records and checksums; no I/O.

An object file (format 2; integers little-endian; the slots start at 4 KiB boundaries)::

    0        header  magic b"\\x89PLOCK2\\n", slot capacity C (u64), crc32 of the two
    24       record  sequence number of the newest synced write (u64), its crc32
    4096     slot 0  seq (u64), data length (u64), version (16 bytes), crc32 of the data, flags
    4096+C   slot 1  (u32; 1: a synced write), crc32 of those 40 bytes; then the data. A slot of
    4096+2C  slot 2  zeros was never written.

The object is the valid slot (both checksums pass) with the highest sequence number. How writes
choose a slot, and why that keeps every document whole through kills and power loss, is told in
the :mod:`prioritylock.stores._local` module docstring; this module only encodes and decodes.
"""

from __future__ import annotations

import enum
import functools
import struct
import zlib
from collections.abc import Sequence
from typing import Final, NamedTuple

__all__ = [
    "BLOCK",
    "EMPTY_SLOT",
    "FIRST_READ",
    "HEADER",
    "Layout",
    "MIN_CAPACITY",
    "RECORD",
    "Plan",
    "RECORD_AT",
    "SLOT",
    "SLOTS",
    "SLOT_BYTES",
    "SMALL_HEADER",
    "SYNCED",
    "TORN",
    "VERSION_BYTES",
    "Current",
    "FormatError",
    "Slot",
    "Torn",
    "Tip",
    "capacity_for",
    "free_slot",
    "header_capacity",
    "layout",
    "made",
    "new_file",
    "pack_header",
    "pack_record",
    "pack_slot",
    "parse_record",
    "parse_slot",
    "plan",
    "slot_offset",
    "tip",
    "write_over",
]

MAGIC = b"\x89PLOCK2\n"  # not a hex digit: files of the format before slots start with one
MAGIC_TWO_SLOTS = b"\x89PLOCK1\n"  # format 1: two slots, no flags
HEADER = struct.Struct("<8sQI")  # magic, slot capacity, crc32 of the two
RECORD = struct.Struct("<QI")  # sequence number of the newest synced write, its crc32
RECORD_AT = 24
# seq, data length, version, data crc32, flags, crc32 of the first five
SLOT = struct.Struct("<QQ16sIII")
SLOT_BYTES = SLOT.size  # 44; the data follows
SLOT_CHECKED = SLOT_BYTES - 4
EMPTY_SLOT = bytes(SLOT_BYTES)
SYNCED = 1  # slot flag: written by a synced write
SLOTS = 3
BLOCK = 4096  # the header's block; slots start at block boundaries
MIN_CAPACITY = BLOCK
# One pread of this much holds a small object whole (the usual lease document: under 2 KiB).
FIRST_READ = BLOCK + SLOTS * MIN_CAPACITY
OLD_FORMAT_HEADER = 33  # 32 hex digits and a newline: the format before slots
HEX = frozenset(b"0123456789abcdef")
VERSION_BYTES = 16


class Slot(NamedTuple):
    """A slot header whose checksum passed; its data may still be half-written. Ordered by
    sequence number (positions differ)."""

    seq: int
    position: int  # 0, 1 or 2
    version: bytes
    length: int
    data_crc: int
    synced: bool  # written by a synced write (flag 1)


class Plan(NamedTuple):
    """Where a write over the current slot goes (:func:`plan`)."""

    kept: int  # the newest synced write's sequence number; above the record: a record to repair
    at: int | None  # the slot that holds it, if one does
    free: int  # the slot the write overwrites


class Tip(NamedTuple):
    """A file's current document (its slot) and where a write over it goes, flat: all that a
    read or a write needs of the file's headers (:func:`tip`)."""

    raw: tuple[bytes, ...]  # the record's bytes, then each slot header's, by position
    capacity: int
    record: int  # the newest synced write's sequence number
    seq: int  # the current slot's sequence number, position, version (in hex: every write
    position: int  # compares it), data length and data checksum
    version: str
    length: int
    data_crc: int
    kept: int  # where a write goes: :class:`Plan`'s fields
    at: int | None
    free: int
    # Every slot whole, the current one the newest, the record at the newest synced write: the
    # tip of any file with these headers (its data checked by each use), and :func:`write_over`
    # derives the next one.
    usual: bool


class Current(NamedTuple):
    """The object's document, and the file's tip for a writer."""

    tip: Tip
    data: bytes


class Torn(enum.Enum):
    """A slot header whose checksum fails: written halfway (or damaged)."""

    TORN = "torn"


TORN: Final = Torn.TORN


class Layout(NamedTuple):
    """A file's record and slot headers: their bytes and what they say (:func:`layout`)."""

    raw: tuple[bytes, ...]  # the record's bytes, then each slot header's, by position
    capacity: int
    record: int | None  # the newest synced write's sequence number; None: fails its checksum
    slots: tuple[Slot | Torn | None, ...]  # by position
    written: Sequence[Slot]  # the whole headers, newest first
    settled: bool  # the record and every header pass their checksums
    plan: Plan | None  # where a write goes if the newest whole header is the current slot


#: Makes a named tuple from a tuple of its fields, unchecked: the class's own ``__new__`` is a
#: Python function (a frame per object: 0.26 µs against 0.13 here), and a write makes two
#: (``Current``, ``Tip``). Only where every field is given, in order.
made = tuple.__new__


def capacity_for(length: int) -> int:
    """Slot capacity for a document of ``length`` bytes: room to grow to twice its size."""
    need = 2 * (SLOT_BYTES + length)
    return max(MIN_CAPACITY, -(-need // BLOCK) * BLOCK)


def slot_offset(index: int, capacity: int) -> int:
    return BLOCK + index * capacity


def pack_slot(seq: int, version: bytes, data: bytes, *, synced: bool) -> bytes:
    """A slot holding ``data``: its header's bytes, then the data."""
    head = _SLOT_CHECKED.pack(seq, len(data), version, zlib.crc32(data), SYNCED if synced else 0)
    return head + _CRC.pack(zlib.crc32(head)) + data


_SLOT_CHECKED = struct.Struct(SLOT.format[:-1])  # the slot header less its own crc32
_CRC = struct.Struct("<I")


def pack_record(seq: int) -> bytes:
    head = seq.to_bytes(8, "little")
    return head + zlib.crc32(head).to_bytes(4, "little")


def new_file(capacity: int, seq: int, version: bytes, data: bytes, *, synced: bool) -> bytes:
    """A whole object file holding ``data`` in slot 0 (the others are left to ftruncate: zeros).

    ``synced``: the file will be synced before it is used, so the record names the slot.
    """
    header = pack_header(capacity)
    block = header + bytes(RECORD_AT - len(header)) + pack_record(seq if synced else 0)
    return block + bytes(BLOCK - len(block)) + pack_slot(seq, version, data, synced=synced)


def pack_header(capacity: int) -> bytes:
    head = HEADER.pack(MAGIC, capacity, 0)[:-4]
    return head + zlib.crc32(head).to_bytes(4, "little")


SMALL_HEADER = pack_header(MIN_CAPACITY)  # most files': no need to check it field by field


def parse_record(buf: bytes) -> int | None:
    """The newest synced write's sequence number in the file's first bytes ``buf``, ``None`` if
    damaged."""
    return _record(buf[RECORD_AT : RECORD_AT + RECORD.size])


@functools.lru_cache(maxsize=1024)  # a file's record changes only with a synced write
def _record(raw: bytes) -> int | None:
    """The record's own bytes, parsed; ``None`` if damaged (or cut short)."""
    if len(raw) < RECORD.size:
        return None
    synced, crc = RECORD.unpack(raw)
    return int(synced) if crc == zlib.crc32(raw[:8]) else None


def free_slot(slots: Sequence[Slot | Torn | None], top: Slot, kept: int | None) -> int:
    """The slot a write over ``top`` overwrites: neither ``top`` nor ``kept``. Of two: first a
    write that never finished (a whole header above the current slot, whose data a kill or a
    power loss cut short; the lowest, so that the new write's sequence number, one above the
    current, is never left on two slots), then a slot never written or torn, then the older.
    """
    taken, free, best = (top.position, kept), -1, _RANKS
    for position, slot in enumerate(slots):
        if position in taken:
            continue
        if not isinstance(slot, Slot):
            rank = _RANKS // 2  # never written, or torn
        elif slot.seq > top.seq:
            rank = slot.seq  # a write that never finished
        else:
            rank = _RANKS // 2 + slot.seq  # an older write
        if rank < best:
            free, best = position, rank
    return free


_RANKS = 1 << 66  # free_slot's order as one number: sequence numbers are below 2**64


def plan(slots: Sequence[Slot | Torn | None], record: int, top: Slot) -> Plan:
    """Where a write goes when ``top`` is the current slot and ``record`` the record: the newest
    synced write, which no write may overwrite, and the free slot (:func:`free_slot`).

    The newest synced write is the one the record names, or a slot flagged synced above it, up to
    the current one: a synced write whose record update never happened (the writer must then
    move the record to it first; see ``LocalStore._move_record``).
    """
    kept, at = record, None
    for slot in slots:
        if isinstance(slot, Slot) and slot.synced and kept < slot.seq <= top.seq:
            kept = slot.seq
    for slot in slots:
        if isinstance(slot, Slot) and slot.seq == kept:
            at = slot.position
            break
    return Plan(kept, at, free_slot(slots, top, at))


def parse_slot(raw: bytes, index: int, capacity: int) -> Slot | Torn | None:
    """The slot header ``raw``: a :class:`Slot`, ``None`` if never written, or torn."""
    if len(raw) < SLOT_BYTES:
        raw = raw.ljust(SLOT_BYTES, b"\0")  # past the end of a short file: zeros
    seq, length, version, data_crc, flags, crc = SLOT.unpack(raw)
    if crc != zlib.crc32(raw[:SLOT_CHECKED]) or length > capacity - SLOT_BYTES or not seq:
        return None if raw == EMPTY_SLOT else TORN
    return Slot(seq, index, version, length, data_crc, (flags & SYNCED) != 0)


def layout(raw: tuple[bytes, ...], capacity: int) -> Layout:
    """The file whose record's bytes and slot headers' bytes (by position; past the end of a
    short file, fewer) are ``raw``, with slots of ``capacity``."""
    slots = tuple([parse_slot(head, at, capacity) for at, head in enumerate(raw[1:])])
    return _layout(raw, capacity, _record(raw[0]), slots)


def tip(parsed: Layout, slot: Slot) -> Tip:
    """The file of ``parsed`` with ``slot`` (one of its whole headers) its current document, its
    record passing its checksum."""
    record = parsed.record
    assert record is not None
    written = parsed.written
    if slot is written[0]:
        where = parsed.plan
        assert where is not None
        usual = len(written) == SLOTS and record == where.kept <= slot.seq
    else:  # a newer write is damaged or in flight: only a locked read takes this one
        where, usual = plan(parsed.slots, record, slot), False
    seq, position, version, length, data_crc, _synced = slot
    fields = (parsed.raw, parsed.capacity, record, seq, position, version.hex(), length, data_crc)
    return made(Tip, (*fields, *where, usual))


def write_over(
    tip: Tip, version: bytes, version_hex: str, data: bytes, synced: bool
) -> tuple[bytes, Tip | None]:
    """A write of ``data`` at ``version`` over ``tip``'s current slot: the bytes to write at the
    free slot (:func:`slot_offset` of ``tip.free``; its header, then the data), and the file's tip
    once they are written and, if ``synced``, the record moved to them: what :func:`tip` of its
    parsed headers would say, worked out in a few steps. That is for a ``usual`` tip; None for
    another, whose next tip takes a parse.
    """
    seq = tip.seq + 1
    crc = zlib.crc32(data)
    head = _SLOT_CHECKED.pack(seq, len(data), version, crc, SYNCED if synced else 0)
    head += _CRC.pack(zlib.crc32(head))
    if not tip.usual:
        return head + data, None
    raw = list(tip.raw)
    raw[1 + tip.free] = head
    # Every slot was whole and stays so; the new slot is the newest, one above the current. Of
    # the two others, ``third`` (neither the current slot nor the one overwritten) is the older.
    top, free = tip.position, tip.free
    third = _POSITIONS - top - free
    at: int | None
    if synced:  # the write is kept, the record names it; the oldest is overwritten next
        raw[0] = pack_record(seq)
        kept, at, record, after = seq, free, seq, third
    else:  # the kept slot stays; of the others, the older is overwritten next
        kept, at, record = tip.kept, tip.at, tip.record
        after = top if at == third else third
    fields = (tuple(raw), tip.capacity, record, seq, free, version_hex, len(data), crc)
    return head + data, made(Tip, (*fields, kept, at, after, True))


_POSITIONS = sum(range(SLOTS))  # the three positions' sum: two of them give the third


def _layout(
    raw: tuple[bytes, ...], capacity: int, record: int | None, slots: tuple[Slot | Torn | None, ...]
) -> Layout:
    written = sorted([slot for slot in slots if isinstance(slot, Slot)], reverse=True)
    settled = record is not None and TORN not in slots
    where = None if record is None or not written else plan(slots, record, written[0])
    return Layout(raw, capacity, record, slots, written, settled, where)


class FormatError(Exception):
    """A file that is not an object file of this format.

    :ivar kind: ``"damaged"`` (this format, but its header fails its checksum), ``"older"`` (an
        older format, named in ``layout``) or ``"foreign"`` (not written by LocalStore).
    """

    def __init__(self, kind: str, layout: str = "") -> None:
        super().__init__(kind, layout)
        self.kind = kind
        self.layout = layout


def header_capacity(buf: bytes) -> int:
    """The slot capacity from the file's first bytes ``buf``.

    :raises FormatError: not an object file of this format (see :class:`FormatError`).
    """
    head = buf[: HEADER.size]
    if head == SMALL_HEADER:
        return MIN_CAPACITY
    if len(head) == HEADER.size:
        magic, capacity, crc = HEADER.unpack(head)
        if magic == MAGIC:
            if crc != zlib.crc32(head[:-4]) or capacity < MIN_CAPACITY or capacity % BLOCK:
                raise FormatError("damaged")
            return int(capacity)
        if magic == MAGIC_TWO_SLOTS:
            raise FormatError("older", "two slots")
    old = buf[:OLD_FORMAT_HEADER]
    if len(old) == OLD_FORMAT_HEADER and old[-1:] == b"\n" and set(old[:-1]) <= HEX:
        raise FormatError("older", "a version line, then the bytes")
    raise FormatError("foreign")
