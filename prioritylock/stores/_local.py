"""LocalStore: objects as files in one directory, safe across the processes of one machine.

Layout of the store directory (every name is derived from the key, so no key can escape it)::

    a.obj            key "a"           a header block, then three slots (see below)
    a.d/b.obj        key "a/b"         a segment that has children becomes a directory "SEG.d"
    a.d/b.obj.tmp    a new file in flight (or left by a killed writer); ignored by list()
    .locks/<sha256>  one lock file per key ever written; flock()ed around every write

Each object file holds a header, a record and three slots, each slot a whole document with its
checksums; :mod:`prioritylock.stores._slots` encodes and decodes them (pure, no I/O). This module
does the file locking and the I/O.

The object is the valid slot (both checksums pass) with the highest sequence number. **Writes.** A
write takes the key's lock (a process-wide thread lock, then ``flock`` on the key's lock file),
reads the file, checks the condition and overwrites one slot in place with one ``pwrite``: never
the *current* slot, so a writer killed at any point leaves the current document whole and a slot
whose checksums fail; and never the *kept* slot, the newest synced write, which the record names,
so a power loss (which may revert or tear any slot written since the last sync) leaves it whole.
Three slots: one is always free. A synced write (``replace`` of a durable store) then syncs the
file (``fdatasync``, which also takes along every earlier unsynced write and record update) and,
once that returned, writes the record, unsynced. An unsynced write (``replace_unsynced``, and
every write of a store with ``durable=False``) never touches the record, so the record only ever
names a write that is on disk: after a power loss, a newest valid slot older than the record is
damage, never a lost write. A synced write's slot carries flag 1, so a record that lags (its
writer was killed between the sync and the record, or a power loss took the record) is caught:
a durable writer that finds a flagged slot newer than the record syncs the file and writes the
record before its own write. So after a power loss the object is at the newest synced write or
a later one, whole. A create, and a document too large for its slots, write a new file instead
(temp file, fsync, rename over it, fsync the directory) with slots twice the document's size;
slots never shrink. Only lock holders open an object file for writing, and only for as long as
they hold the lock, so nothing ever writes into a file that a delete unlinked or a rename
replaced. Files of format 1 (two slots) are refused with a clear error, as are those of the
format before slots.

**Reads** take no lock: they read the file (one ``pread`` for a small object) and accept a slot
only if its checksums pass. If every slot header passes, the newest slot is the latest write: one
that had finished before the read began sits in a slot that now holds it or a newer write, or is
being overwritten and fails its checksum. So a read is linearizable, and ``read_if_changed`` can
answer "not modified" from the slot headers alone. If a slot fails, a writer may be in the middle
of it: the reader tries twice more, then takes the key's lock shared (waiting out that one write)
and reads again. Under the lock no write is in flight, so a failed slot is a write that never
finished, and the newest valid slot is the object, unless the record says that a newer write had
completed: then the newest synced document is damaged, and the store raises
:class:`~prioritylock.StoreError` rather than serve an older one, which would roll a lease (and its
fence) back. Only synced writes move the record, so damage to a newest slot written unsynced (or
by a store with ``durable=False``) reads as the slot before it. Checksums are CRC-32: a torn slot
passes with a chance of 2**-32 per read that meets one.

**Parsing once.** A file's record and slot headers say which slot is current and where the next
write goes: its *tip* (``_slots.Tip``). A store keeps, for each key, the tip its own last write
left or its last read found, with the header bytes it came from (``_Key.tip``); a read or write
that finds exactly those bytes parses nothing, and a write works out the tip it leaves from the
one before (``_slots.write_over``, held to a parse of the written bytes by property tests). Every
read and write still reads the headers and compares their bytes; a file changed since, by anyone,
has other bytes (every write has a new version), so it is parsed again, once per distinct bytes
in a cache the readers share. The current slot's data is checked against its checksum every time.

**Without waiting** (``LocalStore._try_nowait``, for the asyncio lock's event loop): the same
operations, except that the key's lock is only tried (the stripe lock and ``flock`` with
``LOCK_NB``), and a call that would wait for it, or that must sync (a create or synced replace or
delete of a durable store, a document outgrowing its file, a record to repair), is refused before
it writes anything; the caller then makes it on a thread.

**Change notices** (``watch_key``: file-system hints, less this process's own writes) are in
:mod:`~prioritylock.stores._local_notices`; this module only logs each write to it, under the
key's lock, before the write lands.
"""

from __future__ import annotations

import contextlib
import enum
import errno
import fcntl
import functools
import hashlib
import itertools
import os
import secrets
import struct
import threading
import time
import urllib.parse
import zlib
from collections.abc import Callable, Iterator
from typing import Any, Final

from prioritylock._errors import (
    ConditionFailed,
    ConfigError,
    StoreAccessError,
    StoreError,
    StoreUnavailable,
)
from prioritylock.stores import _local_notices as _notices
from prioritylock.stores._base import (
    NOT_MODIFIED,
    WOULD_BLOCK,
    NotModified,
    ReadResult,
    StoreCapabilities,
    StoreStats,
    Versioned,
    validate_key,
    validate_prefix,
)
from prioritylock.stores._log import logged
from prioritylock.stores._slots import (
    BLOCK,
    FIRST_READ,
    MIN_CAPACITY,
    RECORD,
    RECORD_AT,
    SLOT_BYTES,
    SLOTS,
    SMALL_HEADER,
    VERSION_BYTES,
    Current,
    FormatError,
    Layout,
    Tip,
    capacity_for,
    header_capacity,
    layout,
    made,
    new_file,
    pack_record,
    slot_offset,
    tip,
    write_over,
)
from prioritylock.stores._url import file_url, redact_url

