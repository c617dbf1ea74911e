"""The store seam: five conditional operations on keys, and what every store shares.

A store knows nothing of leases. It stores opaque bytes under keys and changes them only through
create-if-absent and compare-and-swap on an opaque version token. A failed condition is always
:class:`~prioritylock.ConditionFailed`; any other failure is a :class:`~prioritylock.StoreError`.
"""

from __future__ import annotations

import collections
import enum
import functools
import os
import re
import threading
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Final, Literal, Protocol, runtime_checkable

import attrs

from prioritylock._errors import ConfigError

__all__ = [
    "ConditionalReader",
    "KeyWatcher",
    "MAX_KEY_BYTES",
    "NOT_MODIFIED",
    "NativeAsync",
    "NonBlocking",
    "NotModified",
    "ObjectStore",
    "OwnWrites",
    "ReadResult",
    "StoreCapabilities",
    "StoreStats",
    "UnsyncedWriter",
    "Versioned",
    "WOULD_BLOCK",
    "WouldBlock",
    "own_writes",
    "validate_key",
]

MAX_KEY_BYTES = 1024
_BAD_KEY_CHARS = re.compile(r"[\x00-\x1f\x7f\\]")


class NotModified(enum.Enum):
    """What :meth:`ConditionalReader.read_if_changed` returns when the object is unchanged."""

    NOT_MODIFIED = "not modified"


NOT_MODIFIED: Final = NotModified.NOT_MODIFIED


@attrs.frozen
class Versioned:
    """Bytes read from a store with the version token they were read at."""

    data: bytes
    version: str


#: What a conditional read returns: the object, ``None`` (absent), or :data:`NOT_MODIFIED`.
ReadResult = Versioned | None | Literal[NotModified.NOT_MODIFIED]


@attrs.frozen
class StoreCapabilities:
    """What a store can promise (tooz's driver characteristics).

    :ivar shared_across_processes: other processes on this machine see the same objects.
    :ivar shared_across_hosts: other machines see the same objects.
    :ivar conditional_delete: delete-if-version-matches is enforced by the store.
    :ivar unique_versions: every write gets a version never seen before for its key, even with
        identical bytes. False for content-hash versions (S3 ETags): there, two writes of the
        same bytes share a version, so objects guarded by compare-and-swap must differ on every
        write (lease documents carry a fresh nonce for this reason).
    """

    shared_across_processes: bool
    shared_across_hosts: bool
    conditional_delete: bool = True
    unique_versions: bool = True


_KINDS = ("reads", "creates", "replaces", "deletes", "lists")


