"""The lease document: what one lock's JSON object holds, and its strict encoding.

One document per lock, never deleted by normal use (releasing marks it free, so the fencing
counter survives). Every write carries a fresh ``nonce``, so no two writes produce the same bytes
(S3 and fake-GCS ETags are content hashes: equal bytes would mean equal versions, an ABA hazard).

Times in the document are wall-clock seconds for people to read; no decision rests on them.
"""

from __future__ import annotations

import base64
import hashlib
import itertools
import json
import math
import os
import secrets
from typing import Any

import attrs

from prioritylock._errors import CorruptLease

__all__ = [
    "MAX_DOCUMENT_BYTES",
    "MAX_MESSAGE_CHARS",
    "MAX_OWNER_CHARS",
    "MAX_PRIORITY",
    "OVERRIDE_PRIORITY",
    "SCHEMA",
    "Event",
    "Holder",
    "Lease",
    "Requestor",
    "Reserve",
    "decode",
    "encode",
    "new_lock_id",
    "new_nonce",
]

SCHEMA = 1
MAX_DOCUMENT_BYTES = 64 * 1024
MAX_OWNER_CHARS = 256
MAX_MESSAGE_CHARS = 4096
#: The highest priority an ordinary client may use.
MAX_PRIORITY = 2_147_483_646
#: INT_MAX: reserved for the operators' emergency override.
OVERRIDE_PRIORITY = 2_147_483_647

#: Kinds of ``Event``: how the current holder got the lock (or how it was freed). Requests have
#: their own fields and leave the event alone, so a break-glass takeover stays on record.
EVENT_KINDS = frozenset(
    {
        "acquired",  # a free or absent lock was taken
        "expired_takeover",  # the holder's lease ran out and another client took over
        "handover",  # the holder finished cleanup and passed the lock to the requestor
        "preempted",  # a higher request took over at once (zero cleanup or waiting timeout)
        "forceful_takeover",  # a forceful requestor's wait ran out and it took the lock
        "override",  # the operators' emergency override (priority INT_MAX)
        "released",  # the holder released it
        "force_unlock",  # an operator freed it
    }
)


def new_nonce() -> str:
    """A nonce no other write (in any process) uses: a random per-process prefix and a counter.

    Nonces need to be unique, not secret; this costs a counter step instead of a system call.
    """
    return f"{_nonce_prefix}{next(_nonce_counter):x}"


def _reseed_nonces() -> None:
    global _nonce_prefix, _nonce_counter, _id_key, _id_counter
    _nonce_prefix = secrets.token_hex(12) + "-"
    _nonce_counter = itertools.count(1)
    _id_key = secrets.token_bytes(32)
    _id_counter = itertools.count(1)


_nonce_prefix = ""
_nonce_counter = itertools.count(1)
_id_key = b""
_id_counter = itertools.count(1)
_reseed_nonces()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reseed_nonces)


def new_lock_id() -> str:
    """A fresh, unguessable lock id (192 bits) for one acquisition.

    A keyed BLAKE2b of a counter under a 256-bit per-process secret key: a pseudorandom
    function, so ids can't be guessed without the key, at no system call per id.
    """
    digest = hashlib.blake2b(
        next(_id_counter).to_bytes(8, "little"), key=_id_key, digest_size=24
    ).digest()
    return base64.urlsafe_b64encode(digest).decode()


@attrs.frozen
class Holder:
    """Who holds the lock, on what terms (Helix's LockInfo holder fields)."""

    lock_id: str
    owner: str
    message: str
    priority: int
    lease_timeout: float
    cleanup_timeout: float
    forceful: bool
    acquired_at: float
    renewed_at: float
    #: Counts renewals of this holding; a waiter judges expiry by how long (lock_id, beat)
    #: stays unchanged, so requests written into the lease never extend a dead holder's life.
    beat: int = 0


@attrs.frozen
class Requestor:
    """The one pending higher-priority request, and the terms it would hold the lock on."""

    requestor_id: str
    owner: str
    message: str
    priority: int
    waiting_timeout: float
    forceful: bool
    requested_at: float
    lease_timeout: float
    cleanup_timeout: float


@attrs.frozen
class Event:
    """The last change of holder or request: kept so break-glass paths stay on record."""

    kind: str
    at: float
    by: str
    message: str = ""


@attrs.frozen
class Reserve:
    """Fences up to ``fence`` may be handed out by unsynced writes while the machine stays in
    boot ``boot`` (stores on one machine's disk only; see ``_reserve``)."""

    fence: int
    boot: str


