"""The lease document: what one lock's JSON object holds, and its strict encoding.

One document per lock, never deleted by normal use (releasing marks it free, so the fencing
counter survives). Every write carries a fresh ``nonce``, so no two writes produce the same bytes
(S3 and fake-GCS ETags are content hashes: equal bytes would mean equal versions, an ABA hazard).

Times in the document are wall-clock seconds for people to read; no decision rests on them.
"""

from __future__ import annotations

import base64
import enum
import itertools
import json
import math
import os
import secrets
from typing import Any, Literal

import attrs

from prioritylock._errors import CorruptLease

__all__ = [
    "FIELDS",
    "MAX_DOCUMENT_BYTES",
    "MAX_LINE",
    "MAX_LINE_BYTES",
    "MAX_FENCE",
    "MAX_HINT_CHARS",
    "MAX_MESSAGE_CHARS",
    "MAX_OWNER_CHARS",
    "MAX_PRIORITY",
    "MAX_READ_FENCE",
    "OVERRIDE_PRIORITY",
    "SAME",
    "SCHEMA",
    "Entry",
    "Event",
    "Holder",
    "Lease",
    "Requestor",
    "Reserve",
    "Terms",
    "decode",
    "encode",
    "encode_line",
    "new_lock_id",
    "new_nonce",
    "salvage_fence",
]

SCHEMA = 1
MAX_DOCUMENT_BYTES = 64 * 1024
MAX_OWNER_CHARS = 256
MAX_MESSAGE_CHARS = 4096
#: The longest hint a lease records (``_hints``).
MAX_HINT_CHARS = 80
#: The highest priority an ordinary client may use.
MAX_PRIORITY = 2_147_483_646
#: INT_MAX: reserved for the operators' emergency override.
OVERRIDE_PRIORITY = 2_147_483_647
#: The largest fence ever written: every fence fits a signed 64-bit column (a database BIGINT).
MAX_FENCE = 2**63 - 1
#: The largest fence a reader accepts. The room above it (2**16 fences) means every document
#: that reads can still take new holders and a ``LocalStore`` fence reservation without the
#: encoder ever passing ``MAX_FENCE``; a document past it is corrupt, and recoverable.
MAX_READ_FENCE = MAX_FENCE - 2**16
#: The most entries a lock's line of waiters holds (``Lease.line``); a waiter that finds it full
#: waits unlined, polling, and joins when there is room.
MAX_LINE = 32
#: The most bytes the line's JSON may take in the document: 32 typical entries (about 200 bytes
#: each) fit several times over; a join past it counts as a full line.
MAX_LINE_BYTES = 16 * 1024
#: Documents larger than this are not parsed even to salvage their fence.
_SALVAGE_MAX_BYTES = 16 * MAX_DOCUMENT_BYTES

#: How the current holder got the lock (or how it was freed).
EventKind = Literal[
    "acquired",
    "expired_takeover",
    "handover",
    "preempted",
    "forceful_takeover",
    "override",
    "released",
    "force_unlock",
]

#: Kinds of ``Event``: how the current holder got the lock (or how it was freed). Requests have
#: their own fields and leave the event alone, so a break-glass takeover stays on record.
EVENT_KINDS: frozenset[str] = frozenset(
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
    global _nonce_prefix, _nonce_counter
    _nonce_prefix = secrets.token_hex(12) + "-"
    _nonce_counter = itertools.count(1)
    _ids.clear()  # a forked child never hands out its parent's ids


_nonce_prefix = ""
_nonce_counter = itertools.count(1)
#: Lock ids made ahead, from one system call per :data:`_ID_BATCH` (``new_lock_id``).
_ids: list[str] = []
_ID_BATCH = 256
_reseed_nonces()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reseed_nonces)


def new_lock_id() -> str:
    """A fresh, unguessable lock id (192 bits) for one acquisition: 24 bytes from the system's
    random source (``os.urandom``), in unpadded URL-safe base64 (32 characters).

    Each id is its own random bytes, so no id says anything of another. They are drawn
    :data:`_ID_BATCH` at a time (one system call, one base64 pass: 24 bytes make exactly 32
    characters, so the batch's text is the ids side by side), a third of the cost of one
    id per call; a forked child draws its own.
    """
    try:
        return _ids.pop()  # (atomic: threads that share the batch never share an id)
    except IndexError:
        text = base64.urlsafe_b64encode(os.urandom(24 * _ID_BATCH)).decode()
        _ids.extend([text[at : at + 32] for at in range(0, 32 * _ID_BATCH, 32)])
        return _ids.pop()


