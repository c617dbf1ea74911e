"""The lease document: encode/decode round trip, fresh nonces, and strict decoding."""

from __future__ import annotations

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from prioritylock import CorruptLease
from prioritylock._lease import (
    EVENT_KINDS,
    OVERRIDE_PRIORITY,
    Event,
    Holder,
    Lease,
    Requestor,
    decode,
    encode,
    new_nonce,
)

pytestmark = pytest.mark.timeout(60)

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


@given(
    holder=st.none() | holders,
    requestor=st.none() | requestors,
    event=st.none() | events,
    fence=st.integers(1, 2**62),
)
def test_round_trip(
    holder: Holder | None, requestor: Requestor | None, event: Event | None, fence: int
) -> None:
    lease = Lease("v1/path/x", fence, new_nonce(), holder, requestor, event)
    assert decode("k", encode(lease), name="v1/path/x") == lease


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
    with pytest.raises(CorruptLease, match="event kind"):
        decode("k", data)
