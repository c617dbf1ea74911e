"""The lease document: encode/decode round trip, fresh nonces, and strict decoding."""

from __future__ import annotations

import json
import math
import string
from typing import Any

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from prioritylock import CorruptLease, _lease
from prioritylock._lease import (
    EVENT_KINDS,
    FIELDS,
    MAX_DOCUMENT_BYTES,
    MAX_FENCE,
    MAX_LINE,
    MAX_READ_FENCE,
    OVERRIDE_PRIORITY,
    Entry,
    Event,
    Holder,
    Lease,
    Requestor,
    Reserve,
    Terms,
    decode,
    encode,
    new_lock_id,
    new_nonce,
    salvage_fence,
)

pytestmark = pytest.mark.timeout(60)

_URLSAFE_CHARS = set(string.ascii_letters + string.digits + "-_")

texts = st.text(max_size=40)
times = st.floats(0, 2e9, allow_nan=False)
priorities = st.integers(0, OVERRIDE_PRIORITY)

holders = st.builds(
    Holder,
    lock_id=st.text(min_size=1, max_size=64),
    owner=texts,
    message=texts,
    priority=priorities,
    lease_timeout=times,
    cleanup_timeout=times,
    forceful=st.booleans(),
    acquired_at=times,
    renewed_at=times,
    beat=st.integers(0, 10**9),
)
requestors = st.builds(
    Requestor,
    requestor_id=st.text(min_size=1, max_size=64),
    owner=texts,
    message=texts,
    priority=priorities,
    waiting_timeout=times,
    forceful=st.booleans(),
    requested_at=times,
    lease_timeout=times,
    cleanup_timeout=times,
)
events = st.builds(
    Event, kind=st.sampled_from(sorted(EVENT_KINDS)), at=times, by=texts, message=texts
)


entries = st.builds(
    Entry,
    entry_id=st.text(min_size=1, max_size=64),
    owner=texts,
    priority=priorities,
    since=times,
    ttl=times,
    beat=st.integers(0, 10**9),
    hint=st.none() | texts,
)


@given(
    holder=st.none() | holders,
    requestor=st.none() | requestors,
    event=st.none() | events,
    fence=st.integers(1, 2**62),
    line=st.lists(entries, max_size=4).map(tuple),
)
def test_round_trip(
    holder: Holder | None,
    requestor: Requestor | None,
    event: Event | None,
    fence: int,
    line: tuple[Entry, ...],
) -> None:
    lease = Lease("v1/path/x", fence, new_nonce(), holder, requestor, event, line=line)
    assert decode("k", encode(lease), name="v1/path/x") == lease


@given(holder=holders, event=events, ours=st.booleans())
def test_a_lock_objects_own_terms_change_no_byte(holder: Holder, event: Event, ours: bool) -> None:
    # The encoder writes a holder (and an event) made of the lock object's own fields from the
    # text it wrote out once (``Terms``): the bytes must be the ones written field by field.
    terms = Terms(
        holder.owner,
        holder.message,
        priority=holder.priority,
        lease_timeout=holder.lease_timeout,
        cleanup_timeout=holder.cleanup_timeout,
        forceful=holder.forceful,
    )
    if ours:
        event = attrs.evolve(event, by=holder.owner, message=holder.message)
    lease = Lease("v1/path/x", 3, new_nonce(), holder, None, event)
    assert terms.holds(holder)
    assert encode(lease, terms) == encode(lease)


@given(
    holder=st.none() | holders,
    owner=texts,
    message=texts,
    kind=st.sampled_from(sorted(EVENT_KINDS)),
    when=st.sampled_from(["acquired_at", "renewed_at", "own"]),
    hint=st.none() | st.text(min_size=1, max_size=40),
    prior=st.none() | texts,
    reserve=st.none() | st.builds(Reserve, fence=st.integers(1, 2**62), boot=texts),
    fence=st.integers(1, 2**62),
)
def test_a_lock_objects_own_writes_are_written_in_one_piece_with_the_same_bytes(
    holder: Holder | None,
    owner: str,
    message: str,
    kind: Any,
    when: str,
    hint: str | None,
    prior: str | None,
    reserve: Reserve | None,
    fence: int,
) -> None:
    # The shape of every uncontended write (``_lease._encode_own``): no request, no line, the
    # writer's own event at one of its holder's times (or any time, for a free lock).
    if holder is not None:
        holder = attrs.evolve(holder, hint=hint)
        owner, message = holder.owner, holder.message
    terms = Terms(
        owner,
        message,
        priority=1 if holder is None else holder.priority,
        lease_timeout=30.0 if holder is None else holder.lease_timeout,
        cleanup_timeout=10.0 if holder is None else holder.cleanup_timeout,
        forceful=False if holder is None else holder.forceful,
    )
    at = 1.5 if holder is None or when == "own" else getattr(holder, when)
    event = Event(kind, at, owner, message)
    lease = Lease("v1/path/x", fence, new_nonce(), holder, None, event, prior=prior)
    lease = lease.with_reserve(reserve)
    own = _lease._encode_own(lease, terms)
    if holder is None or when != "own":
        assert own is not None
    assert encode(lease, terms) == encode(lease)
    assert decode("k", encode(lease, terms), name="v1/path/x") == lease


