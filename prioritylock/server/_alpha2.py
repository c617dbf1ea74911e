"""The full lock API (Dapr's v2 proposal, plus priorities) over ``AsyncLock``.

A lock taken here is renewed by the service until it is unlocked, its stream ends, or it is
lost. The caller gets a ``lockID``: a random capability made here and known only to this process
and the caller (the lease's own lock id is readable by anyone who can read the store, so it
can't be the proof of ownership). A restarted service forgets its lock ids; the leases it held
are then no longer renewed and run out their TTL.

Two kinds of holder:

- A **plain** holder (a POST answered with JSON) has no channel to be told anything, so it does
  not cooperate with preemption: it keeps the lock until it unlocks or a forceful requestor takes
  it (it then learns of the loss from its next renew or unlock: 404 with the reason).
- A **stream** holder (an NDJSON stream) cooperates: a higher priority's request is sent as
  ``cleanup-requested``, and closing the stream (or unlocking) hands the lock over. A stream kept
  open past the cleanup window keeps the lock (nothing half-cleaned is handed over); a forceful
  requestor then takes it and the stream is told ``lost``, a non-forceful one gives up and the
  stream is told ``request-withdrawn``.

A waiting request whose non-forceful preemption ran out is refused (``ResourceLocked``: 409,
ABORTED), as ``try_lock`` would be; it does not wait on as the library's ``lock()`` does.

Requests at priority 2147483647 (the emergency override) and force unlocks are the operators':
the front end checks the operator token and passes ``operator=True``.

Everything here is transport-neutral: the HTTP routes (:mod:`._http2`, NDJSON streams) and the
gRPC ``LockService`` (:mod:`._grpc_lock`, server streams) both drive :class:`Alpha2Locks`, and a
stream holder's life (waiting with pings, the events, the release when it ends) is one
:class:`Holding` whichever carries it. What a stream holder is told is a typed event
(:mod:`._events`) that each front end renders.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import math
import re
import secrets
import time
from collections.abc import AsyncIterator, Hashable, Mapping
from typing import Any

import attrs

from prioritylock import signals
from prioritylock._alock import AsyncLock
from prioritylock._ascheduler import AsyncScheduler
from prioritylock._builder import LockBuilder
from prioritylock._errors import (
    ConfigError,
    CorruptLease,
    LockTimeout,
    NotLockOwner,
    PreemptionTimeout,
    PriorityLockError,
)
from prioritylock._info import LockInfo
from prioritylock._lease import OVERRIDE_PRIORITY
from prioritylock._listener import CleanupNotice, LockListener
from prioritylock._record import record
from prioritylock.server._events import (
    PING,
    CleanupRequested,
    Event,
    LockAcquired,
    Lost,
    Requestor,
    RequestWithdrawn,
)
from prioritylock.server._lockcache import LockCache
from prioritylock.server._metrics import API_ALPHA2, API_GRPC, Metrics
from prioritylock.server._names import BadRequest, Names
from scopes import LockScope

__all__ = [
    "MAX_LIST",
    "MAX_TTL",
    "MIN_TTL",
    "Alpha2Locks",
    "Forbidden",
    "Held",
    "Holding",
    "LockNotFound",
    "Options",
    "Pinger",
    "ResourceLocked",
    "Stream",
    "parse_duration",
]

log = logging.getLogger("prioritylock.server")

#: Bounds of a lease's ttl through the service: shorter leases would make it renew too often to
#: be cheap, longer ones would leave a crashed service's locks held too long.
MIN_TTL = 1.0
MAX_TTL = 24 * 3600.0
DEFAULT_TTL = 30.0
#: Most locks one list answers.
MAX_LIST = 1000
#: Lost locks remembered, so that their holders hear why on their next call (oldest go first).
MAX_LOST = 10_000

_FIELDS = frozenset(
    {
        "immediate",
        "ttl",
        "owner",
        "message",
        "priority",
        "cleanupTimeout",
        "waitingTimeout",
        "forceful",
        "timeout",
    }
)


class ResourceLocked(Exception):
    """Not acquired: someone else holds the lock (ERR_RESOURCE_LOCKED, 409)."""


class LockNotFound(LookupError):
    """No lock of this service has that lockID on that resource, or it was lost (404)."""


class Forbidden(PermissionError):
    """An operator's request without the operator token (403)."""


