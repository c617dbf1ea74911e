"""Hints across hosts: a datagram that tells a holder or a waiter in another process to read its
lease now.

A lease records where its holder (and its requestor) hears hints: ``HOST:PORT/TOKEN``
(:func:`format_hint`), HOST an IPv4 address or a bracketed IPv6 one, TOKEN 22 chars of
base64url (128 bits, one per acquisition: a keyed hash of its lock id under a per-process
secret, worked out once when the acquisition begins and kept until it ends). A client whose
write concerns them (``_protocol.hinted``) sends each a datagram of :data:`DATAGRAM_BYTES`
bytes: :data:`MAGIC` and the token, nothing else.

One listener per process (:data:`HINTS`), opened on first use, shared by every lock object
(sync and asyncio, every store) and by ``prioritylock serve``: one UDP socket and one daemon
thread. A thread rather than an event loop's datagram endpoint because the listener serves
threaded locks and any number of event loops at once, and idles blocked in ``recvfrom`` at no
cost; what it hears goes to the notices board (``_wake``), which hands each loop its own.

A hint is a notice like the in-process and file-system ones: the receiver maps its token to the
document of the acquisition that recorded it and posts a notice there, so the lock reads now
and decides on what it reads. It never answers, never logs a token, and drops anything
malformed or whose token matches no acquisition of the process; hints with one token beyond
:data:`RATE` per second (after a burst of :data:`BURST`) coalesce into one notice when the
rate allows. The rate is per acquisition, so a lock that changes hands quickly is not slowed by
its predecessors' hints; anyone able to send valid tokens (a reader of the bucket) knows at
most the holder's and the requestor's, so a lock's reads stay within twice the rate. Drops are
counted (:func:`hint_stats`; a DEBUG line at most once a second).

Configuration (:func:`configure_hints`, or ``PRIORITYLOCK_HINTS`` read at import):

- unset: listen on 127.0.0.1, an ephemeral port, and record that;
- ``off``: no listener, nothing recorded, hints neither sent nor taken;
- ``ADDRESS`` or ``ADDRESS:PORT``: listen there and record that address;
- ``LISTEN=RECORD`` (each ``ADDRESS[:PORT]``; RECORD's port defaults to the one listened on):
  listen on one address and record another (NAT, a container publishing a port).
"""

from __future__ import annotations

import binascii
import contextlib
import hashlib
import heapq
import ipaddress
import logging
import os
import random
import re
import secrets
import socket
import threading
import time
from collections.abc import Callable, Iterable

import attrs

from prioritylock._errors import ConfigError
from prioritylock._lease import MAX_HINT_CHARS
from prioritylock._wake import NOTICES, Faults

__all__ = [
    "BURST",
    "DATAGRAM_BYTES",
    "HINTS",
    "MAGIC",
    "RATE",
    "HintStats",
    "Hints",
    "configure_hints",
    "format_hint",
    "hint_stats",
    "parse_address",
    "parse_hint",
    "parse_setting",
    "token_for",
]

log = logging.getLogger("prioritylock")

#: What every hint datagram starts with (a format version): a stray packet is not a hint.
MAGIC = b"PLH1"
#: Characters of a token: 128 bits of base64url, unpadded.
TOKEN_CHARS = 22
#: The whole datagram: the magic and the token.
DATAGRAM_BYTES = len(MAGIC) + TOKEN_CHARS
#: Notices one acquisition's hints (its token's) may cause per second, after a burst of
#: :data:`BURST`.
RATE = 2.0
BURST = 4

#: Under notice faults (tests): the chance that a hint sent comes with forged ones.
FORGE = 0.3

_TOKEN = re.compile(r"[A-Za-z0-9_-]{22}")
#: Tokens whose rate is remembered (emptied of idle ones when full).
_RATES_KEPT = 4096

#: An address as bound and recorded: (host, port).
Address = tuple[str, int]


# -- the hint string ------------------------------------------------------------------------------


def format_hint(host: str, port: int, token: str) -> str:
    """``HOST:PORT/TOKEN``, an IPv6 host in brackets."""
    shown = f"[{host}]" if ":" in host else host
    return f"{shown}:{port}/{token}"