# _made: the classes made on every acquire and release (``Holder``, ``Event``, ``Lease``) are
# slotted ``attrs.define``, not frozen: a frozen class sets each field through
# ``object.__setattr__`` (a ten-field ``Lease`` cost 2.6 µs against 0.9). Nothing changes a lease
# once made (``Lease.rewritten`` makes a new one); being mutable, they are not hashable.


@attrs.define  # made on every cycle: see _made
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
    #: Where the holder hears hints (``_hints``: ``HOST:PORT/TOKEN``); None: it polls only.
    hint: str | None = None


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
    #: Where the requestor hears hints (``_hints``); None: it polls only.
    hint: str | None = None


@attrs.define  # made on every cycle: see _made
class Event:
    """The last change of holder or request: kept so break-glass paths stay on record."""

    kind: EventKind
    at: float
    by: str
    message: str = ""


@attrs.frozen
class Entry:
    """One waiter in the lock's line (``Lease.line``): who waits, at what priority, since when
    (its wall clock, for display), and how it shows it is alive: it rewrites ``beat`` (one
    more) at least every ``ttl`` seconds; a reader that sees ``(entry_id, beat)`` unchanged for
    ``ttl`` plus its drift allowance, on its own clock, judges the waiter gone."""

    entry_id: str
    owner: str
    priority: int
    since: float
    ttl: float
    beat: int = 0
    #: Where the waiter hears a hint (``"HOST:PORT/TOKEN"``), recorded as given; None: polls.
    hint: str | None = None

    @property
    def ident(self) -> str:
        """What a reader sights to judge the entry alive: its id and beat."""
        return f"{self.entry_id}#{self.beat}"


@attrs.frozen
class Reserve:
    """Fences up to ``fence`` may be handed out by unsynced writes while the machine stays in
    boot ``boot`` (stores on one machine's disk only; see ``_reserve``)."""

    fence: int
    boot: str


class _Same(enum.Enum):
    """The type of :data:`SAME`."""

    SAME = "same"


#: "Unchanged", for :meth:`Lease.rewritten`'s fields.
SAME = _Same.SAME


@attrs.define  # made on every cycle: see _made
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
    #: The nonce of the free document the current holder took the lock from: it proves that
    #: the release (or force unlock) which wrote that document landed, even once the releasing
    #: holder's own answer was lost. None when the lock was taken from a holder, or created.
    prior: str | None = None
    #: The line of waiters, in the order they take the lock (priority, then the order their
    #: joins landed). Empty when nobody waits; an older client drops it when it rewrites.
    line: tuple[Entry, ...] = ()

    def rewritten(
        self,
        *,
        name: str | _Same = SAME,
        fence: int | _Same = SAME,
        holder: Holder | _Same | None = SAME,
        requestor: Requestor | _Same | None = SAME,
        event: Event | _Same | None = SAME,
        prior: str | _Same | None = SAME,
        line: tuple[Entry, ...] | _Same = SAME,
    ) -> Lease:
        """A copy with the fields given changed and a fresh nonce: the only way the lock makes
        a new version.

        The fence reservation is carried over unchanged (only ``_reserve.plan_write`` sets it).
        """
        # Spelled out: attrs.evolve inspects the class on every call (and keyword parameters
        # with a marker for "unchanged" cost less than a dict of changes).
        return Lease(
            self.name if name is SAME else name,
            self.fence if fence is SAME else fence,
            new_nonce(),
            self.holder if holder is SAME else holder,
            self.requestor if requestor is SAME else requestor,
            self.event if event is SAME else event,
            self.schema,
            self.reserve,
            self.prior if prior is SAME else prior,
            self.line if line is SAME else line,
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
            self.prior,
            self.line,
        )


