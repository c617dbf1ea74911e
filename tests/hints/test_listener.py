"""The listener on its own: what it takes, what it drops, its rate, a flood.

A :class:`Hints` of the test's own on 127.0.0.2, posting its notices to the test (not to the
process's board); the hints are real datagrams over loopback. What a lock object and a forked
child record goes through the process's own (:data:`HINTS`).
"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from prioritylock import LockBuilder
from prioritylock._hints import (
    BURST,
    HINTS,
    MAGIC,
    RATE,
    Hints,
    configure_hints,
    parse_hint,
    parse_setting,
    token_for,
)
from prioritylock._wake import NOTICES, Faults
from prioritylock.stores import LocalStore

pytestmark = pytest.mark.timeout(30)


class Heard:
    """The notices a test's listener posted, by document."""

    def __init__(self) -> None:
        self.by_where: dict[object, int] = {}
        self.event = threading.Event()

    def __call__(self, where: object) -> None:
        self.by_where[where] = self.by_where.get(where, 0) + 1
        self.event.set()


@pytest.fixture
def heard() -> Heard:
    return Heard()


@pytest.fixture
def hints(heard: Heard) -> Iterator[Hints]:
    own = Hints(heard)
    own.configure((("127.0.0.2", 0), None))
    yield own
    own.close()


@pytest.fixture
def sender() -> Iterator[socket.socket]:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.3", 0))
    yield sock
    sock.close()


def _to(hint: str | None) -> tuple[str, int]:
    parsed = parse_hint(hint)
    assert parsed is not None
    return parsed[0], parsed[1]


def test_a_hint_with_a_known_token_is_a_notice_for_its_document(
    hints: Hints, heard: Heard, sender: socket.socket
) -> None:
    hint = hints.hint_for("lock-1", "doc-1")
    assert hint is not None and hint.startswith("127.0.0.2:")
    sent = time.monotonic()
    hints.send([hint])
    assert heard.event.wait(5)
    assert time.monotonic() - sent < 0.05
    assert heard.by_where == {"doc-1": 1}
    assert hints.stats().delivered == 1
    # It never answers.
    sender.sendto(MAGIC + token_for("lock-1").encode(), _to(hint))
    sender.setblocking(False)
    with pytest.raises(BlockingIOError):
        sender.recv(64)


def test_garbage_and_unknown_tokens_are_dropped_and_counted(
    hints: Hints, heard: Heard, sender: socket.socket
) -> None:
    hint = hints.hint_for("lock-1", "doc-1")
    address = _to(hint)
    for junk in (b"", b"x" * 26, MAGIC + b"A" * 22, MAGIC + b"A" * 200, b"\xff" * 26):
        sender.sendto(junk, address)
    hints.forget("lock-1")  # an acquisition that ended: its token means nothing now
    sender.sendto(MAGIC + token_for("lock-1").encode(), address)
    deadline = time.monotonic() + 5
    while hints.stats().dropped < 6 and time.monotonic() < deadline:
        time.sleep(0.005)
    assert hints.stats().dropped == 6
    assert heard.by_where == {}


def test_an_acquisition_keeps_its_token_until_it_ends_and_the_next_gets_another(
    hints: Hints, heard: Heard, sender: socket.socket
) -> None:
    """The token is worked out once per acquisition (kept by lock id until ``forget``): the
    same lock id gets the same hint, another lock id (the next acquisition) another token, and
    once an acquisition ended its token is dropped while the next one's is heard."""
    first = hints.hint_for("lock-1", "doc-1")
    assert first is not None and hints.hint_for("lock-1", "doc-1") == first
    assert first.endswith("/" + token_for("lock-1"))
    second = hints.hint_for("lock-2", "doc-1")
    assert second is not None and _token(second) != _token(first)
    hints.forget("lock-1")
    assert hints.hint_for("lock-2", "doc-1") == second  # the other acquisition's is kept
    address = _to(first)
    sender.sendto(MAGIC + _token(first).encode(), address)  # ended: dropped
    sender.sendto(MAGIC + _token(second).encode(), address)  # going on: heard
    assert heard.event.wait(5)
    deadline = time.monotonic() + 5
    while hints.stats().dropped < 1 and time.monotonic() < deadline:
        time.sleep(0.005)
    assert (hints.stats().dropped, heard.by_where) == (1, {"doc-1": 1})
    hints.forget("lock-2")
    hints.forget("lock-2")  # twice: nothing to forget the second time
    assert not hints._ids and not hints._tokens