@attrs.frozen
class Lease:
    """One lease document."""

    name: str
    fence: int
    nonce: str
    holder: Holder | None = None
    requestor: Requestor | None = None
    event: Event | None = None
    schema: int = SCHEMA
    reserve: Reserve | None = None

    def rewritten(self, **changes: Any) -> Lease:
        """A copy with ``changes`` and a fresh nonce: the only way the lock makes a new version.

        The fence reservation is carried over unchanged (only ``_reserve.plan_write`` sets it).
        """
        # Spelled out: attrs.evolve inspects the class on every call.
        return Lease(
            name=changes.get("name", self.name),
            fence=changes.get("fence", self.fence),
            nonce=new_nonce(),
            holder=changes.get("holder", self.holder),
            requestor=changes.get("requestor", self.requestor),
            event=changes.get("event", self.event),
            schema=self.schema,
            reserve=self.reserve,
        )

    def with_reserve(self, reserve: Reserve | None) -> Lease:
        """The same document (same nonce: not yet written) with another fence reservation."""
        return Lease(
            self.name,
            self.fence,
            self.nonce,
            self.holder,
            self.requestor,
            self.event,
            self.schema,
            reserve,
        )


def encode(lease: Lease) -> bytes:
    """The document's bytes: compact JSON, fields in a fixed order.

    Written out with f-strings (strings quoted by the json module's own C escaper): the generic
    encoder took a fifth of an uncontended acquire. ``test_lease`` checks the round trip.
    """
    h, r, e = lease.holder, lease.requestor, lease.event
    holder = (
        "null"
        if h is None
        else (
            f'{{"lock_id":{_q(h.lock_id)},"owner":{_q(h.owner)},"message":{_q(h.message)},'
            f'"priority":{_int(h.priority)},"lease_timeout":{_num(h.lease_timeout)},'
            f'"cleanup_timeout":{_num(h.cleanup_timeout)},"forceful":{_bool(h.forceful)},'
            f'"acquired_at":{_num(h.acquired_at)},"renewed_at":{_num(h.renewed_at)},'
            f'"beat":{_int(h.beat)}}}'
        )
    )
    requestor = (
        "null"
        if r is None
        else (
            f'{{"requestor_id":{_q(r.requestor_id)},"owner":{_q(r.owner)},"message":{_q(r.message)},'
            f'"priority":{_int(r.priority)},"waiting_timeout":{_num(r.waiting_timeout)},'
            f'"forceful":{_bool(r.forceful)},"requested_at":{_num(r.requested_at)},'
            f'"lease_timeout":{_num(r.lease_timeout)},"cleanup_timeout":{_num(r.cleanup_timeout)}}}'
        )
    )
    event = (
        "null"
        if e is None
        else (
            f'{{"kind":{_q(e.kind)},"at":{_num(e.at)},"by":{_q(e.by)},"message":{_q(e.message)}}}'
        )
    )
    v = lease.reserve  # written only when set: documents on the cloud stores never carry one
    reserve = "" if v is None else f',"reserve":{{"fence":{_int(v.fence)},"boot":{_q(v.boot)}}}'
    data = (
        f'{{"schema":{_int(lease.schema)},"name":{_q(lease.name)},"fence":{_int(lease.fence)},'
        f'"nonce":{_q(lease.nonce)},"holder":{holder},"requestor":{requestor},"event":{event}'
        f"{reserve}}}"
    ).encode()
    if len(data) > MAX_DOCUMENT_BYTES:
        raise CorruptLease(
            lease.name, f"document would be {len(data)} bytes (max {MAX_DOCUMENT_BYTES})"
        )
    return data


_q = json.encoder.encode_basestring_ascii  # a quoted, escaped, ASCII-only JSON string


def _num(value: float) -> str:
    # Exact class checks first: the common cases cost one comparison (bool is not int here).
    cls = value.__class__
    if (cls is float and math.isfinite(value)) or cls is int:
        return repr(value)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"not a finite number: {value!r}")
    return repr(float(value) if isinstance(value, float) else int(value))


def _int(value: int) -> str:
    if value.__class__ is int:
        return str(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"not an integer: {value!r}")
    return str(int(value))


def _bool(value: bool) -> str:
    return "true" if value else "false"