class Terms:
    """One lock object's own constant fields (its owner, message, priority, timeouts), written
    out once: :func:`encode` takes their text from here for a holder (or event) made of these
    very objects, rather than quote and check them on every write."""

    __slots__ = (
        "by",
        "cleanup_timeout",
        "forceful",
        "held",
        "lease_timeout",
        "message",
        "owner",
        "priority",
    )

    def __init__(
        self,
        owner: str,
        message: str,
        *,
        priority: int,
        lease_timeout: float,
        cleanup_timeout: float,
        forceful: bool,
    ) -> None:
        self.owner, self.message, self.priority = owner, message, priority
        self.lease_timeout, self.cleanup_timeout = lease_timeout, cleanup_timeout
        self.forceful = forceful
        lt, ct, priority = _num(lease_timeout), _num(cleanup_timeout), _int(priority)
        #: The holder's fields from ``owner`` to ``forceful``, as :func:`encode` writes them.
        self.held = (
            f'"owner":{_q(owner)},"message":{_q(message)},"priority":{priority!r},'
            f'"lease_timeout":{lt!r},"cleanup_timeout":{ct!r},'
            f'"forceful":{"true" if forceful else "false"}'
        )
        #: An event's ``by`` and ``message``, when they are ``owner`` and ``message``.
        self.by = f'"by":{_q(owner)},"message":{_q(message)}'

    def holds(self, h: Holder) -> bool:
        """Whether ``h``'s constant fields are these very objects (so their text is ours)."""
        return (
            h.owner is self.owner
            and h.message is self.message
            and h.priority is self.priority
            and h.lease_timeout is self.lease_timeout
            and h.cleanup_timeout is self.cleanup_timeout
            and h.forceful is self.forceful
        )


def encode(lease: Lease, terms: Terms | None = None) -> bytes:
    """The document's bytes: compact JSON, fields in a fixed order.

    Written out with f-strings (strings quoted by the json module's own C escaper, numbers by
    ``repr``): the generic encoder took a fifth of an uncontended acquire. Each section's
    numbers are checked in one call (:func:`_numbers`: finite, of their exact kinds) and only
    converted one by one when that fails. ``terms``: the writing lock object's own fields,
    written out once (:class:`Terms`): the same bytes, fewer steps. ``test_lease`` checks the
    round trip, and that ``terms`` changes no byte.

    :raises ValueError: a number that JSON can't carry (not finite, not a number).
    :raises CorruptLease: a fence beyond :data:`MAX_FENCE`, or a document over the size limit.
    """
    if terms is not None:
        own = _encode_own(lease, terms)
        if own is not None:
            return own
    h, r, e = lease.holder, lease.requestor, lease.event
    # A wall-clock time's repr is the slowest part (a microsecond on a slow machine), and one
    # time often stands for several fields (an acquire's, its renewals' event): the same float
    # object is written out once.
    at: float | None = None
    rt: float | None = None
    acquired = renewed = ""
    if h is None:
        holder = "null"
    elif terms is not None and terms.holds(h):
        at, rt, beat = h.acquired_at, h.renewed_at, h.beat
        if not _numbers(at, rt, ints=(beat,)):
            at, rt, beat = _num(at), _num(rt), _int(beat)
        acquired = repr(at)
        renewed = acquired if rt is at else repr(rt)
        hint = "" if h.hint is None else _hint(h.hint)
        holder = (
            f'{{"lock_id":{_q(h.lock_id)},{terms.held},"acquired_at":{acquired},'
            f'"renewed_at":{renewed},"beat":{beat}{hint}}}'
        )
    else:
        lt, ct, at, rt = h.lease_timeout, h.cleanup_timeout, h.acquired_at, h.renewed_at
        priority, beat = h.priority, h.beat
        if not _numbers(lt, ct, at, rt, ints=(priority, beat)):
            lt, ct, at, rt = _num(lt), _num(ct), _num(at), _num(rt)
            priority, beat = _int(priority), _int(beat)
        hint = "" if h.hint is None else _hint(h.hint)
        acquired = repr(at)
        renewed = acquired if rt is at else repr(rt)
        holder = (
            f'{{"lock_id":{_q(h.lock_id)},"owner":{_q(h.owner)},"message":{_q(h.message)},'
            f'"priority":{priority},"lease_timeout":{lt!r},"cleanup_timeout":{ct!r},'
            f'"forceful":{"true" if h.forceful else "false"},"acquired_at":{acquired},'
            f'"renewed_at":{renewed},"beat":{beat}{hint}}}'
        )
    if r is None:
        requestor = "null"
    else:
        wt, qt, lt, ct = r.waiting_timeout, r.requested_at, r.lease_timeout, r.cleanup_timeout
        priority = r.priority
        if not _numbers(wt, qt, lt, ct, ints=(priority,)):
            wt, qt, lt, ct, priority = _num(wt), _num(qt), _num(lt), _num(ct), _int(priority)
        requestor = (
            f'{{"requestor_id":{_q(r.requestor_id)},"owner":{_q(r.owner)},'
            f'"message":{_q(r.message)},"priority":{priority},"waiting_timeout":{wt!r},'
            f'"forceful":{"true" if r.forceful else "false"},"requested_at":{qt!r},'
            f'"lease_timeout":{lt!r},"cleanup_timeout":{ct!r}{_hint(r.hint)}}}'
        )
    if e is None:
        event = "null"
    else:
        when = e.at
        if when is at or when is rt:
            when_text = acquired if when is at else renewed
        else:
            finite = when.__class__ is float and when - when == 0.0
            when_text = repr(when if finite else _num(when))
        if terms is not None and e.by is terms.owner and e.message is terms.message:
            by = terms.by
        else:
            by = f'"by":{_q(e.by)},"message":{_q(e.message)}'
        event = f'{{"kind":{_q(e.kind)},"at":{when_text},{by}}}'
    v = lease.reserve  # written only when set: documents on the cloud stores never carry one
    if not 0 <= lease.fence <= MAX_FENCE or (v is not None and not 0 <= v.fence <= MAX_FENCE):
        raise CorruptLease(lease.name, f"fence beyond the largest one ({MAX_FENCE})")
    reserve = "" if v is None else f',"reserve":{{"fence":{_int(v.fence)!r},"boot":{_q(v.boot)}}}'
    prior = "" if lease.prior is None else f',"prior":{_q(lease.prior)}'
    line = f',"line":{encode_line(lease.line)}' if lease.line else ""  # written only when set
    schema, fence = lease.schema, lease.fence
    if schema.__class__ is not int or fence.__class__ is not int:
        schema, fence = _int(schema), _int(fence)
    data = (
        f'{{"schema":{schema},"name":{_q(lease.name)},"fence":{fence},'
        f'"nonce":{_q(lease.nonce)},"holder":{holder},"requestor":{requestor},"event":{event}'
        f"{reserve}{prior}{line}}}"
    ).encode()
    if len(data) > MAX_DOCUMENT_BYTES:
        raise CorruptLease(
            lease.name, f"document would be {len(data)} bytes (max {MAX_DOCUMENT_BYTES})"
        )
    return data


