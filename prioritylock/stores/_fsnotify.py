"""File-system change hints for LocalStore: one inotify instance and one thread per process.

:func:`watch` subscribes a callback to "the file of this key may have changed" (written, created,
renamed into place or deleted, by any process). A hint is never a fact: callbacks may come late,
twice, or for nothing, and may be lost (the queue overflowing calls every subscriber back). The
lock reads the store when told; correctness never rests on a hint.

Every :class:`~prioritylock.stores.LocalStore` of the process shares one notifier: one inotify
instance (the per-user limit is 128) and one daemon thread, blocked in ``poll`` while nothing
happens. A watch is added per directory that holds watched keys and removed when its last
subscriber leaves (the per-user limit is about 190,000 watches). A key whose directory does not
exist yet (``a/b/c`` lives in ``a.d/b.d/``) is watched from its deepest existing ancestor, for the
next directory's name, and moves down as directories appear. Events are filtered by file name, so
writes to other keys of a directory call nobody back; the events of one read are coalesced, one
call per subscriber.

Where there is no inotify (not Linux, ``inotify_simple`` missing, the instance limit reached, or
``PRIORITYLOCK_FSNOTIFY=0``), :func:`watch` subscribes nothing: locks poll as they always did.
A key whose watch can't be added (the watch limit reached, permissions) is likewise only polled;
either limit is logged once, as a warning.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import sys
import threading
from collections.abc import Callable, Iterable
from typing import Any

__all__ = ["active", "watch"]

log = logging.getLogger("prioritylock.stores")

# inotify(7) event bits: stable kernel ABI.
_IN_MODIFY = 0x2
_IN_MOVED_FROM = 0x40
_IN_MOVED_TO = 0x80
_IN_CREATE = 0x100
_IN_DELETE = 0x200
_IN_DELETE_SELF = 0x400
_IN_MOVE_SELF = 0x800
_IN_Q_OVERFLOW = 0x4000
_IN_IGNORED = 0x8000
_IN_ONLYDIR = 0x1000000
# A LocalStore write is a pwrite into the object file (IN_MODIFY, once the slot is whole: a read
# then sees it), a temp file renamed over it (IN_MOVED_TO) or an unlink (IN_DELETE). Not
# IN_CLOSE_WRITE: a durable write closes after its fdatasync, milliseconds later. IN_CREATE and
# the moves also show a missing directory appearing; the *_SELF bits, the watched one going.
_MASK = (
    _IN_MODIFY
    | _IN_MOVED_FROM
    | _IN_MOVED_TO
    | _IN_CREATE
    | _IN_DELETE
    | _IN_DELETE_SELF
    | _IN_MOVE_SELF
    | _IN_ONLYDIR
)
_GONE = _IN_DELETE_SELF | _IN_MOVE_SELF | _IN_IGNORED

Unsubscribe = Callable[[], None]


def _nothing() -> None:
    pass


class _Sub:
    """One subscriber: a callback, and where its key's file is watched from."""

    __slots__ = ("callback", "dirs", "level", "names")

    def __init__(self, callback: Callable[[], None], dirs: list[str], names: list[str]) -> None:
        self.callback = callback
        # dirs[i] holds names[i]: the store root holds the first segment, the last directory
        # the key's file. The watch sits on dirs[level], or nowhere (None).
        self.dirs = dirs
        self.names = names
        self.level: int | None = None


class _Dir:
    """One watched directory: its watch descriptor and its subscribers by file name."""

    __slots__ = ("names", "paths", "wd")

    def __init__(self, wd: int) -> None:
        self.wd = wd
        self.paths: list[str] = []  # more than one: the same directory through a symlink
        self.names: dict[str, set[_Sub]] = {}