def test_equal_terms_of_another_kind_are_written_as_they_are() -> None:
    # 30 == 30.0 and 1 == True, but they are written "30", "30.0", "1", "true": only the very
    # objects the terms were written from take their text.
    terms = Terms("o", "m", priority=1, lease_timeout=30.0, cleanup_timeout=10.0, forceful=False)
    holder = Holder("id", "o", "m", 1, 30, 10.0, False, 5.0, 5.0)
    assert not terms.holds(holder)
    lease = Lease("v1/path/x", 3, new_nonce(), holder, None, None)
    assert encode(lease, terms) == encode(lease)
    assert b'"lease_timeout":30,' in encode(lease, terms)


def test_every_rewrite_has_a_new_nonce_and_new_bytes() -> None:
    lease = Lease("v1/path/x", 1, new_nonce())
    again = lease.rewritten()
    assert again.nonce != lease.nonce
    assert encode(again) != encode(lease)
    assert len({new_nonce() for _ in range(10_000)}) == 10_000


def test_a_held_lease_with_fence_zero_is_corrupt() -> None:
    h = Holder("id", "o", "", 0, 1.0, 1.0, False, 0.0, 0.0, 0)
    data = encode(attrs.evolve(Lease("n", 0, "x"), holder=h))
    with pytest.raises(CorruptLease, match="fence"):
        decode("k", data)


def test_unknown_event_kind_is_corrupt() -> None:
    data = encode(Lease("n", 1, "x", event=Event("acquired", 0.0, "a"))).replace(
        b'"acquired"', b'"teleported"'
    )
    with pytest.raises(CorruptLease, match=r"event\.kind"):
        decode("k", data)


# -- strict reading: every field, every wrong type (issue 15) -----------------------------------

_HOLDER = Holder("id", "owner", "msg", 5, 1.5, 2.0, False, 1.0e9, 1.0e9, 3)
_REQUESTOR = Requestor("rid", "owner", "msg", 7, 3.0, True, 1.0e9, 1.5, 2.0)
_FULL = Lease(
    "v1/path/x",
    9,
    "nonce",
    _HOLDER,
    _REQUESTOR,
    Event("acquired", 1.0e9, "owner", "msg"),
    reserve=Reserve(137, "boot"),
    line=(Entry("eid", "waiter", 4, 1.0e9, 10.0, 2, "127.0.0.1:9/t"),),
)
_GOOD = json.loads(encode(_FULL))

# What each kind of field must refuse. JSON gives true/false as bool (an int subclass in Python)
# and 1.0 as float: neither is an integer, and a bool is not a number.
_NOT_TEXT: list[Any] = [None, 1, 1.5, True, [], {}]
_NOT_INT: list[Any] = [None, True, False, 1.0, 2.5, "1", [], {}]
_NOT_NUMBER: list[Any] = [None, True, False, "1", -1, -0.5, [], {}]
_NOT_FLAG: list[Any] = [None, 0, 1, 1.0, "true", [], {}]
_BAD_BY_FIELD: dict[str, list[Any]] = {
    "schema": [True, 1.0, "1", 2, 0, None, [], {}],
    "fence": [*_NOT_INT, -1, MAX_READ_FENCE + 1, MAX_FENCE, 2**63, 2**64, 10**4000],
    "holder": ["me", 1, True, []],
    "requestor": ["me", 1, False, []],
    "event": ["acquired", 0, True, []],
    "reserve": ["x", 1, True, []],
    "line": ["x", 1, True, {}, [1], [None]],
    "holder.priority": [*_NOT_INT, -1, OVERRIDE_PRIORITY + 1],
    "requestor.priority": [*_NOT_INT, -1, OVERRIDE_PRIORITY + 1],
    "holder.beat": [*_NOT_INT, -1, MAX_FENCE + 1],
    "reserve.fence": [*_NOT_INT, -1, MAX_READ_FENCE + 1, 2**63],
    "event.kind": [*_NOT_TEXT, "teleported", "", "ACQUIRED"],
    "name": [*_NOT_TEXT, "x" * 2049],
    "nonce": [*_NOT_TEXT, "n" * 129],
    "holder.lock_id": [*_NOT_TEXT, "i" * 129],
    "holder.owner": [*_NOT_TEXT, "o" * 257],
    "holder.message": [*_NOT_TEXT, "m" * 4097],
    "reserve.boot": [*_NOT_TEXT, "b" * 65],
}


