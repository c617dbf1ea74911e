"""``prioritylock hudi info|watch|force-unlock BASE_PATH``: Apache Hudi's own table lock.

The table is named by its base path as Hudi has it (``s3a://bucket/path``, ``gs://...``,
``abfss://container@account.dfs.core.windows.net/path``); the lock is its
``.hoodie/.locks/table_lock.json``. Credentials come from the SDKs' usual environment.

``force-unlock`` is the recovery for a lock left held by a writer whose release failed (Hudi's
dangling lock): one conditional write of ``expired: true`` over exactly the document the
operator saw. With ``--owner`` and ``--valid-until`` (as ``info`` shows them) it acts only while
the lock still shows them; without, it shows the lock and asks on a terminal, or with ``--yes``
acts on what it read; either way a holder that renewed in between makes it fail, changing
nothing.
"""

from __future__ import annotations

import argparse
import signal
import sys
import time
from typing import Any

from prioritylock._config import DEFAULT_MAX_CLOCK_DRIFT
from prioritylock._errors import ConditionFailed, ConfigError, CorruptLease
from prioritylock._hudi_config import store_url
from prioritylock._hudi_lock import KEY, HudiLockInfo, force_unlock, read_info
from prioritylock.cli._admin import confirm
from prioritylock.cli._exits import Exit, Failure
from prioritylock.cli._output import Output, clean, when

__all__ = ["add_hudi_commands", "cmd_hudi"]


def add_hudi_commands(
    commands: Any,
    common: argparse.ArgumentParser,
    seconds: Any,
    interval: Any,
    parser_class: Any,
) -> None:
    """Add ``hudi`` and its subcommands to ``commands`` (the CLI's subparsers); ``seconds`` and
    ``interval`` are the CLI's own argument types (an interval has a floor: no busy loop)."""
    hudi = commands.add_parser(
        "hudi",
        help="Apache Hudi's own table lock (shared with Java writers)",
        description=(
            "Inspect or free Apache Hudi's table lock, <BASE_PATH>/.hoodie/.locks/table_lock.json,"
            " as Hudi's StorageBasedLockProvider writes it."
        ),
    )
    sub = hudi.add_subparsers(dest="hudi_command", metavar="COMMAND", parser_class=parser_class)
    table = parser_class(add_help=False, parents=[common])
    table.add_argument("base_path", metavar="BASE_PATH", help="the table's base path (s3a://…)")
    table.add_argument(
        "--max-clock-drift",
        type=seconds,
        default=DEFAULT_MAX_CLOCK_DRIFT,
        metavar="S",
        help="Hudi's drift allowance past validUntil (default 0.5)",
    )
    sub.add_parser(
        "info",
        parents=[table],
        help="owner, validUntil, time left, expired",
        description="Show Hudi's table lock as one read finds it.",
    )
    watch = sub.add_parser(
        "watch",
        parents=[table],
        help="print each change of the lock",
        description="Read the lock every --interval and print each change until Ctrl-C.",
    )
    watch.add_argument(
        "--interval", type=interval, default=1.0, metavar="S", help="seconds between reads (1)"
    )
    watch.add_argument("--count", type=int, metavar="N", help="stop after N changes")
    force = sub.add_parser(
        "force-unlock",
        parents=[table],
        help="free a dangling lock: expired=true over what you saw",
        description=(
            "Write expired=true over the lock document, only while it still shows what you saw."
            " A Java holder that is alive loses the lock at its next renewal."
        ),
    )
    force.add_argument("--owner", metavar="UUID", help="act only while this owner holds it")
    force.add_argument(
        "--valid-until", type=int, metavar="MS", help="act only while it shows this validUntil"
    )
    force.add_argument(
        "-y", "--yes", action="store_true", help="act on what is read now, without asking"
    )


def cmd_hudi(args: argparse.Namespace, out: Output) -> int:
    if args.hudi_command is None:
        raise Failure(Exit.USAGE, "hudi: choose info, watch or force-unlock")
    return {"info": _info, "watch": _watch, "force-unlock": _force}[args.hudi_command](args, out)


#: The schemes of a base path as Hudi writes them, mapped by ``store_url`` (and prioritylock's
#: own store URLs, which it leaves as they are).
_SCHEMES = ("s3a", "s3n", "s3", "gs", "gcs", "abfss", "abfs", "wasbs", "wasb", "az", "file")

#: What to say a BASE_PATH may be.
_TAKES = (
    "an absolute local path (/data/tables/orders), s3a://BUCKET/PATH, gs://BUCKET/PATH or"
    " abfss://CONTAINER@ACCOUNT.dfs.core.windows.net/PATH (also s3://, s3n://, gcs://, abfs://,"
    " wasb[s]://, file://)"
)