def test_a_forked_child_never_records_its_parents_token_for_an_acquisition() -> None:
    lock_id = "lock-forked"
    parent = HINTS.hint_for(lock_id, "doc-forked")
    if parent is None:
        pytest.skip("hints are off in this process")
    try:
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: the same lock id gets a token of the child's own key
            child = HINTS.hint_for(lock_id, "doc-forked")
            os.write(write, f"{child} {token_for(lock_id)}".encode())
            os._exit(0)
        os.close(write)
        _pid, status = os.waitpid(pid, 0)
        with os.fdopen(read) as f:
            hint, token = f.read().split()
    finally:
        HINTS.forget(lock_id)
    assert os.waitstatus_to_exitcode(status) == 0
    assert _token(hint) == token != _token(parent)
    assert token_for(lock_id) == _token(parent)


def test_each_acquisition_of_a_lock_records_its_own_token_heard_until_it_ends(
    tmp_path: Path,
) -> None:
    """On a store other processes share (a LocalStore), a lock object's every acquisition
    records a hint: a token of its own, heard while it holds and forgotten once released."""
    configure_hints("127.0.0.2")
    lock = LockBuilder().store(LocalStore(tmp_path)).path("hints", "own").owner("a").build()
    try:
        tokens = []
        for _ in range(2):
            assert lock.try_lock()
            holding = lock._st.holding
            assert holding is not None and holding.lease.holder is not None
            token = _token(holding.lease.holder.hint)
            assert token == token_for(holding.lock_id) and token in HINTS._tokens
            lock.unlock()
            assert token not in HINTS._tokens and holding.lock_id not in HINTS._ids
            tokens.append(token)
        assert tokens[0] != tokens[1]
    finally:
        lock.close()
        HINTS.configure(parse_setting(os.environ.get("PRIORITYLOCK_HINTS")))


def _token(hint: str | None) -> str:
    parsed = parse_hint(hint)
    assert parsed is not None
    return parsed[2]


def test_hints_past_the_rate_coalesce_into_one_later_notice(
    hints: Hints, heard: Heard, sender: socket.socket
) -> None:
    hint = hints.hint_for("lock-1", "doc-1")
    packet, address = MAGIC + token_for("lock-1").encode(), _to(hint)
    for _ in range(50):
        sender.sendto(packet, address)
    deadline = time.monotonic() + 5
    while hints.stats().delivered + hints.stats().coalesced < 50 and time.monotonic() < deadline:
        time.sleep(0.005)
    assert heard.by_where == {"doc-1": BURST}
    heard.event.clear()
    assert heard.event.wait(2 / RATE)  # the folded ones: one notice, when the rate allows
    assert heard.by_where == {"doc-1": BURST + 1}
    assert hints.stats().coalesced == 50 - BURST


def test_under_notice_faults_hints_come_with_forged_ones(
    hints: Hints, heard: Heard, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The notice-fault replay of the lock suites (``PRIORITYLOCK_NOTICES=faults:SEED``) gets
    a hint channel: besides the board's drops, duplicates and delays, forged datagrams."""

    class Now(Faults):
        def later(self, delay: float, send: Callable[[], None]) -> None:
            send()

    monkeypatch.setattr(NOTICES, "faults", Now(5))
    hint = hints.hint_for("lock-1", "doc-1")
    assert hint is not None
    for _ in range(100):
        hints.send([hint])
    deadline = time.monotonic() + 5
    stats = hints.stats()
    while (stats.dropped <= 20 or stats.delivered + stats.coalesced <= 100) and (
        time.monotonic() < deadline
    ):
        time.sleep(0.005)
        stats = hints.stats()
    assert stats.dropped > 20, "garbage and unknown tokens were forged"
    assert stats.delivered + stats.coalesced > 100, "and the right token again"


def test_closing_after_the_thread_closed_its_socket_loses_nothing(heard: Heard) -> None:
    """The listener's thread closes its socket as soon as it sees the listener closed, which
    may be before :meth:`Hints.configure` has woken it (a datagram or a coalesced notice came
    due in between): closing must not touch the socket, and the senders are closed even so."""
    own = Hints(heard)
    own.configure((("127.0.0.2", 0), None))
    hint = own.hint_for("lock-1", "doc-1")
    assert hint is not None
    own.send([hint])  # opens a sender
    assert heard.event.wait(5)
    listener = own._listener
    assert listener is not None and listener.thread is not None
    listener.open = False  # what configure does first; then the thread wakes on its own
    own.send([hint])
    listener.thread.join(5)
    assert listener.sock.fileno() == -1, "the thread closed its socket"
    senders = list(own._senders.values())
    own.close()  # raised OSError (EBADF) when closing read the closed socket's address
    assert senders and all(sender.fileno() == -1 for sender in senders)
