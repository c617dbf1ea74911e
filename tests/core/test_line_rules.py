"""One named case per rule of the fair line (``_protocol.acquire_step`` with a line).

Times: we (``me``, priority 6, lease 10 s) saw every entry's beat first at 95 on our clock, and
the lock free since 98 (or its holder's heartbeat at 85: surely gone at 96); drift 1 s. So an
entry with a 10 s ttl is surely gone at 106, and the head of a lock free since 98 is passed
over at 109.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

import pytest

from prioritylock import _protocol as proto
from prioritylock._lease import MAX_LINE, Entry, Event, Lease
from prioritylock._protocol import Lining, Sighting, Wait

from ._fixtures import claim, holder, lease, requestor

NOW, WALL, DRIFT = 100.0, 5000.0, 1.0


def entry(name: str, priority: int = 6, beat: int = 0, ttl: float = 10.0) -> Entry:
    return Entry(name, name, priority, 1.0, ttl, beat)


def free(*line: Entry) -> Lease:
    return Lease(lease().name, 7, "n0", None, None, Event("released", 1.0, "h"), line=line)


def held(*line: Entry) -> Lease:
    return Lease(lease().name, 7, "n0", holder("h", priority=6), None, None, line=line)


def step(
    doc: Lease,
    *,
    me: proto.Claim | None = None,
    now: float = NOW,
    lining: Lining | None = None,
    seen: float = 95.0,
    free_since: float = 98.0,
    beat_seen: float = 95.0,
) -> proto.Step:
    return proto.acquire_step(
        doc,
        doc.name,
        me or claim(),
        now=now,
        wall=WALL,
        drift=DRIFT,
        holder_seen=Sighting(proto.heartbeat_ident(doc) or "", beat_seen),
        request_seen=None,
        mine=None,
        free_seen=Sighting("free#7", free_since),
        line_seen={e.ident: seen for e in doc.line},
        lining=lining,
    )


def took(line: tuple[str, ...], kind: str = "acquired") -> Callable[[proto.Step], bool]:
    def check(s: proto.Step) -> bool:
        return (
            isinstance(s, proto.Write)
            and s.outcome == "acquired"
            and s.lease.holder is not None
            and s.lease.holder.lock_id == "me"
            and s.lease.event is not None
            and s.lease.event.kind == kind
            and tuple(e.entry_id for e in s.lease.line) == line
        )

    return check


def joined(line: tuple[str, ...], beat: int = 0) -> Callable[[proto.Step], bool]:
    def check(s: proto.Step) -> bool:
        if not (isinstance(s, proto.Write) and s.outcome == "joined"):
            return False
        mine = [e for e in s.lease.line if e.entry_id == "me"]
        return tuple(e.entry_id for e in s.lease.line) == line and mine[0].beat == beat

    return check


def waits(
    until: float | None, reason: Literal["busy", "full"] = "busy"
) -> Callable[[proto.Step], bool]:
    return lambda s: s == Wait(until, reason)


A, B = entry("a"), entry("b")
LINED = Lining(None, 103.0)  # our entry written; its next beat due at 103
FULL = tuple(entry(f"e{i}") for i in range(MAX_LINE))

RULES: list[tuple[str, dict[str, Any], Callable[[proto.Step], bool]]] = [
    # -- who takes a free lock
    ("free: a live head of our priority goes first", {"doc": free(A)}, waits(106.0)),
    (
        "free: the head goes first, even to a lined waiter",
        {"doc": free(A, entry("me"))},
        waits(106.0),
    ),
    (
        "free: we are the head: we take it, our entry out",
        {"doc": free(entry("me"), B)},
        took(("b",)),
    ),
    (
        "free: a strictly higher priority than the head's goes first",
        {"doc": free(entry("a", 5))},
        took(("a",)),
    ),
    ("free: a dead head is skipped and taken out", {"doc": free(A), "now": 106.0}, took(())),
    (
        "free: a head that did not come within its ttl + drift is passed over (kept)",
        {"doc": free(A), "free_since": 80.0, "seen": 99.5},
        took(("a",)),
    ),
    (
        "free: the next waiter's turn follows the head's",
        {"doc": free(A, B, entry("me")), "free_since": 85.0, "seen": 99.5},
        waits(107.0),
    ),
    (
        "expired holder: the live head takes over, not us",
        {"doc": held(A), "beat_seen": 85.0},
        waits(106.0),
    ),
    (
        "expired holder: the head takes it over",
        {"doc": held(entry("me"), B), "beat_seen": 85.0},
        took(("b",), "expired_takeover"),
    ),
    # -- joining and staying
    ("held: a try_lock (no lining) waits, no join", {"doc": held(A)}, waits(106.0)),
    (
        "held: a blocking fair acquire joins at the back",
        {"doc": held(A), "lining": Lining()},
        joined(("a", "me")),
    ),
    (
        "held: it joins after every higher or equal priority, before lower ones",
        {"doc": held(entry("x", 9), A, entry("y", 2)), "lining": Lining()},
        joined(("x", "a", "me", "y")),
    ),
    (
        "held: its join takes dead entries out",
        {"doc": held(A, B), "lining": Lining(), "seen": 80.0, "beat_seen": 99.0},
        joined(("me",)),
    ),
    (
        "held: lined, its beat not due: wait until the earlier of expiry and the beat",
        {"doc": held(entry("me")), "lining": LINED},
        waits(103.0),
    ),
    (
        "held: lined, its beat due: rewrite its entry, beat + 1, in place",
        {"doc": held(entry("me"), B), "lining": LINED, "now": 103.0},
        joined(("me", "b"), beat=1),
    ),
    (
        "held: a full line is waited at unlined",
        {"doc": held(*FULL), "lining": Lining()},
        waits(106.0, "full"),
    ),
]


@pytest.mark.parametrize(("rule", "given", "expected"), RULES, ids=[r[0] for r in RULES])
def test_line_rule(
    rule: str, given: dict[str, Any], expected: Callable[[proto.Step], bool]
) -> None:
    got = step(**given)
    assert expected(got), f"{rule}: got {got!r}"


MOVED: list[tuple[str, Lease | None, bool]] = [
    ("a waiter joined", held(A).rewritten(line=(A, B)), True),
    ("a waiter's beat", held(A).rewritten(line=(entry("a", beat=1),)), True),
    ("a waiter left", held(A).rewritten(line=()), True),
    ("rewritten, nothing else changed", held(A).rewritten(), True),
    (
        "the holder's heartbeat moved",
        held(A).rewritten(holder=holder("h", priority=6, beat=4)),
        False,
    ),
    ("a request came", held(A).rewritten(requestor=requestor()), False),
    ("another fence", held(A).rewritten(fence=8), False),
    ("released", held(A).rewritten(holder=None, event=Event("released", 2.0, "h")), False),
    ("absent", None, False),
]


@pytest.mark.parametrize(("rule", "fresh", "moved"), MOVED, ids=[r[0] for r in MOVED])
def test_a_holders_write_lost_only_to_the_line(rule: str, fresh: Lease | None, moved: bool) -> None:
    """``line_moved``: the holder's write is made again at once only when waiters alone wrote."""
    assert proto.line_moved(held(A), fresh) is moved, rule