def _store(args: argparse.Namespace) -> Any:
    from prioritylock.cli._target import opened

    base = args.base_path.strip().rstrip("/")
    scheme, sep, _ = base.partition("://")
    if (sep and scheme.lower() not in _SCHEMES) or (not sep and not base.startswith("/")):
        what = f"{clean(scheme)}:// is not a store the hudi commands read" if sep else "not a path"
        raise ConfigError(f"BASE_PATH: {what}; give {_TAKES}", option="BASE_PATH")
    return opened(store_url(base, "BASE_PATH"), create=False)


def _record(args: argparse.Namespace, info: HudiLockInfo | None) -> dict[str, Any]:
    found: dict[str, Any] = {"base_path": args.base_path, "key": KEY, "state": _state(info)}
    if info is not None:
        found.update(
            owner=info.owner,
            valid_until_ms=info.valid_until_ms,
            valid_until=when(info.valid_until_ms / 1000, ms=True),
            expired=info.expired,
            free=info.free,
            time_left=info.time_left,
            version=info.version,
        )
    return found


def _state(info: HudiLockInfo | None) -> str:
    if info is None:
        return "never taken"
    if info.expired:
        return "released"
    return "lapsed" if info.free else "held"


def _describe(info: HudiLockInfo | None) -> str:
    if info is None:
        return "never taken (no lock file)"
    until = f"validUntil {info.valid_until_ms} ({when(info.valid_until_ms / 1000, ms=True)})"
    text = f"{_state(info)}: owner {clean(info.owner)}, {until}"
    if info.expired:
        return text + ", expired=true"
    return text + (", lapsed" if info.free else f", {info.time_left:.1f} s left")


def _read(store: Any, args: argparse.Namespace) -> HudiLockInfo | None:
    return read_info(store, max_clock_drift=args.max_clock_drift)


def _info(args: argparse.Namespace, out: Output) -> int:
    with _store(args) as store:
        info = _read(store, args)
    if out.json:
        out.record(_record(args, info))
    else:
        out.line(f"{clean(args.base_path)}: {_describe(info)}")
    return Exit.OK


def _watch(args: argparse.Namespace, out: Output) -> int:
    previous = signal.signal(signal.SIGTERM, signal.default_int_handler)
    count, last = 0, ""
    try:
        with _store(args) as store:
            while True:
                try:
                    info = _read(store, args)
                    text = _describe(info)
                    record = _record(args, info)
                except CorruptLease as exc:
                    text, record = f"corrupt: {exc.problem}", {"state": "corrupt"}
                # Time left changes on every read: a change is anything else.
                key = text.rsplit(", ", 1)[0] if text.endswith(" s left") else text
                if key != last:
                    now = time.time()
                    if out.json:
                        out.record({"at": when(now, ms=True), "time": now, **record})
                    else:
                        out.line(f"{when(now, ms=True)}  {text}")
                    if last:
                        count += 1
                        if args.count is not None and count >= args.count:
                            return Exit.OK
                    last = key
                time.sleep(args.interval)
    except KeyboardInterrupt:
        return Exit.OK
    finally:
        signal.signal(signal.SIGTERM, previous)


def _force(args: argparse.Namespace, out: Output) -> int:
    guarded = args.owner is not None or args.valid_until is not None
    if guarded and (args.owner is None or args.valid_until is None):
        raise Failure(Exit.USAGE, "hudi force-unlock: give --owner and --valid-until together")
    ask = not guarded and not args.yes
    if ask and not (sys.stdin is not None and sys.stdin.isatty()):
        raise Failure(
            Exit.USAGE,
            "hudi force-unlock: not on a terminal, so there is no one to ask: give --owner and"
            " --valid-until (as 'prioritylock hudi info' shows them) to act only while the lock"
            " still shows them, or --yes to act on what it shows now; nothing was changed",
        )
    with _store(args) as store:
        seen = _read(store, args)
        if seen is None or seen.expired:
            raise Failure(
                Exit.NOT_HELD,
                f"{KEY}: not held ({_describe(seen)}); nothing was changed",
                key=KEY,
            )
        owner, valid_until = (
            (args.owner, args.valid_until) if guarded else (seen.owner, seen.valid_until_ms)
        )
        if ask:
            confirm(out, f"{args.base_path}: {_describe(seen)}", "Mark it expired?")
        try:
            done = force_unlock(
                store,
                if_owner=owner,
                if_valid_until_ms=valid_until,
                max_clock_drift=args.max_clock_drift,
            )
        except ConditionFailed:
            try:
                now = _describe(_read(store, args))
            except CorruptLease as exc:
                now = f"corrupt ({exc.problem})"
            raise Failure(
                Exit.GUARD_FAILED,
                f"{KEY}: the lock no longer shows owner {clean(owner)}, validUntil {valid_until};"
                f" it is {now}; nothing was changed",
                key=KEY,
            ) from None
    if out.json:
        out.record({**_record(args, done), "forced": True, "was": _record(args, seen)})
    else:
        out.line(f"{clean(args.base_path)}: marked expired (was {_describe(seen)})")
    return Exit.OK