class StoreStats:
    """Thread-safe counts of the requests a store has sent, by kind.

    Every attempt counts, retries included: requests are what users pay for.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts = dict.fromkeys(_KINDS, 0)
        self._not_modified = 0

    def count(self, kind: str) -> None:
        with self._lock:
            self._counts[kind] += 1

    def count_not_modified(self) -> None:
        """A conditional read found the object unchanged (it is counted in ``reads`` too)."""
        with self._lock:
            self._not_modified += 1

    @property
    def not_modified(self) -> int:
        """Reads answered "unchanged" (HTTP 304): billed as reads, but no body was sent."""
        return self._not_modified

    @property
    def reads(self) -> int:
        return self._counts["reads"]

    @property
    def creates(self) -> int:
        return self._counts["creates"]

    @property
    def replaces(self) -> int:
        return self._counts["replaces"]

    @property
    def deletes(self) -> int:
        return self._counts["deletes"]

    @property
    def lists(self) -> int:
        return self._counts["lists"]

    @property
    def total(self) -> int:
        with self._lock:
            return sum(self._counts.values())

    @property
    def writes(self) -> int:
        with self._lock:
            return self._counts["creates"] + self._counts["replaces"] + self._counts["deletes"]

    def snapshot(self) -> dict[str, int]:
        """The counts now, as a plain dict (``total`` included)."""
        with self._lock:
            snap = dict(self._counts)
        snap["total"] = sum(snap.values())
        return snap

    def reset(self) -> None:
        with self._lock:
            for kind in _KINDS:
                self._counts[kind] = 0
            self._not_modified = 0

    def __repr__(self) -> str:
        inner = ", ".join(f"{k}={v}" for k, v in self.snapshot().items())
        return f"StoreStats({inner})"


@runtime_checkable
class ObjectStore(Protocol):
    """Five operations on keys; every store in prioritylock implements exactly these.

    Keys are ``/``-separated relative paths (see :func:`validate_key`). Version tokens are opaque
    strings: compare them for equality, never order them.

    What every operation may raise, on every store (a store documents only what it adds):

    - :class:`~prioritylock.ConfigError`: an invalid key or prefix, or data the store can't
      take, refused before any request.
    - :class:`~prioritylock.ConditionFailed` (writes only): the condition did not hold.
    - :class:`~prioritylock.StoreAccessError`: credentials or permissions refused, or the
      bucket, container or directory is missing: retrying won't help.
    - :class:`~prioritylock.StoreUnavailable`: throttled, a server error, a timeout or a lost
      connection: retry with backoff. For a write, ``outcome_unknown`` is true when it may have
      landed: read the object back to decide.
    - :class:`~prioritylock.StoreError`: any other failure of the store.
    """

    @property
    def stats(self) -> StoreStats:
        """Counts of the requests this store object has sent."""
        ...

    @property
    def capabilities(self) -> StoreCapabilities: ...

    if TYPE_CHECKING:  # a member for type checkers; at run time a store may still lack it

        @property
        def namespace(self) -> str:
            """Names what the store addresses (a directory; a bucket and prefix): two store
            objects with one namespace share objects, and versions never repeat within one. A
            store object without one is still accepted at run time, and its locks share no
            cached reads with other store objects."""
            ...

    def read(self, key: str) -> Versioned | None:
        """The object's bytes and version, or ``None`` when absent."""
        ...

    def create(self, key: str, data: bytes) -> str:
        """Store ``data`` only if ``key`` is absent; return the new version.

        :raises ConditionFailed: the key exists.
        """
        ...

    def replace(self, key: str, data: bytes, version: str) -> str:
        """Store ``data`` only if the object is at ``version``; return the new version.

        :raises ConditionFailed: absent or at another version.
        """
        ...

    def delete(self, key: str, version: str) -> None:
        """Delete the object only if it is at ``version``.

        :raises ConditionFailed: absent or at another version.
        """
        ...

    def list(self, prefix: str) -> list[str]:
        """Every key that starts with ``prefix``, sorted."""
        ...

    def close(self) -> None:
        """Release clients and connections; the store is not used afterwards."""
        ...


@runtime_checkable
class ConditionalReader(Protocol):
    """A store that can read "only if changed" (HTTP ``If-None-Match`` and its kin).

    Optional: the lock uses it when a store offers it, and a plain :meth:`ObjectStore.read`
    otherwise. Every store in prioritylock offers it.
    """

    def read_if_changed(self, key: str, version: str) -> ReadResult:
        """:data:`NOT_MODIFIED` if the object is still at ``version``; else what :meth:`read`
        returns. One request, counted in ``stats.reads`` (and ``stats.not_modified`` when
        unchanged): a store that can't ask conditionally may read in full and compare. Raises
        what :meth:`ObjectStore.read` raises.
        """
        ...


class WouldBlock(enum.Enum):
    """What a store's quick path (``_try_nowait``, see :class:`NonBlocking`) returns when the
    call would have to wait."""

    WOULD_BLOCK = "would block"


WOULD_BLOCK: Final = WouldBlock.WOULD_BLOCK


class NonBlocking(Protocol):
    """A store whose calls usually finish at once on the calling thread, and that can tell,
    before doing anything, when one would not (private: the asyncio driver's fast path).

    A store offers it by a method ``_try_nowait(op, *args)``, looked up by name: ``op`` names
    one of its methods (``"read"``, ``"replace_unsynced"``, ...) and ``args`` are that method's
    arguments. It either makes the call, exactly as the method would (same result or error,
    counted in ``stats`` and logged once), or returns :data:`WOULD_BLOCK` having written,
    counted and logged nothing, when the call would wait: for a lock another thread or process
    holds, or for the disk (a sync). The caller then calls the method itself, on a thread that
    may wait.
    """

    def _try_nowait(self, op: str, *args: Any) -> object: ...