# -- durations ---------------------------------------------------------------------------------

_UNIT = {
    "ns": 1e-9,
    "us": 1e-6,
    "µs": 1e-6,  # Go accepts both micro signs
    "μs": 1e-6,
    "ms": 1e-3,
    "s": 1.0,
    "m": 60.0,
    "h": 3600.0,
}
_PIECE = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h)")


def parse_duration(value: object, field: str) -> float:
    """Seconds from a Go duration string (``"30s"``, ``"1m30s"``, ``"250ms"``) or a number of
    seconds (``30``, ``0.5``, ``"30"``).

    :raises BadRequest: anything else, or a negative or non-finite duration.
    """
    seconds: float
    if isinstance(value, bool):
        raise BadRequest(f'{field}: expected a duration such as "30s", got {value!r}')
    if isinstance(value, int | float):
        seconds = float(value)
    elif isinstance(value, str):
        text = value.strip()
        try:
            seconds = float(text)
        except ValueError:
            seconds = _go_duration(text, field)
    else:
        raise BadRequest(f"{field}: expected a duration such as '30s', got {type(value).__name__}")
    if not math.isfinite(seconds) or seconds < 0:
        raise BadRequest(f"{field}: must be a finite duration of 0 or more, got {value!r}")
    return seconds


def _go_duration(text: str, field: str) -> float:
    if text == "0":
        return 0.0
    pos, total = 0, 0.0
    while pos < len(text):
        match = _PIECE.match(text, pos)
        if match is None:
            raise BadRequest(
                f'{field}: {text[:40]!r} is not a duration (e.g. "30s", "1m30s", "250ms")'
            )
        total += float(match.group(1)) * _UNIT[match.group(2)]
        pos = match.end()
    if not text:
        raise BadRequest(f"{field}: empty duration")
    return total


# -- options -----------------------------------------------------------------------------------


@attrs.frozen
class Options:
    """What a lock request asks for (the JSON body of ``POST .../lock/{store}/{resourceId}``)."""

    immediate: bool = False
    ttl: float = DEFAULT_TTL
    owner: str | None = None
    message: str | None = None
    priority: int = 0
    cleanup_timeout: float | None = None
    waiting_timeout: float | None = None
    forceful: bool = False
    #: How long a blocking request waits for the lock (None: until acquired or the client goes).
    timeout: float | None = None

    @classmethod
    def parse(cls, body: Mapping[str, Any]) -> Options:
        """:raises BadRequest: a field of the wrong type or out of range (unknown fields are
        ignored, as Dapr ignores them)."""
        ttl = parse_duration(body.get("ttl", DEFAULT_TTL), "ttl")
        if not MIN_TTL <= ttl <= MAX_TTL:
            raise BadRequest(f"ttl: must be between {MIN_TTL:g} s and {MAX_TTL:g} s, got {ttl:g} s")
        priority = body.get("priority", 0)
        if isinstance(priority, bool) or not isinstance(priority, int):
            raise BadRequest(f"priority: expected an integer, got {priority!r}")
        return cls(
            immediate=_flag(body, "immediate"),
            ttl=ttl,
            owner=_text(body, "owner"),
            message=_text(body, "message"),
            priority=priority,
            cleanup_timeout=_duration(body, "cleanupTimeout"),
            waiting_timeout=_duration(body, "waitingTimeout"),
            forceful=_flag(body, "forceful"),
            timeout=_duration(body, "timeout"),
        )


def _flag(body: Mapping[str, Any], name: str) -> bool:
    value = body.get(name, False)
    if not isinstance(value, bool):
        raise BadRequest(f"{name}: expected true or false, got {value!r}")
    return value


def _text(body: Mapping[str, Any], name: str) -> str | None:
    value = body.get(name)
    if value is not None and not isinstance(value, str):
        raise BadRequest(f"{name}: expected a string")
    return value


def _duration(body: Mapping[str, Any], name: str) -> float | None:
    value = body.get(name)
    return None if value is None else parse_duration(value, name)


