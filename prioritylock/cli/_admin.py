"""Administration: ``force-unlock``, and how an operator's break-glass command is guarded.

An operator acts on what they saw: with ``--fence``/``--owner`` the command acts only while the
lease still shows them (the check and the write are one compare-and-swap in the library). Without
them it shows the lease and asks on a terminal, then acts only on the lease it showed; off a
terminal it needs ``--yes``.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

import attrs

from prioritylock._errors import ConditionFailed, ConfigError, CorruptLease, PriorityLockError
from prioritylock._info import LockInfo
from prioritylock._lock import Lock
from prioritylock.cli._exits import Exit, Failure
from prioritylock.cli._output import PROG, Output, clean, state, when
from prioritylock.cli._target import builder, opened, operator, scope, the_store

__all__ = ["cmd_force_unlock", "confirm", "confirmation_needed", "describe", "guard_failed"]


def describe(info: LockInfo | None) -> str:
    """The lease as an operator is asked about it: holder, priority, fence, since when."""
    if info is None:
        return "never taken (no lease document)"
    if not info.held:
        return f"free (fence {info.fence})"
    return (
        f"held by {clean(info.owner)} (priority {info.priority}, fence {info.fence}) "
        f"since {when(info.acquired_at)}" + (f": {clean(info.message)}" if info.message else "")
    )


def confirmation_needed(args: argparse.Namespace) -> bool:
    """Whether to ask before acting; off a terminal, without a guard or ``--yes``: a usage error.

    :raises Failure: (exit 2) not on a terminal and neither a guard nor ``--yes`` was given.
    """
    if args.fence is not None or args.owner is not None or args.yes:
        return False
    if sys.stdin is not None and sys.stdin.isatty():
        return True
    raise Failure(
        Exit.USAGE,
        f"{args.command}: not on a terminal, so there is no one to ask: give --fence N and/or "
        f"--owner NAME (as '{PROG} info' shows them) to act only while the lease still shows "
        f"them, or --yes to act whatever it shows; nothing was changed",
    )


def confirm(out: Output, what: str, question: str) -> None:
    """Show ``what`` and ask ``question`` on the terminal; anything but yes changes nothing.

    :raises Failure: (exit 1) the answer was not yes (or stdin ended).
    """
    out.stderr.write(f"{what}\n{question} [y/N] ")
    out.stderr.flush()
    answer = sys.stdin.readline()
    if not answer.endswith("\n"):
        out.stderr.write("\n")
    if answer.strip().lower() not in ("y", "yes"):
        raise Failure(Exit.ERROR, "not confirmed; nothing was changed")


def guard_failed(lock: Lock, outcome: str, fence: int | None, owner: str | None) -> Failure:
    """The failure when the lease no longer shows what the operator saw (one more read)."""
    wanted = " and ".join(
        part
        for part in (
            "" if fence is None else f"fence {fence}",
            "" if owner is None else f"held by {clean(owner)}",
        )
        if part
    )
    try:
        now = describe(lock.info())
    except PriorityLockError as exc:
        now = f"unreadable ({exc})"
    return Failure(
        Exit.GUARD_FAILED,
        f"{lock.key}: {outcome}: the lease does not show {wanted}; it is {now}; "
        "nothing was changed",
        key=lock.key,
    )


def cmd_force_unlock(args: argparse.Namespace, out: Output) -> int:
    if not args.message.strip():
        raise ConfigError("--message: force-unlock needs a message saying why", option="message")
    if args.overwrite_corrupt and (args.fence is not None or args.owner is not None):
        raise Failure(
            Exit.USAGE,
            "force-unlock: --overwrite-corrupt can't be combined with --fence or --owner "
            "(a corrupt document shows neither); nothing was changed",
        )
    ask = confirmation_needed(args)
    lock_scope = scope(args.path)
    who = operator()
    with opened(args.url, create=False, store_timeout=args.store_timeout) as store:
        lock = builder(store, lock_scope, args).owner(who).build()
        corrupt = False
        try:
            with out.waiting(the_store(args)):
                current = lock.info()
        except CorruptLease as exc:
            if not args.overwrite_corrupt:
                raise Failure(
                    Exit.CORRUPT,
                    f"{exc}; nothing was changed ('--overwrite-corrupt' replaces it)",
                    key=lock_scope.key,
                ) from None
            corrupt = True
            current = None
            if ask:
                confirm(out, clean(str(exc)), "Overwrite it with a free lease?")
        if not corrupt and (current is None or not current.held):
            now = state(current)
            raise Failure(
                Exit.NOT_HELD,
                f"{lock_scope.key}: not held ({now}); nothing was changed",
                key=lock_scope.key,
                state=now,
            )
        if_fence, if_owner = args.fence, args.owner
        if ask and current is not None:
            confirm(out, f"{lock_scope.key}: {describe(current)}", "Free it?")
            # Act on what was confirmed: the lease must still show it when the write lands.
            if_fence, if_owner = current.fence, current.owner
        try:
            with out.waiting(the_store(args)):
                before = lock.force_unlock(
                    args.message,
                    by=who,
                    overwrite_corrupt=args.overwrite_corrupt,
                    if_fence=if_fence,
                    if_owner=if_owner,
                )
                after = lock.info()
        except ConditionFailed:
            raise guard_failed(lock, "not freed", if_fence, if_owner) from None
    result: dict[str, Any] = {
        "key": lock_scope.key,
        "freed": None if before is None else attrs.asdict(before),
        "overwrote_corrupt": corrupt,
        "fence": None if after is None else after.fence,
        "by": who,
    }
    if out.json:
        out.record(result)
        return Exit.OK
    if corrupt:
        freed = "a corrupt lease document (overwritten with a free lease)"
    elif before is not None and before.held:
        freed = (
            f"{clean(before.owner)} (priority {before.priority}, fence {before.fence}"
            + (f": {clean(before.message)}" if before.message else "")
            + ")"
        )
    else:
        freed = "nobody (it was released meanwhile)"
    fence = "-" if after is None else str(after.fence)
    out.line(f"{lock_scope.key}: freed {freed}")
    out.line(f"  fence now {fence}; the next holder gets a higher one; recorded as {who}")
    return Exit.OK
