"""The whole exception tree of prioritylock.

Every error the library raises on purpose derives from :class:`PriorityLockError`; where a builtin
says the same thing, the error derives from it too, so ``except TimeoutError`` keeps working::

    PriorityLockError
    ├── ConfigError            (also ValueError)   bad option, URL, path, scope or argument
    ├── LockTimeout            (also TimeoutError) lock(timeout=...) ran out
    │   └── LockCancelled                          the wait was cancelled, or the lock closed
    ├── PreemptionTimeout      (also TimeoutError) a non-forceful request waited out its window
    ├── LockHeld                                   this lock object already holds the lock
    ├── NotLockOwner                               an operation needs ownership we don't have
    │   └── LockLost                               ...because we held it and lost it
    ├── CorruptLease                               the lease document can't be trusted
    ├── ConditionFailed                            a conditional write or delete lost its race
    ├── StoreError                                 the store itself failed
    │   ├── StoreUnavailable                       throttled, 5xx, timeout: retryable
    │   └── StoreAccessError   (also PermissionError) credentials, permissions, missing bucket
    └── ServiceError                               prioritylock.client: the service refused
                                                   or could not be reached
"""

from __future__ import annotations

__all__ = [
    "ConditionFailed",
    "ConfigError",
    "CorruptLease",
    "LockCancelled",
    "LockHeld",
    "LockLost",
    "LockTimeout",
    "NotLockOwner",
    "PreemptionTimeout",
    "PriorityLockError",
    "ServiceError",
    "StoreAccessError",
    "StoreError",
    "StoreUnavailable",
]


class PriorityLockError(Exception):
    """Root of every error raised by prioritylock."""


class ConfigError(PriorityLockError, ValueError):
    """An option, URL, lock path, scope or argument is invalid; the message names it.

    ``option`` is the name of the one option at fault (``"lease_timeout"``, ``"store"``, a
    property key such as ``"prioritylock.priority"``), or None when the error is not about one
    option. The message then reads ``"option: problem"``, and ``problem`` is the part after the
    name, so a front end can say it in its own words (the CLI names its flags).
    """

    def __init__(self, message: str, *, option: str | None = None) -> None:
        super().__init__(message)
        self.option = option
        prefix = f"{option}: "
        self.problem = message[len(prefix) :] if option and message.startswith(prefix) else message


class LockTimeout(PriorityLockError, TimeoutError):
    """``lock(timeout=...)`` did not get the lock in time."""


class LockCancelled(LockTimeout):
    """A wait for the lock was ended before it got the lock: its ``cancel`` event was set, or the
    lock object was closed. Nothing is left claimed for it."""


class PreemptionTimeout(PriorityLockError, TimeoutError):
    """A non-forceful preemption request waited out its window; the request was withdrawn."""


class LockHeld(PriorityLockError):
    """This lock object already holds the lock (locks are not reentrant)."""


class NotLockOwner(PriorityLockError):
    """The operation needs this lock object to hold the lock, and it does not."""


class LockLost(NotLockOwner):
    """This lock object held the lock and lost it (expired, preempted, overridden, forced)."""

    def __init__(self, message: str, *, reason: str = "") -> None:
        super().__init__(message)
        self.reason = reason


class CorruptLease(PriorityLockError):
    """The document at ``key`` is not a lease this library can trust; it was left untouched."""

    def __init__(self, key: str, problem: str) -> None:
        super().__init__(f"corrupt lease document at {key!r}: {problem}")
        self.key = key
        self.problem = problem


class ConditionFailed(PriorityLockError):
    """A conditional write or delete found the object absent, present, or at another version.

    This is the one typed outcome of a lost compare-and-swap on every store.
    """

    def __init__(self, key: str, detail: str = "") -> None:
        super().__init__(f"condition failed on {key!r}" + (f": {detail}" if detail else ""))
        self.key = key


class StoreError(PriorityLockError):
    """The store failed to answer a request."""


class StoreUnavailable(StoreError):
    """A transient store failure: throttling (429/503), a 5xx, a timeout or a lost connection.

    ``outcome_unknown`` is true when the failed request was a write that may have landed; the lock
    resolves that by reading the document back.
    """

    def __init__(self, message: str, *, outcome_unknown: bool = False) -> None:
        super().__init__(message)
        self.outcome_unknown = outcome_unknown


class StoreAccessError(StoreError, PermissionError):
    """Credentials are missing or refused, or the bucket/container does not exist."""


class ServiceError(PriorityLockError):
    """:mod:`prioritylock.client`: the lock service refused a call for a reason none of the other
    errors names (a missing or wrong token, a request too large), or could not be reached.

    ``code`` is the gRPC status code's name (``"UNAUTHENTICATED"``, ``"UNAVAILABLE"``, ...) and
    ``reason`` the service's error code (``"ERR_UNAUTHORIZED"``, ...; empty when it sent none).
    """

    def __init__(self, message: str, *, code: str = "", reason: str = "") -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
