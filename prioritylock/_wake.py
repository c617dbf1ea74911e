"""In-process change notices: a write to a lease document tells the other locks of this process
that wait on it or hold it to read it now.

One process-wide :data:`NOTICES` board, used by both drivers, for every store. A notice is only
a hint: it moves a read earlier and decides nothing (the flows decide on what the read returns),
so a lost, late, duplicated or reordered notice costs latency, never safety. Notices for one
document coalesce: a waiter is woken once (its event stays set until it reads), a holder's watch
is brought forward once (the scheduler keeps one due time per lease).

Two kinds of interest, both keyed by the document's *location* (the store's ``namespace``, or the
store object itself when it names nothing, and the key):

- a **waiter** (:meth:`Notices.arm`) is woken by the next notice and then forgotten: a lock
  between attempts to acquire arms before it reads, then pauses on the waiter; a notice that
  lands after the read ends the pause at once. Waiters are held weakly: a lock that stops
  waiting just drops its waiter.
- a **watcher** (:meth:`Notices.watch`) is called on every notice until it is removed: a holder's
  heartbeat, whose watch read the scheduler then brings forward. The notice of a request for the
  lock carries a :class:`Stamp` (the version the write made, when it was sent and on which
  clock), so the holder can count its cleanup window from the write rather than from its last
  quiet read (``_protocol.window_start``); the holder uses it only when it reads that version.

Each is told from the notifying thread: a waiter or watcher that lives on an event loop hands
the call to its loop (:class:`LoopWaiter`, and the async scheduler's ``poke``).

A store that can tell when a key may have changed (``stores._base.KeyWatcher``: ``watch_key``,
e.g. file-system notification) feeds the same board: the first interest in a location of such a
store subscribes, and the subscription ends when a notice finds nobody interested any more.
Whether a store can is decided once per lock object (:func:`place`), not per notice.

A holder that is never asked pays almost nothing for being askable: its in-process interest is
a dictionary entry, and its store subscription (an inotify watch, whose every event another
thread must read, GIL and all) waits while this process holds the document in quick bursts.
After :data:`BRIEF_STREAK` holdings in a row that ended within :data:`GRACE` of their start
un-asked, a new holding's subscription is *deferred*: the driver makes it (:meth:`Notices.feed`)
at the holding's first heartbeat, :data:`GRACE` later, and reads the document then (what
landed meanwhile). A holding that was asked, or outlived the grace, makes the next one
subscribe at once. So a try-lock/unlock loop subscribes nothing, and a request from another
process reaches a holder at once unless it lands in the first :data:`GRACE` (up to twice that,
on the heartbeat's grid) of a holding that follows such a burst.

``PRIORITYLOCK_NOTICES=off`` drops every notice (each lock polls); ``faults:SEED`` drops,
duplicates and delays them at random (:class:`Faults`), for tests.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
import threading
import weakref
from collections.abc import Callable
from typing import NamedTuple

from prioritylock._errors import ConditionFailed
from prioritylock.stores._base import KeyWatcher

__all__ = [
    "BRIEF_STREAK",
    "GRACE",
    "NOTICES",
    "Faults",
    "LoopWaiter",
    "Notices",
    "Place",
    "Stamp",
    "ThreadWaiter",
    "Waiter",
    "Watching",
    "location",
    "place",
]

log = logging.getLogger("prioritylock")

#: A document, process-wide: (what the store addresses, key).
Location = tuple[object, str]

#: Seconds a holding must last (or be asked) for the next holding to subscribe at once.
GRACE = 0.01
#: Brief, un-asked holdings in a row after which a holding's store subscription is deferred.
BRIEF_STREAK = 3


def location(store: object, key: str) -> Location:
    """The document ``key`` of ``store``, process-wide: stores that know what they address (a
    directory, a bucket) say so in ``namespace``, so lock objects with separate store objects on
    the same data hear each other."""
    return (getattr(store, "namespace", None) or id(store), key)


class Place(NamedTuple):
    """A lock object's document on the board, worked out once (:func:`place`): its location,
    its key, and the store that feeds notices for it (``KeyWatcher``), if the store can."""

    where: Location
    store: object
    key: str
    feed: KeyWatcher | None


def place(store: object, key: str) -> Place:
    """``key`` of ``store`` on the board; whether the store notices changes itself is looked up
    here, once (a runtime-checkable ``Protocol`` check costs microseconds)."""
    feed = store if isinstance(store, KeyWatcher) else None
    return Place(location(store, key), store, key, feed)


class Stamp(NamedTuple):
    """What the notice of a request write says of it: the ``version`` it made, and when it was
    sent (``at``, by ``clock``'s ``monotonic``, read before the call was made)."""

    version: str
    at: float
    clock: object


class Waiter:
    """One wait for a notice; :meth:`notify` may be called from any thread, more than once.

    ``behind``: set when the waiter waits in the lock's line behind its head and can do nothing
    before the waiters ahead of it have had their turn (``effects.Pause.behind``: its place in
    the line's order). A notice wakes every waiter not so placed, and of those so placed only
    the first in that order: when the lock comes free it goes to the head, and the next of this
    process is the one to read (the head may be in another process, or gone); the others would
    read only to find themselves still behind. Each is woken in its turn, as the one before it
    leaves the line (or by its own pause's end, as every waiter is). The first stays armed
    while it reads: notices in a burst (a release, the take, the store's own) wake it again
    rather than each the next one behind."""

    __slots__ = ("__weakref__", "behind", "owner")

    def __init__(self, owner: object) -> None:
        self.owner = owner  # the lock object waiting: its own writes don't wake it
        self.behind: tuple[int, float] | None = None

    def notify(self) -> None:
        raise NotImplementedError


class ThreadWaiter(Waiter):
    """A waiter a thread waits on (``Clock.wait(waiter.event, timeout)``)."""

    __slots__ = ("event",)

    def __init__(self, owner: object) -> None:
        super().__init__(owner)
        self.event = threading.Event()

    def notify(self) -> None:
        self.event.set()


class LoopWaiter(Waiter):
    """A waiter a task awaits (``waiter.event.wait()``) on the loop that made it."""

    __slots__ = ("event", "loop")

    def __init__(self, owner: object) -> None:
        super().__init__(owner)
        self.loop = asyncio.get_running_loop()
        self.event = asyncio.Event()

    def notify(self) -> None:
        on_loop(self.loop, self.event.set)


def on_loop(loop: asyncio.AbstractEventLoop, fn: Callable[[], object]) -> None:
    """Call ``fn`` on ``loop``: at once when called from it, else handed over (a closed loop
    has nobody left to tell)."""
    try:
        running: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
    except RuntimeError:
        running = None
    if loop is running:
        fn()
    elif not loop.is_closed():
        with contextlib.suppress(RuntimeError):  # closed meanwhile
            loop.call_soon_threadsafe(fn)


class Watching:
    """A holder's interest (:meth:`Notices.watch_at`), and the board's entry for it: whether
    its store subscription is made (``fed``; False: deferred, the driver calls
    :meth:`Notices.feed`), when it began on the holder's clock (``started``), and whether a
    notice reached it (``heard``). One object per holding: it is made on every acquire."""

    __slots__ = ("callback", "fed", "heard", "owner", "place", "started")

    def __init__(
        self,
        place: Place,
        owner: object,
        callback: Callable[[Stamp | None], None],
        started: float,
        fed: bool,
    ) -> None:
        self.place = place
        self.owner = owner  # its own writes don't call it
        self.callback = callback
        self.started = started
        self.fed = fed
        self.heard = False  # a notice reached it


class Notices:
    """The process's board of notices (use :data:`NOTICES`). Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._waiters: dict[Location, weakref.WeakSet[Waiter]] = {}
        self._watchers: dict[Location, list[Watching]] = {}
        self._feeds: dict[Location, Callable[[], None]] = {}
        # Brief, un-asked holdings in a row, by location (see GRACE); bounded.
        self._brief: dict[Location, int] = {}
        #: False: notices are dropped (tests show the locks are correct without them).
        self.enabled = True
        #: Seeded faults on every notice (tests show the locks are correct with them).
        self.faults: Faults | None = None

    # -- interest ----------------------------------------------------------------------------

    def arm(self, store: object, key: str, waiter: Waiter) -> Waiter:
        """Wake ``waiter`` at the next notice for ``key`` of ``store`` (once)."""
        return self.arm_at(place(store, key), waiter)

    def arm_at(self, at: Place, waiter: Waiter) -> Waiter:
        """:meth:`arm`, on a place worked out once."""
        where = at.where
        with self._lock:
            self._waiters.setdefault(where, weakref.WeakSet()).add(waiter)
        self._feed(at)
        return waiter

    def watch(
        self, store: object, key: str, owner: object, callback: Callable[[Stamp | None], None]
    ) -> Watching:
        """Call ``callback`` (from any thread) at every notice for ``key`` of ``store`` that
        ``owner`` did not send, with the notice's :class:`Stamp` (None: none), until
        :meth:`unwatch` is given the handle returned."""
        return self.watch_at(place(store, key), owner, callback, started=0.0, may_defer=False)

    def watch_at(
        self,
        at: Place,
        owner: object,
        callback: Callable[[Stamp | None], None],
        *,
        started: float,
        may_defer: bool = True,
    ) -> Watching:
        """:meth:`watch`, on a place worked out once, for a holding that began at ``started``
        (its lock's monotonic clock). ``may_defer``: the caller will call :meth:`feed` at the
        holding's first heartbeat if the handle says the store subscription was deferred (see
        the module docstring)."""
        where = at.where
        with self._lock:
            defer = may_defer and at.feed is not None and self._brief.get(where, 0) >= BRIEF_STREAK
            watching = Watching(at, owner, callback, started, not defer)
            self._watchers.setdefault(where, []).append(watching)
        if not defer and at.feed is not None:
            self._feed(at)
        return watching

    def feed(self, watching: Watching) -> None:
        """Make a deferred store subscription (at the holding's first heartbeat; idempotent)."""
        if not watching.fed:
            watching.fed = True
            self._feed(watching.place)

    def unwatch(self, handle: Watching, ended: float | None = None) -> None:
        """Stop the calls of :meth:`watch`; ``ended``: when the holding ended (its lock's clock),
        to judge whether it was brief."""
        where = handle.place.where
        brief = ended is not None and not handle.heard and ended - handle.started < GRACE
        with self._lock:
            watchers = self._watchers.get(where)
            if watchers is not None:
                if handle in watchers:  # (not contextlib.suppress: three calls per release)
                    watchers.remove(handle)
                if not watchers:
                    del self._watchers[where]
            if brief:
                if len(self._brief) >= _BRIEF_KEYS:
                    self._brief.clear()
                self._brief[where] = min(BRIEF_STREAK, self._brief.get(where, 0) + 1)
            elif ended is not None:
                self._brief.pop(where, None)
        if where in self._feeds:  # (read without the lock: a hint)
            self._unfeed_if_idle(where)

    # -- notices -----------------------------------------------------------------------------

    def notice(
        self, store: object, key: str, *, source: object = None, stamp: Stamp | None = None
    ) -> None:
        """``key`` of ``store`` may have changed (``source``, the lock object that wrote, if
        any, is not told): wake its waiters, poke its watchers (with ``stamp``, a request
        write's)."""
        self.notice_at(location(store, key), source=source, stamp=stamp)

    def after_write(
        self,
        store: object,
        key: str,
        error: BaseException | None,
        *,
        source: object = None,
        stamp: Stamp | None = None,
    ) -> None:
        """A write of ``key`` returned (``error`` None) or raised ``error``: unless it surely
        did not land (``ConditionFailed``), it may have changed the document: a notice."""
        if not isinstance(error, ConditionFailed):
            self.notice(store, key, source=source, stamp=stamp)

    def after_write_at(
        self,
        at: Place,
        error: BaseException | None,
        *,
        source: object = None,
        stamp: Stamp | None = None,
    ) -> None:
        """:meth:`after_write`, on a place worked out once."""
        if not isinstance(error, ConditionFailed):
            self.notice_at(at.where, source=source, stamp=stamp)

    def notice_at(
        self, where: Location, *, source: object = None, stamp: Stamp | None = None
    ) -> None:
        if not self.enabled:
            return
        # Nobody of this process but the writer itself (a holder's own release) waits on or
        # holds the document, and no feed is left to end: nothing to do (read without the
        # lock: an interest added meanwhile armed before its read, which then sees the write
        # this notice is about).
        if where not in self._waiters and where not in self._feeds:
            watchers = tuple(self._watchers.get(where, ()))  # a snapshot
            if not watchers or (len(watchers) == 1 and watchers[0].owner is source):
                return
        if self.faults is not None:
            self.faults.deliver(lambda: self._deliver(where, source, stamp))
        else:
            self._deliver(where, source, stamp)

    def _deliver(self, where: Location, source: object, stamp: Stamp | None) -> None:
        with self._lock:
            waiting = self._waiters.get(where)
            woken: list[Waiter] = []
            if waiting:
                first: Waiter | None = None  # of the waiters placed behind in the line
                first_at: tuple[int, float] | None = None
                for w in waiting:
                    if w.owner is source:
                        continue
                    at = w.behind
                    if at is None:
                        woken.append(w)
                    elif first_at is None or at < first_at:
                        first, first_at = w, at
                for waiter in woken:
                    waiting.discard(waiter)
                if first is not None:
                    # It stays armed until its lock arms anew (``FlowRunner._rearm``: in the same
                    # place) or stops waiting: a notice while it wakes, reads and decides wakes
                    # it again, not the next one behind it.
                    woken.append(first)
                if not waiting:
                    del self._waiters[where]
            watchers = [w for w in self._watchers.get(where, ()) if w.owner is not source]
        for waiter in woken:
            waiter.notify()
        for watcher in watchers:
            watcher.heard = True
            watcher.callback(stamp)
        if not woken and not watchers:
            self._unfeed_if_idle(where)

    # -- stores that notice changes themselves -------------------------------------------------

    def _feed(self, at: Place) -> None:
        feed, where = at.feed, at.where
        if feed is None:
            return
        with self._lock:
            if where in self._feeds:
                return
            self._feeds[where] = _nothing  # taken: subscribe outside the lock
        try:
            unsubscribe = feed.watch_key(at.key, lambda: self.notice_at(where))
        except Exception:
            with self._lock:
                self._feeds.pop(where, None)
            raise
        with self._lock:
            self._feeds[where] = unsubscribe

    def _unfeed_if_idle(self, where: Location) -> None:
        if where not in self._feeds:  # none to end (read without the lock: a hint)
            return
        with self._lock:
            if where in self._waiters or where in self._watchers:
                return
            unsubscribe = self._feeds.pop(where, None)
        if unsubscribe is not None:
            unsubscribe()


def _nothing() -> None:
    pass


#: Locations whose brief holdings are counted (the count is a hint: emptied when full).
_BRIEF_KEYS = 4096


class Faults:
    """Notices made unreliable on purpose, from a seed: each is dropped, sent twice, or sent
    late (so out of order with the ones after it), at random. The locks must be as correct as
    with none (notices are hints); only slower. Which notice meets which fault depends on the
    threads' timing too, so a seed gives the same mix, not the same run."""

    DROP, TWICE, LATE = 0.3, 0.2, 0.3  # chances; the rest are sent as they are
    MAX_DELAY = 0.05  # seconds

    def __init__(self, seed: int) -> None:
        self.seed = seed
        self._random = random.Random(seed)
        self._lock = threading.Lock()

    def deliver(self, send: Callable[[], None]) -> None:
        with self._lock:
            roll = self._random.random()
            delay = self._random.uniform(0.0, self.MAX_DELAY)
        if roll < self.DROP:
            return
        roll -= self.DROP
        if roll < self.TWICE:
            send()
            send()
        elif roll < self.TWICE + self.LATE:
            self.later(delay, send)
        else:
            send()

    def later(self, delay: float, send: Callable[[], None]) -> None:
        """Send in ``delay`` seconds, from another thread."""
        timer = threading.Timer(delay, send)
        timer.daemon = True
        timer.start()


def _configure(board: Notices, setting: str) -> None:
    """``PRIORITYLOCK_NOTICES``: ``off`` drops every notice (each lock then polls, as across
    hosts); ``faults:SEED`` makes them unreliable (:class:`Faults`), for tests."""
    value = setting.strip().lower()
    if value in ("", "on", "1"):
        return
    if value in ("off", "0", "false"):
        board.enabled = False
        return
    if value.startswith("faults:") and value[7:].isdigit():
        board.faults = Faults(int(value[7:]))
        return
    log.warning(
        "prioritylock: PRIORITYLOCK_NOTICES=%r is not on, off or faults:SEED; ignored", setting
    )


#: The process's notices, shared by every lock object, sync and async.
NOTICES = Notices()
_configure(NOTICES, os.environ.get("PRIORITYLOCK_NOTICES", ""))
