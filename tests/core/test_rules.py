"""One named case per rule of the protocol's pure decisions (``_protocol``, ``_reserve``).

Each table row is (rule, what goes in, what must come out); a broken rule fails under its own
name. Times: we first saw the holder's heartbeat ``h#3`` at 95 and the pending request at 99, on
our clock; the drift allowance is 1 s. So the holder (10 s lease) is surely gone at 106, and
the request (its wait: min(6 s, the holder's 4 s cleanup)) surely stale at 104.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs
import pytest

from prioritylock import _protocol as proto
from prioritylock import _reserve
from prioritylock._lease import OVERRIDE_PRIORITY, Event, EventKind, Lease, Reserve
from prioritylock._protocol import MyRequest, Owned, Refused, Sighting, Wait
from prioritylock._reserve import RESERVE_BLOCK, next_fence, plan_write

from ._fixtures import claim, holder, lease, requestor

NOW = 100.0
WALL = 5000.0
DRIFT = 1.0
SEEN_BEAT = Sighting("h#3", 95.0)
SEEN_REQUEST = Sighting("r", 99.0)
EXPIRY = 106.0
STALE = 104.0
THIS_BOOT = "boot-now"
OLD_BOOT = "boot-before"


@pytest.fixture(autouse=True)
def _this_boot(monkeypatch: pytest.MonkeyPatch) -> None:
    # The rules are given the boot; this makes sure none of them reads the module's own.
    monkeypatch.setattr(_reserve, "_boot", "not-this-boot")


# -- acquire_step ------------------------------------------------------------------------------


@attrs.frozen
class Seen:
    """What a contender has observed besides the lease (defaults: the module's timeline)."""

    now: float = NOW
    holder_seen: Sighting | None = SEEN_BEAT
    request_seen: Sighting | None = SEEN_REQUEST
    mine: MyRequest | None = None
    may_request: bool = True


def written(
    outcome: str,
    *,
    fence: int,
    holder: str,
    requestor: str | None = None,
    event: str | None = None,
    prior: str | None = None,
    create: bool = False,
) -> tuple[Any, ...]:
    """A ``Write`` step, summarised to the fields the rules decide."""
    return ("write", outcome, create, fence, holder, requestor, event, prior)


def take(kind: str, fence: int = 8, prior: str | None = None) -> tuple[Any, ...]:
    return written("acquired", fence=fence, holder="me", event=kind, prior=prior)


def summary(step: proto.Step) -> object:
    if not isinstance(step, proto.Write):
        return step
    new = step.lease
    return written(
        step.outcome,
        fence=new.fence,
        holder=new.holder.lock_id if new.holder is not None else "(free)",
        requestor=new.requestor.requestor_id if new.requestor is not None else None,
        event=new.event.kind if new.event is not None else None,
        prior=new.prior,
        create=step.create,
    )


HELD = lease(holder=holder(), prior="p-old")
FREE = lease(nonce="free-n", event=Event("released", 1.0, "x"))
HELD_PENDING = lease(holder=holder(), requestor=requestor(), prior="p-old")
MINE_PENDING = lease(holder=holder(), requestor=requestor("me", priority=6))
MY_REQUEST = MyRequest(started=98.0, wait=3.0)  # our request's deadline: 101

ACQUIRE: list[tuple[str, Lease | None, proto.Claim, Seen, object]] = [
    (
        "absent: create it, fence 1",
        None,
        claim(),
        Seen(holder_seen=None, request_seen=None),
        written("acquired", fence=1, holder="me", event="acquired", create=True),
    ),
    (
        "absent, override: create it, recorded as an override",
        None,
        claim(priority=OVERRIDE_PRIORITY),
        Seen(holder_seen=None, request_seen=None),
        written("acquired", fence=1, holder="me", event="override", create=True),
    ),
    (
        "free: take it with the next fence, prior = the free document's nonce",
        FREE,
        claim(),
        Seen(holder_seen=None, request_seen=None),
        take("acquired", prior="free-n"),
    ),
    ("our own lock id holds it: Owned", lease(holder=holder("me")), claim(), Seen(), Owned()),
    (
        "override takes a live holder's lock at once, prior cleared",
        HELD,
        claim(priority=OVERRIDE_PRIORITY),
        Seen(),
        take("override"),
    ),
    (
        "expired: lease_timeout + drift after the first sighting, take over (prior cleared)",
        HELD,
        claim(priority=1),
        Seen(now=EXPIRY),
        take("expired_takeover"),
    ),
    (
        "not expired a moment earlier: wait until the expiry",
        HELD,
        claim(priority=1),
        Seen(now=EXPIRY - 0.001),
        Wait(EXPIRY, "busy"),
    ),
    (
        "expiry counts from the first sighting, not from the read",
        HELD,
        claim(priority=1),
        Seen(now=EXPIRY, holder_seen=Sighting("h#3", 96.0)),
        Wait(107.0, "busy"),
    ),
    (
        "a pending request does not extend an expired holder: take over, request cleared",
        HELD_PENDING,
        claim(priority=1),
        Seen(now=EXPIRY),
        take("expired_takeover"),
    ),
    ("equal priority: busy until expiry", HELD, claim(priority=5), Seen(), Wait(EXPIRY, "busy")),
    ("lower priority: busy until expiry", HELD, claim(priority=1), Seen(), Wait(EXPIRY, "busy")),
    (
        "strictly higher, nothing pending: write a request",
        HELD,
        claim(priority=6),
        Seen(),
        written("requested", fence=7, holder="h", requestor="me", prior="p-old"),
    ),
    (
        "a request must beat the pending requestor: equal waits until the request is stale",
        HELD_PENDING,
        claim(priority=7),
        Seen(),
        Wait(STALE, "busy"),
    ),
    (
        "a higher request displaces the pending one",
        HELD_PENDING,
        claim(priority=8),
        Seen(),
        written("requested", fence=7, holder="h", requestor="me", prior="p-old"),
    ),
    (
        "a stale request is replaceable by a lower one",
        HELD_PENDING,
        claim(priority=6),
        Seen(now=STALE),
        written("requested", fence=7, holder="h", requestor="me", prior="p-old"),
    ),
    (
        "a request is stale only from its first sighting + wait + drift",
        HELD_PENDING,
        claim(priority=6),
        Seen(now=STALE - 0.001),
        Wait(STALE, "busy"),
    ),
    (
        "our request displaced by another: Refused denied",
        HELD_PENDING,
        claim(priority=6),
        Seen(mine=MY_REQUEST),
        Refused("denied"),
    ),
    (
        "our request cleared (nothing pending, not ours): Refused denied",
        HELD,
        claim(priority=6),
        Seen(mine=MY_REQUEST),
        Refused("denied"),
    ),
    (
        "our waiting timeout 0: preempt at once",
        HELD,
        claim(priority=6, waiting_timeout=0.0),
        Seen(),
        take("preempted"),
    ),
    (
        "the holder's cleanup timeout 0: preempt at once",
        lease(holder=holder(cleanup_timeout=0.0)),
        claim(priority=6),
        Seen(),
        take("preempted"),
    ),
    (
        "zero wait still must beat a live pending request",
        lease(holder=holder(cleanup_timeout=0.0), requestor=requestor(priority=7)),
        claim(priority=6),
        Seen(request_seen=Sighting("r", 99.5)),
        Wait(100.5, "busy"),
    ),
    (
        "our request pending before its deadline: wait for the handover until the deadline",
        MINE_PENDING,
        claim(priority=6),
        Seen(mine=MY_REQUEST, request_seen=Sighting("me", 98.0)),
        Wait(101.0, "handover"),
    ),
    (
        "our request pending, the holder expires first: wait until the expiry",
        MINE_PENDING,
        claim(priority=6),
        Seen(mine=MyRequest(98.0, 30.0), request_seen=Sighting("me", 98.0)),
        Wait(EXPIRY, "handover"),
    ),
    (
        "our request's deadline passed, forceful: take it",
        MINE_PENDING,
        claim(priority=6, forceful=True),
        Seen(now=101.0, mine=MY_REQUEST, request_seen=Sighting("me", 98.0)),
        take("forceful_takeover"),
    ),
    (
        "our request's deadline passed, not forceful: withdraw it",
        MINE_PENDING,
        claim(priority=6),
        Seen(now=101.0, mine=MY_REQUEST, request_seen=Sighting("me", 98.0)),
        written("withdrawn", fence=7, holder="h"),
    ),
    (
        "may_request=False (our request timed out once): busy like any contender",
        HELD,
        claim(priority=6),
        Seen(may_request=False),
        Wait(EXPIRY, "busy"),
    ),
    (
        "operator guard: the fence moved on, Refused changed",
        HELD,
        claim(priority=OVERRIDE_PRIORITY, if_fence=6),
        Seen(),
        Refused("changed"),
    ),
    (
        "operator guard: another owner holds it, Refused changed",
        HELD,
        claim(priority=OVERRIDE_PRIORITY, if_owner="someone else"),
        Seen(),
        Refused("changed"),
    ),
    (
        "operator guard: an absent lease shows no fence, Refused changed",
        None,
        claim(priority=OVERRIDE_PRIORITY, if_fence=7),
        Seen(holder_seen=None, request_seen=None),
        Refused("changed"),
    ),
    (
        "operator guard: a free lease shows no owner, Refused changed",
        FREE,
        claim(priority=OVERRIDE_PRIORITY, if_owner="holder"),
        Seen(holder_seen=None, request_seen=None),
        Refused("changed"),
    ),
    (
        "operator guard still matching: the override acts",
        HELD,
        claim(priority=OVERRIDE_PRIORITY, if_fence=7, if_owner="holder"),
        Seen(),
        take("override"),
    ),
]


@pytest.mark.parametrize(
    ("before", "me", "seen", "expected"),
    [row[1:] for row in ACQUIRE],
    ids=[row[0] for row in ACQUIRE],
)
def test_acquire_step(before: Lease | None, me: proto.Claim, seen: Seen, expected: object) -> None:
    step = proto.acquire_step(
        before,
        "jobs/a",
        me,
        now=seen.now,
        wall=WALL,
        drift=DRIFT,
        holder_seen=seen.holder_seen,
        request_seen=seen.request_seen,
        mine=seen.mine,
        may_request=seen.may_request,
    )
    assert summary(step) == expected
    if isinstance(step, proto.Write):
        # Every write is a new version (fresh nonce); a holder we write starts at beat 0.
        assert before is None or step.lease.nonce != before.nonce
        if step.outcome == "acquired":
            assert step.lease.holder is not None
            assert step.lease.holder.beat == 0
            assert step.lease.holder.acquired_at == WALL
            assert step.lease.event is not None and step.lease.event.by == "me-owner"


# -- the holder's side: after_cleanup, released, renewed, handed_over, forced_free --------------

AFTER_CLEANUP: list[tuple[str, Lease, float, Sighting | None, object]] = [
    (
        "nobody pending: release",
        HELD,
        NOW,
        None,
        written("released", fence=7, holder="(free)", event="released", prior="p-old"),
    ),
    (
        "a live requestor: hand over with the next fence",
        HELD_PENDING,
        STALE - 0.001,
        SEEN_REQUEST,
        written("handover", fence=8, holder="r", event="handover"),
    ),
    (
        "a surely stale requestor (its wait + drift over since first seen): release",
        HELD_PENDING,
        STALE,
        SEEN_REQUEST,
        written("released", fence=7, holder="(free)", event="released", prior="p-old"),
    ),
    (
        "a request never sighted is live: hand over",
        HELD_PENDING,
        1000.0,
        None,
        written("handover", fence=8, holder="r", event="handover"),
    ),
    (
        "staleness uses the requestor's own shorter wait",
        lease(holder=holder(), requestor=requestor(waiting_timeout=2.0)),
        102.0,
        SEEN_REQUEST,
        written("released", fence=7, holder="(free)", event="released"),
    ),
]


def lease_summary(new: Lease, outcome: str) -> tuple[Any, ...]:
    return written(
        outcome,
        fence=new.fence,
        holder=new.holder.lock_id if new.holder is not None else "(free)",
        requestor=new.requestor.requestor_id if new.requestor is not None else None,
        event=new.event.kind if new.event is not None else None,
        prior=new.prior,
    )


@pytest.mark.parametrize(
    ("before", "now", "request_seen", "expected"),
    [row[1:] for row in AFTER_CLEANUP],
    ids=[row[0] for row in AFTER_CLEANUP],
)
def test_after_cleanup(
    before: Lease, now: float, request_seen: Sighting | None, expected: tuple[Any, ...]
) -> None:
    new = proto.after_cleanup(
        before, now=now, wall=WALL, drift=DRIFT, request_seen=request_seen, boot=THIS_BOOT
    )
    assert new.requestor is None
    assert lease_summary(new, expected[1]) == expected


OLD_RESERVE = Reserve(200, OLD_BOOT)
HELD_OLD_BOOT = lease(holder=holder(), requestor=requestor(), reserve=OLD_RESERVE)
FREE_OLD_BOOT = lease(reserve=OLD_RESERVE)


def _take_by(before: Lease, me: proto.Claim, now: float) -> Lease:
    step = proto.acquire_step(
        before,
        "jobs/a",
        me,
        now=now,
        wall=WALL,
        drift=DRIFT,
        holder_seen=SEEN_BEAT,
        request_seen=SEEN_REQUEST,
        mine=None,
    )
    assert isinstance(step, proto.Write)
    return step.lease


# Every way the fence moves: each takes next_fence, here past an old boot's reservation (200).
FENCE_WRITES: list[tuple[str, Callable[[], Lease], int]] = [
    ("handover takes next_fence", lambda: proto.handed_over(HELD_OLD_BOOT, WALL, THIS_BOOT), 201),
    (
        "force unlock takes next_fence",
        lambda: proto.forced_free(HELD_OLD_BOOT, by="op", message="x", wall=WALL, boot=THIS_BOOT),
        201,
    ),
    (
        "expired takeover takes next_fence",
        lambda: _take_by(HELD_OLD_BOOT, claim(priority=1), EXPIRY),
        201,
    ),
    (
        "override takes next_fence",
        lambda: _take_by(HELD_OLD_BOOT, claim(priority=OVERRIDE_PRIORITY), NOW),
        201,
    ),
    ("taking a free lock takes next_fence", lambda: _take_by(FREE_OLD_BOOT, claim(), NOW), 201),
    ("release keeps the fence", lambda: proto.released(HELD_OLD_BOOT, WALL), 7),
    ("renew keeps the fence", lambda: proto.renewed(HELD_OLD_BOOT, WALL), 7),
]


@pytest.mark.parametrize(
    ("make", "fence"),
    [row[1:] for row in FENCE_WRITES],
    ids=[row[0] for row in FENCE_WRITES],
)
def test_fence_of_each_write(make: Callable[[], Lease], fence: int) -> None:
    new = make()
    assert new.fence == fence
    assert new.reserve == OLD_RESERVE  # only plan_write sets a reservation


def test_released_frees_and_records_the_holder() -> None:
    new = proto.released(HELD_PENDING, WALL)
    assert (new.holder, new.requestor, new.fence) == (None, None, 7)
    assert new.event == Event("released", WALL, "holder", "")


def test_renewed_bumps_the_beat_only() -> None:
    new = proto.renewed(HELD_PENDING, WALL)
    assert HELD_PENDING.holder is not None
    assert new.holder == attrs.evolve(HELD_PENDING.holder, beat=4, renewed_at=WALL)
    assert (new.fence, new.requestor, new.event, new.prior) == (7, requestor(), None, "p-old")
    assert new.nonce != HELD_PENDING.nonce


def test_handed_over_makes_the_requestor_holder_on_its_own_terms() -> None:
    new = proto.handed_over(HELD_PENDING, WALL, THIS_BOOT)
    r = requestor()
    assert new.holder is not None
    assert (new.holder.lock_id, new.holder.owner, new.holder.priority) == ("r", "asker", 7)
    assert (new.holder.lease_timeout, new.holder.cleanup_timeout, new.holder.beat) == (8, 2, 0)
    assert new.event == Event("handover", WALL, "holder", f"to {r.owner}")
    assert (new.requestor, new.prior) == (None, None)


def test_forced_free_records_the_operator() -> None:
    new = proto.forced_free(HELD_PENDING, by="op", message="stuck", wall=WALL, boot=THIS_BOOT)
    assert (new.holder, new.requestor, new.fence) == (None, None, 8)
    assert new.event == Event("force_unlock", WALL, "op", "stuck")


# -- next_fence and plan_write: the reservation rules --------------------------------------------

NEXT_FENCE: list[tuple[str, str | None, Lease, int]] = [
    ("no reservation: fence + 1", THIS_BOOT, lease(), 8),
    ("this boot's reservation: fence + 1", THIS_BOOT, lease(reserve=Reserve(135, THIS_BOOT)), 8),
    ("an old boot's reservation: past it", THIS_BOOT, lease(reserve=OLD_RESERVE), 201),
    (
        "an old boot's reservation below the fence: fence + 1",
        THIS_BOOT,
        lease(fence=300, reserve=OLD_RESERVE),
        301,
    ),
    ("no boot id: every reservation is old", None, lease(reserve=Reserve(135, THIS_BOOT)), 136),
]


@pytest.mark.parametrize(
    ("boot", "before", "fence"),
    [row[1:] for row in NEXT_FENCE],
    ids=[row[0] for row in NEXT_FENCE],
)
def test_next_fence(boot: str | None, before: Lease, fence: int) -> None:
    assert next_fence(before, boot) == fence


MINE_NOW = Reserve(135, THIS_BOOT)
BASE = lease(holder=holder(), reserve=MINE_NOW)


def _raised(base: Lease, fence: int, kind: EventKind = "acquired") -> Lease:
    return base.rewritten(fence=fence, event=Event(kind, WALL, "me"))


# (rule, boot, the lease to write, the base it replaces, (unsynced?, the reserve written))
PLAN: list[tuple[str, str | None, Lease, Lease | None, tuple[bool, Reserve | None]]] = [
    ("same fence (renew, release): unsynced", THIS_BOOT, BASE.rewritten(), BASE, (True, MINE_NOW)),
    (
        "a raise within this boot's reservation: unsynced",
        THIS_BOOT,
        _raised(BASE, 8),
        BASE,
        (True, MINE_NOW),
    ),
    (
        "a raise to the reservation's last fence: unsynced",
        THIS_BOOT,
        _raised(BASE, 135),
        BASE,
        (True, MINE_NOW),
    ),
    (
        "a break-glass raise (override) is synced",
        THIS_BOOT,
        _raised(BASE, 8, "override"),
        BASE,
        (False, MINE_NOW),
    ),
    (
        "a break-glass raise (force unlock) is synced",
        THIS_BOOT,
        _raised(BASE, 8, "force_unlock"),
        BASE,
        (False, MINE_NOW),
    ),
    (
        "a raise past the reservation: synced, reserve the next block",
        THIS_BOOT,
        _raised(BASE, 136),
        BASE,
        (False, Reserve(136 + RESERVE_BLOCK, THIS_BOOT)),
    ),
    (
        "unsure of the base: synced",
        THIS_BOOT,
        _raised(BASE, 8),
        None,
        (False, MINE_NOW),
    ),
    (
        "a create: synced, with a reservation",
        THIS_BOOT,
        lease(fence=1, holder=holder()),
        None,
        (False, Reserve(1 + RESERVE_BLOCK, THIS_BOOT)),
    ),
    (
        "an old boot's reservation is never used: the raise past it is synced",
        THIS_BOOT,
        _raised(lease(reserve=OLD_RESERVE), 201),
        lease(reserve=OLD_RESERVE),
        (False, Reserve(201 + RESERVE_BLOCK, THIS_BOOT)),
    ),
    (
        "a synced same-fence write keeps an old boot's reservation",
        THIS_BOOT,
        lease(reserve=OLD_RESERVE).rewritten(holder=holder()),
        None,
        (False, OLD_RESERVE),
    ),
    (
        "no boot id: synced, no reservation",
        None,
        _raised(lease(), 8),
        lease(),
        (False, None),
    ),
]


@pytest.mark.parametrize(
    ("boot", "new", "base", "expected"),
    [row[1:] for row in PLAN],
    ids=[row[0] for row in PLAN],
)
def test_plan_write(
    boot: str | None,
    new: Lease,
    base: Lease | None,
    expected: tuple[bool, Reserve | None],
) -> None:
    planned, unsynced = plan_write(new, base, boot)
    assert (unsynced, planned.reserve) == expected
    assert (planned.nonce, planned.fence, planned.holder) == (new.nonce, new.fence, new.holder)


# -- release_landed ------------------------------------------------------------------------------

OUR_RELEASE = lease(nonce="rel", event=Event("released", WALL, "holder"))
OUR_HANDOVER = proto.handed_over(HELD_PENDING, WALL, THIS_BOOT)
NEXT_HOLDER = holder("x", owner="next")

LANDED: list[tuple[str, Lease | None, Lease, bool]] = [
    (
        "release: the next holder took our free document (prior = its nonce)",
        lease(fence=8, holder=NEXT_HOLDER, prior="rel"),
        OUR_RELEASE,
        True,
    ),
    (
        "release: the next holder took another free document",
        lease(fence=8, holder=NEXT_HOLDER, prior="other"),
        OUR_RELEASE,
        False,
    ),
    (
        "release: taken from a holder (no prior) proves nothing",
        lease(fence=8, holder=NEXT_HOLDER),
        OUR_RELEASE,
        False,
    ),
    ("release: an absent document proves nothing", None, OUR_RELEASE, False),
    (
        "handover: the requestor holds it under our handover event",
        attrs.evolve(OUR_HANDOVER, nonce="later"),
        OUR_HANDOVER,
        True,
    ),
    (
        "handover: the requestor holds it by its own forceful takeover",
        attrs.evolve(OUR_HANDOVER, event=Event("forceful_takeover", WALL, "asker")),
        OUR_HANDOVER,
        False,
    ),
    (
        "handover: another holder under an equal event",
        attrs.evolve(OUR_HANDOVER, holder=NEXT_HOLDER),
        OUR_HANDOVER,
        False,
    ),
    (
        "handover: a free document proves nothing",
        lease(fence=8, event=OUR_HANDOVER.event, prior=OUR_HANDOVER.nonce),
        OUR_HANDOVER,
        False,
    ),
    ("handover: an absent document proves nothing", None, OUR_HANDOVER, False),
]


@pytest.mark.parametrize(
    ("current", "ours", "landed"),
    [row[1:] for row in LANDED],
    ids=[row[0] for row in LANDED],
)
def test_release_landed(current: Lease | None, ours: Lease, landed: bool) -> None:
    assert proto.release_landed(current, ours) is landed


# -- observations: shows, sight, pending_request_for, expires_at, request_wait --------------------

SHOWS: list[tuple[str, Lease | None, int | None, str | None, bool]] = [
    ("no guard: shows", HELD, None, None, True),
    ("fence and owner as seen: shows", HELD, 7, "holder", True),
    ("another fence: does not show", HELD, 6, None, False),
    ("another owner: does not show", HELD, None, "someone", False),
    ("absent, a fence expected: does not show", None, 7, None, False),
    ("absent, an owner expected: does not show", None, None, "holder", False),
    ("free, an owner expected: does not show", FREE, None, "holder", False),
    ("free, its fence expected: shows", FREE, 7, None, True),
]


@pytest.mark.parametrize(
    ("current", "if_fence", "if_owner", "expected"),
    [row[1:] for row in SHOWS],
    ids=[row[0] for row in SHOWS],
)
def test_shows(
    current: Lease | None, if_fence: int | None, if_owner: str | None, expected: bool
) -> None:
    assert proto.shows(current, if_fence, if_owner) is expected


SIGHT: list[tuple[str, Sighting | None, Lease | None, Sighting | None]] = [
    ("no holder: no sighting", SEEN_BEAT, FREE, None),
    ("the same heartbeat: the first sighting stays", SEEN_BEAT, HELD, SEEN_BEAT),
    (
        "a request written into the lease: the heartbeat's sighting stays",
        SEEN_BEAT,
        HELD_PENDING,
        SEEN_BEAT,
    ),
    ("a new beat: a new sighting", SEEN_BEAT, lease(holder=holder(beat=4)), Sighting("h#4", NOW)),
    ("a new holder: a new sighting", SEEN_BEAT, lease(holder=holder("g")), Sighting("g#3", NOW)),
    ("first look: a new sighting", None, HELD, Sighting("h#3", NOW)),
]


@pytest.mark.parametrize(
    ("previous", "current", "expected"),
    [row[1:] for row in SIGHT],
    ids=[row[0] for row in SIGHT],
)
def test_sight_heartbeat(
    previous: Sighting | None, current: Lease | None, expected: Sighting | None
) -> None:
    assert proto.sight(previous, proto.heartbeat_ident(current), NOW) == expected


def test_sight_request_follows_the_requestor() -> None:
    assert proto.sight(SEEN_REQUEST, proto.request_ident(HELD_PENDING), NOW) == SEEN_REQUEST
    assert proto.sight(SEEN_REQUEST, proto.request_ident(HELD), NOW) is None
    other = lease(holder=holder(), requestor=requestor("q"))
    assert proto.sight(SEEN_REQUEST, proto.request_ident(other), NOW) == Sighting("q", NOW)


PENDING: list[tuple[str, Lease, int, str | None]] = [
    ("nothing pending", HELD, 5, None),
    ("a request above the holder", HELD_PENDING, 5, "r"),
    ("a request at the holder's priority", HELD_PENDING, 7, None),
    ("a request below the holder", HELD_PENDING, 9, None),
]


@pytest.mark.parametrize(
    ("current", "priority", "expected"),
    [row[1:] for row in PENDING],
    ids=[row[0] for row in PENDING],
)
def test_pending_request_for(current: Lease, priority: int, expected: str | None) -> None:
    found = proto.pending_request_for(current, priority)
    assert (found.requestor_id if found is not None else None) == expected


def test_expires_at_counts_from_the_sighting_plus_drift() -> None:
    assert proto.expires_at(HELD, SEEN_BEAT, DRIFT) == EXPIRY
    assert proto.expires_at(HELD, SEEN_BEAT, 0.0) == EXPIRY - DRIFT


@pytest.mark.parametrize(
    ("waiting", "cleanup", "expected"),
    [(6.0, 4.0, 4.0), (2.0, 4.0, 2.0), (0.0, 4.0, 0.0)],
    ids=["the holder's cleanup is shorter", "the request's wait is shorter", "zero wait"],
)
def test_request_wait_is_the_shorter(waiting: float, cleanup: float, expected: float) -> None:
    assert proto.request_wait(waiting, cleanup) == expected


# (rule, the deadline of the holder's cleanup window, when it hears of the request, told?)
TELLS: list[tuple[str, float, float, bool]] = [
    ("heard inside the window: told", 103.0, NOW, True),
    ("heard as the window closes: not told", NOW, NOW, False),
    ("heard after the window closed: not told, never late", 99.5, NOW, False),
]


@pytest.mark.parametrize(
    ("deadline", "now", "told"), [row[1:] for row in TELLS], ids=[row[0] for row in TELLS]
)
def test_tells_cleanup_only_while_the_window_is_open(
    deadline: float, now: float, told: bool
) -> None:
    assert proto.tells_cleanup(deadline, now) is told


HIGHER_PENDING = HELD.rewritten(requestor=requestor("q", priority=8))
LOW_PENDING = HELD.rewritten(requestor=requestor("q", priority=3))

# (rule, the holder's read, the request it was told of, withdrawn?)
WITHDRAWN: list[tuple[str, Lease, str | None, bool]] = [
    ("told of nothing: nothing to withdraw", HELD, None, False),
    ("the request told of is still pending", HELD_PENDING, "r", False),
    ("the request told of is gone: withdrawn", HELD, "r", True),
    ("displaced by a higher request: not withdrawn", HIGHER_PENDING, "r", False),
    ("replaced by one the holder outranks: withdrawn", LOW_PENDING, "r", True),
]


@pytest.mark.parametrize(
    ("current", "told", "withdrawn"),
    [row[1:] for row in WITHDRAWN],
    ids=[row[0] for row in WITHDRAWN],
)
def test_request_withdrawn(current: Lease, told: str | None, withdrawn: bool) -> None:
    assert proto.request_withdrawn(current, told) is withdrawn