def _encode_own(lease: Lease, terms: Terms) -> bytes | None:
    """:func:`encode`, in one piece, for the shape of every uncontended write of a lock object:
    no request, no line, the event its own (``terms``'), and its holder (if any) made of its
    own fields, with the event's time one of the holder's. None for any other shape (or any
    value :func:`encode` would convert or refuse), which ``encode`` then writes field by field:
    the bytes are the same either way (``test_lease``)."""
    e = lease.event
    if (
        e is None
        or lease.requestor is not None
        or lease.line
        or e.by is not terms.owner
        or e.message is not terms.message
    ):
        return None
    fence, schema, v = lease.fence, lease.schema, lease.reserve
    if fence.__class__ is not int or not 0 <= fence <= MAX_FENCE or schema.__class__ is not int:
        return None
    if v is None:
        reserve = ""
    elif v.fence.__class__ is int and 0 <= v.fence <= MAX_FENCE:
        reserve = f',"reserve":{{"fence":{v.fence!r},"boot":{_q(v.boot)}}}'
    else:
        return None
    h, when = lease.holder, e.at
    if h is None:
        if when.__class__ is not float or when - when != 0.0:
            return None
        holder, at = "null", repr(when)
    else:
        acquired_at, renewed_at, beat = h.acquired_at, h.renewed_at, h.beat
        if not terms.holds(h) or not _numbers(acquired_at, renewed_at, ints=(beat,)):
            return None
        acquired = repr(acquired_at)
        renewed = acquired if renewed_at is acquired_at else repr(renewed_at)
        if when is acquired_at:
            at = acquired
        elif when is renewed_at:
            at = renewed
        else:
            return None
        hint = "" if h.hint is None else _hint(h.hint)
        holder = (
            f'{{"lock_id":{_q(h.lock_id)},{terms.held},"acquired_at":{acquired},'
            f'"renewed_at":{renewed},"beat":{beat}{hint}}}'
        )
    prior = "" if lease.prior is None else f',"prior":{_q(lease.prior)}'
    data = (
        f'{{"schema":{schema},"name":{_q(lease.name)},"fence":{fence},'
        f'"nonce":{_q(lease.nonce)},"holder":{holder},"requestor":null,'
        f'"event":{{"kind":{_q(e.kind)},"at":{at},{terms.by}}}{reserve}{prior}}}'
    ).encode()
    return data if len(data) <= MAX_DOCUMENT_BYTES else None