class NativeAsync(Protocol):
    """A store that can make some of its calls with native async I/O on the running event loop,
    with no thread (private: the asyncio driver's way to keep network I/O off the GIL-holding
    thread pool).

    A store offers it by a method ``_call_async(op, *args)``, looked up by name like
    ``_try_nowait`` of :class:`NonBlocking`: it returns an awaitable that makes the call named
    ``op`` exactly as the method would (same result or error, counted in ``stats`` and logged
    once), or ``None``, having done nothing, when it has no async way for ``op`` (not installed,
    or an operation it leaves to the sync client). The caller then calls the method on a thread.
    """

    def _call_async(self, op: str, *args: Any) -> Awaitable[object] | None: ...


@runtime_checkable
class UnsyncedWriter(Protocol):
    """A store whose writes are durable (synced to disk) by default, and that can skip the sync.

    Optional, for stores on one machine's disk (``LocalStore``): the lock replaces unsynced
    only where losing the write to an operating-system crash or power loss is harmless: where
    the write keeps the lease's fence (a renewal, a release, a request), or raises it within a
    fence reservation that a synced write made in this boot of the machine (``_reserve``), so
    a fence a holder has used never comes back after a reboot.
    """

    def replace_unsynced(self, key: str, data: bytes, version: str) -> str:
        """Exactly :meth:`ObjectStore.replace` (conditional, atomic, at once visible to every
        reader, counted in ``stats.replaces``), except that it may return before the write is
        on disk: after an OS crash or power loss the object may be at the version before it,
        whole, never torn, never older than the last synced write.
        """
        ...


@runtime_checkable
class KeyWatcher(Protocol):
    """A store that can tell when a key may have changed (file-system notification, say).

    Optional, and private to the package for now: the lock's in-process notices (``_wake``)
    subscribe while a lock of the process waits on or holds the key, and read the document when
    told. A notice is a hint, never a fact: it may come late, twice, or for a change that did
    not happen, and a lost one only costs the poll's latency.
    """

    def watch_key(self, key: str, callback: Callable[[], None]) -> Callable[[], None]:
        """Call ``callback`` (from any thread, with no arguments, quickly) whenever ``key`` may
        have changed, until the returned function is called; that function may be called
        from any thread, once."""
        ...


class OwnWrites:
    """The versions this process wrote to each object, and its writes under way there: how a
    server store's change notices tell a change this process made (its locks were told of it
    in-process, ``_wake``, so waking them costs a read for nothing) from another's.

    Objects are named by the store (its endpoint and the object's name, so stores on different
    servers never share a name). A write is announced before it is sent (:meth:`begin`) and
    again when its answer came (:meth:`end`): a notice can come before the answer, so a store
    that cannot tell yet waits for its writes under way (:meth:`made` with ``wait``), or knows
    the version before it is made (``expected``). Bounded: the latest few versions of the latest
    few thousand objects. A forked child starts empty: the parent's writes are another
    process's.
    """

    _KEEP = 8  # versions per object
    _OBJECTS = 4096  # objects remembered

    def __init__(self) -> None:
        self._clear()
        os.register_at_fork(after_in_child=self._clear)

    def _clear(self) -> None:
        self._changed = threading.Condition()
        self._versions: collections.OrderedDict[str, collections.deque[str]] = (
            collections.OrderedDict()
        )
        self._began: collections.Counter[str] = collections.Counter()
        self._pending: collections.Counter[str] = collections.Counter()

    def begin(self, name: str, expected: str | None = None) -> None:
        """A write to ``name`` is about to be sent; ``expected``: the version it will make if it
        lands, when that is known before its answer (ours from now on)."""
        with self._changed:
            self._began[name] += 1
            self._pending[name] += 1
            if len(self._began) > self._OBJECTS:
                self._began.clear()  # a watch then asks whose each change was, once
            if expected is not None:
                self._remember(name, expected)

    def end(self, name: str, version: str | None = None, *, withdrawn: str | None = None) -> None:
        """The write :meth:`begin` announced has its answer: ``version`` if it landed (``None``:
        it did not, or no answer came); ``withdrawn``: the expected version, which it did not
        make."""
        with self._changed:
            if withdrawn is not None and withdrawn != version:
                versions = self._versions.get(name)
                if versions is not None and withdrawn in versions:
                    versions.remove(withdrawn)
            if version is not None:
                self._remember(name, version)
            self._pending[name] -= 1
            if self._pending[name] <= 0:
                del self._pending[name]
            self._changed.notify_all()

    def under_way(self, name: str) -> tuple[int, bool]:
        """How many writes to ``name`` began so far (a count that only grows, but may restart
        from 0), and whether one is under way."""
        with self._changed:
            return self._began[name], self._pending[name] > 0

    def made(self, name: str, version: str, *, wait: float = 0.0) -> bool:
        """Whether this process wrote ``version`` of ``name``; with ``wait``, after waiting up to
        that many seconds for its writes under way to ``name`` (past it: the answer so far)."""
        with self._changed:
            if wait > 0:
                self._changed.wait_for(lambda: not self._pending[name], timeout=wait)
            return version in self._versions.get(name, ())

    def _remember(self, name: str, version: str) -> None:
        """(``_changed`` held.)"""
        versions = self._versions.setdefault(name, collections.deque(maxlen=self._KEEP))
        self._versions.move_to_end(name)
        if version not in versions:
            versions.append(version)
        while len(self._versions) > self._OBJECTS:
            self._versions.popitem(last=False)


