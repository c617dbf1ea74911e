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
    "MIN_CAPACITY",
    "RECORD",
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
    "capacity_for",
    "free_slot",
    "header_capacity",
    "new_file",
    "pack_header",
    "pack_record",
    "pack_slot",
    "parse_record",
    "parse_slot",
    "slot_offset",
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


class Current(NamedTuple):
    """The object's document: the valid slot with the highest sequence number; and, for a
    writer, every slot's header and the record."""

    slot: Slot
    capacity: int
    data: bytes
    slots: Sequence[Slot | Torn | None]  # by position
    record: int  # the newest synced write's sequence number

    @property
    def version(self) -> str:
        return self.slot.version.hex()


class Torn(enum.Enum):
    """A slot header whose checksum fails: written halfway (or damaged)."""

    TORN = "torn"


TORN: Final = Torn.TORN


def capacity_for(length: int) -> int:
    """Slot capacity for a document of ``length`` bytes: room to grow to twice its size."""
    need = 2 * (SLOT_BYTES + length)
    return max(MIN_CAPACITY, -(-need // BLOCK) * BLOCK)


def slot_offset(index: int, capacity: int) -> int:
    return BLOCK + index * capacity


def pack_slot(seq: int, version: bytes, data: bytes, *, synced: bool) -> bytes:
    flags = SYNCED if synced else 0
    head = SLOT.pack(seq, len(data), version, zlib.crc32(data), flags, 0)[:SLOT_CHECKED]
    return head + zlib.crc32(head).to_bytes(4, "little") + data


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
    record = buf[RECORD_AT : RECORD_AT + RECORD.size]
    if len(record) < RECORD.size:
        return None
    synced, crc = RECORD.unpack(record)
    return int(synced) if crc == zlib.crc32(record[:8]) else None


def free_slot(current: Current, kept: int | None) -> int:
    """The slot a write overwrites: neither the current one nor ``kept``. Of two: first a write
    that never finished (a whole header above the current slot, whose data a kill or a power loss
    cut short; the lowest, so that the new write's sequence number, one above the current, is
    never left on two slots), then a slot never written or torn, then the older.
    """
    top = current.slot
    taken = (top.position, kept)
    free, best = -1, (3, 0)
    for position, slot in enumerate(current.slots):
        if position in taken:
            continue
        if not isinstance(slot, Slot):
            rank = (1, 0)
        elif slot.seq > top.seq:
            rank = (0, slot.seq)
        else:
            rank = (2, slot.seq)
        if rank < best:
            free, best = position, rank
    return free


# Every read parses every slot header, and most find the same headers as the read before: a
# cache of this pure function makes that a dict lookup (about 0.5 µs instead of 2).
@functools.lru_cache(maxsize=8192)
def parse_slot(raw: bytes, index: int, capacity: int) -> Slot | Torn | None:
    """The slot header ``raw``: a :class:`Slot`, ``None`` if never written, or torn."""
    if len(raw) < SLOT_BYTES:
        raw = raw.ljust(SLOT_BYTES, b"\0")  # past the end of a short file: zeros
    seq, length, version, data_crc, flags, crc = SLOT.unpack(raw)
    if crc != zlib.crc32(raw[:SLOT_CHECKED]) or length > capacity - SLOT_BYTES or not seq:
        return None if raw == EMPTY_SLOT else TORN
    return Slot(seq, index, version, length, data_crc, (flags & SYNCED) != 0)


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
