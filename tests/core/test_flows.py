"""One case per rule of the lock's flows (``_flows``), each driven by a script of the effects
it must yield and the answers it gets: no store, no thread, no clock, no sleep.

Times are on the lock's monotonic clock (the wall clock reads 1000 s ahead). Our lock's terms
(``_fixtures.Terms``): 10 s lease, renew every 3 s, watch every 1 s, 1 s drift, 5 s store timeout.
"""

from __future__ import annotations

from typing import Any

import pytest

from prioritylock import _effects as effects
from prioritylock import _flows as flows
from prioritylock import _lease as lease_module
from prioritylock import _protocol as proto
from prioritylock import _state as lockstate
from prioritylock._effects import (
    ARM,
    NOW,
    End,
    Hold,
    Pause,
    Put,
    Read,
    Renewed,
    RetryRelease,
    Sleep,
)
from prioritylock._errors import ConditionFailed, PreemptionTimeout, StoreUnavailable
from prioritylock._lease import Entry, Event, EventKind, Lease, encode
from prioritylock._state import Holding, Released, Seen, Written
from prioritylock.stores._base import Versioned

from ._fixtures import holder, lease, requestor, state
from ._script import Step, drive, last_put, lose, now, put_lease


def doc(of: Lease, version: str) -> Versioned:
    return Versioned(encode(of), version)


def unavailable() -> StoreUnavailable:
    return StoreUnavailable("timed out", outcome_unknown=True)


def ours_back(version: str) -> Any:
    """A read answered with what the flow last wrote: its write landed."""
    return lambda effects: Versioned(last_put(effects).data, version)


BEFORE = lease(holder=holder())
OTHER = lease(fence=8, holder=holder("x", owner="other"), nonce="other-n")


# -- writes whose outcome is unknown --------------------------------------------------------------

# (rule, the script after the write is issued, what write() returns: "ours" or the other lease)
WRITES: list[tuple[str, list[Step], str]] = [
    (
        "a timeout, then our nonce read back: it landed",
        [Step(Put, unavailable()), now(1.0), Step(Sleep), Step(Read, ours_back("v2"))],
        "ours@v2",
    ),
    (
        "a timeout, then the old version read back: it did not land, write again",
        [
            Step(Put, unavailable()),
            now(1.0),
            Step(Sleep),
            Step(Read, doc(BEFORE, "v1")),
            Step(lambda e: isinstance(e, Put) and e.version == "v1", "v3"),
        ],
        "ours@v3",
    ),
    (
        "a timeout, then another document read back: it moved on, re-decide",
        [Step(Put, unavailable()), now(1.0), Step(Sleep), Step(Read, doc(OTHER, "v9"))],
        "other@v9",
    ),
    (
        "a 412, then our nonce read back: it answered a retry of our write",
        [Step(Put, ConditionFailed("jobs/a")), Step(Read, ours_back("v2"))],
        "ours@v2",
    ),
    (
        "a 412, then another document: we lost a race",
        [Step(Put, ConditionFailed("jobs/a")), Step(Read, doc(OTHER, "v9"))],
        "other@v9",
    ),
    (
        "a 412, then the document is gone: we lost a race",
        [Step(Put, ConditionFailed("jobs/a")), Step(Read, None)],
        "absent",
    ),
]


@pytest.mark.parametrize(
    ("script", "expected"), [row[1:] for row in WRITES], ids=[row[0] for row in WRITES]
)
def test_write_settles_an_unknown_outcome(script: list[Step], expected: str) -> None:
    mine = BEFORE.rewritten(requestor=requestor("me"))
    st = state()
    result, effects = drive(flows.write(st, mine, "v1", create=False, deadline=5.0), script)
    assert put_lease(effects[0]) == mine
    if expected.startswith("ours@"):
        assert result == Written(mine, expected[5:])
    elif expected == "absent":
        assert result == Seen(None, None)
    else:
        assert result == Seen(OTHER, "v9")


def test_write_backs_off_until_its_deadline_then_raises() -> None:
    st = state()
    mine = BEFORE.rewritten()
    script = [
        Step(Put, unavailable()),
        now(4.99),
        Step(lambda e: isinstance(e, Sleep) and 0 <= e.seconds <= 0.01 + 1e-9),
        Step(Read, doc(BEFORE, "v1")),
        Step(Put, unavailable()),
        now(5.0),
    ]
    with pytest.raises(StoreUnavailable):
        drive(flows.write(st, mine, "v1", create=False, deadline=5.0), script)


