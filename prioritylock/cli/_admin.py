"""Administration: ``force-unlock``, the break-glass path that frees a lock whoever holds it."""

from __future__ import annotations

import argparse
from typing import Any

import attrs

from prioritylock._errors import ConfigError, CorruptLease
from prioritylock.cli._exits import Exit, Failure
from prioritylock.cli._output import Output, clean, state
from prioritylock.cli._target import builder, opened, operator, scope

__all__ = ["cmd_force_unlock"]


def cmd_force_unlock(args: argparse.Namespace, out: Output) -> int:
    if not args.message.strip():
        raise ConfigError("--message: force-unlock needs a message saying why")
    lock_scope = scope(args.path)
    who = operator()
    with opened(args.url, create=False) as store:
        lock = builder(store, lock_scope, args).owner(who).build()
        corrupt = False
        try:
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
        if not corrupt and (current is None or not current.held):
            now = state(current)
            raise Failure(
                Exit.NOT_HELD,
                f"{lock_scope.key}: not held ({now}); nothing was changed",
                key=lock_scope.key,
                state=now,
            )
        before = lock.force_unlock(args.message, by=who, overwrite_corrupt=args.overwrite_corrupt)
        after = lock.info()
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