class _Notifier:
    """The process's inotify instance, its watches and its thread."""

    def __init__(self, inotify: Any) -> None:
        self._inotify = inotify
        self._lock = threading.Lock()
        self._dirs: dict[str, _Dir] = {}
        self._by_wd: dict[int, _Dir] = {}
        self._warned = False
        self._thread = threading.Thread(target=self._run, name="prioritylock-fsnotify", daemon=True)
        self._thread.start()

    def watch(self, root: str, path: str, callback: Callable[[], None]) -> Unsubscribe:
        """See :func:`watch`."""
        relative = os.path.relpath(path, root).split(os.sep)
        dirs = [root]
        for segment in relative[:-1]:
            dirs.append(os.path.join(dirs[-1], segment))
        sub = _Sub(callback, dirs, relative)
        with self._lock:
            self._place(sub)

        def unsubscribe() -> None:
            with self._lock:
                self._unplace(sub)

        return unsubscribe

    def watch_count(self) -> int:
        with self._lock:
            return len(self._dirs)

    # -- placing watches (the lock held) --------------------------------------------------

    def _place(self, sub: _Sub) -> None:
        """Watch ``sub``'s key from the deepest of its directories that exists."""
        last = len(sub.dirs) - 1
        for attempt in range(3):  # bounded: a directory that exists but can't be watched
            level = self._attach(sub, last)
            # The next directory may have appeared before this watch was added: go down.
            if level in (None, last) or attempt == 2 or not os.path.isdir(sub.dirs[level + 1]):
                return
            self._unplace(sub)

    def _attach(self, sub: _Sub, level: int) -> int | None:
        """Watch ``sub`` from ``sub.dirs[level]`` or the deepest directory above it that can be
        watched; return that level (``None``: nowhere, it is only polled)."""
        for at in range(level, -1, -1):
            found = self._watch_dir(sub.dirs[at])
            if found is not None:
                found.names.setdefault(sub.names[at], set()).add(sub)
                sub.level = at
                return at
        return None

    def _watch_dir(self, path: str) -> _Dir | None:
        found = self._dirs.get(path)
        if found is not None:
            return found
        try:
            wd = self._inotify.add_watch(path, _MASK)
        except OSError as exc:
            if exc.errno == errno.ENOSPC and not self._warned:
                self._warned = True
                log.warning(
                    "prioritylock: the inotify watch limit is reached"
                    " (fs.inotify.max_user_watches); LocalStore keys in directories not yet"
                    " watched are polled"
                )
            return None
        found = self._by_wd.get(wd)
        if found is None:
            found = self._by_wd[wd] = _Dir(wd)
        found.paths.append(path)
        self._dirs[path] = found
        return found

    def _unplace(self, sub: _Sub) -> None:
        if sub.level is None:
            return
        found = self._dirs.get(sub.dirs[sub.level])
        name = sub.names[sub.level]
        sub.level = None
        if found is None:
            return
        subs = found.names.get(name)
        if subs is not None:
            subs.discard(sub)
            if not subs:
                del found.names[name]
        if not found.names:
            self._drop(found)
            with contextlib.suppress(OSError):  # the directory went, and its watch with it
                self._inotify.rm_watch(found.wd)

    def _drop(self, found: _Dir) -> None:
        for path in found.paths:
            if self._dirs.get(path) is found:
                del self._dirs[path]
        self._by_wd.pop(found.wd, None)

    # -- the thread ------------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            try:
                events = self._inotify.read()
            except OSError:
                log.exception("prioritylock: reading inotify failed; LocalStore keys are polled")
                return
            with self._lock:
                due = self._dispatch(events)
            for sub in due:
                try:
                    sub.callback()
                except Exception:
                    log.exception("prioritylock: a LocalStore change callback raised")

    def _dispatch(self, events: Iterable[Any]) -> set[_Sub]:
        """The subscribers to call back for ``events`` (the lock held)."""
        due: set[_Sub] = set()
        moved: set[_Sub] = set()
        for event in events:
            if event.mask & _IN_Q_OVERFLOW:
                for watched in self._by_wd.values():
                    for all_subs in watched.names.values():
                        due.update(all_subs)
                continue
            found = self._by_wd.get(event.wd)
            if found is None:
                continue  # a watch removed since the kernel queued the event
            if event.mask & _GONE:
                # The directory was deleted or renamed: watch its keys from what remains.
                self._drop(found)
                if not event.mask & _IN_IGNORED:
                    with contextlib.suppress(OSError):
                        self._inotify.rm_watch(found.wd)
                for gone_subs in found.names.values():
                    moved.update(gone_subs)
                continue
            named = found.names.get(event.name)
            if named:
                due.update(named)
                for sub in named:
                    if sub.level is not None and sub.level < len(sub.dirs) - 1:
                        moved.add(sub)  # a directory on its path appeared (or went)
        for sub in moved:
            self._unplace(sub)
            self._place(sub)
        # The key's file may have changed while it was not watched.
        return due | moved


_notifier: _Notifier | None = None
_tried = False  # made or failed once: not again (one warning)
_guard = threading.Lock()


def _get() -> _Notifier | None:
    global _notifier, _tried
    with _guard:
        if _tried:
            return _notifier
        _tried = True
        if os.environ.get("PRIORITYLOCK_FSNOTIFY", "1").strip().lower() in ("0", "false", "off"):
            return None
        if not sys.platform.startswith("linux"):
            return None
        try:
            import inotify_simple  # type: ignore[import-untyped]

            inotify = inotify_simple.INotify()
        except ImportError:
            return None
        except (OSError, AttributeError) as exc:
            log.warning(
                "prioritylock: no inotify instance (%s); LocalStore changes made by other"
                " processes are found by polling",
                exc,
            )
            return None
        _notifier = _Notifier(inotify)
        return _notifier


def _forget_in_child() -> None:
    """A forked child has the parent's subscribers' callbacks but not its thread: start over."""
    global _notifier, _tried, _guard
    old, _notifier, _tried, _guard = _notifier, None, False, threading.Lock()
    if old is not None:
        old._inotify.close()


os.register_at_fork(after_in_child=_forget_in_child)


def watch(root: str, path: str, callback: Callable[[], None]) -> Unsubscribe:
    """Call ``callback`` from the notifier thread when the file ``path`` (under the store directory
    ``root``) may have changed; return a function that stops it (idempotent; a callback already
    under way may still run once). With no notifier, nothing is watched.
    """
    notifier = _get()
    if notifier is None:
        return _nothing
    return notifier.watch(root, path, callback)


def active() -> bool:
    """Whether this process has a working notifier (it is made on first use)."""
    return _get() is not None