__all__ = ["LocalStore", "store_from_url"]

_OBJ = ".obj"
_DIR = ".d"
_TMP = ".tmp"
_LOCKS = ".locks"
# A segment becomes a file name "SEG.obj.tmp"; most filesystems cap names at 255 bytes.
_MAX_SEGMENT_BYTES = 255 - len(_OBJ + _TMP)
_ACCESS_ERRNOS = frozenset({errno.EACCES, errno.EPERM, errno.EROFS})
_LOCK_FILE_FLAGS = os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW
_OBJECT_FLAGS = os.O_RDWR | os.O_CLOEXEC | os.O_NOFOLLOW  # a writer's, the key's lock held
_READ_FLAGS = os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW

# -- the object file ----------------------------------------------------------------------------

_LOCK_FREE_ATTEMPTS = 3

# Thread locks striped by (directory, key), shared by every LocalStore of this process. flock alone
# would do on a local filesystem (each operation opens its own file description), but where flock
# is emulated with per-process POSIX locks (NFS, some FUSE mounts) threads would not exclude each
# other; and threads queueing on a thread lock wait without polling.
_STRIPES = tuple(threading.Lock() for _ in range(64))


def _reseed_versions() -> None:
    global _versions
    random = itertools.repeat(secrets.token_bytes(VERSION_BYTES // 2))
    _versions = map(_VERSION.pack, random, itertools.count(1))


#: Versions no write of any process ever made (``next(_versions)``): 64 random bits per process,
#: and a counter. Unique without looking at the file, so they stay unique across delete and
#: create, a file rewritten for a larger document, or a slot damaged and skipped. (No system call
#: and no Python frame per write; the random part is drawn again in a forked child.)
_versions: Iterator[bytes]
_VERSION = struct.Struct(">8sQ")
_reseed_versions()
os.register_at_fork(after_in_child=_reseed_versions)


class _WouldBlock(Exception):
    """A call made not to wait (``LocalStore._try_nowait``) would wait for a lock held by
    another thread or process, or for a sync; raised before anything is written."""


class _Unsettled(enum.Enum):
    """A lock-free read that met a slot in flight; it is tried again."""

    UNSETTLED = "unsettled"


_UNSETTLED: Final = _Unsettled.UNSETTLED


def _raw_headers(fd: int, buf: bytes, capacity: int) -> tuple[bytes, ...]:
    """The record's bytes and each slot header's (by position): from ``buf`` (the file's first
    bytes) where it holds them, else read."""
    raw = [buf[_RECORD]]
    for start in range(BLOCK, BLOCK + SLOTS * capacity, capacity):
        end = start + SLOT_BYTES
        raw.append(buf[start:end] if end <= len(buf) else os.pread(fd, SLOT_BYTES, start))
    return tuple(raw)


_RECORD = slice(RECORD_AT, RECORD_AT + RECORD.size)
_HEAD_0, _HEAD_1, _HEAD_2 = (
    slice(offset, offset + SLOT_BYTES) for offset in range(BLOCK, FIRST_READ, MIN_CAPACITY)
)

# Headers this store's last write of a key left, or its last read found in the usual shape, are
# the key's ``_Key.tip``; others (another process's write, a file just made) are parsed once per
# distinct bytes, shared by every store of the process.
_parsed = functools.lru_cache(maxsize=2048)(layout)

#: Keys a LocalStore remembers (their paths and tips); past it, it forgets them all.
_KEYS = 2048


class _Key:
    """A key of one store: its files and stripe lock, worked out once, and the tip of its file
    as this store last left or found it (:class:`~prioritylock.stores._slots.Tip`, in the usual
    shape, or None): a read or write that finds the same headers parses nothing. Any thread sets
    ``tip``: a tip is true of every file with its headers, so one that lost a race is only a
    tip whose headers are not found."""

    __slots__ = ("key", "lock_path", "path", "stripe", "tip", "where")

    def __init__(self, store: LocalStore, key: str) -> None:
        self.path, self.lock_path, self.stripe = _key_paths(store._root, key)
        self.key = key
        self.where = (store._namespace, key)  # the key in the own-writes log
        self.tip: Tip | None = None


def _unlock(fd: int, stripe: threading.Lock) -> None:
    """Release a key's lock taken by :meth:`LocalStore._lock`."""
    try:
        os.close(fd)  # releases the flock
    finally:
        stripe.release()


class LocalStore:
    """Objects as files under ``directory``; shared by the processes of one machine.

    Every write is atomic: a writer killed at any moment leaves either the old document or the
    new one, never a torn one, and readers never see a half-written one. With ``durable=True``
    (the default) it is also durable: a write returns only after its data is on disk (one
    ``fdatasync``; a create, or a document outgrowing its file, also syncs the directory), so a
    power loss can't roll a lease (and its fencing counter) back to before a write that returned;
    and a file whose newest synced document is damaged raises :class:`~prioritylock.StoreError`
    instead of serving the one before. :meth:`replace_unsynced` skips the sync for one write that
    may be lost to a power loss (the lock uses it for writes that keep the fence, and for
    acquisitions within a fence reservation made in this boot of the machine): the object
    then stays whole, at a version no older than the last synced write. ``durable=False`` skips
    every sync: faster, still atomic against crashed processes, but after an operating-system
    crash a document may be older than the last write (fences may then repeat after the reboot),
    and a damaged newest document reads as the one before it. Versions are 128 bits, unique per
    write, so they never repeat for a key, even after delete and create. The directory is
    created if missing.

    Not for network filesystems: ``flock`` and ``rename`` are only as atomic as the filesystem
    makes them. Keys that differ only in case collide on case-insensitive filesystems.

    :param directory: the store's directory.
    :param durable: sync every write to disk (default); see above.
    :param lock_timeout: seconds a write waits for another writer of the same key (and a read for
        a write it met in flight) before failing with :class:`~prioritylock.StoreUnavailable`; a
        writer holds the key's lock for one write.
    :raises ConfigError: ``directory`` exists and is not a directory, or ``lock_timeout`` is not
        positive.
    :raises StoreAccessError: the directory can't be created or entered (permissions).
    :raises StoreUnavailable: another I/O error while creating the directory.

    Its operations raise what :class:`~prioritylock.stores.ObjectStore` says, and in particular:
    :class:`~prioritylock.StoreAccessError` for permissions or a store directory that is gone;
    :class:`~prioritylock.StoreUnavailable` for another I/O error, or another writer that held
    the key's lock past ``lock_timeout`` (a read waits for a write it met in flight); and
    :class:`~prioritylock.StoreError` for a file that is not a LocalStore object, or is damaged.
    """

    def __init__(
        self, directory: str | os.PathLike[str], *, lock_timeout: float = 10.0, durable: bool = True
    ) -> None:
        path = os.fspath(directory)
        if not isinstance(path, str) or not path:
            raise ConfigError(f"LocalStore directory must be a non-empty str path, got {path!r}")
        if not lock_timeout > 0:
            raise ConfigError(f"LocalStore lock_timeout must be positive, got {lock_timeout!r}")
        self._root = os.path.abspath(path)
        self._locks_dir = os.path.join(self._root, _LOCKS)
        self._lock_timeout = float(lock_timeout)
        self._durable = bool(durable)
        self._namespace = "file:" + os.path.realpath(self._root)
        self._stats = StoreStats()
        self._keys: dict[str, _Key] = {}
        try:
            os.makedirs(self._locks_dir, exist_ok=True)
        except (FileExistsError, NotADirectoryError) as exc:
            raise ConfigError(
                f"LocalStore directory {self._root!r} (or a parent) exists and is not a directory"
            ) from exc
        except OSError as exc:
            raise self._error(exc, "create the store directory", None) from exc

    @property
    def directory(self) -> str:
        """The store's directory, absolute."""
        return self._root

    @property
    def namespace(self) -> str:
        """Names what this store addresses: two stores with one namespace share objects."""
        return self._namespace

    @property
    def stats(self) -> StoreStats:
        return self._stats

    @property
    def capabilities(self) -> StoreCapabilities:
        return StoreCapabilities(
            shared_across_processes=True, shared_across_hosts=False, conditional_delete=True
        )

    @logged("read")
    def read(self, key: str) -> Versioned | None:
        """The object's bytes and version, read from one snapshot, or ``None`` when absent."""
        found = self._get(key, None)
        assert not isinstance(found, NotModified)  # only with a known version
        return found

    @logged("read_if_changed")
    def read_if_changed(self, key: str, version: str) -> ReadResult:
        """:data:`~prioritylock.stores.NOT_MODIFIED` if the object is still at ``version``, else
        what :meth:`read` returns. An unchanged object costs one small read: the slot headers,
        not the document.
        """
        return self._get(key, version)

    @logged("create")
    def create(self, key: str, data: bytes) -> str:
        """Store ``data`` only if ``key`` is absent; return the new version."""
        return self._create(key, data)

    @logged("replace")
    def replace(self, key: str, data: bytes, version: str) -> str:
        """Store ``data`` only if the object is at ``version``; return the new version.

        With ``durable`` it returns once the write is on disk (one ``fdatasync``).
        """
        return self._replace(key, data, version, self._durable, True)

    @logged("replace_unsynced")
    def replace_unsynced(self, key: str, data: bytes, version: str) -> str:
        """Exactly :meth:`replace`, except that it returns without waiting for the disk.

        Atomic, visible to every reader at once, and never undone by a killed process; an
        operating-system crash or power loss may leave the object at the version before it (or
        before an earlier unsynced write), whole, but never older than the last :meth:`replace`
        that returned. With ``durable=False`` it is :meth:`replace`.
        """
        return self._replace(key, data, version, False, True)

    @logged("delete")
    def delete(self, key: str, version: str) -> None:
        """Delete the object only if it is at ``version``.

        Directories left empty stay: removing them would race with a concurrent create below them.
        """
        self._delete(key, version)

    def _try_nowait(self, op: str, *args: Any) -> object:
        """Make the call ``op`` (the name of a method: ``read``, ``read_if_changed``,
        ``create``, ``replace``, ``replace_unsynced`` or ``delete``) with ``args`` on this
        thread, exactly as that method would, unless it would wait: for the key's lock (another
        thread or process holds it) or for the disk (a sync). Then it returns ``WOULD_BLOCK``
        having written, counted and logged nothing, and the caller calls the method on a thread
        that may wait.

        The asyncio lock calls the store this way on its event loop (``NonBlocking`` in
        ``stores/_base.py``): most calls take tens of microseconds, less than a hop to a worker
        thread and back. Of a durable store, a ``create``, a ``replace``, a ``delete`` and a
        write that outgrows its file always sync, so they always go to the thread.
        """
        quick = _QUICK.get(op)
        if quick is None:
            return WOULD_BLOCK
        kind, syncs, call = quick
        if syncs and self._durable:
            return WOULD_BLOCK
        self._key(args[0])  # an invalid key raises here, uncounted as by the method
        try:
            result = call(self, *args)
        except _WouldBlock:
            return WOULD_BLOCK
        except BaseException:
            self._stats.count(kind)
            raise
        self._stats.count(kind)
        return result

    @logged("list")
    def list(self, prefix: str) -> list[str]:
        """Every key that starts with ``prefix``, sorted; temp and foreign files are skipped."""
        validate_prefix(prefix)
        self._stats.count("lists")
        found: list[str] = []
        pending = [(self._root, "")]
        while pending:
            dirpath, key_prefix = pending.pop()
            try:
                with os.scandir(dirpath) as entries:
                    for entry in entries:
                        _visit(entry, key_prefix, prefix, found, pending)
            except FileNotFoundError as exc:
                # A subdirectory removed by hand while we walked: it holds no keys now.
                if dirpath == self._root:
                    raise self._error(exc, "list", prefix) from exc
            except OSError as exc:
                raise self._error(exc, "list", prefix) from exc
        return sorted(found)

    def watch_key(self, key: str, callback: Callable[[], None]) -> Callable[[], None]:
        """Call ``callback`` when ``key`` may have changed, written by any process of this machine
        (inotify on Linux); return a function that stops the calls.

        A hint, not a fact: a call may come late, twice, or with nothing changed, and comes from
        another thread; where the platform can't notify, none comes (the lock polls). One
        thread and one inotify instance serve every store of the process.

        :raises ConfigError: invalid key.
        """
        k = self._key(key)
        return _notices.watch(self._root, k.where, k.path, lambda: self._peek(k), callback)

    def _peek(self, k: _Key) -> str | None:
        """The object's version now (``ABSENT`` when absent), or ``None`` when unsure (a write
        in flight, an error): one lock-free read, never waiting, not counted in :attr:`stats`
        (it is how a hint is checked, not a request the lock made)."""
        for _ in range(_LOCK_FREE_ATTEMPTS):
            try:
                found = self._read_once(k, None, locked=False)
            except StoreError:
                return None
            if found is None:
                return _notices.ABSENT
            if isinstance(found, Current):
                return found.tip.version
        return None

    def close(self) -> None:
        """Nothing to release: every operation opens and closes its own files."""

    def __repr__(self) -> str:
        durable = "" if self._durable else ", durable=False"
        return f"LocalStore({self._root!r}{durable})"

    def _key(self, key: str) -> _Key:
        """``key``'s files, stripe lock and tip (:class:`_Key`).

        :raises ConfigError: invalid key, or a segment too long for a file name.
        """
        found = self._keys.get(key) if type(key) is str else None
        if found is None:
            found = _Key(self, key)  # validates the key
            if len(self._keys) >= _KEYS:
                self._keys.clear()
            self._keys[key] = found
        return found

    # -- the operations, each ``wait``-ing (counted at the start) or not (see _try_nowait) --

    def _get(self, key: str, known: str | None, *, wait: bool = True) -> ReadResult:
        k = self._key(key)
        if wait:
            self._stats.count("reads")
        found = self._read(k, known, wait=wait)
        if found is NOT_MODIFIED:
            self._stats.count_not_modified()
            return NOT_MODIFIED
        return None if found is None else Versioned(found.data, found.tip.version)

    def _create(self, key: str, data: bytes, *, wait: bool = True) -> str:
        k = self._key(key)
        path = k.path
        if wait:
            self._stats.count("creates")
        with self._locked(key, "create", wait=wait):
            if self._locked_current(k, "create") is not None:
                raise ConditionFailed(key, "already exists")
            version = next(_versions)
            _notices.OWN.wrote(k.where, _notices.ABSENT, version.hex())
            self._write_file(key, path, "create", seq=1, version=version, data=data)
        return version.hex()

    def _delete(self, key: str, version: str, *, wait: bool = True) -> None:
        k = self._key(key)
        path = k.path
        if wait:
            self._stats.count("deletes")
        with self._locked(key, "delete", wait=wait):
            current = self._locked_current(k, "delete")
            if current is None:
                raise ConditionFailed(key, "absent")
            if current.tip.version != version:
                raise ConditionFailed(key, "version changed")
            _notices.OWN.wrote(k.where, version, _notices.ABSENT)
            # A reader that opened the file before the unlink finishes reading the old document
            # (its read overlaps the delete); writers open the path only under the lock, so none
            # can write into the unlinked file.
            unlinked = False
            try:
                os.unlink(path)
                unlinked = True
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(path + _TMP)
                self._fsync_dir(os.path.dirname(path))
            except OSError as exc:
                raise self._error(exc, "delete", key, outcome_unknown=unlinked) from exc

    # -- reading ----------------------------------------------------------------------------

    def _read(
        self, k: _Key, known: str | None, *, wait: bool = True
    ) -> Current | NotModified | None:
        """The object (or ``NOT_MODIFIED`` if it is at ``known``), or ``None`` when absent.

        Lock-free first; after :data:`_LOCK_FREE_ATTEMPTS` reads that each met a slot in flight
        (or one left by a killed writer), once more under the key's lock, shared.
        """
        for _ in range(_LOCK_FREE_ATTEMPTS):
            found = self._read_once(k, known, locked=False)
            if found is not _UNSETTLED:
                return found
        with self._locked(k.key, "read", fcntl.LOCK_SH, wait=wait):
            found = self._read_once(k, known, locked=True)
        assert found is not _UNSETTLED
        return found

    def _read_once(
        self, k: _Key, known: str | None, *, locked: bool
    ) -> Current | NotModified | _Unsettled | None:
        try:
            fd = os.open(k.path, _READ_FLAGS)
        except FileNotFoundError as exc:
            self._check_root(exc, "read", k.key)
            return None
        except OSError as exc:
            raise self._error(exc, "read", k.key) from exc
        try:
            return self._settle(k, fd, "read", known, locked)
        finally:
            os.close(fd)

    def _locked_current(self, k: _Key, op: str) -> Current | None:
        """The object's document, or ``None`` when absent (the key's lock held)."""
        try:
            fd = os.open(k.path, _READ_FLAGS)
        except FileNotFoundError as exc:
            self._check_root(exc, op, k.key)
            return None
        except OSError as exc:
            raise self._error(exc, op, k.key) from exc
        try:
            current = self._settle(k, fd, op, None, True)
        finally:
            os.close(fd)
        assert isinstance(current, Current)
        return current

    def _settle(
        self, k: _Key, fd: int, op: str, known: str | None, locked: bool
    ) -> Current | NotModified | _Unsettled:
        """Pick the document in the open object file ``fd``, or :data:`NOT_MODIFIED` if it is
        at version ``known``.

        ``locked``: the caller holds the key's lock (shared or exclusive), so no write is in
        flight and a failed slot is one a killed writer left. Lock-free, a failed slot or record
        may be a write in flight: :data:`_UNSETTLED`, try again.

        :raises StoreError: not a LocalStore file, or damaged (see the module docstring).
        """
        try:
            buf = os.pread(fd, FIRST_READ, 0)
            capacity = MIN_CAPACITY if buf.startswith(SMALL_HEADER) else self._capacity(k.key, buf)
            raw: tuple[bytes, ...]
            if capacity == MIN_CAPACITY and len(buf) == FIRST_READ:  # a small object's file
                raw = (buf[_RECORD], buf[_HEAD_0], buf[_HEAD_1], buf[_HEAD_2])
            else:
                raw = _raw_headers(fd, buf, capacity)
            tip = k.tip
            if tip is not None and tip.raw == raw and tip.capacity == capacity:
                # The headers this store left or found last: the newest slot is the current one
                # if its data is whole (else the long way below says what it is).
                version = tip.version
                if not locked and version == known:
                    return NOT_MODIFIED  # every header whole: as in _pick
                start = BLOCK + tip.position * capacity + SLOT_BYTES  # slot_offset(), inline
                end = start + tip.length
                data = buf[start:end] if end <= len(buf) else os.pread(fd, tip.length, start)
                if zlib.crc32(data) == tip.data_crc:
                    return NOT_MODIFIED if version == known else made(Current, (tip, data))
            return self._pick(k, fd, buf, _parsed(raw, capacity), known=known, locked=locked)
        except OSError as exc:
            raise self._error(exc, op, k.key) from exc

    def _pick(
        self, k: _Key, fd: int, buf: bytes, parsed: Layout, *, known: str | None, locked: bool
    ) -> Current | NotModified | _Unsettled:
        """:meth:`_settle` of a file whose headers are ``parsed``: the newest whole slot, or
        the newest whose data is whole if ``locked``; in the usual shape it is the key's tip."""
        record = parsed.record
        if not locked and not parsed.settled:
            return _UNSETTLED
        if record is None:
            raise self._damaged(k.key, "its record fails its checksum")
        capacity = parsed.capacity
        for slot in parsed.written:
            if slot.seq < record:
                break  # a synced write is damaged: never read an older one instead
            version = slot.version.hex()
            if not locked and version == known:
                # Every slot header is whole, so no write newer than this one had finished
                # when the read began, and ``known`` came from a write that had finished:
                # the object is at ``known``. Its data isn't needed.
                return NOT_MODIFIED
            start = BLOCK + slot.position * capacity + SLOT_BYTES  # slot_offset(), inline
            end = start + slot.length
            data = buf[start:end] if end <= len(buf) else os.pread(fd, slot.length, start)
            if zlib.crc32(data) == slot.data_crc:
                if version == known:
                    return NOT_MODIFIED
                found = tip(parsed, slot)
                if found.usual:
                    k.tip = found
                return made(Current, (found, data))
            if not locked:
                return _UNSETTLED  # its data may still be arriving
        if not locked:
            return _UNSETTLED
        if not parsed.written:
            raise self._damaged(k.key, "none of its slots holds a whole document")
        raise self._damaged(
            k.key,
            f"its newest synced write (sequence {record}) fails its checksum; reading the"
            " slot before it would roll the object back",
        )

    def _capacity(self, key: str, buf: bytes) -> int:
        """The slot capacity from the file's header.

        :raises StoreError: not a LocalStore file, a file of an older format (two slots, or the
            one before slots), or a header that fails its checksum.
        """
        try:
            return header_capacity(buf)
        except FormatError as problem:
            if problem.kind == "older":
                raise self._older_format(key, problem.layout) from None
            if problem.kind == "damaged":
                raise self._damaged(key, "its header fails its checksum") from None
            raise StoreError(
                f"LocalStore object {key!r} in {self._root!r} is not a LocalStore object file;"
                " it was not written by LocalStore"
            ) from None

    def _older_format(self, key: str, layout: str) -> StoreError:
        return StoreError(
            f"LocalStore object {key!r} in {self._root!r} was written by an older prioritylock"
            f" ({layout}), which this one can't read: delete the file or the store directory"
            " (the old lock leases it holds go too)"
        )

    def _damaged(self, key: str, problem: str) -> StoreError:
        return StoreError(
            f"LocalStore object {key!r} in {self._root!r} is damaged: {problem}. It was left"
            " as it is; move it away (or delete it) to use the key again"
        )

    # -- writing ----------------------------------------------------------------------------

    def _replace(self, key: str, data: bytes, version: str, synced: bool, wait: bool) -> str:
        """:meth:`replace` (``synced``: then sync it) or :meth:`replace_unsynced`; not ``wait``:
        see :meth:`_try_nowait`. (Arguments by position: the write path's calls.)"""
        try:
            k = self._keys[key]
        except (KeyError, TypeError):  # not yet, or not a key at all
            k = self._key(key)
        if wait:
            self._stats.count("replaces")
        lock = self._lock(k, "replace", fcntl.LOCK_EX, wait)
        try:
            try:
                fd = os.open(k.path, _OBJECT_FLAGS)
            except FileNotFoundError as exc:
                self._check_root(exc, "replace", key)
                raise ConditionFailed(key, "absent") from None
            except OSError as exc:
                raise self._error(exc, "replace", key) from exc
            try:
                current = self._settle(k, fd, "replace", None, True)
                assert isinstance(current, Current)
                tip = current.tip
                if tip.version != version:
                    raise ConditionFailed(key, "version changed")
                new_version = next(_versions)
                written = new_version.hex()
                _notices.OWN.wrote(k.where, version, written)
                if SLOT_BYTES + len(data) > tip.capacity:
                    if not wait and self._durable:
                        raise _WouldBlock  # a new file, synced
                    self._write_file(
                        key, k.path, "replace", seq=tip.seq + 1, version=new_version, data=data
                    )
                    return written
                # Overwrite a free slot in place: neither the current one (so a write cut short,
                # by a kill or a full disk, leaves it whole and a slot whose checksums fail) nor
                # the kept one (so a power loss leaves the newest synced write whole).
                if tip.kept > tip.record and self._durable:
                    self._move_record(key, fd, tip.kept, wait=wait)
                blob, after = write_over(tip, new_version, written, data, synced)
                offset = BLOCK + tip.free * tip.capacity  # slot_offset(), inline
                try:
                    done = os.pwrite(fd, blob, offset)
                    while done < len(blob):  # short (a full disk): the slot fails its checksum
                        blob, offset = blob[done:], offset + done
                        done = os.pwrite(fd, blob, offset)
                except OSError as exc:
                    raise self._error(exc, "replace", key) from exc
                if synced:
                    try:
                        os.fdatasync(fd)
                        # Only now: a record naming a write that is not on disk yet would, after a
                        # power loss, make the slot before it look damaged. Written without a sync
                        # of its own: the next synced write's fdatasync takes it along; until then
                        # it may lag (see _move_record).
                        os.pwrite(fd, pack_record(tip.seq + 1), RECORD_AT)
                    except OSError as exc:
                        # The slot is whole in the page cache: readers may already see it.
                        raise self._error(exc, "replace", key, outcome_unknown=True) from exc
                k.tip = after  # what the next read or write of the key will find
            finally:
                os.close(fd)
        finally:
            _unlock(lock, k.stripe)
        return written

    def _move_record(self, key: str, fd: int, kept: int, *, wait: bool = True) -> None:
        """Move the record to ``kept``, a slot flagged synced that is newer than the record.

        That is a synced write whose record update never happened (its writer was killed, maybe
        before its sync, or a power loss took the update): a durable store syncs the file before
        anything is overwritten, so that slot is on disk, and moves the record to it. (A flagged
        slot up to the current one is whole: a synced write is on disk before any later write is
        made, by its own sync or by this one.) Which slot is kept is :func:`plan`'s rule.

        :raises StoreUnavailable: that sync failed; nothing was written.
        :raises _WouldBlock: not ``wait``; nothing was written.
        """
        if not wait:
            raise _WouldBlock
        try:
            os.fdatasync(fd)
            os.pwrite(fd, pack_record(kept), RECORD_AT)
        except OSError as exc:
            raise self._error(exc, "replace", key) from exc

    def _write_file(
        self, key: str, path: str, op: str, *, seq: int, version: bytes, data: bytes
    ) -> None:
        """Write a new object file holding ``data``: temp file, fsync, rename over ``path``.

        For a create, and for a document too large for the file's slots (the key's lock held).
        The temp name is fixed per key: only the lock holder writes it, so one left by a killed
        writer is simply truncated and reused by the next, or removed by a delete.
        """
        capacity = capacity_for(len(data))
        temp = path + _TMP
        renaming = False
        try:
            fd = self._open_temp(temp)
            try:
                blob = memoryview(new_file(capacity, seq, version, data, synced=self._durable))
                while blob:
                    blob = blob[os.write(fd, blob) :]
                os.ftruncate(fd, slot_offset(SLOTS, capacity))
                if self._durable:
                    os.fsync(fd)
            finally:
                os.close(fd)
            renaming = True
            os.replace(temp, path)
            self._fsync_dir(os.path.dirname(path))
        except OSError as exc:
            if not renaming:
                with contextlib.suppress(OSError):
                    os.unlink(temp)
            raise self._error(exc, op, key, outcome_unknown=renaming) from exc

    def _open_temp(self, temp: str) -> int:
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC | os.O_NOFOLLOW
        try:
            return os.open(temp, flags, 0o666)
        except FileNotFoundError:
            self._make_parents(os.path.dirname(temp))
            return os.open(temp, flags, 0o666)

    def _make_parents(self, dirpath: str) -> None:
        """Create the ``SEG.d`` directories down to ``dirpath``, each one durably."""
        missing: list[str] = []
        current = dirpath
        while current != self._root and not os.path.isdir(current):
            missing.append(current)
            current = os.path.dirname(current)
        if current == self._root and not os.path.isdir(self._root):
            raise FileNotFoundError(errno.ENOENT, "store directory is missing", self._root)
        for directory in reversed(missing):
            with contextlib.suppress(FileExistsError):
                os.mkdir(directory)
            self._fsync_dir(os.path.dirname(directory))

    def _fsync_dir(self, dirpath: str) -> None:
        if not self._durable:
            return
        fd = os.open(dirpath, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    # -- locking ----------------------------------------------------------------------------

    @contextlib.contextmanager
    def _locked(
        self, key: str, op: str, mode: int = fcntl.LOCK_EX, *, wait: bool = True
    ) -> Iterator[None]:
        """Hold ``key``'s lock (``with self._locked(...):``): :meth:`_lock` and
        :func:`_unlock` around the block."""
        k = self._key(key)
        fd = self._lock(k, op, mode, wait)
        try:
            yield
        finally:
            _unlock(fd, k.stripe)

    def _lock(self, k: _Key, op: str, mode: int, wait: bool) -> int:
        """Take the key's lock: this process's stripe lock, then ``flock`` on its lock file,
        exclusive for a write (``mode``), shared for a read that must not meet a write in
        flight. Returns the lock file's descriptor; :func:`_unlock` releases both. Not
        ``wait``: raise :class:`_WouldBlock` at once where either is held by another.

        The flock dies with the process (SIGKILL included), so a killed writer never leaves the
        key locked; the lock file itself stays, empty, and is reused. Each call opens its own file
        description: flock belongs to it, so two calls never share (or convert) one lock.
        """
        key, stripe = k.key, k.stripe
        deadline = None  # read only when something is held by another
        if not stripe.acquire(False):  # (by position: a C method's keywords cost)
            if not wait:
                raise _WouldBlock
            deadline = time.monotonic() + self._lock_timeout
            if not stripe.acquire(timeout=self._lock_timeout):
                raise self._lock_timed_out(op, key)
        try:
            try:
                fd = os.open(k.lock_path, _LOCK_FILE_FLAGS, 0o666)
            except OSError as exc:
                fd = self._open_lock_file(exc, k.lock_path, key, op)
            try:
                fcntl.flock(fd, mode | fcntl.LOCK_NB)
            except OSError as exc:
                self._flock_refused(fd, exc, key, op, mode=mode, wait=wait, deadline=deadline)
        except BaseException:
            stripe.release()
            raise
        return fd

    def _flock_refused(
        self,
        fd: int,
        exc: OSError,
        key: str,
        op: str,
        *,
        mode: int,
        wait: bool,
        deadline: float | None,
    ) -> None:
        """:meth:`_lock`'s flock on ``fd`` failed with ``exc``: take it once another process
        lets it go (polling; it holds it for one write), by ``deadline`` (or ``lock_timeout``
        from now). If it can't be had, close ``fd`` and raise."""
        try:
            if not isinstance(exc, BlockingIOError):
                raise self._error(exc, op, key) from exc
            if not wait:
                raise _WouldBlock from None
            if deadline is None:
                deadline = time.monotonic() + self._lock_timeout
            delay = 0.0002
            while True:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise self._lock_timed_out(op, key) from None
                time.sleep(min(delay, remaining))
                delay = min(delay * 2, 0.005)
                try:
                    fcntl.flock(fd, mode | fcntl.LOCK_NB)
                    return
                except BlockingIOError:
                    continue
                except OSError as again:
                    raise self._error(again, op, key) from again
        except BaseException:
            os.close(fd)
            raise

    def _open_lock_file(self, exc: OSError, path: str, key: str, op: str) -> int:
        """The lock file's descriptor, after opening it for writing failed with ``exc``."""
        flags = _LOCK_FILE_FLAGS
        if isinstance(exc, FileNotFoundError):
            # The lock directory was removed by hand; recreate it if the store is still there.
            self._check_root(exc, op, key)
            try:
                os.makedirs(self._locks_dir, exist_ok=True)
                return os.open(path, flags, 0o666)
            except OSError as again:
                raise self._error(again, op, key) from again
        if isinstance(exc, PermissionError):
            # A reader with read access only: a shared flock needs no more.
            try:
                return os.open(path, _READ_FLAGS)
            except OSError as again:
                raise self._error(again, op, key) from again
        raise self._error(exc, op, key) from exc

    def _lock_timed_out(self, op: str, key: str) -> StoreUnavailable:
        return StoreUnavailable(
            f"LocalStore could not {op} {key!r} in {self._root!r}: another writer held the key's"
            f" lock for more than {self._lock_timeout:g}s"
        )

    # -- errors -----------------------------------------------------------------------------

    def _check_root(self, exc: OSError, op: str, key: str) -> None:
        """After ENOENT: a missing key is normal, a missing store directory is not.

        :raises StoreAccessError: the store directory itself is gone.
        """
        if not os.path.isdir(self._root):
            raise self._error(exc, op, key) from exc

    def _error(
        self, exc: OSError, op: str, key: str | None, *, outcome_unknown: bool = False
    ) -> StoreError:
        """Our error for an unexpected ``OSError`` during ``op`` on ``key``."""
        where = f"{op} {key!r} in {self._root!r}" if key is not None else f"{op} {self._root!r}"
        if not os.path.isdir(self._root):
            return StoreAccessError(
                f"LocalStore could not {where}: the store directory is missing or not a directory"
                f" ({exc.strerror or exc})"
            )
        if exc.errno in _ACCESS_ERRNOS:
            return StoreAccessError(f"LocalStore could not {where}: {exc.strerror or exc}")
        return StoreUnavailable(
            f"LocalStore could not {where}: {exc.strerror or exc}", outcome_unknown=outcome_unknown
        )


# The methods' bodies made not to wait, logged like the methods (a refusal is not logged).


@logged("read")
def _read_nowait(store: LocalStore, key: str) -> ReadResult:
    return store._get(key, None, wait=False)


@logged("read_if_changed")
def _read_if_changed_nowait(store: LocalStore, key: str, version: str) -> ReadResult:
    return store._get(key, version, wait=False)


@logged("create")
def _create_nowait(store: LocalStore, key: str, data: bytes) -> str:
    return store._create(key, data, wait=False)


@logged("replace")
def _replace_nowait(store: LocalStore, key: str, data: bytes, version: str) -> str:
    return store._replace(key, data, version, store._durable, False)


@logged("replace_unsynced")
def _replace_unsynced_nowait(store: LocalStore, key: str, data: bytes, version: str) -> str:
    return store._replace(key, data, version, False, False)


@logged("delete")
def _delete_nowait(store: LocalStore, key: str, version: str) -> None:
    store._delete(key, version, wait=False)


#: What ``LocalStore._try_nowait`` may call, by method name: the request kind it counts, whether
#: it always syncs in a durable store, and its body made not to wait.
_QUICK: Final[dict[str, tuple[str, bool, Callable[..., object]]]] = {
    "read": ("reads", False, _read_nowait),
    "read_if_changed": ("reads", False, _read_if_changed_nowait),
    "create": ("creates", True, _create_nowait),  # a new file, synced with its directory
    "replace": ("replaces", True, _replace_nowait),
    "replace_unsynced": ("replaces", False, _replace_unsynced_nowait),
    "delete": ("deletes", True, _delete_nowait),  # syncs the directory
}


def _key_paths(root: str, key: str) -> tuple[str, str, threading.Lock]:
    """The object file and lock file of ``key`` in the store at ``root``, and its stripe lock.

    :raises ConfigError: invalid key, or a segment too long for a file name.
    """
    if type(key) is not str:
        validate_key(key)  # raises, before the cache would hash it
    return _cached_key_paths(root, key)


@functools.lru_cache(maxsize=65536)
def _cached_key_paths(root: str, key: str) -> tuple[str, str, threading.Lock]:
    """Segments become ``SEG.d`` directories, the last ``SEG.obj``; the lock file is named by the
    key's SHA-256. Invalid keys are not cached: they raise every time.
    """
    validate_key(key)
    segments = key.split("/")
    for segment in segments:
        if len(segment.encode("utf-8")) > _MAX_SEGMENT_BYTES:
            raise ConfigError(
                f"LocalStore key segments are limited to {_MAX_SEGMENT_BYTES} bytes"
                f" (a file name), got {len(segment.encode('utf-8'))}: {key[:60]!r}..."
            )
    *parents, leaf = segments
    path = os.path.join(root, *(p + _DIR for p in parents), leaf + _OBJ)
    lock = os.path.join(root, _LOCKS, hashlib.sha256(key.encode("utf-8")).hexdigest())
    return path, lock, _STRIPES[hash((root, key)) % len(_STRIPES)]


def _visit(
    entry: os.DirEntry[str],
    key_prefix: str,
    prefix: str,
    found: list[str],
    pending: list[tuple[str, str]],
) -> None:
    """Add ``entry`` to ``found`` if it is an object under ``prefix``, or queue its directory."""
    name = entry.name
    if name.endswith(_OBJ):
        segment = name[: -len(_OBJ)]
        key = key_prefix + segment
        if key.startswith(prefix) and _segment_ok(segment) and entry.is_file(follow_symlinks=False):
            found.append(key)
    elif name.endswith(_DIR):
        segment = name[: -len(_DIR)]
        below = key_prefix + segment + "/"
        wanted = below.startswith(prefix) or prefix.startswith(below)
        if wanted and _segment_ok(segment) and entry.is_dir(follow_symlinks=False):
            pending.append((entry.path, below))


def _segment_ok(segment: str) -> bool:
    """Whether a file name read back from disk decodes to a valid key segment."""
    try:
        validate_key(segment)
    except (ConfigError, UnicodeError):
        return False
    return "/" not in segment


def store_from_url(parts: urllib.parse.SplitResult, options: dict[str, str]) -> LocalStore:
    """``file:///ABSOLUTE/PATH[?durable=false]``: a :class:`LocalStore` in that directory.

    :raises ConfigError: a host (``file://relative`` names a host, not a directory), a path that
        is not absolute, or an option other than ``durable``.
    """
    shown = redact_url(parts.geturl())
    if parts.netloc not in ("", "localhost"):
        hint, meant = "", parts.netloc + parts.path
        if "@" not in parts.netloc:  # user-info may hold a secret: never repeat it
            hint = f"; for the directory {meant!r} use {file_url(meant)!r}"
        raise ConfigError(
            f"file store URL must be file:///ABSOLUTE/PATH (no host), got {shown!r}{hint}"
        )
    path = urllib.parse.unquote(parts.path)
    if not path.startswith("/") or path == "/":
        raise ConfigError(f"file store URL needs an absolute directory path, got {shown!r}")
    options = dict(options)
    durable = options.pop("durable", "true").lower()
    if durable not in ("true", "false"):
        raise ConfigError("file store URL option durable must be true or false")
    if options:
        raise ConfigError(f"file store URL takes only the option durable, got {sorted(options)}")
    return LocalStore(path, durable=durable == "true")
