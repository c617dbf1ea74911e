"""The deadline rules of the flows (issue 22), one case each: when a store operation stops
retrying and when its request in flight is given up (``Read.by``/``Put.by``), ``LockTimeout``
when the caller's deadline ends an acquire on a failing store, and ``Unsettled`` after a claim
write whose outcome stayed unknown. Our lock's store timeout is 5 s (``_fixtures.Terms``)."""

from __future__ import annotations

import pytest

from prioritylock import _flows as flows
from prioritylock._effects import ARM, Put, Read, Sleep, Unsettled
from prioritylock._errors import LockTimeout, StoreUnavailable

from ._fixtures import state
from ._script import Step, drive, now


def unavailable() -> StoreUnavailable:
    return StoreUnavailable("connection refused")


# (rule, start, caller's deadline, timeout, when the operation ends)
LIMITS = [
    ("no deadline: the store timeout", 10.0, None, None, 15.0),
    ("a later deadline: the store timeout", 10.0, 30.0, None, 15.0),
    ("a sooner deadline: the deadline", 10.0, 12.0, None, 12.0),
    ("a deadline passed: one attempt, bounded by the grace", 10.0, 9.0, None, 11.0),
    ("a deadline that leaves less than the grace: the grace", 10.0, 10.5, None, 11.0),
    ("a try's timeout: the shorter one", 10.0, None, 2.0, 12.0),
    ("a grace longer than the timeout: the timeout", 10.0, 9.0, 0.5, 10.5),
]


@pytest.mark.parametrize(
    ("start", "cap", "timeout", "end"),
    [row[1:] for row in LIMITS],
    ids=[row[0] for row in LIMITS],
)
def test_limit(start: float, cap: float | None, timeout: float | None, end: float) -> None:
    assert flows.limit(state(), start, cap, timeout) == end


def test_the_deadline_ends_an_acquire_on_a_failing_store_with_lock_timeout() -> None:
    script = [
        Step(ARM),
        now(0.0),
        Step(lambda e: isinstance(e, Read) and e.by == 3.0, unavailable()),  # not 5 s
        now(1.0),
        Step(Sleep),
        Step(Read, unavailable()),
        now(3.0),  # retries end at the caller's deadline
        now(3.0),
    ]
    with pytest.raises(LockTimeout) as raised:
        drive(flows.acquire(state(), "me", blocking=True, deadline=3.0), script)
    assert isinstance(raised.value.__cause__, StoreUnavailable)


def test_a_failing_store_past_the_store_timeout_is_store_unavailable() -> None:
    script = [
        Step(ARM),
        now(0.0),
        Step(lambda e: isinstance(e, Read) and e.by == 5.0, unavailable()),
        now(5.0),  # the store timeout, before the caller's deadline
        now(5.0),
    ]
    with pytest.raises(StoreUnavailable):
        drive(flows.acquire(state(), "me", blocking=True, deadline=30.0), script)


def test_a_try_lock_stops_retrying_first_and_settles_its_unknown_write() -> None:
    """Its retries end after 2 s; the request in flight is given the store timeout (5 s); a
    claim write left unknown is settled (``Unsettled``) before the error is raised."""
    script = [
        now(0.0),
        Step(lambda e: isinstance(e, Read) and e.by == 5.0, None),  # absent: free
        now(0.1),  # the decision, and the write's deadlines
        Step(
            lambda e: isinstance(e, Put) and e.by == 5.1,
            StoreUnavailable("timed out", outcome_unknown=True),
        ),
        now(2.2),  # past the try's 2 s: no retry
        Step(lambda e: isinstance(e, Unsettled) and e.lock_id == "me"),
    ]
    with pytest.raises(StoreUnavailable):
        drive(flows.acquire(state(), "me", blocking=False, deadline=None), script)