def test_read_retries_with_growing_backoff_within_the_deadline_then_raises() -> None:
    st = state()
    script = [
        now(0.0),  # the store timeout counts from here: deadline 5
        Step(Read, unavailable()),
        now(1.0),
        Step(lambda e: isinstance(e, Sleep) and 0.01 <= e.seconds <= 0.03),
        Step(Read, unavailable()),
        now(4.99),
        Step(lambda e: isinstance(e, Sleep) and e.seconds <= 0.01 + 1e-9),
        Step(Read, unavailable()),
        now(5.0),
    ]
    with pytest.raises(StoreUnavailable):
        drive(flows.read(st), script)


def test_read_retry_that_succeeds_returns_the_document() -> None:
    st = state()
    script = [now(0.0), Step(Read, unavailable()), now(1.0), Step(Sleep), Step(Read, None)]
    result, _ = drive(flows.read(st), script)
    assert result == Seen(None, None)
    assert st.seen == result


# -- acquiring ------------------------------------------------------------------------------------


def is_create(effect: object) -> bool:
    return isinstance(effect, Put) and effect.create and effect.version is None


def test_acquire_creates_an_absent_lease_and_yields_hold() -> None:
    st = state()
    script = [
        now(0.0),
        Step(Read, None),
        now(1.0),  # the decision, and the write's: the lease clock counts from here
        Step(is_create, "v1"),
        Step(Hold),
    ]
    got, effects = drive(flows.acquire(st, "me", blocking=False, deadline=None), script)
    assert got is True
    hold = effects[-1]
    assert isinstance(hold, Hold)
    assert st.holding is hold.holding
    assert (hold.holding.deadline, hold.due) == (11.0, 2.0)  # lease 10 s; watch due first
    written = put_lease(effects[3])
    assert written.holder is not None
    assert (written.fence, written.holder.lock_id) == (1, "me")


def test_blocking_acquire_arms_pauses_while_busy_then_takes_the_freed_lock() -> None:
    st = state(priority=5)  # equal to the holder's: it can only wait
    st.fair = False  # out of the line (joining it: tests/line)
    freed = lease(holder=None, event=Event("released", 1.0, "holder"), nonce="freed")
    script = [
        Step(ARM),
        now(0.0),
        Step(Read, doc(BEFORE, "v1")),
        now(0.0),
        now(0.0),
        Step(lambda e: isinstance(e, Pause) and 0 < e.seconds <= 0.75),
        now(0.5),
        Step(Read, doc(freed, "v2")),
        now(0.5),
        Step(lambda e: isinstance(e, Put) and e.version == "v2", "v3"),
        Step(Hold),
    ]
    got, effects = drive(flows.acquire(st, "me", blocking=True, deadline=None), script)
    assert got is True
    taken = put_lease(effects[9])
    assert (taken.fence, taken.prior) == (8, "freed")