def decode(key: str, data: bytes, *, name: str | None = None) -> Lease:
    """Parse and validate a lease document read from ``key``.

    :param name: the lock name the document must carry; a document for another lock is foreign.
    :raises CorruptLease: too large, not JSON, an unknown schema, a foreign name, or missing or
        mistyped fields. The document is left untouched.
    """
    if len(data) > MAX_DOCUMENT_BYTES:
        raise CorruptLease(key, f"document is {len(data)} bytes (max {MAX_DOCUMENT_BYTES})")
    try:
        body = json.loads(data.decode("utf-8"), parse_constant=_reject_constant)
    except (UnicodeDecodeError, ValueError) as exc:
        raise CorruptLease(key, f"not a JSON document ({exc})") from exc
    if not isinstance(body, dict):
        raise CorruptLease(key, "not a JSON object")
    schema = body.get("schema")
    if schema != SCHEMA:
        raise CorruptLease(key, f"unknown schema {schema!r} (this library reads schema {SCHEMA})")
    reader = _Reader(key, body)
    lease_name = reader.text("name", limit=2048)
    if name is not None and lease_name != name:
        raise CorruptLease(key, f"document is for lock {lease_name!r}, not {name!r}")
    fence = reader.integer("fence")
    if fence < 0:
        raise CorruptLease(key, f"negative fence {fence}")
    lease = Lease(
        name=lease_name,
        fence=fence,
        nonce=reader.text("nonce", limit=128),
        holder=_holder(key, body.get("holder")),
        requestor=_requestor(key, body.get("requestor")),
        event=_event(key, body.get("event")),
        reserve=_reserve(key, body.get("reserve")),
    )
    if lease.holder is not None and fence == 0:
        raise CorruptLease(key, "a held lease must have a fence of at least 1")
    return lease


def _reject_constant(value: str) -> Any:
    raise ValueError(f"{value} is not allowed")


class _Reader:
    """Typed field access that turns every surprise into CorruptLease."""

    def __init__(self, key: str, body: dict[str, Any], where: str = "") -> None:
        self.key = key
        self.body = body
        self.where = where

    def _get(self, field: str) -> Any:
        if field not in self.body:
            raise CorruptLease(self.key, f"missing field {self.where}{field}")
        return self.body[field]

    def text(self, field: str, *, limit: int = MAX_MESSAGE_CHARS) -> str:
        value = self._get(field)
        if not isinstance(value, str) or len(value) > limit:
            raise CorruptLease(
                self.key, f"field {self.where}{field} must be a string of <= {limit} chars"
            )
        return value

    def integer(self, field: str) -> int:
        value = self._get(field)
        if isinstance(value, bool) or not isinstance(value, int):
            raise CorruptLease(self.key, f"field {self.where}{field} must be an integer")
        return value

    def number(self, field: str) -> float:
        value = self._get(field)
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not math.isfinite(value)
        ):
            raise CorruptLease(self.key, f"field {self.where}{field} must be a finite number")
        if value < 0:
            raise CorruptLease(self.key, f"field {self.where}{field} must not be negative")
        return float(value)

    def flag(self, field: str) -> bool:
        value = self._get(field)
        if not isinstance(value, bool):
            raise CorruptLease(self.key, f"field {self.where}{field} must be true or false")
        return value

    def priority(self, field: str) -> int:
        value = self.integer(field)
        if not 0 <= value <= OVERRIDE_PRIORITY:
            raise CorruptLease(self.key, f"field {self.where}{field} out of range: {value}")
        return value


def _section(key: str, value: Any, where: str) -> _Reader | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise CorruptLease(key, f"field {where} must be an object or null")
    return _Reader(key, value, where + ".")


def _holder(key: str, value: Any) -> Holder | None:
    r = _section(key, value, "holder")
    if r is None:
        return None
    return Holder(
        lock_id=r.text("lock_id", limit=128),
        owner=r.text("owner", limit=MAX_OWNER_CHARS),
        message=r.text("message"),
        priority=r.priority("priority"),
        lease_timeout=r.number("lease_timeout"),
        cleanup_timeout=r.number("cleanup_timeout"),
        forceful=r.flag("forceful"),
        acquired_at=r.number("acquired_at"),
        renewed_at=r.number("renewed_at"),
        beat=r.integer("beat"),
    )


def _requestor(key: str, value: Any) -> Requestor | None:
    r = _section(key, value, "requestor")
    if r is None:
        return None
    return Requestor(
        requestor_id=r.text("requestor_id", limit=128),
        owner=r.text("owner", limit=MAX_OWNER_CHARS),
        message=r.text("message"),
        priority=r.priority("priority"),
        waiting_timeout=r.number("waiting_timeout"),
        forceful=r.flag("forceful"),
        requested_at=r.number("requested_at"),
        lease_timeout=r.number("lease_timeout"),
        cleanup_timeout=r.number("cleanup_timeout"),
    )


def _reserve(key: str, value: Any) -> Reserve | None:
    r = _section(key, value, "reserve")
    if r is None:
        return None
    fence = r.integer("fence")
    if fence < 0:
        raise CorruptLease(key, f"negative reserve.fence {fence}")
    return Reserve(fence=fence, boot=r.text("boot", limit=64))


def _event(key: str, value: Any) -> Event | None:
    r = _section(key, value, "event")
    if r is None:
        return None
    kind = r.text("kind", limit=64)
    if kind not in EVENT_KINDS:
        raise CorruptLease(key, f"unknown event kind {kind!r}")
    return Event(
        kind=kind,
        at=r.number("at"),
        by=r.text("by", limit=MAX_OWNER_CHARS),
        message=r.text("message"),
    )