# -- streams -----------------------------------------------------------------------------------


class Stream:
    """The events for one NDJSON stream holder, and the news that the stream has ended."""

    def __init__(self) -> None:
        self.events: asyncio.Queue[Event | _AcquireEnded] = asyncio.Queue()
        self.closed = asyncio.Event()
        #: The client closed the stream after cleanup-requested, within the window: handing
        #: over then is its release, not a loss.
        self.cooperated = False
        #: When (the loop's time) the stream was last sent something, a ping included.
        self.last_sent = 0.0

    def send(self, event: Event) -> None:
        if not self.closed.is_set():
            self.events.put_nowait(event)


class _StreamListener(LockListener):
    """A stream holder's side of cooperative preemption. A lock object taken over by another
    stream's request (``LockCache``) is given that ``stream``: what it is told of a holding
    goes to the stream of that holding (a cleanup under way keeps the stream it began with)."""

    def __init__(self, stream: Stream) -> None:
        self.stream = stream

    async def on_cleanup_notification(self, notice: CleanupNotice) -> None:
        stream = self.stream
        stream.send(
            CleanupRequested(
                deadline=notice.deadline_wall,
                seconds_left=round(max(0.0, notice.seconds_left()), 3),
                requestor=Requestor.of(notice),
            )
        )
        try:
            await asyncio.wait_for(stream.closed.wait(), max(0.0, notice.seconds_left()))
            stream.cooperated = True
        except asyncio.TimeoutError:  # the builtin TimeoutError from Python 3.11 on
            # The client kept its stream open past the window: it has not said it is done, so
            # nothing is handed over. Ending the cleanup as cancelled keeps the lock (and lets a
            # later request be announced); a forceful requestor takes it and we say `lost`.
            log.warning(
                "prioritylock serve: %r: the stream holder kept the lock past its cleanup window",
                notice.lock.key,
            )
            raise asyncio.CancelledError from None

    def on_request_withdrawn(self, notice: CleanupNotice) -> None:
        self.stream.send(RequestWithdrawn(Requestor.of(notice)))

    def on_lock_lost(self, lock: Any, reason: str) -> None:
        self.stream.send(Lost(reason))


# -- the locks ---------------------------------------------------------------------------------


@attrs.define(eq=False)
class Held:
    """One lock held through this API."""

    lock_id: str
    store_name: str
    resource_id: str
    lock: AsyncLock
    stream: Stream | None
    #: The ``api`` label its metrics are counted under.
    api: str = API_ALPHA2
    ending: asyncio.Future[None] | None = None
    #: What the lock object was built for (``LockCache``): it goes back there once released.
    built_for: Hashable = None

    @property
    def fence(self) -> int:
        return self.lock.fencing_token


