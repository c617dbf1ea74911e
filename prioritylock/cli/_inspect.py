"""Looking without touching: ``info``, ``list`` and ``watch``."""

from __future__ import annotations

import argparse
import signal
import time
from typing import Any

import attrs

from prioritylock._errors import CorruptLease
from prioritylock._info import LockInfo
from prioritylock._record import record, state
from prioritylock.cli._exits import Exit
from prioritylock.cli._output import Output, clean, holder_text, secs, when
from prioritylock.cli._target import builder, missing_directory, opened, scope, the_store
from scopes import LockScope

__all__ = ["cmd_info", "cmd_list", "cmd_watch"]


# -- info / list -------------------------------------------------------------------------------


def _time_left(info: LockInfo, now: float) -> str:
    if info.expires_at is None:
        return ""
    left = info.expires_at - now
    if left >= 0:
        return f"about {left:.0f} s left (approximate: by wall clocks)"
    return f"overdue by about {-left:.0f} s (approximate: by wall clocks; the holder may be dead)"


def _info_lines(lock_scope: LockScope, info: LockInfo | None, now: float) -> list[str]:
    if info is None:
        return [f"{lock_scope.key}: never taken (no lease document)"]
    head = f"{lock_scope.key}: " + (f"held by {clean(info.owner)}" if info.held else "free")
    rows: list[tuple[str, str]] = []
    if info.held:
        rows += [
            ("message", clean(info.message or "")),
            ("priority", str(info.priority)),
            ("fence", str(info.fence)),
            ("lease", f"{secs(info.lease_timeout)}, renewed {when(info.renewed_at)}"),
            ("time left", _time_left(info, now)),
            (
                "cleanup",
                f"{secs(info.cleanup_timeout)}" + ("; forceful" if info.forceful else ""),
            ),
            ("acquired", when(info.acquired_at)),
        ]
    else:
        rows.append(("fence", f"{info.fence} (the next holder gets a higher one)"))
    if info.requestor_owner is not None:
        rows.append(
            (
                "requested",
                f"by {clean(info.requestor_owner)}, priority {info.requestor_priority}, "
                f"waits {secs(info.requestor_waiting_timeout)}"
                + (", forceful" if info.requestor_forceful else "")
                + f", since {when(info.requestor_requested_at)}"
                + (f": {clean(info.requestor_message)}" if info.requestor_message else ""),
            )
        )
    for place, waiter in enumerate(info.waiters, 1):
        rows.append(
            (
                "waiting" if place == 1 else "",
                f"{place}. {clean(waiter.owner)}, priority {waiter.priority}, "
                f"since {when(waiter.since)}",
            )
        )
    if info.last_event is not None:
        rows.append(
            (
                "last event",
                f"{info.last_event} by {clean(info.last_event_by)} at "
                f"{when(info.last_event_at)}"
                + (f": {clean(info.last_event_message)}" if info.last_event_message else ""),
            )
        )
    return [head] + [f"  {name:<11} {value}" for name, value in rows]


def cmd_info(args: argparse.Namespace, out: Output) -> int:
    lock_scope = scope(args.path)
    with (
        out.waiting(the_store(args)),
        opened(args.url, create=False, store_timeout=args.store_timeout) as store,
    ):
        info = builder(store, lock_scope, args).build().info()
    now = time.time()
    if out.json:
        out.record(record(lock_scope, info, now))
    else:
        for text in _info_lines(lock_scope, info, now):
            out.line(text)
    return Exit.OK


def _key_prefix(prefix: str) -> str:
    """A key prefix as given, or a lock path prefix turned into one."""
    if "v1/".startswith(prefix) or prefix.startswith("v1/"):
        return prefix
    return "v1/path/" + prefix


def cmd_list(args: argparse.Namespace, out: Output) -> int:
    rows: list[dict[str, Any]] = []
    now = time.time()
    with (
        out.waiting(the_store(args)),
        opened(args.url, create=False, store_timeout=args.store_timeout) as store,
    ):
        for key in store.list(_key_prefix(args.prefix)):
            try:
                lock_scope = LockScope.from_key(key)
            except ValueError:
                rows.append({"key": key, "state": "foreign", "problem": "not a lock key"})
                continue
            try:
                info = builder(store, lock_scope, args).build().info()
            except CorruptLease as exc:
                rows.append({"key": key, "state": "corrupt", "problem": exc.problem})
                continue
            rows.append(record(lock_scope, info, now))
    if out.json:
        out.record(rows)
        return Exit.OK
    if not rows:
        out.line(f"no lock documents under {_key_prefix(args.prefix)!r}")
        return Exit.OK
    width = max(len("KEY"), *(len(clean(row["key"])) for row in rows))
    out.line(f"{'KEY':<{width}}  {'STATE':<11}  {'FENCE':>6}  {'PRIORITY':>10}  {'LINE':>4}  OWNER")
    for row in rows:
        fence = row.get("fence")
        priority = row.get("priority")
        line = len(row.get("waiters", ()))
        last = row.get("owner") or row.get("problem") or "-"
        out.line(
            f"{clean(row['key']):<{width}}  {row['state']:<11}  "
            f"{'-' if fence is None else fence:>6}  {'-' if priority is None else priority:>10}  "
            f"{line:>4}  {clean(last)}"
        )
    return Exit.OK


# -- watch -------------------------------------------------------------------------------------


@attrs.frozen
class Observation:
    """One read of the lease by ``watch``: absent, a lease, or a corrupt document."""

    info: LockInfo | None = None
    problem: str | None = None

    @property
    def state(self) -> str:
        return "corrupt" if self.problem is not None else state(self.info)