def parse_hint(text: object) -> tuple[str, int, str] | None:
    """``(host, port, token)`` of a hint string, the host without brackets; None for anything
    else (a hint another version wrote, or a forged one: never sent to)."""
    if not isinstance(text, str) or len(text) > MAX_HINT_CHARS:
        return None
    where, slash, token = text.rpartition("/")
    if not slash or not _TOKEN.fullmatch(token):
        return None
    try:
        host, port = parse_address(where, need_port=True)
    except ValueError:
        return None
    if port == 0 or ipaddress.ip_address(host).is_unspecified:
        return None
    return host, port, token


def parse_address(text: str, *, default_port: int = 0, need_port: bool = False) -> Address:
    """``ADDRESS`` or ``ADDRESS:PORT`` (an IPv6 address bracketed when a port follows):
    ``(host, port)``, the host normalised.

    :raises ValueError: not an IP address literal (names are not resolved), or a bad port.
    """
    text = text.strip()
    port_text = ""
    if text.startswith("["):
        host, bracket, rest = text[1:].partition("]")
        if not bracket or (rest and not rest.startswith(":")):
            raise ValueError(f"not an address: {text!r}")
        port_text = rest[1:]
        if not isinstance(ipaddress.ip_address(host), ipaddress.IPv6Address):
            raise ValueError(f"not an IPv6 address in brackets: {text!r}")
    elif text.count(":") == 1:
        host, _, port_text = text.partition(":")
    else:
        host = text  # IPv4, or IPv6 without a port
    host = str(ipaddress.ip_address(host))
    if port_text:
        if not port_text.isdigit() or not 0 <= int(port_text) <= 65535:
            raise ValueError(f"not a port: {port_text!r}")
        return host, int(port_text)
    if need_port:
        raise ValueError(f"no port: {text!r}")
    return host, default_port


def parse_setting(setting: str | None) -> tuple[Address, Address | None] | None:
    """``PRIORITYLOCK_HINTS``'s value: ``(listen, record)`` (record None: the address listened
    on, with the port bound), or None for ``off``. Unset or empty: 127.0.0.1, any port.

    :raises ConfigError: not one of the forms the module docstring lists.
    """
    value = (setting or "").strip()
    if not value:
        return ("127.0.0.1", 0), None
    if value.lower() in ("off", "0", "false", "no"):
        return None
    listen_text, eq, record_text = value.partition("=")
    try:
        listen = parse_address(listen_text)
        record = None
        if eq:
            record = parse_address(record_text, default_port=listen[1])
    except ValueError as exc:
        raise ConfigError(
            f"hints: {setting!r} is not off, ADDRESS[:PORT] or LISTEN=RECORD ({exc})",
            option="hints",
        ) from None
    shown = record or listen
    if ipaddress.ip_address(shown[0]).is_unspecified:
        raise ConfigError(
            f"hints: {setting!r} would record {shown[0]}, which reaches nobody: say which "
            "address to record (LISTEN=RECORD, e.g. 0.0.0.0:7700=203.0.113.5)",
            option="hints",
        )
    return listen, record


# -- tokens ---------------------------------------------------------------------------------------


def token_for(lock_id: str) -> str:
    """The token of the acquisition ``lock_id``: unguessable without this process's key (drawn
    again in a forked child), the same for the same lock id within a process."""
    hasher = _keyed.copy()  # the key set up once per process: a copy, not a keyed init, per id
    hasher.update(lock_id.encode())
    text = binascii.b2a_base64(hasher.digest(), newline=False)[:TOKEN_CHARS]
    return text.translate(_URLSAFE).decode()


def _new_key() -> hashlib.blake2b:
    return hashlib.blake2b(key=secrets.token_bytes(32), digest_size=16)


_keyed = _new_key()
_URLSAFE = bytes.maketrans(b"+/", b"-_")


# -- the listener ---------------------------------------------------------------------------------


@attrs.frozen
class HintStats:
    """What the process's hint listener did: the address it records (``HOST:PORT``; None: hints
    off or not yet opened), hints that made a lock read (``delivered``), hints that came past
    the rate and were folded into a later read (``coalesced``), and hints dropped
    (``dropped``: malformed, or a token of no acquisition of this process)."""

    address: str | None
    delivered: int
    coalesced: int
    dropped: int