def _kind_of(section: str, field: str) -> str:
    kind = dict(FIELDS[section])[field].__class__.__name__
    return {"_Text": "text", "_Int": "int", "_Number": "number", "_Flag": "flag"}.get(kind, kind)


#: Optional, advisory fields: absent, null or of another kind, they read as None.
_OPTIONAL = {
    f"{s}.{f}" if s else f
    for s, spec in FIELDS.items()
    for f, kind in spec
    if kind.__class__.__name__ == "_Optional"
}


def _bad_cases() -> list[tuple[str, Any]]:
    """(dotted field, bad value) for every field in the table, and the sections themselves."""
    cases = [(f, v) for f, values in _BAD_BY_FIELD.items() for v in values]
    generic = {"text": _NOT_TEXT, "int": _NOT_INT, "number": _NOT_NUMBER, "flag": _NOT_FLAG}
    for section, spec in FIELDS.items():
        for field, _ in spec:
            dotted = f"{section}.{field}" if section else field
            if dotted not in _BAD_BY_FIELD and dotted not in _OPTIONAL:
                cases += [(dotted, v) for v in generic[_kind_of(section, field)]]
    for value in (float("inf"), float("-inf"), float("nan")):  # spelled as JSON can't
        cases.append(("holder.lease_timeout", value))
    return cases


def _target(body: dict[str, Any], parents: list[str]) -> Any:
    target = body
    for parent in parents:
        target = target[parent]
        if parent == "line":
            target = target[0]  # the line's (first) entry
    return target


def _with(field: str, value: Any) -> bytes:
    body = json.loads(json.dumps(_GOOD))
    *parents, last = field.split(".")
    _target(body, parents)[last] = value
    # allow_nan: the non-finite cases are written as Infinity/NaN, which the reader refuses.
    return json.dumps(body, allow_nan=True).encode()


def _without(field: str) -> bytes:
    body = json.loads(json.dumps(_GOOD))
    *parents, last = field.split(".")
    del _target(body, parents)[last]
    return json.dumps(body).encode()


def test_the_full_document_reads_back() -> None:
    assert decode("k", encode(_FULL)) == _FULL
    assert decode("k", json.dumps(_GOOD).encode()) == _FULL


def test_every_field_of_the_table_is_covered() -> None:
    dotted = {f"{s}.{f}" if s else f for s, spec in FIELDS.items() for f, _ in spec}
    assert (
        dotted | {"schema", "holder", "requestor", "event", "reserve", "line"}
        == {f for f, _ in _bad_cases()} | _OPTIONAL
    )
    assert {"holder.hint", "requestor.hint", "line.hint"} == _OPTIONAL


@pytest.mark.parametrize(("field", "value"), _bad_cases(), ids=repr)
def test_a_mistyped_field_is_corrupt(field: str, value: Any) -> None:
    data = _with(field, value)
    with pytest.raises(CorruptLease) as caught:
        decode("the-key", data)
    assert caught.value.key == "the-key"
    if not (isinstance(value, float) and not math.isfinite(value)):  # those fail as JSON
        assert field.rsplit(".", maxsplit=1)[-1] in str(caught.value)
    assert len(str(caught.value)) < 400  # a short message, whatever the value


@pytest.mark.parametrize(
    "field",
    [
        f"{s}.{f}" if s else f
        for s, spec in FIELDS.items()
        for f, _ in spec
        if s != "reserve" and f"{s}.{f}" not in _OPTIONAL
    ],
)
def test_a_missing_field_is_corrupt(field: str) -> None:
    with pytest.raises(CorruptLease, match=f"missing field {field}"):
        decode("k", _without(field))


def test_an_absent_reserve_is_none_and_integers_stay_integers() -> None:
    lease = decode("k", _without("reserve"))
    assert lease.reserve is None
    assert lease.holder is not None and lease.holder.lease_timeout.__class__ is float
    whole = decode("k", _with("holder.lease_timeout", 2))  # an integral number of seconds
    assert whole.holder is not None and whole.holder.lease_timeout == 2.0