_TAKEN = {
    "acquired": "acquired",
    "expired_takeover": "acquired",
    "handover": "handover",
    "preempted": "preempted",
    "forceful_takeover": "preempted",
    "override": "override",
}


def changes(prev: Observation, cur: Observation) -> list[tuple[str, str]]:
    """What changed between two observations, as (change, detail) pairs."""
    if cur == prev:
        return []
    if cur.problem is not None:
        return [("corrupt", clean(cur.problem))] if prev.problem != cur.problem else []
    c, p = cur.info, prev.info
    if c is None:
        return [("deleted", "the lease document is gone")]
    found: list[tuple[str, str]] = []
    event = c.last_event or ""
    by = f" by {clean(c.last_event_by)}" if c.last_event_by else ""
    why = f": {clean(c.last_event_message)}" if c.last_event_message else ""
    if p is None or c.fence != p.fence:
        skipped = "" if p is None or c.fence - p.fence <= 1 else f" ({c.fence - p.fence} changes)"
        if c.held:
            change = _TAKEN.get(event, "acquired")
            was = (
                f" from {clean(p.owner)}" if p is not None and p.held and p.owner != c.owner else ""
            )
            detail = f"{holder_text(c)}{was}"
            if change == "override":
                detail += why
            elif event == "expired_takeover":
                detail += " (the previous lease had expired)"
        else:
            change = "forced" if event == "force_unlock" else "released"
            detail = f"fence {c.fence}{by}{why}"
        found.append((change, detail + skipped))
    elif p.held and not c.held:
        found.append(("released", f"fence {c.fence}{by}"))
    elif c.held and p.held and c.renewed_at != p.renewed_at:
        found.append(("renewed", f"{holder_text(c)}, renewed {when(c.renewed_at, ms=True)}"))
    request = (c.requestor_owner, c.requestor_priority, c.requestor_requested_at)
    before = (
        (None, None, None)
        if p is None
        else (
            p.requestor_owner,
            p.requestor_priority,
            p.requestor_requested_at,
        )
    )
    if request != before:
        if c.requestor_owner is not None:
            found.append(
                (
                    "requested",
                    f"by {clean(c.requestor_owner)} (priority {c.requestor_priority}"
                    + (", forceful" if c.requestor_forceful else "")
                    + ")"
                    + (f": {clean(c.requestor_message)}" if c.requestor_message else ""),
                )
            )
        elif p is not None and p.fence == c.fence:
            found.append(("withdrawn", f"the request by {clean(p.requestor_owner)} is gone"))
    found += _line_changes(p, c)
    return found


def _line_changes(p: LockInfo | None, c: LockInfo) -> list[tuple[str, str]]:
    """Waiters that joined or left the line (the one that took the lock shows as acquired)."""
    before = {(w.owner, w.since): w for w in (p.waiters if p is not None else ())}
    now = {(w.owner, w.since): w for w in c.waiters}
    found = []
    for key, w in now.items():
        if key not in before:
            place = list(now).index(key) + 1
            found.append(
                ("joined", f"{clean(w.owner)} (priority {w.priority}), {place} of {len(now)}")
            )
    for key, w in before.items():
        if key not in now and not (c.held and c.owner == w.owner):
            found.append(("left", f"{clean(w.owner)} left the line, {len(now)} waiting"))
    return found


def _state_detail(seen: Observation) -> str:
    if seen.problem is not None:
        return f"corrupt: {clean(seen.problem)}"
    info = seen.info
    if info is None:
        return "never taken"
    if info.held:
        return f"held by {holder_text(info)}"
    return f"free, fence {info.fence}"


def _await_directory(args: argparse.Namespace, out: Output) -> None:
    """Watching a lock on a directory not made yet (watch started before the first holder):
    say so once, then look again every ``--interval`` until it is there."""
    missing = missing_directory(args.url)
    if missing is None:
        return
    out.note(
        f"store directory {missing!r} does not exist yet: waiting for the lock's first holder"
        f" to create it (checking every {args.interval:g} s)"
    )
    while missing_directory(args.url) is not None:
        time.sleep(args.interval)


def cmd_watch(args: argparse.Namespace, out: Output) -> int:
    lock_scope = scope(args.path)
    count = 0
    previous = signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        _await_directory(args, out)
        with opened(args.url, create=False, store_timeout=args.store_timeout) as store:
            lock = builder(store, lock_scope, args).build()
            prev: Observation | None = None
            while True:
                try:
                    with out.waiting(the_store(args)):
                        seen = Observation(info=lock.info())
                except CorruptLease as exc:
                    seen = Observation(problem=exc.problem)
                now = time.time()
                lines = [("state", _state_detail(seen))] if prev is None else changes(prev, seen)
                for change, detail in lines:
                    if out.json:
                        out.record(
                            {
                                "at": when(now, ms=True),
                                "time": now,
                                "change": change,
                                "detail": detail,
                                "key": lock_scope.key,
                                "state": seen.state,
                                "lease": None if seen.info is None else attrs.asdict(seen.info),
                            }
                        )
                    else:
                        out.line(f"{when(now, ms=True)}  {change:<9}  {detail}")
                    if change != "state":
                        count += 1
                        if args.count is not None and count >= args.count:
                            return Exit.OK
                prev = seen
                time.sleep(args.interval)
    except KeyboardInterrupt:
        return Exit.OK
    finally:
        signal.signal(signal.SIGTERM, previous)