def encode_line(line: tuple[Entry, ...]) -> str:
    """The line's JSON array (its size is what :data:`MAX_LINE_BYTES` bounds)."""
    return (
        "["
        + ",".join(
            f'{{"entry_id":{_q(e.entry_id)},"owner":{_q(e.owner)},"priority":{_int(e.priority)!r},'
            f'"since":{_num(e.since)!r},"ttl":{_num(e.ttl)!r},"beat":{_int(e.beat)!r},'
            f'"hint":{"null" if e.hint is None else _q(e.hint)}}}'
            for e in line
        )
        + "]"
    )


_q = json.encoder.encode_basestring_ascii  # a quoted, escaped, ASCII-only JSON string


def _numbers(*floats: float, ints: tuple[int, ...]) -> bool:
    """Whether ``floats`` are all finite floats (or ints) and ``ints`` all ints, exactly (not
    bool): then ``repr`` writes them as JSON. One call for a section's numbers."""
    for value in floats:
        cls = value.__class__
        if not ((cls is float and value - value == 0.0) or cls is int):
            return False
    for value in ints:  # noqa: SIM110 (not all() of a generator: four calls per section)
        if value.__class__ is not int:
            return False
    return True


def _num(value: float) -> float:
    """``value`` as a number JSON can carry (its ``repr`` is the JSON), or ValueError."""
    cls = value.__class__
    if (cls is float and math.isfinite(value)) or cls is int:
        return value
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"not a finite number: {value!r}")
    return float(value) if isinstance(value, float) else int(value)


def _int(value: int) -> int:
    """``value`` as an integer JSON can carry, or ValueError."""
    if value.__class__ is int:
        return value
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"not an integer: {value!r}")
    return int(value)


def _hint(value: str | None) -> str:
    # Written only when set: a lease without hints is byte for byte what older clients wrote.
    return "" if value is None else f',"hint":{_q(value)}'


def decode(key: str, data: bytes, *, name: str | None = None) -> Lease:
    """Parse and validate a lease document read from ``key``.

    Every field is checked against :data:`FIELDS`, its exact JSON type first (``true`` is not
    a number here, nor ``1.0`` an integer), then its range.

    :param name: the lock name the document must carry; a document for another lock is foreign.
    :raises CorruptLease: too large, not JSON (nested too deeply included), an unknown schema, a
        foreign name, or missing or mistyped fields. The document is left untouched.
    """
    body = _parse(key, data)
    schema = body.get("schema")
    if schema.__class__ is not int or schema != SCHEMA:
        raise CorruptLease(
            key, f"unknown schema {_show(schema)} (this library reads schema {SCHEMA})"
        )
    lease_name, fence, nonce = _fields(key, body, "", FIELDS[""])
    if name is not None and lease_name != name:
        raise CorruptLease(key, f"document is for lock {lease_name!r}, not {name!r}")
    lease = Lease(
        name=lease_name,
        fence=fence,
        nonce=nonce,
        holder=_section(key, body, "holder", Holder),
        requestor=_section(key, body, "requestor", Requestor),
        event=_section(key, body, "event", Event),
        reserve=_section(key, body, "reserve", Reserve, optional=True),
        prior=_optional_text(key, body, "prior", _ID),
        line=_line(key, body),
    )
    if lease.holder is not None and fence == 0:
        raise CorruptLease(key, "a held lease must have a fence of at least 1")
    return lease


def salvage_fence(data: bytes) -> int:
    """The fence of a document :func:`decode` refuses, if it can still be read; else 0.

    For replacing a corrupt document with a fence above the old one. Never raises: anything
    unreadable (not JSON, nested too deeply, no ``fence``, a mistyped one, one whose successor
    would be out of the readable range) gives 0.
    """
    if len(data) > _SALVAGE_MAX_BYTES:
        return 0
    try:
        body = json.loads(data.decode("utf-8", "replace"), parse_constant=_reject_constant)
        value = body.get("fence") if body.__class__ is dict else None
    except Exception:  # RecursionError and MemoryError included: salvage is best effort
        return 0
    # Below the readable bound, so the overwrite's fence (at least this + 1) reads back.
    return value if value.__class__ is int and 0 < value < MAX_READ_FENCE else 0