def test_the_line_is_optional_and_bounded() -> None:
    """A document without ``line`` (any older client's) reads with an empty line; a null hint
    is None; a line longer than MAX_LINE is corrupt."""
    assert decode("k", _without("line")).line == ()
    assert decode("k", _with("line", None)).line == ()
    lease = decode("k", _with("line.hint", None))
    assert lease.line[0].hint is None and lease.line[0].entry_id == "eid"
    body = json.loads(json.dumps(_GOOD))
    body["line"] = body["line"] * (MAX_LINE + 1)
    with pytest.raises(CorruptLease, match="line"):
        decode("k", json.dumps(body).encode())
    free = Lease("n", 1, "x")
    assert b"line" not in encode(free)  # written only when someone waits


def test_the_fence_bounds() -> None:
    assert decode("k", _with("fence", MAX_READ_FENCE)).fence == MAX_READ_FENCE
    assert MAX_FENCE == 2**63 - 1
    # The encoder writes up to MAX_FENCE (the counting past MAX_READ_FENCE has room)...
    encode(Lease("n", MAX_FENCE, "x"))
    # ... and never beyond it, for the fence or a reservation.
    with pytest.raises(CorruptLease, match="fence"):
        encode(Lease("n", MAX_FENCE + 1, "x"))
    with pytest.raises(CorruptLease, match="fence"):
        encode(Lease("n", 1, "x", reserve=Reserve(MAX_FENCE + 1, "b")))


def test_deeply_nested_json_is_corrupt() -> None:
    for opener, closer in ((b"[", b"]"), (b'{"a":', b"}")):
        depth = (MAX_DOCUMENT_BYTES - 100) // (len(opener) + 1)
        data = opener * depth + b"1" + closer * depth
        assert len(data) <= MAX_DOCUMENT_BYTES
        with pytest.raises(CorruptLease, match="nested too deeply"):
            decode("k", data)
        assert salvage_fence(data) == 0


@pytest.mark.parametrize(
    ("data", "fence"),
    [
        (b'{"schema": 99, "fence": 41}', 41),
        (b'{"fence": 7, "holder": "junk"}', 7),
        (b'{"fence": 0}', 0),
        (b'{"fence": -3}', 0),
        (b'{"fence": true}', 0),
        (b'{"fence": 4.0}', 0),
        (b'{"fence": "12"}', 0),
        (f'{{"fence": {MAX_READ_FENCE - 1}}}'.encode(), MAX_READ_FENCE - 1),
        (f'{{"fence": {MAX_READ_FENCE}}}'.encode(), 0),  # its successor would not read
        (f'{{"fence": {MAX_READ_FENCE + 1}}}'.encode(), 0),
        (f'{{"fence": {10**4000}}}'.encode(), 0),
        (b'{"fence": NaN}', 0),
        (b"[1, 2]", 0),
        (b"\xff\xfe", 0),
        (b"", 0),
        (b"[" * 100_000, 0),
        (b" " * (20 * MAX_DOCUMENT_BYTES) + b'{"fence": 5}', 0),
    ],
    ids=repr,
)
def test_salvage_fence_never_raises(data: bytes, fence: int) -> None:
    assert salvage_fence(data) == fence


def test_prior_round_trips_is_carried_by_rewrites_and_is_checked() -> None:
    """``prior`` (the free document the holder took) is written only when set, survives the
    holder's renewals and requests, and is read strictly."""
    free = Lease("k", 3, new_nonce())
    assert b"prior" not in encode(free)
    taken = free.rewritten(prior=free.nonce)
    assert decode("k", encode(taken)).prior == free.nonce
    assert taken.rewritten().prior == free.nonce
    assert taken.rewritten(prior=None).prior is None
    body = json.loads(encode(taken))
    for bad in (1, True, "x" * 129, ["n"]):
        body["prior"] = bad
        with pytest.raises(CorruptLease, match="prior"):
            decode("k", json.dumps(body).encode())
    body["prior"] = None
    assert decode("k", json.dumps(body).encode()).prior is None


def test_lock_ids_are_unguessable_text_and_never_shared_with_a_forked_child() -> None:
    ids = [new_lock_id() for _ in range(600)]  # past one batch of ids drawn ahead
    assert len(set(ids)) == 600
    assert all(len(i) == 32 and set(i) <= _URLSAFE_CHARS for i in ids)
    assert _lease._ids  # some drawn ahead ...
    _lease._reseed_nonces()  # ... which a forked child drops (``os.register_at_fork``)
    assert not _lease._ids