def test_the_first_round_and_a_later_one_write_the_same_document(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The first round's take of a free lock is spelled out in ``acquire``; a later round's
    goes through ``take`` and ``write``: the same inputs, the same bytes, the same holding."""
    monkeypatch.setattr(lease_module, "new_nonce", lambda: "n")
    freed = lease(holder=None, event=Event("released", 1.0, "holder"), nonce="freed")
    first, later = state(), state()
    first.seen = later.seen = Seen(freed, "v1")
    taken = Step(Put, "v9")
    script = [now(1.0), taken, Step(Hold)]
    _, flat = drive(flows.acquire(first, "me", blocking=False, deadline=None), script)
    # The first attempt loses its race to a writer that left the same document.
    lost = [now(1.0), Step(Put, ConditionFailed("jobs/a")), Step(Read, doc(freed, "v2"))]
    script = [*lost, now(1.0), Step(lambda e: isinstance(e, Put) and e.version == "v2", "v9")]
    _, looped = drive(
        flows.acquire(later, "me", blocking=False, deadline=None), [*script, Step(Hold)]
    )
    assert last_put(flat).data == last_put(looped).data
    assert put_lease(last_put(flat)).fence == 8
    assert first.holding is not None and later.holding is not None
    assert (first.holding.deadline, first.holding.version) == (11.0, "v9")
    assert (later.holding.deadline, later.holding.version) == (11.0, "v9")


def test_try_lock_busy_returns_false_without_writing() -> None:
    st = state(priority=5)
    script = [now(0.0), Step(Read, doc(BEFORE, "v1")), now(0.0)]
    got, _ = drive(flows.acquire(st, "me", blocking=False, deadline=None), script)
    assert got is False


def _requested(effects: list[object]) -> Versioned:
    return Versioned(last_put(effects).data, "v2")


def test_a_request_handed_over_is_confirmed_by_our_own_renewal() -> None:
    st = state()  # priority 6 beats the holder's 5: it asks
    handed = proto.handed_over(
        BEFORE.rewritten(requestor=requestor("me", priority=6)), 1000.5, None
    )
    script = [
        now(0.0),
        Step(Read, doc(BEFORE, "v1")),
        now(0.0),  # the decision, and the write's deadlines
        Step(lambda e: isinstance(e, Put) and put_lease(e).requestor is not None, "v2"),
        now(0.1),  # our request surely landed: its wait counts from here
        now(0.1),
        now(0.1),
        Step(Pause),
        now(0.5),
        Step(Read, doc(handed, "v3")),
        now(1.0),
        now(2.0),  # the confirming renewal starts: the lease clock counts from here
        Step(lambda e: isinstance(e, Put) and e.version == "v3", "v4"),
        Step(Hold),
    ]
    got, effects = drive(flows.acquire(st, "me", blocking=False, deadline=None), script)
    assert got is True
    renewal = put_lease(effects[12])
    assert renewal.holder is not None and renewal.holder.beat == 1
    assert renewal.fence == handed.fence
    assert st.holding is not None and st.holding.deadline == 12.0


def test_a_non_forceful_request_withdraws_at_its_deadline_and_raises() -> None:
    st = state()  # waits min(5 s, the holder's 4 s cleanup) = 4 s from 0.1
    script = [
        now(0.0),
        Step(Read, doc(BEFORE, "v1")),
        now(0.0),  # the decision, and the write's deadlines
        # A request: its notice is to say when it was sent (``Put.request``).
        Step(lambda e: isinstance(e, Put) and e.request, "v2"),
        now(0.1),
        now(0.1),
        now(0.1),
        Step(Pause),
        now(0.2),
        Step(Read, _requested),
        now(4.1),
        Step(lambda e: isinstance(e, Put) and put_lease(e).requestor is None, "v3"),
    ]
    with pytest.raises(PreemptionTimeout):
        drive(flows.acquire(st, "me", blocking=False, deadline=None), script)


def test_a_displaced_request_is_told_denied_and_try_lock_gives_up() -> None:
    st = state()
    displaced = BEFORE.rewritten(requestor=requestor("q", priority=8))
    denied = Step(lambda e: isinstance(e, effects.Denied) and e.lease == displaced)
    script = [
        now(0.0),
        Step(Read, doc(BEFORE, "v1")),
        now(0.0),  # the decision, and the write's deadlines
        Step(Put, "v2"),
        now(0.1),
        now(0.1),
        now(0.1),
        Step(Pause),
        now(0.2),
        Step(Read, doc(displaced, "v3")),
        now(0.2),
        denied,
    ]
    got, _ = drive(flows.acquire(st, "me", blocking=False, deadline=None), script)
    assert got is False


# -- holding --------------------------------------------------------------------------------------

MINE = lease(holder=holder("me", owner="me-owner", priority=6))


def holding_of(of: Lease, st: Any, **changes: Any) -> Holding:
    held = Holding(
        lock_id="me",
        lease=of,
        version="v1",
        deadline=20.0,
        next_renew=13.0,
        next_watch=11.0,
        quiet_since=10.0,
    )
    for name, value in changes.items():
        setattr(held, name, value)
    st.holding = held
    st.seen = Seen(of, "v1")
    return held


LOSSES = [
    ("expired_takeover", "expired"),
    ("preempted", "preempted"),
    ("forceful_takeover", "preempted"),
    ("handover", "preempted"),
    ("override", "overridden"),
    ("force_unlock", "forced"),
    ("acquired", "superseded"),
    ("released", "superseded"),
]


@pytest.mark.parametrize(
    ("kind", "reason"), LOSSES, ids=[f"taken by {k}: lost, {r}" for k, r in LOSSES]
)
def test_examine_loses_with_the_reason_of_the_event(kind: EventKind, reason: str) -> None:
    st = state()
    held = holding_of(MINE, st)
    taken = lease(fence=8, holder=holder("x"), event=Event(kind, 1.0, "x"))
    script = [lose(reason)]
    still, _ = drive(flows.examine(st, held, Seen(taken, "v2")), script)
    assert still is False


def test_examine_of_an_absent_lease_loses_superseded() -> None:
    st = state()
    held = holding_of(MINE, st)
    script = [lose("superseded")]
    assert drive(flows.examine(st, held, Seen(None, None)), script)[0] is False


def test_examine_asks_for_cleanup_once_per_requestor() -> None:
    st = state(cooperates=False)
    held = holding_of(MINE, st)
    asked = MINE.rewritten(requestor=requestor("r"))
    # The requestor waits min(6 s, our 4 s cleanup) from after quiet_since (10); less the drift.
    cleanup = Step(
        lambda e: (
            isinstance(e, effects.Cleanup)
            and e.requestor.requestor_id == "r"
            and (e.deadline, e.deadline_wall) == (13.0, 1013.0)
        )
    )
    assert drive(flows.examine(st, held, Seen(asked, "v2")), [now(12.0), cleanup])[0] is True
    held.cleaning = False  # the cleanup returned; not cooperating, we keep the lock
    assert drive(flows.examine(st, held, Seen(asked, "v2")), [now(12.5)])[0] is True
    again = asked.rewritten(requestor=requestor("q", priority=8))
    ask_q = Step(lambda e: isinstance(e, effects.Cleanup) and e.requestor.requestor_id == "q")
    assert drive(flows.examine(st, held, Seen(again, "v3")), [now(12.6), ask_q])[0] is True


def test_examine_starts_no_second_cleanup_while_one_runs() -> None:
    st = state()
    held = holding_of(MINE, st, cleaning=True, notified="r")
    higher = MINE.rewritten(requestor=requestor("q", priority=8))
    assert drive(flows.examine(st, held, Seen(higher, "v2")), [now(12.0)])[0] is True


def test_examine_ignores_a_request_not_above_us() -> None:
    st = state()
    held = holding_of(MINE, st)
    equal = MINE.rewritten(requestor=requestor("r", priority=6))
    assert drive(flows.examine(st, held, Seen(equal, "v2")), [now(12.0)])[0] is True


def test_examine_does_not_tell_a_holder_whose_window_closed_before_it_heard() -> None:
    st = state(cooperates=False)
    held = holding_of(MINE, st)
    # min(1.5 s wait, our 4 s cleanup) - 1 s drift from quiet_since (10): the window ends at
    # 10.5; our watch read shows the request only at 12 (a watch interval longer than the wait).
    late = MINE.rewritten(requestor=requestor("r", waiting_timeout=1.5))
    assert drive(flows.examine(st, held, Seen(late, "v2")), [now(12.0)])[0] is True
    assert (held.notified, held.told, held.cleaning) == ("r", None, False)
    # ... nor later, nor when the request is withdrawn: it never heard of it.
    assert drive(flows.examine(st, held, Seen(late, "v2")), [now(12.5)])[0] is True
    assert drive(flows.examine(st, held, Seen(MINE, "v3")), [now(13.0)])[0] is True


@pytest.mark.parametrize("stamped", ["v2", "v1"])
def test_examine_counts_a_request_written_in_this_process_from_its_write(stamped: str) -> None:
    st = state(cooperates=False)
    held = holding_of(MINE, st)
    # The case above, but a request write of this process stamped its notice: sent at 11.9, it
    # made v2. Reading exactly v2, the window runs from 11.9 to 11.9 + 1.5 - 1 = 12.4; the
    # stamp of another version (v1) proves nothing and the window stays closed.
    held.request_sent = (stamped, 11.9)
    late = MINE.rewritten(requestor=requestor("r", waiting_timeout=1.5))
    told = Step(lambda e: isinstance(e, effects.Cleanup) and e.deadline == pytest.approx(12.4))
    script = [now(12.0), told] if stamped == "v2" else [now(12.0)]
    assert drive(flows.examine(st, held, Seen(late, "v2")), script)[0] is True
    assert (held.told is not None) is (stamped == "v2")


def test_examine_tells_the_holder_once_when_the_request_it_was_told_of_is_withdrawn() -> None:
    st = state()
    held = holding_of(MINE, st)
    asked = MINE.rewritten(requestor=requestor("r"))
    drive(flows.examine(st, held, Seen(asked, "v2")), [now(11.0), Step(effects.Cleanup)])
    told = held.told
    assert told is not None and told.requestor.requestor_id == "r" and told.deadline == 13.0
    withdrawn = Step(
        lambda e: isinstance(e, effects.Withdrawn) and e.told == told and e.holding is held
    )
    assert drive(flows.examine(st, held, Seen(MINE, "v3")), [now(12.0), withdrawn])[0] is True
    assert held.told is None
    assert drive(flows.examine(st, held, Seen(MINE, "v3")), [now(12.5)])[0] is True  # once


def test_examine_does_not_call_a_displaced_request_withdrawn() -> None:
    st = state()
    held = holding_of(MINE, st)
    asked = MINE.rewritten(requestor=requestor("r"))
    drive(flows.examine(st, held, Seen(asked, "v2")), [now(11.0), Step(effects.Cleanup)])
    higher = MINE.rewritten(requestor=requestor("q", priority=8))
    # The cleanup still runs (one at a time): it goes on for the newcomer, nothing withdrawn.
    assert drive(flows.examine(st, held, Seen(higher, "v3")), [now(12.0)])[0] is True
    assert held.told is not None and held.told.requestor.requestor_id == "r"


def test_a_blocking_acquire_that_does_not_wait_on_raises_when_its_request_runs_out() -> None:
    st = state(keep_waiting=False)  # LockBuilder.keep_waiting(False), as the service builds
    script = [
        Step(ARM),
        now(0.0),
        Step(Read, doc(BEFORE, "v1")),
        now(0.0),  # the decision, and the write's deadlines
        Step(Put, "v2"),
        now(0.1),
        now(0.1),
        now(0.1),
        Step(Pause),
        now(0.2),
        Step(Read, _requested),
        now(4.1),
        Step(lambda e: isinstance(e, Put) and put_lease(e).requestor is None, "v3"),
    ]
    with pytest.raises(PreemptionTimeout):
        drive(flows.acquire(st, "me", blocking=True, deadline=None), script)


def test_cleanup_deadline_never_before_quiet_since() -> None:
    st = state()
    held = holding_of(MINE, st)
    short = MINE.rewritten(requestor=requestor("r", waiting_timeout=0.5))
    assert lockstate.cleanup_deadline(held, short, "v1", 1.0) == 10.0


def test_a_request_written_in_this_process_counts_its_window_from_its_write() -> None:
    """The stamp of the write that made the version read moves the window's start there; a
    stamp of another version (a later write, or one out of order) leaves the last quiet read."""
    st = state()
    held = holding_of(MINE, st)  # quiet since 10.0
    asked = MINE.rewritten(requestor=requestor("r", waiting_timeout=2.0))
    held.request_sent = ("v7", 11.5)
    assert lockstate.cleanup_deadline(held, asked, "v7", 0.5) == 11.5 + 2.0 - 0.5
    assert lockstate.cleanup_deadline(held, asked, "v8", 0.5) == 10.0 + 2.0 - 0.5
    assert lockstate.cleanup_deadline(held, asked, None, 0.5) == 10.0 + 2.0 - 0.5
    held.request_sent = ("v7", 9.0)  # never before the last quiet read
    assert lockstate.cleanup_deadline(held, asked, "v7", 0.5) == 10.0 + 2.0 - 0.5


@pytest.mark.parametrize(
    ("sent", "version", "start"),
    [
        (("v2", 5.0), "v2", 5.0),
        (("v2", 5.0), "v3", 1.0),
        (None, "v2", 1.0),
        (("v2", 0.5), "v2", 1.0),
    ],
)
def test_window_start(sent: tuple[str, float] | None, version: str, start: float) -> None:
    assert proto.window_start(1.0, version, sent) == start


# -- releasing ------------------------------------------------------------------------------------

ASKED = MINE.rewritten(requestor=requestor("r"))


def test_release_with_a_request_pending_hands_over() -> None:
    st = state()
    held = holding_of(ASKED, st, request_seen=proto.Sighting("r", 11.0))
    script = [now(12.0), Step(Put, "v2"), Step(End)]
    result, effects = drive(flows.release(st, held, cleanup_done=False), script)
    sent = put_lease(effects[1])
    assert sent.holder is not None
    assert (sent.holder.lock_id, sent.fence, sent.event and sent.event.kind) == ("r", 8, "handover")
    assert result == Released(sent, handed_over=True)
    assert held.releasing and held.ended


def test_release_after_cleanup_hands_over_and_marks_us_preempted() -> None:
    st = state()
    held = holding_of(ASKED, st, request_seen=proto.Sighting("r", 11.0))
    lost = lose("preempted", force=True)
    script = [now(12.0), Step(Put, "v2"), Step(End), lost]
    assert drive(flows.release(st, held, cleanup_done=True), script)[0] is None


def test_release_with_nobody_waiting_frees_it() -> None:
    st = state()
    held = holding_of(MINE, st)
    script = [now(12.0), Step(Put, "v2"), Step(End)]
    result, effects = drive(flows.release(st, held, cleanup_done=False), script)
    sent = put_lease(effects[1])
    assert (sent.holder, sent.fence) == (None, 7)
    assert result == Released(sent, handed_over=False)


def test_release_whose_answer_was_lost_is_proven_by_the_next_holder() -> None:
    st = state()
    held = holding_of(MINE, st)

    def next_holder(effects: list[object]) -> Versioned:
        taken = lease(fence=8, holder=holder("x"), prior=put_lease(last_put(effects)).nonce)
        return doc(taken, "v3")

    script = [now(12.0), Step(Put, ConditionFailed("jobs/a")), Step(Read, next_holder)]
    script.append(Step(End))
    result, _ = drive(flows.release(st, held, cleanup_done=False), script)
    assert isinstance(result, Released) and not result.handed_over


def test_release_that_cannot_land_ends_retries_later_and_raises() -> None:
    st = state()
    held = holding_of(MINE, st)
    script = [
        now(12.0),  # the store timeout counts from here: deadline 17
        Step(Put, unavailable()),
        now(17.0),
        Step(End),
        Step(lambda e: isinstance(e, RetryRelease) and e.holding is held),
    ]
    with pytest.raises(StoreUnavailable):
        drive(flows.release(st, held, cleanup_done=False), script)
    assert held.ended


# -- the holder's writes against a busy line ------------------------------------------------------

#: How many times waiters' writes (joins, beats, leaves) beat the holder's write in a row: more
#: than the 8 lost races after which a renewal gives up.
CHURN = 12


def churned(base: Lease, k: int) -> Lease:
    """``base`` after ``k`` waiters' writes: a line of ``k`` entries, a new nonce each time."""
    line = tuple(Entry(f"w{i}", f"waiter-{i}", 6, 1.0, 10.0) for i in range(k))
    return base.rewritten(line=line)


def against_the_line(k: int, base: Lease, answer: object) -> list[Step]:
    """A holder's write that loses to a waiter's write ``k`` times, each time made again at
    once (no pause, nothing examined) on the version just read, then lands as ``answer``."""

    def put_on(version: str) -> Any:
        return lambda effect: isinstance(effect, Put) and effect.version == version

    script: list[Step] = []
    for i in range(k):
        script.append(now(12.0))
        script.append(Step(put_on(f"v{i + 1}"), ConditionFailed("jobs/a")))
        script.append(Step(Read, doc(churned(base, i + 1), f"v{i + 2}")))
        script.append(now(12.0))  # the line's beats sighted
    return [*script, now(12.0), Step(put_on(f"v{k + 1}"), answer)]


def test_a_renewal_that_lost_only_to_waiters_is_made_again_at_once() -> None:
    st = state()
    held = holding_of(MINE, st)
    renewed = Step(lambda e: isinstance(e, Renewed) and e.holding is held)
    script = [*against_the_line(CHURN, MINE, "landed"), renewed]
    _, effects = drive(flows.renew(st, held), script)
    sent = put_lease(last_put(effects))
    assert sent.holder is not None and sent.holder.beat == 4  # one renewal, written 13 times
    assert [e.entry_id for e in sent.line] == [f"w{i}" for i in range(CHURN)]
    assert (held.version, held.deadline) == ("landed", 22.0)


@pytest.mark.parametrize("asked", [False, True], ids=["release", "handover"])
def test_a_release_that_lost_only_to_waiters_is_made_again_at_once(asked: bool) -> None:
    st = state()
    base = ASKED if asked else MINE
    held = holding_of(base, st, request_seen=proto.Sighting("r", 11.0) if asked else None)
    script = [*against_the_line(CHURN, base, "landed"), Step(End)]
    result, effects = drive(flows.release(st, held, cleanup_done=False), script)
    sent = put_lease(last_put(effects))
    assert isinstance(result, Released) and result.handed_over is asked
    assert (sent.holder is not None) is asked and len(sent.line) == CHURN
    assert not any(isinstance(e, Sleep) for e in effects)


# -- an abandoned acquire -------------------------------------------------------------------------

SETTLE: list[tuple[str, Lease | None, tuple[str | None, str | None] | None]] = [
    ("our lease: released", MINE, (None, None)),
    ("our request: withdrawn", BEFORE.rewritten(requestor=requestor("me")), ("h", None)),
    ("another's lease and request: left alone", BEFORE.rewritten(requestor=requestor()), None),
    ("absent: nothing to do", None, None),
]


@pytest.mark.parametrize(
    ("found", "after"), [row[1:] for row in SETTLE], ids=[row[0] for row in SETTLE]
)
def test_settle_abandoned(found: Lease | None, after: tuple[str | None, str | None] | None) -> None:
    st = state()
    script = [now(0.0), Step(Read, None if found is None else doc(found, "v1"))]
    if found is not None:
        script.append(now(0.0))
    if after is not None:
        script.append(Step(lambda e: isinstance(e, Put) and e.version == "v1", "v2"))
    _, effects = drive(flows.settle_abandoned(st, "me"), script)
    if after is not None:
        sent = put_lease(effects[-1])
        holder_id = sent.holder.lock_id if sent.holder is not None else None
        request_id = sent.requestor.requestor_id if sent.requestor is not None else None
        assert (holder_id, request_id) == after
        assert sent.fence == 7


# -- the heartbeat --------------------------------------------------------------------------------


def test_beat_past_the_deadline_loses_expired() -> None:
    st = state()
    held = holding_of(MINE, st)
    lost = lose("expired")
    assert drive(flows.beat(st, held), [now(20.0), lost])[0] is None


def test_beat_on_a_corrupt_document_loses() -> None:
    st = state()
    held = holding_of(MINE, st)
    lost = lose("heartbeat failed", prefix=True)
    script = [now(11.5), Step(Read, Versioned(b"{not json", "v2")), lost]
    assert drive(flows.beat(st, held), script)[0] is None


def test_beat_retries_later_when_the_store_is_unavailable() -> None:
    st = state()
    held = holding_of(MINE, st)
    # The watch read may retry only until the renewal falls due (13).
    script = [now(11.5), Step(Read, unavailable()), now(13.0)]
    again, _ = drive(flows.beat(st, held), script)
    assert again == 11.5 + 0.75  # a quarter of the renew interval, well before the deadline
    assert held.active


def test_beat_renews_when_due_and_moves_the_deadline() -> None:
    st = state()
    held = holding_of(MINE, st)
    renewed = Step(lambda e: isinstance(e, Renewed) and e.holding is held)
    script = [now(13.0), Step(Put, "v2"), renewed]
    again, effects = drive(flows.beat(st, held), script)
    assert (held.deadline, held.version, again) == (23.0, "v2", 14.0)
    sent = put_lease(effects[1])
    assert sent.holder is not None and sent.holder.beat == 4


def test_beat_renewal_refused_by_an_override_loses_overridden() -> None:
    st = state()
    held = holding_of(MINE, st)
    taken = lease(fence=8, holder=holder("x"), event=Event("override", 1.0, "op"))
    lost = lose("overridden")
    script = [
        now(13.0),
        Step(Put, ConditionFailed("jobs/a")),
        Step(Read, doc(taken, "v2")),
        lost,
    ]
    assert drive(flows.beat(st, held), script)[0] is None


def test_now_is_answered_by_the_clock() -> None:
    # The driver's contract for NOW: (monotonic, wall).
    assert drive(flows.now(), [Step(NOW, (3.0, 1003.0))])[0] == 3.0
