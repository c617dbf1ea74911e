"""LocalStore: objects as files in one directory, safe across the processes of one machine.

Layout of the store directory (every name is derived from the key, so no key can escape it)::

    a.obj            key "a"           first line: the version (32 hex digits), then the bytes
    a.d/b.obj        key "a/b"         a segment that has children becomes a directory "SEG.d"
    a.d/b.obj.tmp    a write in flight (or left by a killed writer); ignored by list()
    .locks/<sha256>  one lock file per key ever written; flock()ed around every write

A write takes the key's lock (a process-wide thread lock, then ``flock`` on the key's lock file),
checks the condition, writes the whole document to the key's temp file, fsyncs it and renames it
over the object with ``os.replace``. Readers take no lock: a rename is atomic, so a read sees one
complete document, header and bytes together, even when a writer is SIGKILLed halfway.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import itertools
import os
import secrets
import threading
import time
from collections.abc import Iterator

from prioritylock._errors import (
    ConditionFailed,
    ConfigError,
    StoreAccessError,
    StoreError,
    StoreUnavailable,
)
from prioritylock.stores._base import (
    StoreCapabilities,
    StoreStats,
    Versioned,
    validate_key,
    validate_prefix,
)

__all__ = ["LocalStore"]

_OBJ = ".obj"
_DIR = ".d"
_TMP = ".tmp"
_LOCKS = ".locks"
_VERSION_CHARS = 32  # 64 random bits per process, then a 64-bit counter, in hex
_HEADER_LEN = _VERSION_CHARS + 1  # the version and its newline
_HEX = frozenset("0123456789abcdef")
# A segment becomes a file name "SEG.obj.tmp"; most filesystems cap names at 255 bytes.
_MAX_SEGMENT_BYTES = 255 - len(_OBJ + _TMP)
_ACCESS_ERRNOS = frozenset({errno.EACCES, errno.EPERM, errno.EROFS})

# Thread locks striped by (directory, key), shared by every LocalStore of this process. flock alone
# would do on a local filesystem (each operation opens its own file description), but where flock
# is emulated with per-process POSIX locks (NFS, some FUSE mounts) threads would not exclude each
# other; and threads queueing on a thread lock wait without polling.
_STRIPES = tuple(threading.Lock() for _ in range(64))


def _new_version() -> str:
    """A version no write of any process ever made: 64 random bits per process, and a counter.

    (No system call per write; the random part is drawn again in a forked child.)
    """
    return f"{_version_prefix}{next(_version_counter):016x}"


def _reseed_versions() -> None:
    global _version_prefix, _version_counter
    _version_prefix = secrets.token_hex(_VERSION_CHARS // 4)
    _version_counter = itertools.count(1)


_version_prefix = ""
_version_counter = itertools.count(1)
_reseed_versions()
os.register_at_fork(after_in_child=_reseed_versions)


class LocalStore:
    """Objects as files under ``directory``; shared by the processes of one machine.

    Every write is atomic: a writer killed at any moment leaves either the old document or the
    new one, never a torn one. With ``durable=True`` (the default) it is also durable: the file
    and its directory are fsync'ed before the write returns, so a power loss can't roll a lease
    (and its fencing counter) back. ``durable=False`` skips the fsyncs: several times faster,
    still atomic against crashed processes, but after an operating-system crash a document may
    be older than the last write (fences may then repeat after the reboot).
    Versions are 128 bits, unique per write, so they never repeat for a key, even after delete and
    create. The directory is created if missing.

    Not for network filesystems: ``flock`` and ``rename`` are only as atomic as the filesystem
    makes them. Keys that differ only in case collide on case-insensitive filesystems.

    :param directory: the store's directory.
    :param durable: fsync every write (default); see above.
    :param lock_timeout: seconds a write waits for another writer of the same key before failing
        with :class:`~prioritylock.StoreUnavailable` (a writer holds it for one fsync'ed write).
    :raises ConfigError: ``directory`` exists and is not a directory, or ``lock_timeout`` is not
        positive.
    :raises StoreAccessError: the directory can't be created or entered (permissions).
    :raises StoreUnavailable: another I/O error while creating the directory.
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

    def read(self, key: str) -> Versioned | None:
        """The object's bytes and version, read from one snapshot, or ``None`` when absent.

        :raises ConfigError: invalid key.
        :raises StoreAccessError: the directory is gone or unreadable.
        :raises StoreError: the file is not a LocalStore document, or another I/O error
            (:class:`~prioritylock.StoreUnavailable`).
        """
        path = self._object_path(key)
        self._stats.count("reads")
        try:
            with open(path, "rb") as file:
                blob = file.read()
        except FileNotFoundError as exc:
            self._check_root(exc, "read", key)
            return None
        except OSError as exc:
            raise self._error(exc, "read", key) from exc
        version = self._parse_header(key, blob[:_HEADER_LEN])
        return Versioned(blob[_HEADER_LEN:], version)

    def create(self, key: str, data: bytes) -> str:
        """Store ``data`` only if ``key`` is absent; return the new version.

        :raises ConfigError: invalid key.
        :raises ConditionFailed: the key exists.
        :raises StoreAccessError: permissions, or the directory is gone.
        :raises StoreUnavailable: another I/O error, or another writer held the key's lock past
            ``lock_timeout``; ``outcome_unknown`` is true if the write may have landed.
        :raises StoreError: the existing file is not a LocalStore document.
        """
        path = self._object_path(key)
        self._stats.count("creates")
        with self._locked(key, "create"):
            if self._current_version(key, path, "create") is not None:
                raise ConditionFailed(key, "already exists")
            return self._write(key, path, data, "create")

    def replace(self, key: str, data: bytes, version: str) -> str:
        """Store ``data`` only if the object is at ``version``; return the new version.

        :raises ConfigError: invalid key.
        :raises ConditionFailed: absent or at another version.
        :raises StoreAccessError: permissions, or the directory is gone.
        :raises StoreUnavailable: another I/O error, or another writer held the key's lock past
            ``lock_timeout``; ``outcome_unknown`` is true if the write may have landed.
        :raises StoreError: the existing file is not a LocalStore document.
        """
        path = self._object_path(key)
        self._stats.count("replaces")
        with self._locked(key, "replace"):
            current = self._current_version(key, path, "replace")
            if current is None:
                raise ConditionFailed(key, "absent")
            if current != version:
                raise ConditionFailed(key, "version changed")
            return self._write(key, path, data, "replace")

    def delete(self, key: str, version: str) -> None:
        """Delete the object only if it is at ``version``.

        Directories left empty stay: removing them would race with a concurrent create below them.

        :raises ConfigError: invalid key.
        :raises ConditionFailed: absent or at another version.
        :raises StoreAccessError: permissions, or the directory is gone.
        :raises StoreUnavailable: another I/O error, or another writer held the key's lock past
            ``lock_timeout``; ``outcome_unknown`` is true if the delete may have landed.
        :raises StoreError: the existing file is not a LocalStore document.
        """
        path = self._object_path(key)
        self._stats.count("deletes")
        with self._locked(key, "delete"):
            current = self._current_version(key, path, "delete")
            if current is None:
                raise ConditionFailed(key, "absent")
            if current != version:
                raise ConditionFailed(key, "version changed")
            unlinked = False
            try:
                os.unlink(path)
                unlinked = True
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(path + _TMP)
                self._fsync_dir(os.path.dirname(path))
            except OSError as exc:
                raise self._error(exc, "delete", key, outcome_unknown=unlinked) from exc

    def list(self, prefix: str) -> list[str]:
        """Every key that starts with ``prefix``, sorted; temp and foreign files are skipped.

        :raises ConfigError: invalid prefix.
        :raises StoreAccessError: the directory is gone or unreadable.
        :raises StoreUnavailable: another I/O error.
        """
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

    def close(self) -> None:
        """Nothing to release: every operation opens and closes its own files."""

    def __repr__(self) -> str:
        durable = "" if self._durable else ", durable=False"
        return f"LocalStore({self._root!r}{durable})"

    # -- paths ------------------------------------------------------------------------------

    def _object_path(self, key: str) -> str:
        """The file of ``key``: segments become ``SEG.d`` directories, the last ``SEG.obj``."""
        validate_key(key)
        segments = key.split("/")
        for segment in segments:
            if len(segment.encode("utf-8")) > _MAX_SEGMENT_BYTES:
                raise ConfigError(
                    f"LocalStore key segments are limited to {_MAX_SEGMENT_BYTES} bytes"
                    f" (a file name), got {len(segment.encode('utf-8'))}: {key[:60]!r}..."
                )
        *parents, leaf = segments
        return os.path.join(self._root, *(p + _DIR for p in parents), leaf + _OBJ)

    def _lock_path(self, key: str) -> str:
        return os.path.join(self._locks_dir, hashlib.sha256(key.encode("utf-8")).hexdigest())

    # -- locking and writing ----------------------------------------------------------------

    @contextlib.contextmanager
    def _locked(self, key: str, op: str) -> Iterator[None]:
        """Hold ``key``'s lock: this process's stripe lock, then ``flock`` on its lock file.

        The flock dies with the process (SIGKILL included), so a killed writer never leaves the
        key locked; the lock file itself stays, empty, and is reused.
        """
        deadline = time.monotonic() + self._lock_timeout
        stripe = _STRIPES[hash((self._root, key)) % len(_STRIPES)]
        if not stripe.acquire(timeout=self._lock_timeout):
            raise self._lock_timed_out(op, key)
        try:
            fd = self._open_lock_file(key, op)
            try:
                delay = 0.0002
                while True:
                    try:
                        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                        break
                    except BlockingIOError:
                        # Another process writes this key: it holds the lock for one write.
                        remaining = deadline - time.monotonic()
                        if remaining <= 0:
                            raise self._lock_timed_out(op, key) from None
                        time.sleep(min(delay, remaining))
                        delay = min(delay * 2, 0.005)
                    except OSError as exc:
                        raise self._error(exc, op, key) from exc
                yield
            finally:
                os.close(fd)  # releases the flock
        finally:
            stripe.release()

    def _open_lock_file(self, key: str, op: str) -> int:
        path = self._lock_path(key)
        flags = os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW
        try:
            return os.open(path, flags, 0o666)
        except FileNotFoundError as exc:
            # The lock directory was removed by hand; recreate it if the store is still there.
            self._check_root(exc, op, key)
            try:
                os.makedirs(self._locks_dir, exist_ok=True)
                return os.open(path, flags, 0o666)
            except OSError as again:
                raise self._error(again, op, key) from again
        except OSError as exc:
            raise self._error(exc, op, key) from exc

    def _lock_timed_out(self, op: str, key: str) -> StoreUnavailable:
        return StoreUnavailable(
            f"LocalStore could not {op} {key!r} in {self._root!r}: another writer held the key's"
            f" lock for more than {self._lock_timeout:g}s"
        )

    def _current_version(self, key: str, path: str, op: str) -> str | None:
        """The version in the header of ``key``'s file, or ``None`` when absent (lock held)."""
        try:
            with open(path, "rb") as file:
                header = file.read(_HEADER_LEN)
        except FileNotFoundError as exc:
            self._check_root(exc, op, key)
            return None
        except OSError as exc:
            raise self._error(exc, op, key) from exc
        return self._parse_header(key, header)

    def _write(self, key: str, path: str, data: bytes, op: str) -> str:
        """Write the whole document to the temp file, fsync, rename over ``path`` (lock held).

        The temp name is fixed per key: only the lock holder writes it, so one left by a killed
        writer is simply truncated and reused by the next write, or removed by a delete.
        """
        version = _new_version()
        temp = path + _TMP
        renaming = False
        try:
            fd = self._open_temp(temp)
            with os.fdopen(fd, "wb") as file:
                file.write(version.encode("ascii") + b"\n")
                file.write(data)
                file.flush()
                if self._durable:
                    os.fsync(file.fileno())
            renaming = True
            os.replace(temp, path)
            self._fsync_dir(os.path.dirname(path))
        except OSError as exc:
            if not renaming:
                with contextlib.suppress(OSError):
                    os.unlink(temp)
            raise self._error(exc, op, key, outcome_unknown=renaming) from exc
        return version

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

    # -- errors -----------------------------------------------------------------------------

    def _parse_header(self, key: str, header: bytes) -> str:
        version = header[:_VERSION_CHARS].decode("ascii", "replace")
        if len(header) != _HEADER_LEN or header[-1:] != b"\n" or not set(version) <= _HEX:
            raise StoreError(
                f"LocalStore object {key!r} in {self._root!r} has no version header;"
                " it was not written by LocalStore"
            )
        return version

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