class Alpha2Locks:
    """Blocking and immediate locks with priorities, renewed by the service, on named stores."""

    def __init__(
        self,
        names: Names,
        *,
        scheduler: AsyncScheduler | None = None,
        metrics: Metrics | None = None,
    ) -> None:
        self.names = names
        self._scheduler = scheduler
        self.metrics = metrics or Metrics()
        for name in names.store_names:
            self.metrics.prepare(name, API_ALPHA2)
            self.metrics.prepare(name, API_GRPC)
        self._held: dict[str, Held] = {}
        #: Lock objects no request uses now, for the next request on the same lock and options.
        self.idle = LockCache()
        self._by_lock: dict[int, Held] = {}
        # lock id -> (store, resource, why): a lost lock is let go at once, its reason kept; a
        # released one is remembered too, so that a second unlock hears which it was.
        self._lost: collections.OrderedDict[str, tuple[str, str, str]] = collections.OrderedDict()
        signals.lock_lost.connect(self._on_lost, weak=False)
        signals.cleanup_requested.connect(self._on_cleanup, weak=False)

    def close(self) -> None:
        """Stop listening to the library's signals (after :meth:`shutdown`)."""
        signals.lock_lost.disconnect(self._on_lost)
        signals.cleanup_requested.disconnect(self._on_cleanup)

    def _on_cleanup(self, sender: object, **_: object) -> None:
        held = self._by_lock.get(id(sender))
        if held is not None and held.lock is sender:
            self.metrics.preempted(held.store_name, held.api)

    def _on_lost(self, sender: object, *, reason: str, **_: object) -> None:
        held = self._by_lock.get(id(sender))
        if held is None or held.lock is not sender or held.ending is not None:
            return  # not ours, or being released (a handover ends a holding as "preempted")
        self._tombstone(held, reason)

    def _tombstone(self, held: Held, reason: str) -> None:
        if self._held.get(held.lock_id) is held:
            self.metrics.lost(held.store_name, held.api, reason)
        self._forget(held)
        self._remember(held, reason)

    def _remember(self, held: Held, reason: str) -> None:
        """Keep why a lock id ended (a reason of loss, or ``released``), for the 404 to say."""
        self._lost[held.lock_id] = (held.store_name, held.resource_id, reason)
        while len(self._lost) > MAX_LOST:
            self._lost.popitem(last=False)

    @property
    def held(self) -> list[Held]:
        return list(self._held.values())

    async def lock(
        self,
        store_name: str,
        resource_id: str,
        options: Options,
        *,
        stream: Stream | None = None,
        operator: bool = False,
        api: str = API_ALPHA2,
    ) -> Held:
        """Take the lock (now, or waiting as the options say) and keep renewing it.

        :raises StoreNotFound: no such store.
        :raises BadRequest: an invalid field or resource id.
        :raises Forbidden: priority 2147483647 without ``operator``.
        :raises ResourceLocked: not acquired (immediate, timeout, or the holder kept it).
        :raises ConditionFailed: never (no guards are offered here).
        :raises StoreError: the store failed (CorruptLease: a document it can't trust).
        """
        key, lock = self._take(store_name, resource_id, options, stream, operator)
        started = time.monotonic()
        try:
            if options.immediate:
                got = await lock.try_lock()
            else:
                await lock.lock(options.timeout)
                got = True
        except PreemptionTimeout as exc:
            self._refused(store_name, api, started)
            self.idle.give(key, lock)
            raise ResourceLocked(f"the holder did not hand over in time: {exc}") from None
        except LockTimeout as exc:
            self._refused(store_name, api, started)
            self.idle.give(key, lock)
            raise ResourceLocked(f"not acquired within the timeout: {exc}") from None
        except PriorityLockError:
            self.metrics.failed(store_name, api, latency=time.monotonic() - started)
            await lock.aclose()
            raise
        except BaseException:
            await lock.aclose()
            raise
        if not got:
            self._refused(store_name, api, started)
            self.idle.give(key, lock)
            raise ResourceLocked(f"lock {resource_id} in store {store_name} is held")
        lock_id = secrets.token_urlsafe(24)
        held = Held(lock_id, store_name, resource_id, lock, stream, api, built_for=key)
        self._held[held.lock_id] = held
        self._by_lock[id(lock)] = held
        took = time.monotonic() - started
        self.metrics.acquired(store_name, api, latency=took, waited=took, line=lock._line_length())
        if not lock.is_current_owner():  # lost between the acquire and now
            self._tombstone(held, _lost_reason(lock))
        return held

    def _released(self, held: Held) -> None:
        if self._held.get(held.lock_id) is held:
            self.metrics.released(held.store_name, held.api)
        self._remember(held, _RELEASED)

    def _refused(self, store_name: str, api: str, started: float) -> None:
        self.metrics.refused(store_name, api, latency=time.monotonic() - started)

    async def unlock(self, store_name: str, resource_id: str, lock_id: str) -> None:
        """Release (or, with a request pending, hand over) the lock ``lock_id`` names.

        :raises LockNotFound: no such lock here, or it was lost (the message says why).
        :raises StoreError: the store failed.
        """
        held = self._find(store_name, resource_id, lock_id)
        await self.end(held)

    async def renew(self, store_name: str, resource_id: str, lock_id: str) -> Held:
        """Renew now: proof that the lock is still held.

        :raises LockNotFound: no such lock here, or it was lost.
        :raises StoreError: the store failed.
        """
        held = self._find(store_name, resource_id, lock_id)
        try:
            await held.lock.renew()
        except NotLockOwner:
            reason = _lost_reason(held.lock)
            self._tombstone(held, reason)
            raise LockNotFound(f"the lock was lost ({reason})") from None
        return held

    async def force_unlock(
        self, store_name: str, resource_id: str, message: str, *, by: str
    ) -> LockInfo | None:
        """The operators' force unlock, recorded in the lease; returns the lease before.

        :raises StoreError: the store failed (CorruptLease included: it is not overwritten).
        """
        key, probe = self._take(store_name, resource_id)
        try:
            found = await probe.force_unlock(message, by=by)
        except ConfigError as exc:
            raise BadRequest(str(exc)) from None
        self.idle.give(key, probe)
        return found

    async def info(self, store_name: str, resource_id: str) -> dict[str, Any]:
        """The lease as the CLI's ``info --json`` shows it.

        :raises CorruptLease: the document can't be trusted.
        :raises StoreError: the store failed.
        """
        key, probe = self._take(store_name, resource_id)
        info = await probe.info()
        self.idle.give(key, probe)
        scope = LockScope.path(*self.names.path(store_name, resource_id))
        return {"resourceId": resource_id, **record(scope, info, time.time())}

    async def list(self, store_name: str, prefix: str, limit: int) -> list[dict[str, Any]]:
        """The locks of this app under ``prefix`` (a resource id prefix), at most ``limit``."""
        store = self.names.store(store_name)
        parts = self.names.prefix(store_name)
        base = LockScope.path(*parts).key + "/" if parts else "v1/path/"
        keys = await asyncio.to_thread(lambda: sorted(store.list(base + prefix))[:limit])
        rows: list[dict[str, Any]] = []
        for key in keys:
            try:
                scope = LockScope.from_key(key)
            except ValueError:
                continue
            resource = self.names.resource_id(store_name, scope)
            if resource is None:
                continue
            try:
                rows.append(await self.info(store_name, resource))
            except CorruptLease as exc:
                rows.append(
                    {"resourceId": resource, "key": key, "state": "corrupt", "problem": exc.problem}
                )
            except BadRequest:
                continue
        return rows

    async def end(self, held: Held) -> None:
        """Release ``held`` once, however many ask (the client, the stream's end, a shutdown).

        :raises LockNotFound: it was lost before the release.
        """
        if held.ending is None:
            held.ending = asyncio.ensure_future(self._release(held))
            # A waiter cancelled meanwhile (a stream handler at shutdown) drops its interest:
            # the outcome is taken here, so no release ends as "exception never retrieved".
            held.ending.add_done_callback(_outcome_taken)
        await asyncio.shield(held.ending)

    async def _release(self, held: Held) -> None:
        try:
            await held.lock.unlock()
        except NotLockOwner:
            reason = _lost_reason(held.lock)
            if reason == "preempted" and held.stream is not None and held.stream.cooperated:
                self._released(held)  # the handover after its cleanup beat us to it
                return
            self._tombstone(held, reason)
            raise LockNotFound(f"the lock was lost ({reason})") from None
        else:
            self._released(held)
        finally:
            self._forget(held)
            if held.stream is not None:
                held.stream.closed.set()
        self.idle.give(held.built_for, held.lock)  # released: the next request may take it over

    async def shutdown(self) -> None:
        """Tell every stream holder and release its lock; plain holders keep their leases,
        which run out their TTL once no longer renewed."""
        streams = [held for held in self._held.values() if held.stream is not None]
        for held in streams:
            assert held.stream is not None
            held.stream.send(Lost("service-stopping"))
        ends = (self.end(held) for held in streams)
        results = await asyncio.gather(*ends, return_exceptions=True)
        for held, result in zip(streams, results, strict=True):
            if isinstance(result, BaseException) and not isinstance(result, LockNotFound):
                log.error(
                    "prioritylock serve: release of %s/%s at shutdown failed: %s",
                    held.store_name,
                    held.resource_id,
                    result,
                )

    def _find(self, store_name: str, resource_id: str, lock_id: str) -> Held:
        self.names.path(store_name, resource_id)  # StoreNotFound / BadRequest first
        held = self._held.get(lock_id)
        if held is not None and held.ending is None and not held.lock.is_current_owner():
            self._tombstone(held, _lost_reason(held.lock))  # noticed now (an expiry)
            held = None
        lost = self._lost.get(lock_id)
        if lost is not None and lost[:2] == (store_name, resource_id):
            if lost[2] == _RELEASED:
                raise LockNotFound(f"the lock {resource_id} of that lockID was already released")
            raise LockNotFound(f"the lock was lost ({lost[2]})")
        if held is None or (held.store_name, held.resource_id) != (store_name, resource_id):
            raise LockNotFound(f"no lock {resource_id} with that lockID in store {store_name}")
        return held

    def _forget(self, held: Held) -> None:
        if self._held.get(held.lock_id) is held:
            del self._held[held.lock_id]
        if self._by_lock.get(id(held.lock)) is held:
            del self._by_lock[id(held.lock)]

    def _builder(self, store_name: str, resource_id: str) -> LockBuilder:
        return (
            LockBuilder()
            .store(self.names.store(store_name))
            .path(*self.names.path(store_name, resource_id))
        )

    def _take(
        self,
        store_name: str,
        resource_id: str,
        options: Options | None = None,
        stream: Stream | None = None,
        operator: bool = False,
    ) -> tuple[Hashable, AsyncLock]:
        """A lock object for this request alone: an idle one built for the same lock and options
        (``LockCache``), else a new one (``options`` None: a probe, for reads and force unlocks);
        and the key to give it back under."""
        if options is not None and options.priority == OVERRIDE_PRIORITY and not operator:
            raise Forbidden("priority 2147483647 (the emergency override) needs the operator token")
        # What the lock object's config is built from: not how long or whether this one waits.
        terms = None if options is None else attrs.evolve(options, immediate=False, timeout=None)
        key = (store_name, resource_id, terms, stream is not None)
        lock = self.idle.take(key)
        if lock is None:
            self.idle.built_one()
            if options is None:
                builder = self._builder(store_name, resource_id)
                lock = builder.build_async(scheduler=self._scheduler)
            else:
                lock = self._build(store_name, resource_id, options, stream)
        elif stream is not None:
            assert isinstance(lock.config.listener, _StreamListener)
            lock.config.listener.stream = stream  # what it is told goes to this stream now
        return key, lock

    def _build(
        self, store_name: str, resource_id: str, options: Options, stream: Stream | None
    ) -> AsyncLock:
        builder = self._builder(store_name, resource_id)
        message = options.message or f"locked through prioritylock serve by app {self.names.app_id}"
        try:
            builder.owner(options.owner or self.names.app_id).lease_timeout(options.ttl)
            builder.keep_waiting(False)  # a priority request whose wait ran out answers 409
            if options.priority == OVERRIDE_PRIORITY:
                builder.emergency_override(message)
            else:
                builder.priority(options.priority).forceful(options.forceful).message(message)
                if options.waiting_timeout is not None:
                    builder.waiting_timeout(options.waiting_timeout)
            if options.cleanup_timeout is not None:
                builder.cleanup_timeout(options.cleanup_timeout)
            if stream is not None:
                builder.listener(_StreamListener(stream))
            return builder.build_async(scheduler=self._scheduler)
        except ConfigError as exc:
            raise BadRequest(str(exc)) from None