def _parse(key: str, data: bytes) -> dict[str, Any]:
    if len(data) > MAX_DOCUMENT_BYTES:
        raise CorruptLease(key, f"document is {len(data)} bytes (max {MAX_DOCUMENT_BYTES})")
    try:
        body = json.loads(data.decode("utf-8"), parse_constant=_reject_constant)
    except RecursionError as exc:
        # The json module recurses once per nesting level: a few KB of brackets exhaust the stack.
        raise CorruptLease(key, "not a JSON document (nested too deeply)") from exc
    except (UnicodeDecodeError, ValueError) as exc:
        raise CorruptLease(key, f"not a JSON document ({exc})") from exc
    if body.__class__ is not dict:
        raise CorruptLease(key, "not a JSON object")
    return body


def _reject_constant(value: str) -> Any:
    raise ValueError(f"{value} is not allowed")


# -- the field table ----------------------------------------------------------------------------
# One place says what every field may hold. A kind is checked on the value's exact class (JSON's
# true/false decode to bool, a subclass of int, and 1.0 to float: neither is an integer here).


class _Text:
    __slots__ = ("limit",)

    def __init__(self, limit: int) -> None:
        self.limit = limit

    def want(self) -> str:
        return f"a string of <= {self.limit} chars"


class _Int:
    __slots__ = ("high", "low")

    def __init__(self, low: int, high: int) -> None:
        self.low = low
        self.high = high

    def want(self) -> str:
        return f"an integer from {self.low} to {self.high}"


class _Number:
    __slots__ = ()

    def want(self) -> str:
        return "a finite number >= 0"


class _Flag:
    __slots__ = ()

    def want(self) -> str:
        return "true or false"


class _Choice:
    __slots__ = ("values",)

    def __init__(self, values: frozenset[str]) -> None:
        self.values = values

    def want(self) -> str:
        return "one of " + ", ".join(sorted(self.values))


class _Optional:
    """A field that may be absent (or null: None). ``lenient``: a value of the wrong kind is
    read as None rather than making the document corrupt (for advisory fields, which decide
    nothing: a value another version wrote must never stop the lock)."""

    __slots__ = ("kind", "lenient")

    def __init__(self, kind: _Text | _Int | _Number | _Flag | _Choice, *, lenient: bool) -> None:
        self.kind = kind
        self.lenient = lenient

    def want(self) -> str:
        return self.kind.want() + " or null"


_Kind = _Text | _Int | _Number | _Flag | _Choice | _Optional

_NUMBER = _Number()
_FLAG = _Flag()
_ID = _Text(128)
_OWNER = _Text(MAX_OWNER_CHARS)
_MESSAGE = _Text(MAX_MESSAGE_CHARS)
_PRIORITY = _Int(0, OVERRIDE_PRIORITY)
_FENCE = _Int(0, MAX_READ_FENCE)
#: A hint (``_hints``: ``HOST:PORT/TOKEN``, at most 80 chars). Advisory: anything else recorded
#: there (another version's format, a wrong type) is read as no hint, never as a corrupt lease.
_HINT = _Optional(_Text(MAX_HINT_CHARS), lenient=True)

#: Every field of the document, by section ("" is the top level), in the order of the attrs
#: class it fills. ``schema`` is checked first, on its own, to name an unknown version.
FIELDS: dict[str, tuple[tuple[str, _Kind], ...]] = {
    "": (("name", _Text(2048)), ("fence", _FENCE), ("nonce", _ID)),
    "holder": (
        ("lock_id", _ID),
        ("owner", _OWNER),
        ("message", _MESSAGE),
        ("priority", _PRIORITY),
        ("lease_timeout", _NUMBER),
        ("cleanup_timeout", _NUMBER),
        ("forceful", _FLAG),
        ("acquired_at", _NUMBER),
        ("renewed_at", _NUMBER),
        ("beat", _Int(0, MAX_FENCE)),
        ("hint", _HINT),
    ),
    "requestor": (
        ("requestor_id", _ID),
        ("owner", _OWNER),
        ("message", _MESSAGE),
        ("priority", _PRIORITY),
        ("waiting_timeout", _NUMBER),
        ("forceful", _FLAG),
        ("requested_at", _NUMBER),
        ("lease_timeout", _NUMBER),
        ("cleanup_timeout", _NUMBER),
        ("hint", _HINT),
    ),
    "event": (
        ("kind", _Choice(EVENT_KINDS)),
        ("at", _NUMBER),
        ("by", _OWNER),
        ("message", _MESSAGE),
    ),
    "reserve": (("fence", _FENCE), ("boot", _Text(64))),
    "line": (
        ("entry_id", _ID),
        ("owner", _OWNER),
        ("priority", _PRIORITY),
        ("since", _NUMBER),
        ("ttl", _NUMBER),
        ("beat", _Int(0, MAX_FENCE)),
        ("hint", _HINT),
    ),
}


