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

**This process's own writes** call nobody back: the process tells its own locks in-process, and
the hint would cost a read. A LocalStore write to a watched key is bracketed by two *marks*,
renames of a file in a private directory this notifier watches (:func:`own_write`), made while the
writer holds the key's lock; the key's events between a write's two marks are dropped. Every
LocalStore writer holds the key's lock for as long as its write makes events, and the kernel
queues an event before the call that made it returns, so another process's write to the key
lies wholly before the first mark or after the second: its events are never dropped, and none
merges into one of ours (inotify merges an event only with an identical one queued just before
it, and a mark lies between). Nothing is read to decide. (A change made by hand, without the
key's lock, while a write of ours is in flight may go unheard: it is found by polling.) Where the
marks fail (the directory went, the queue overflowed and lost some), the brackets open are
forgotten: the events pass, and the store's own check (a read of the file's version) applies.

Where there is no inotify (not Linux, ``inotify_simple`` missing, the instance limit reached, or
``PRIORITYLOCK_FSNOTIFY=0``), :func:`watch` subscribes nothing: locks poll as they always did.
A key whose watch can't be added (the watch limit reached, permissions) is likewise only polled;
either limit is logged once, as a warning.
"""

from __future__ import annotations

import atexit
import collections
import contextlib
import errno
import fcntl
import itertools
import logging
import os
import shutil
import sys
import tempfile
import threading
from collections.abc import Callable, Iterable
from typing import Any

__all__ = ["active", "own_write", "watch"]

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
# The marks' directory: one event per rename (its new name), and word of the directory going.
_MARK_MASK = _IN_MOVED_TO | _IN_DELETE_SELF | _IN_MOVE_SELF | _IN_ONLYDIR

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
        # Own writes' marks (see the module docstring), under _marks (taken inside _lock).
        self._marks = threading.Lock()
        self._mark_dir: str | None = None  # None: no marks, every event passes
        self._mark_wd = -2  # never a watch descriptor while there are no marks
        self._mark_name = ""  # the mark file's name now
        self._mark_ids = itertools.count(1)
        self._mark_lock: int | None = None  # the directory, flock-ed while the process lives
        # A write's bracket: (directory, file name) from its first mark made until it is read;
        # then (wd, file name) until its second mark is read.
        self._begun: dict[int, tuple[str, str]] = {}
        self._bracketed: dict[int, tuple[int, str]] = {}
        self._open: collections.Counter[tuple[int, str]] = collections.Counter()
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

    # -- this process's own writes --------------------------------------------------------

    def start_marks(self) -> None:
        """Make the private directory and file whose renames are the marks, and watch it; with
        neither, there are no marks (own writes' events pass, checked by the store).

        The directory is ``flock``-ed for as long as the process (or a child it forked) lives:
        it goes at exit, and one left by a killed process is removed by the next notifier made.
        """
        # tmpfs: a rename there takes half the time. mkdtemp makes the directory private (0700,
        # a random name), wherever it is.
        shm = "/dev/shm"  # noqa: S108
        parent = shm if os.access(shm, os.W_OK | os.X_OK) else tempfile.gettempdir()
        _sweep_marks(parent)
        try:
            # Made under another name, and locked before it takes the name a sweep looks for.
            made = tempfile.mkdtemp(prefix=_NEW_MARKS, dir=parent)
        except OSError:
            return
        directory = os.path.join(parent, _MARKS + os.path.basename(made)[len(_NEW_MARKS) :])
        lock: int | None = None
        try:
            lock = _locked_dir(made, fcntl.LOCK_EX)
            os.rename(made, directory)
            with open(os.path.join(directory, "0"), "xb"):
                pass
            wd = self._inotify.add_watch(directory, _MARK_MASK)
        except OSError:
            for path in (made, directory):
                shutil.rmtree(path, ignore_errors=True)
            if lock is not None:
                os.close(lock)
            return
        self._mark_lock = lock
        atexit.register(_remove_marks, directory, os.getpid())
        with self._marks:
            self._mark_dir, self._mark_wd, self._mark_name = directory, wd, "0"

    def begin_own(self, path: str) -> int | None:
        """Mark the start of a write to the file ``path`` (its key's lock held): the bracket's
        id, or ``None`` if nothing here watches the file or there are no marks."""
        directory, name = os.path.split(path)
        # Unlocked: a stale answer only brackets a write for nothing or lets its events pass.
        found = self._dirs.get(directory)
        if found is None or name not in found.names or self._mark_dir is None:
            return None
        with self._marks:
            ident = next(self._mark_ids)
            self._begun[ident] = (directory, name)
            if self._mark(f"b{ident}"):
                return ident
            self._begun.pop(ident, None)
        return None

    def end_own(self, ident: int) -> None:
        """Mark the end of the write bracketed as ``ident`` (before its key's lock is let go)."""
        with self._marks:
            if not self._mark(f"e{ident}"):
                # No end in the queue: close the bracket now; the write's events still queued
                # pass (a read too many, never a notice too few).
                self._begun.pop(ident, None)
                self._close(ident)

    def _mark(self, name: str) -> bool:
        """Rename the mark file to ``name`` (``_marks`` held); False: no marks (any more)."""
        if self._mark_dir is None:
            return False
        try:
            os.rename(
                os.path.join(self._mark_dir, self._mark_name), os.path.join(self._mark_dir, name)
            )
        except OSError as exc:
            log.warning(
                "prioritylock: marking own writes failed (%s); hints of this process's own"
                " LocalStore writes are checked by reading the file",
                exc,
            )
            self._stop_marks()
            return False
        self._mark_name = name
        return True

    def _stop_marks(self) -> None:
        """No more marks, and no bracket open (``_marks`` held): every event passes."""
        self._mark_dir, self._mark_wd = None, -2
        self._forget_brackets()

    def _forget_brackets(self) -> None:
        self._begun.clear()
        self._bracketed.clear()
        self._open.clear()

    def _close(self, ident: int) -> None:
        where = self._bracketed.pop(ident, None)
        if where is not None:
            self._open[where] -= 1
            if not self._open[where]:
                del self._open[where]

    def _marked(self, event: Any) -> None:
        """A mark read (``_lock`` and ``_marks`` held): open or close its bracket."""
        if event.mask & _GONE:
            self._stop_marks()  # the directory went: no more marks
            return
        kind, ident = event.name[:1], event.name[1:]
        if not ident.isdigit():
            return
        if kind == "e":
            self._close(int(ident))
            return
        begun = self._begun.pop(int(ident), None)
        found = None if begun is None else self._dirs.get(begun[0])
        if begun is not None and found is not None:
            where = (found.wd, begun[1])
            self._bracketed[int(ident)] = where
            self._open[where] += 1

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
                with self._marks:  # nobody reads them any more
                    self._stop_marks()
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
                with self._marks:  # marks may be lost: no bracket is known to be open
                    self._forget_brackets()
                continue
            if event.wd == self._mark_wd:
                with self._marks:
                    self._marked(event)
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
            # Unlocked first: only this thread opens brackets.
            if self._open and self._own(event):
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

    def _own(self, event: Any) -> bool:
        """Whether ``event`` is an own write's, between its marks."""
        with self._marks:
            return (event.wd, event.name) in self._open


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
        _notifier.start_marks()
        return _notifier


_MARKS = "prioritylock-marks-"
_NEW_MARKS = ".prioritylock-new-"  # not yet locked: no sweep looks at it


def _locked_dir(path: str, mode: int) -> int:
    """An open descriptor of the directory ``path``, ``flock``-ed in ``mode``."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        fcntl.flock(fd, mode)
    except OSError:
        os.close(fd)
        raise
    return fd


def _sweep_marks(parent: str) -> None:
    """Remove the marks' directories in ``parent`` of processes that are gone: nobody holds
    their lock (another user's can't be opened, and are left alone)."""
    try:
        with os.scandir(parent) as entries:
            names = [entry.name for entry in entries if entry.name.startswith(_MARKS)]
    except OSError:
        return
    for name in names:
        path = os.path.join(parent, name)
        try:
            fd = _locked_dir(path, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            continue  # alive (locked), gone already, or not ours
        try:
            shutil.rmtree(path, ignore_errors=True)
        finally:
            os.close(fd)


def _remove_marks(directory: str, pid: int) -> None:
    if os.getpid() == pid:  # not a forked child's: the directory is its parent's
        shutil.rmtree(directory, ignore_errors=True)


def _forget_in_child() -> None:
    """A forked child has the parent's subscribers' callbacks but not its thread: start over."""
    global _notifier, _tried, _guard
    old, _notifier, _tried, _guard = _notifier, None, False, threading.Lock()
    if old is not None:
        old._inotify.close()
        if old._mark_lock is not None:  # the parent's directory: its lock is the parent's
            os.close(old._mark_lock)


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


class _OwnWrite:
    """The bracket of one write; see :func:`own_write`."""

    __slots__ = ("_ident", "_notifier")

    def __init__(self, notifier: _Notifier, ident: int) -> None:
        self._notifier = notifier
        self._ident = ident

    def __enter__(self) -> None:
        pass

    def __exit__(self, *exc_info: object) -> None:
        self._notifier.end_own(self._ident)


_UNMARKED = contextlib.nullcontext()


def own_write(path: str) -> contextlib.AbstractContextManager[None]:
    """Bracket a write of this process to the file ``path``: its events call nobody back. Begins
    at once: call it holding the key's lock, before the write makes any event, and leave the
    ``with`` (which marks the end) before letting the lock go. Where nothing of this process
    watches ``path``, it does nothing."""
    notifier = _notifier
    ident = None if notifier is None else notifier.begin_own(path)
    if notifier is None or ident is None:
        return _UNMARKED
    return _OwnWrite(notifier, ident)


def active() -> bool:
    """Whether this process has a working notifier (it is made on first use)."""
    return _get() is not None