#: The writes of this process to the objects of the stores that filter their own notices out.
own_writes = OwnWrites()


@functools.lru_cache(maxsize=65536)
def _check_key(key: str) -> None:
    _validate_key(key)


def validate_key(key: str) -> str:
    """Return ``key`` if it is a valid store key (see :func:`_validate_key`); cached.

    :raises ConfigError: the key is invalid.
    """
    if not isinstance(key, str):
        raise ConfigError(f"store key must be a non-empty string, got {key!r}")
    _check_key(key)
    return key


def _validate_key(key: str) -> str:
    """Return ``key`` if it is a valid store key.

    :raises ConfigError: empty, absolute, with empty, ``.`` or ``..`` segments, control
        characters or backslashes, or longer than :data:`MAX_KEY_BYTES` bytes in UTF-8.
    """
    if not isinstance(key, str) or not key:
        raise ConfigError(f"store key must be a non-empty string, got {key!r}")
    try:
        size = len(key.encode("utf-8"))
    except UnicodeEncodeError as exc:
        raise ConfigError(f"store key is not valid Unicode text: {key!r}") from exc
    if size > MAX_KEY_BYTES:
        raise ConfigError(f"store key is longer than {MAX_KEY_BYTES} bytes: {key[:60]!r}...")
    if _BAD_KEY_CHARS.search(key):
        raise ConfigError(f"store key contains control characters or backslashes: {key!r}")
    for part in key.split("/"):
        if part in ("", ".", ".."):
            raise ConfigError(f"store key has an empty, '.' or '..' segment: {key!r}")
    return key


def normalize_prefix(prefix: str, store: str) -> str:
    """A cloud store's key prefix as stored: empty, or a valid key followed by ``/``.

    :raises ConfigError: not a string, or not a valid key once its slashes are trimmed.
    """
    if not isinstance(prefix, str):
        raise ConfigError(f"{store} prefix must be a string, got {prefix!r}")
    stripped = prefix.strip("/")
    if not stripped:
        return ""
    validate_key(stripped)
    return stripped + "/"


def prefixed_key(prefix: str, key: str, what: str) -> str:
    """``prefix + key`` after checking both, refused before any request if too long.

    :raises ConfigError: the key is invalid, or longer than :data:`MAX_KEY_BYTES` with the prefix.
    """
    validate_key(key)
    full = prefix + key
    if len(full.encode("utf-8")) > MAX_KEY_BYTES:
        raise ConfigError(
            f"{what} {full[:60]!r}... is longer than {MAX_KEY_BYTES} bytes with the prefix"
        )
    return full


def validate_prefix(prefix: str) -> str:
    """Return ``prefix`` if it is usable with ``list``: empty, or a key-like string."""
    if prefix == "":
        return prefix
    # Every segment but the last is complete and must be valid; the last may be any start of one
    # (".", "a/." are prefixes of ".x" and "a/.hidden").
    *complete, _ = prefix.split("/")
    if complete:
        validate_key("/".join(complete))
    validate_key(prefix.replace("/", "-") + "x")  # characters and length
    return prefix
