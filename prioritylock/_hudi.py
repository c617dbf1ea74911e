"""Apache Hudi's table lock document and its rules, pure (no I/O, no clock reads).

Hudi's ``StorageBasedLockProvider`` (hudi-client-common, ``client/transaction/lock``) keeps one
object per table, ``<base path>/.hoodie/.locks/table_lock.json``, holding the JSON form of its
``StorageLockData``: ``{"expired":false,"validUntil":1700000000000,"owner":"<uuid>"}``, written
compactly by Jackson in that field order, read with unknown fields ignored and the three fields
required (``models/StorageLockFile.java``, ``models/StorageLockData.java``).

Its rules, as its ``tryLock``/``renewLock``/``unlock`` apply them:

- the lock is free when the object is absent, ``expired`` is true, or the reader's wall clock is
  past ``validUntil`` plus a drift allowance (``CLOCK_DRIFT_BUFFER_MS`` = 500), judged on one read;
- acquire writes ``{expired: false, validUntil: now + validity, owner}`` with ``If-None-Match: *``
  when the object was absent, else ``If-Match`` the version read;
- renew writes the same with a fresh ``validUntil``, ``If-Match`` the holder's version;
- release writes ``{expired: true}`` with the held ``validUntil`` and owner, ``If-Match`` the
  holder's version; the object is never deleted.

The force unlock of operators is the release written for someone else: ``expired: true`` over
exactly the version the operator saw (with ``validUntil`` a millisecond short, see
:func:`forced`), so a live holder's next renewal fails its condition.
"""

from __future__ import annotations

import json
from typing import Final

import attrs

from prioritylock._errors import CorruptLease

__all__ = [
    "DEFAULT_DRIFT_MS",
    "LOCK_FILE",
    "LOCKS_FOLDER",
    "MAX_DOCUMENT_BYTES",
    "HudiLockData",
    "acquired",
    "decode",
    "encode",
    "forced",
    "is_free",
    "released",
    "renewed",
    "time_left_ms",
]

#: Where Hudi keeps a table's lock, relative to the table's base path.
LOCKS_FOLDER: Final = ".hoodie/.locks"
LOCK_FILE: Final = "table_lock.json"
#: Hudi's ``CLOCK_DRIFT_BUFFER_MS``.
DEFAULT_DRIFT_MS: Final = 500
#: Hudi's documents are under 100 bytes; anything far larger is not one.
MAX_DOCUMENT_BYTES: Final = 64 * 1024

# Java's long: what Jackson accepts for validUntil.
_LONG_MIN: Final = -(2**63)
_LONG_MAX: Final = 2**63 - 1


@attrs.frozen
class HudiLockData:
    """One state of Hudi's lock document (its ``StorageLockData``).

    :ivar expired: the holder released it (or an operator forced it free).
    :ivar valid_until_ms: epoch milliseconds, on the writer's wall clock, until which it is held.
    :ivar owner: the holder's id: a random UUID per Java lock provider, per lock object here.
    """

    expired: bool
    valid_until_ms: int
    owner: str


def encode(data: HudiLockData) -> bytes:
    """The bytes Hudi's Jackson mapper writes for ``data`` (compact, fields in creator order)."""
    body = json.dumps(
        {"expired": data.expired, "validUntil": data.valid_until_ms, "owner": data.owner},
        separators=(",", ":"),
        ensure_ascii=False,
    )
    return body.encode("utf-8")


def decode(raw: bytes, *, key: str) -> HudiLockData:
    """Hudi's document read as Hudi reads it: unknown fields ignored, the three fields required.

    :raises CorruptLease: not a JSON object, too large, or a field missing, null or mistyped
        (where Hudi's reader throws, so Java writers can't use the lock either).
    """
    if len(raw) > MAX_DOCUMENT_BYTES:
        raise CorruptLease(key, f"{len(raw)} bytes: not a Hudi lock document")
    try:
        doc = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise CorruptLease(key, f"not JSON ({exc.__class__.__name__})") from None
    if not isinstance(doc, dict):
        raise CorruptLease(key, "not a JSON object")
    for field in ("expired", "validUntil", "owner"):
        if field not in doc or doc[field] is None:
            raise CorruptLease(key, f"no {field!r} (Hudi requires it)")
    expired, valid_until, owner = doc["expired"], doc["validUntil"], doc["owner"]
    if not isinstance(expired, bool):
        raise CorruptLease(key, f"'expired' is not a boolean: {expired!r}")
    if isinstance(valid_until, bool) or not isinstance(valid_until, int):
        raise CorruptLease(key, f"'validUntil' is not an integer: {valid_until!r}")
    if not _LONG_MIN <= valid_until <= _LONG_MAX:
        raise CorruptLease(key, "'validUntil' is out of range")
    if not isinstance(owner, str):
        raise CorruptLease(key, f"'owner' is not a string: {owner!r}")
    return HudiLockData(expired, valid_until, owner)


def is_free(data: HudiLockData | None, now_ms: int, drift_ms: int = DEFAULT_DRIFT_MS) -> bool:
    """Hudi's rule: absent, released, or ``now`` certainly past ``validUntil`` (plus the drift)."""
    return data is None or data.expired or now_ms > data.valid_until_ms + drift_ms


def time_left_ms(data: HudiLockData, now_ms: int, drift_ms: int = DEFAULT_DRIFT_MS) -> int:
    """How long until Hudi's writers judge the lock free (0 when it is free now)."""
    if data.expired:
        return 0
    return max(0, data.valid_until_ms + drift_ms - now_ms + 1)


def acquired(owner: str, now_ms: int, validity_ms: int) -> HudiLockData:
    """What an acquire writes (Hudi's ``tryLock``)."""
    return HudiLockData(False, now_ms + validity_ms, owner)


def renewed(held: HudiLockData, now_ms: int, validity_ms: int) -> HudiLockData:
    """What a renewal writes (Hudi's ``renewLock``): a fresh ``validUntil``, never an earlier one.

    Hudi writes ``now + validity`` as it is; taking the later of that and the held value keeps a
    holder's lease from shrinking when its wall clock steps back.
    """
    return HudiLockData(False, max(held.valid_until_ms, now_ms + validity_ms), held.owner)


def released(held: HudiLockData) -> HudiLockData:
    """What a release writes (Hudi's ``tryExpireCurrentLock``): the held values, expired."""
    return HudiLockData(True, held.valid_until_ms, held.owner)


def forced(seen: HudiLockData) -> HudiLockData:
    """What a force unlock writes over the version the operator saw: that document, expired,
    its ``validUntil`` one millisecond short of the holder's.

    Keeping the owner records whose lock was ended; the holder's next renewal (``If-Match`` its
    own version) then fails, which Hudi's holder reads as "acquired by others". The millisecond
    tells a forced release from the holder's own (``released``: the held values, expired), which
    a holder reading back a write of unknown outcome would otherwise take for its own: ours then
    hears it lost the lock (``forced``), as a lease holder does. Hudi's readers ignore
    ``validUntil`` once ``expired`` is true.
    """
    until = seen.valid_until_ms
    return HudiLockData(True, until - 1 if until > _LONG_MIN else until + 1, seen.owner)
