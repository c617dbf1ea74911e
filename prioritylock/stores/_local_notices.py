"""LocalStore's change notices: file-system hints that a key may have changed, less the
changes this process made itself.

:func:`watch` is ``LocalStore.watch_key``'s body: it subscribes to the process's notifier
(:mod:`~prioritylock.stores._fsnotify`, inotify) and passes a hint on only when the object is at
a version its subscriber was not told of in-process: this process's locks tell each other of
their own writes directly (``_wake``), so a hint for a write of this process is noise. The store
logs each write it makes to a watched key (:data:`OWN`, under the key's lock, before the write
lands), and a hint is checked against the object's version (``peek``: one lock-free read,
uncounted). Nothing here reads the file format; the store passes its ``peek``.
"""

from __future__ import annotations

import collections
import os
import threading
from collections.abc import Callable
from typing import Final

from prioritylock.stores import _fsnotify

__all__ = ["ABSENT", "OWN", "KeyHints", "OwnWrites", "watch"]

#: The version of an absent object, in the own-writes log.
ABSENT: Final = ""


class OwnWrites:
    """The writes this process made to the keys it watches, as (version before, version after),
    oldest first, a few per key: how ``LocalStore.watch_key`` tells a file-system hint for
    a change this process made itself (it told its own locks in-process) from another
    process's. A write is logged under the key's lock *before* it lands, so its hint never
    outruns it; one that never lands is a version that never appears, so it matches nothing.
    """

    _KEEP = 32  # writes per watched key
    _KEYS = 4096  # keys whose last write is remembered

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._logs: dict[tuple[str, str], tuple[int, collections.deque[tuple[str, str]]]] = {}
        # Oldest first: a key written moves to the end. Each write of a key holds its lock, so
        # only the trimming (under ``_lock``) meets another thread's change of the same entry.
        self._last: dict[tuple[str, str], str] = {}

    def start(self, where: tuple[str, str]) -> None:
        with self._lock:
            count, log = self._logs.get(where, (0, collections.deque(maxlen=self._KEEP)))
            self._logs[where] = (count + 1, log)

    def stop(self, where: tuple[str, str]) -> None:
        with self._lock:
            count, log = self._logs[where]
            if count == 1:
                del self._logs[where]
            else:
                self._logs[where] = (count - 1, log)

    def wrote(self, where: tuple[str, str], before: str, after: str) -> None:
        entry = self._logs.get(where)  # the keys watched keep a log
        if entry is not None:
            with self._lock:
                entry[1].append((before, after))
        # Every key: the last write, for a watch that begins after it (a holder's). Every write
        # of a store passes here: no lock taken but to forget the oldest keys.
        last = self._last
        last.pop(where, None)
        last[where] = after
        if len(last) > self._KEYS:
            with self._lock:
                for old in list(last)[: len(last) - self._KEYS]:
                    last.pop(old, None)

    def made(self, where: tuple[str, str], version: str) -> bool:
        """Whether ``version`` (not absent) is one this process wrote."""
        if version == ABSENT:
            return False
        with self._lock:
            if self._last.get(where) == version:
                return True
            entry = self._logs.get(where)
            return entry is not None and any(after == version for _, after in entry[1])

    def lead(self, where: tuple[str, str], known: str, current: str) -> bool:
        """Whether this process's writes alone lead from ``known`` to ``current``. Versions are
        unique and every write was conditional on the one before, so no other process's write
        lies between them (only a change it made and undid before this process wrote over the
        absent object, which no read would show any more)."""
        entry = self._logs.get(where)
        if entry is None:
            return False
        with self._lock:
            log = list(entry[1])
        at = known
        for before, after in log:
            if before == at:
                at = after
        return at == current

    def forget(self) -> None:
        """In a forked child: the parent's writes are another process's."""
        self._lock = threading.Lock()
        self._logs = {}
        self._last = {}


OWN = OwnWrites()
os.register_at_fork(after_in_child=OWN.forget)


class KeyHints:
    """One ``LocalStore.watch_key`` subscription's filter: passes a hint on unless the
    object is at a version its subscriber was already told of, or that this process's own
    writes alone led to from there."""

    __slots__ = ("_known", "_lock", "_where")

    def __init__(self, where: tuple[str, str]) -> None:
        self._where = where
        self._lock = threading.Lock()
        self._known: str | None = None  # None: not known; the next hint is passed on

    def begin(self, current: str | None) -> None:
        """The version when the watch began: known only if this process wrote it (its locks
        know it); otherwise the first hint is passed on."""
        with self._lock:
            if self._known is None and current is not None and OWN.made(self._where, current):
                self._known = current

    def news(self, current: str | None) -> bool:
        """Whether a hint that found the object at ``current`` is news. Unsure (``None``, a
        write in flight): it is, and what the subscriber was told of stays as it was."""
        with self._lock:
            known = self._known
            if current is None:
                return True
            self._known = current
        if known is None:
            return True
        return current != known and not OWN.lead(self._where, known, current)


def watch(
    root: str,
    where: tuple[str, str],
    path: str,
    peek: Callable[[], str | None],
    callback: Callable[[], None],
) -> Callable[[], None]:
    """Call ``callback`` when the file ``path`` of a key (``where``: the store's namespace and
    the key; the store's directory is ``root``) may have changed by a write this process did not
    make; ``peek`` gives the object's version now (:data:`ABSENT` when absent, None when
    unsure). Returns a function that stops the calls (idempotent). Without a notifier, nothing
    is watched: the lock polls.
    """
    if not _fsnotify.active():
        return _fsnotify.watch(root, path, callback)  # nothing watched: polled
    hints = KeyHints(where)
    OWN.start(where)

    def hinted() -> None:
        if hints.news(peek()):
            callback()

    stop = _fsnotify.watch(root, path, hinted)
    hints.begin(peek())  # after the watch: a write from now on is hinted
    stopped = threading.Lock()

    def unsubscribe() -> None:
        if stopped.acquire(blocking=False):
            stop()
            OWN.stop(where)

    return unsubscribe