# -- a stream holder, whatever carries it ----------------------------------------------------------


class Pinger:
    """One timer for every open stream: a ping to each stream that was sent nothing for an
    interval (checked ten times an interval: no timer, task or timeout per stream)."""

    def __init__(self, interval: float) -> None:
        self.interval = interval
        self._streams: set[Stream] = set()
        self._task: asyncio.Task[None] | None = None

    def add(self, stream: Stream) -> None:
        self._streams.add(stream)
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._run())

    def discard(self, stream: Stream) -> None:
        self._streams.discard(stream)

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while self._streams:
            await asyncio.sleep(self.interval / 10)
            due = loop.time() - self.interval
            for stream in self._streams:
                if stream.last_sent <= due:
                    stream.last_sent = loop.time()
                    stream.events.put_nowait(PING)


class _AcquireEnded:
    """Never sent: the cue to :meth:`Holding.events` that the acquire has an outcome."""


_ACQUIRE_ENDED = _AcquireEnded()


class Holding:
    """One stream holder's life: the request, its wait (with pings), the events while it holds,
    and the release (or handover) when the stream ends, however it ends.

    A front end calls :meth:`started` (an ``immediate`` refusal raises there, before anything
    is sent), relays :meth:`events` to its client, and calls :meth:`close` in a ``finally``.
    """

    def __init__(
        self,
        locks: Alpha2Locks,
        store_name: str,
        resource_id: str,
        options: Options,
        *,
        operator: bool,
        pinger: Pinger,
        api: str = API_ALPHA2,
    ) -> None:
        self._locks = locks
        self._options = options
        self._pinger = pinger
        self.stream = Stream()
        self.held: Held | None = None
        self._acquiring = asyncio.ensure_future(
            locks.lock(
                store_name, resource_id, options, stream=self.stream, operator=operator, api=api
            )
        )

    async def started(self) -> None:
        """Return once the stream may begin.

        :raises ResourceLocked, BadRequest, Forbidden, StoreNotFound, PriorityLockError: an
            ``immediate`` request was refused or failed.
        """
        if self._options.immediate:
            await asyncio.wait({self._acquiring})
            if self._acquiring.exception() is not None:
                self._acquiring.result()

    async def events(self) -> AsyncIterator[Event]:
        """Pings until ``lock-acquired``; then pings, ``cleanup-requested`` (and
        ``request-withdrawn`` when that request is given up) and at last ``lost`` (the
        iteration then ends).

        :raises ResourceLocked, BadRequest, Forbidden, StoreNotFound, PriorityLockError: the
            request was refused or failed while waiting.
        """
        stream = self.stream
        self._acquiring.add_done_callback(lambda _: stream.events.put_nowait(_ACQUIRE_ENDED))
        loop = asyncio.get_running_loop()
        stream.last_sent = loop.time()
        self._pinger.add(stream)
        early: list[Event] = []  # told before we could say it was acquired
        while True:
            event = await stream.events.get()
            if isinstance(event, _AcquireEnded):
                self.held = held = self._acquiring.result()
                stream.last_sent = loop.time()
                yield LockAcquired(held.lock_id, held.fence)
                for event in early:
                    stream.events.put_nowait(event)
                continue
            if self.held is None and event is not PING:
                early.append(event)
                continue
            if event is not PING:
                stream.last_sent = loop.time()
            yield event
            if isinstance(event, Lost):
                return

    async def close(self) -> None:
        """End the stream: withdraw a request still waiting, release (or hand over) a lock."""
        self._pinger.discard(self.stream)
        self.stream.closed.set()
        acquiring = self._acquiring
        if not acquiring.done():
            acquiring.cancel()  # a cancelled acquire settles: nothing is left claimed
            with contextlib.suppress(BaseException):
                await acquiring
        if self.held is None and acquiring.done() and not acquiring.cancelled():
            with contextlib.suppress(Exception):
                self.held = acquiring.result()  # acquired, but the client never heard of it
        if self.held is not None:
            await end_quietly(self._locks, self.held)


async def end_quietly(locks: Alpha2Locks, held: Held) -> None:
    """Release ``held`` for a client that can no longer hear the outcome (it is logged)."""
    try:
        await locks.end(held)
    except LockNotFound:
        pass  # lost before: the stream was told
    except PriorityLockError as exc:
        log.error(
            "prioritylock serve: release of %s in store %s after its stream ended failed: %s",
            held.resource_id,
            held.store_name,
            exc,
        )


def _outcome_taken(ending: asyncio.Future[None]) -> None:
    if not ending.cancelled():
        ending.exception()


#: Why a lock id ended when its holder unlocked it (or handed it over): not a loss.
_RELEASED = "released"


def _lost_reason(lock: AsyncLock) -> str:
    holding = lock._st.holding  # the reason is kept on the holding
    return (holding.lost if holding is not None else None) or _RELEASED