def _fields(
    key: str, body: dict[str, Any], where: str, spec: tuple[tuple[str, _Kind], ...]
) -> list[Any]:
    """The values of ``spec``'s fields in ``body``, each checked, in order."""
    values: list[Any] = []
    for field, wanted in spec:
        kind = wanted
        optional = wanted if wanted.__class__ is _Optional else None
        if optional is not None:
            assert isinstance(optional, _Optional)
            value = body.get(field)
            if value is None:
                values.append(None)
                continue
            kind = optional.kind
        else:
            try:
                value = body[field]
            except KeyError:
                raise CorruptLease(key, f"missing field {where}{field}") from None
        cls = value.__class__
        if kind.__class__ is _Text:
            ok = cls is str and len(value) <= kind.limit
        elif kind is _NUMBER:
            ok = ((cls is float and math.isfinite(value)) or cls is int) and value >= 0
            value = float(value) if ok else value
        elif kind.__class__ is _Int:
            ok = cls is int and kind.low <= value <= kind.high
        elif kind is _FLAG:
            ok = cls is bool
        else:
            assert isinstance(kind, _Choice)
            ok = cls is str and value in kind.values
        if not ok:
            if optional is not None and optional.lenient:
                values.append(None)
                continue
            raise CorruptLease(
                key, f"field {where}{field} must be {wanted.want()}, not {_show(value)}"
            )
        values.append(value)
    return values


def _section(
    key: str, body: dict[str, Any], where: str, cls: type[Any], *, optional: bool = False
) -> Any:
    """The section ``where`` as a ``cls``, or None when it is null (or, if optional, absent)."""
    if where not in body and not optional:
        raise CorruptLease(key, f"missing field {where}")
    value = body.get(where)
    if value is None:
        return None
    if value.__class__ is not dict:
        raise CorruptLease(key, f"field {where} must be an object or null, not {_show(value)}")
    return cls(*_fields(key, value, where + ".", FIELDS[where]))


def _line(key: str, body: dict[str, Any]) -> tuple[Entry, ...]:
    """The optional ``line``: absent or null is empty; at most :data:`MAX_LINE` entries."""
    value = body.get("line")
    if value is None:
        return ()
    if value.__class__ is not list or len(value) > MAX_LINE:
        raise CorruptLease(
            key, f"field line must be an array of <= {MAX_LINE} entries, not {_show(value)}"
        )
    entries = []
    for item in value:
        if item.__class__ is not dict:
            raise CorruptLease(key, f"field line must hold objects, not {_show(item)}")
        entry_id, owner, priority, since, ttl, beat, hint = _fields(
            key, item, "line.", FIELDS["line"]
        )
        entries.append(Entry(entry_id, owner, priority, since, ttl, beat, hint))
    return tuple(entries)


def _optional_text(
    key: str, body: dict[str, Any], field: str, kind: _Text, where: str = ""
) -> str | None:
    """An optional string field: absent or null is None."""
    value = body.get(field)
    if value is None:
        return None
    if value.__class__ is not str or len(value) > kind.limit:
        raise CorruptLease(
            key, f"field {where}{field} must be {kind.want()} or null, not {_show(value)}"
        )
    return str(value)


def _show(value: Any) -> str:
    """A short description of a JSON value for an error message (never the whole of it)."""
    if value is None:
        return "null"
    if value.__class__ is bool:
        return "true" if value else "false"
    if value.__class__ is dict:
        return "an object"
    if value.__class__ is list:
        return "an array"
    text = repr(value) if value.__class__ is not int or abs(value) < 10**30 else "a huge integer"
    return text if len(text) <= 40 else text[:37] + "..."
