"""Exit codes, and the two exceptions that end a command with one of them."""

from __future__ import annotations

import enum
from typing import Any

from prioritylock._errors import (
    ConditionFailed,
    ConfigError,
    CorruptLease,
    LockLost,
    LockTimeout,
    NotLockOwner,
    PreemptionTimeout,
    StoreError,
)

__all__ = ["EXIT_CODES", "Exit", "Failure", "Interrupted", "exit_code"]


class Exit(enum.IntEnum):
    """The exit codes of the command. ``run`` also passes CMD's own status through."""

    OK = 0
    ERROR = 1
    USAGE = 2
    CONFIG = 3
    STORE = 4
    CORRUPT = 5
    NOT_ACQUIRED = 6
    LOST = 7
    NOT_HELD = 8
    GUARD_FAILED = 9
    PORT_UNAVAILABLE = 10
    CANNOT_EXECUTE = 126
    NOT_FOUND = 127
    INTERRUPTED = 130


#: (code, meaning): the table shown by ``--help`` and in the CLI page of the docs.
EXIT_CODES: tuple[tuple[str, str], ...] = (
    ("0", "success (run/override -- CMD: CMD exited 0)"),
    ("1", "any other error, or a confirmation answered no (nothing changed)"),
    ("2", "usage: unknown command or option, missing argument or '--', malformed number;"),
    ("", "force-unlock/override off a terminal without --fence, --owner or --yes"),
    ("3", "bad input: store URL, lock path, option value (ConfigError)"),
    ("4", "store unavailable or refused: network, credentials, missing bucket (StoreError)"),
    ("5", "corrupt or foreign lease document; it was left untouched (CorruptLease)"),
    ("6", "lock not acquired: --timeout ran out, or another override holds it"),
    ("7", "the lock was preempted or lost while CMD ran (or the hold lasted)"),
    ("8", "not held: force-unlock found nothing to free"),
    ("9", "force-unlock/override: the lease no longer shows --fence/--owner; nothing changed"),
    ("10", "serve: a port can't be bound (in use): change --http-port/--grpc-port (or --host)"),
    ("126/127", "run/override: CMD could not be executed / was not found"),
    ("128+N", "interrupted by signal N (130 for SIGINT, 143 for SIGTERM); the lock was released"),
    ("other", "run/override -- CMD: CMD's own exit status (128+N if a signal N killed it)"),
)


class Failure(Exception):
    """Ends the command with one line on stderr and ``code``."""

    def __init__(self, code: int, message: str, **extra: Any) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.extra = extra


class Interrupted(BaseException):
    """A forwarded signal arrived while nothing could be forwarded to: stop what we are doing."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def exit_code(exc: BaseException) -> int:
    """The exit code for one of the library's errors."""
    if isinstance(exc, ConfigError):
        return Exit.CONFIG
    if isinstance(exc, StoreError):
        return Exit.STORE
    if isinstance(exc, CorruptLease):
        return Exit.CORRUPT
    if isinstance(exc, LockTimeout | PreemptionTimeout):
        return Exit.NOT_ACQUIRED
    if isinstance(exc, LockLost):
        return Exit.LOST
    if isinstance(exc, NotLockOwner):
        return Exit.NOT_HELD
    if isinstance(exc, ConditionFailed):
        return Exit.GUARD_FAILED
    return Exit.ERROR