class _Rate:
    """One document's token bucket, and whether a coalesced notice is due."""

    __slots__ = ("pending", "stamp", "tokens")

    def __init__(self, now: float) -> None:
        self.tokens = float(BURST)
        self.stamp = now
        self.pending = False


class _Listener:
    """The socket and its thread; the thread ends when the socket is swapped or closed."""

    def __init__(self, sock: socket.socket, record: Address) -> None:
        self.sock = sock
        self.bound: Address = sock.getsockname()[:2]  # kept: the thread closes the socket
        self.record = record
        #: ``HOST:PORT/``, what every hint it records begins with.
        self.prefix = format_hint(record[0], record[1], "")
        self.open = True
        self.thread: threading.Thread | None = None


class Hints:
    """The process's hints (use :data:`HINTS`): the listener, what its tokens stand for, and
    the sending. Thread-safe.

    :param notice: posts a notice for a document (``_wake.Notices.notice_at``).
    :param clock: monotonic seconds, for the rate.
    """

    def __init__(
        self,
        notice: Callable[[object], None],
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._notice = notice
        self._clock = clock
        self._lock = threading.Lock()
        self._setting: tuple[Address, Address | None] | None = ("127.0.0.1", 0), None
        self._listener: _Listener | None = None
        self._failed = False  # the listener could not be opened: hints off, said once
        self._tokens: dict[str, object] = {}  # token -> the document's place on the board
        self._ids: dict[str, str] = {}  # lock id -> token, while its acquisition lasts
        self._senders: dict[int, socket.socket] = {}
        self._forger: tuple[Faults, random.Random] | None = None
        # Only the listener's thread touches these.
        self._rates: dict[str, _Rate] = {}  # by token: one acquisition's holding or wait
        self._due: list[tuple[float, int, str]] = []
        self._seq = 0
        self.delivered = self.coalesced = self.dropped = 0
        self._reported = (0, 0.0)  # drops counted at the last DEBUG line, and when

    # -- settings ----------------------------------------------------------------------------

    @property
    def enabled(self) -> bool:
        return self._setting is not None and not self._failed

    @property
    def reaches_other_hosts(self) -> bool:
        """Whether hints are on and record an address other hosts may reach (not loopback):
        a request from another host then tells a holder here at once, whatever its watch
        interval (unless a firewall or NAT stops the datagram)."""
        setting = self._setting
        if setting is None or self._failed:
            return False
        listen, record = setting
        return not ipaddress.ip_address((record or listen)[0]).is_loopback

    def configure(self, setting: tuple[Address, Address | None] | None) -> None:
        """Listen and record as ``setting`` says (see :func:`parse_setting`; None: off). An
        open listener is closed; the next acquisition opens the new one. Acquisitions already
        made keep the hint they recorded (a hint that no longer reaches them costs polling)."""
        with self._lock:
            self._setting = setting
            self._failed = False
            listener, self._listener = self._listener, None
        if listener is not None:
            self._close(listener)

    def close(self) -> None:
        """Hints off, and every socket closed (the listener's by its thread)."""
        try:
            self.configure(None)
        finally:
            with self._lock:
                senders, self._senders = self._senders, {}
            for sender in senders.values():
                sender.close()

    def stats(self) -> HintStats:
        listener = self._listener
        address = None
        if listener is not None:
            host, port = listener.record
            address = format_hint(host, port, "x").rpartition("/")[0]
        return HintStats(address, self.delivered, self.coalesced, self.dropped)

    # -- acquisitions ------------------------------------------------------------------------

    def hint_for(self, lock_id: str, where: object) -> str | None:
        """The hint the acquisition ``lock_id`` records, its hints posted to ``where`` from now
        on (until :meth:`forget`); None with hints off (or a listener that can't be opened)."""
        if self._setting is None:
            return None
        listener = self._listener or self._open()
        if listener is None:
            return None
        token = self._ids.get(lock_id)
        if token is None:  # (worked out once: its end needs it again, from ``_ids``)
            token = self._ids[lock_id] = token_for(lock_id)
        self._tokens[token] = where
        return listener.prefix + token

    def forget(self, lock_id: str) -> None:
        """The acquisition ``lock_id`` ended (its holding, or its wait): its token means nothing
        from now on."""
        token = self._ids.pop(lock_id, None)
        if token is not None:
            self._tokens.pop(token, None)

    # -- sending -----------------------------------------------------------------------------

    def send(self, hints: Iterable[str]) -> None:
        """Send each hint its datagram. Never blocks, never raises: a hint that can't go is
        the old latency, nothing more."""
        if not self.enabled:
            return
        for hint in hints:
            parsed = parse_hint(hint)
            if parsed is None:
                continue
            host, port, token = parsed
            family = socket.AF_INET6 if ":" in host else socket.AF_INET
            try:
                sender = self._senders.get(family) or self._sender(family)
                sender.sendto(MAGIC + token.encode(), (host, port))
            except OSError as exc:  # unreachable, buffer full, no such family here
                log.debug("prioritylock: a hint to %s:%d could not be sent: %s", host, port, exc)
                continue
            faults = NOTICES.faults
            if faults is not None:
                self._forge(faults, sender, (host, port), token)

    def _forge(self, faults: Faults, sender: socket.socket, to: Address, token: str) -> None:
        """Under ``PRIORITYLOCK_NOTICES=faults:SEED`` (tests): besides what the board does to
        every notice the hints cause (drop, duplicate, delay), forge datagrams at random, as
        anyone who can reach the listener may: garbage, an unknown token, and the right token
        again, later, with nothing written (a notice that nothing caused)."""
        with self._lock:
            forger = self._forger
            if forger is None or forger[0] is not faults:
                forger = self._forger = (faults, random.Random(faults.seed))
            roll, delay = forger[1].random(), forger[1].uniform(0.0, faults.MAX_DELAY)
        if roll >= FORGE:
            return
        forged = [b"forged", MAGIC + token_for(f"forged-{roll}").encode()]
        with contextlib.suppress(OSError):
            for data in forged:
                sender.sendto(data, to)
        again = MAGIC + token.encode()
        faults.later(delay, lambda: _quietly(sender.sendto, again, to))

    def _sender(self, family: int) -> socket.socket:
        with self._lock:
            sender = self._senders.get(family)
            if sender is None:
                sender = socket.socket(family, socket.SOCK_DGRAM)
                sender.setblocking(False)
                self._senders[family] = sender
            return sender

    # -- receiving -----------------------------------------------------------------------------

    def _open(self) -> _Listener | None:
        with self._lock:
            if self._listener is not None:
                return self._listener
            if self._setting is None or self._failed:
                return None
            (host, port), record = self._setting
            family = socket.AF_INET6 if ":" in host else socket.AF_INET
            sock = socket.socket(family, socket.SOCK_DGRAM)
            try:
                sock.bind((host, port))
            except OSError as exc:
                sock.close()
                self._failed = True
                log.warning(
                    "prioritylock: hints: cannot listen on %s:%d (%s); locks poll instead",
                    host,
                    port,
                    exc,
                )
                return None
            listener = _Listener(sock, record or (host, sock.getsockname()[1]))
            self._listener = listener
        thread = threading.Thread(
            target=self._run, args=(listener,), name="prioritylock-hints", daemon=True
        )
        listener.thread = thread
        thread.start()
        return listener

    def _close(self, listener: _Listener) -> None:
        listener.open = False  # from here on its thread may close the socket at any time
        host, port = listener.bound
        if ipaddress.ip_address(host).is_unspecified:
            host = "::1" if listener.sock.family == socket.AF_INET6 else "127.0.0.1"
        with contextlib.suppress(OSError):  # wake the thread: it sees the listener closed
            self._sender(listener.sock.family).sendto(b"", (host, port))

    def _run(self, listener: _Listener) -> None:
        sock = listener.sock
        try:
            while listener.open:
                due = self._due
                sock.settimeout(max(0.0, due[0][0] - self._clock()) if due else None)
                try:
                    data = sock.recv(64)
                except TimeoutError:
                    data = None
                except OSError:
                    continue  # an ICMP error reported on the socket, or it was closed
                if data is not None and listener.open:
                    self._receive(data)
                if due:
                    self._release_due()
        finally:
            sock.close()

    def _receive(self, data: bytes) -> None:
        token = where = None
        if len(data) == DATAGRAM_BYTES and data.startswith(MAGIC):
            token = data[len(MAGIC) :].decode("ascii", "replace")
            where = self._tokens.get(token)
        if token is None or where is None:
            self.dropped += 1
            self._report()
            return
        now = self._clock()
        rate = self._rates.get(token)
        if rate is None:
            if len(self._rates) >= _RATES_KEPT:
                self._forget_idle_rates(now)
            rate = self._rates[token] = _Rate(now)
        rate.tokens = min(float(BURST), rate.tokens + (now - rate.stamp) * RATE)
        rate.stamp = now
        if rate.tokens >= 1.0 and not rate.pending:
            rate.tokens -= 1.0
            self.delivered += 1
            self._notice(where)
            return
        self.coalesced += 1
        if not rate.pending:
            rate.pending = True
            self._seq += 1
            heapq.heappush(self._due, (now + (1.0 - rate.tokens) / RATE, self._seq, token))

    def _release_due(self) -> None:
        now = self._clock()
        due = self._due
        while due and due[0][0] <= now:
            _at, _seq, token = heapq.heappop(due)
            rate = self._rates.get(token)
            if rate is not None:
                rate.pending = False
                rate.tokens = max(0.0, min(float(BURST), rate.tokens + (now - rate.stamp) * RATE))
                rate.tokens = max(0.0, rate.tokens - 1.0)
                rate.stamp = now
            where = self._tokens.get(token)  # None: its acquisition ended meanwhile
            if where is not None:
                self.delivered += 1
                self._notice(where)

    def _forget_idle_rates(self, now: float) -> None:
        full = BURST / RATE  # a bucket idle this long is full: the same as none
        self._rates = {w: r for w, r in self._rates.items() if r.pending or now - r.stamp < full}

    def _report(self) -> None:
        if not log.isEnabledFor(logging.DEBUG):
            return
        counted, at = self._reported
        now = self._clock()
        if now - at >= 1.0:
            log.debug(
                "prioritylock: hints: %d dropped (malformed or unknown token) since the last "
                "report; %d in all, %d coalesced",
                self.dropped - counted,
                self.dropped,
                self.coalesced,
            )
            self._reported = (self.dropped, now)

    # -- fork ----------------------------------------------------------------------------------

    def _after_fork(self) -> None:
        """In a forked child: no listener (the parent's socket is the parent's), no tokens."""
        listener = self._listener
        self._lock = threading.Lock()
        self._listener = None
        self._tokens = {}
        self._ids = {}
        self._rates = {}
        self._due = []
        self._senders = {}
        if listener is not None:
            listener.open = False
            with contextlib.suppress(OSError):
                listener.sock.close()


def _quietly(send: Callable[..., object], *args: object) -> None:
    with contextlib.suppress(OSError):
        send(*args)


#: The process's hints, shared by every lock object and the service.
HINTS = Hints(NOTICES.notice_at)  # type: ignore[arg-type]


def configure_hints(listen: str | None = "127.0.0.1", *, record: str | None = None) -> None:
    """Where this process hears hints from other processes, and what its leases record.

    Call it before the first lock is taken (``PRIORITYLOCK_HINTS`` says the same at import;
    this call overrides it). ``listen``: ``ADDRESS`` or ``ADDRESS:PORT`` (an IPv6 one
    bracketed with a port; no port: any free one), or None for no hints at all (locks poll).
    ``record``: the ``ADDRESS[:PORT]`` other hosts reach this listener at, when that is not
    ``listen`` (NAT, a container publishing the port; no port: the one listened on).

    :raises ConfigError: an address that is not an IP literal, or one that records an
        unspecified address (0.0.0.0 without ``record``).
    """
    if listen is None:
        HINTS.configure(None)
        return
    HINTS.configure(parse_setting(listen if record is None else f"{listen}={record}"))


def hint_stats() -> HintStats:
    """What the process's hint listener did so far (see :class:`HintStats`)."""
    return HINTS.stats()


def _reseed() -> None:
    global _keyed
    _keyed = _new_key()
    HINTS._after_fork()


def _from_environment() -> None:
    setting = os.environ.get("PRIORITYLOCK_HINTS")
    try:
        HINTS.configure(parse_setting(setting))
    except ConfigError as exc:
        log.warning("prioritylock: PRIORITYLOCK_HINTS ignored, hints off: %s", exc)
        HINTS.configure(None)


_from_environment()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reseed)
