"""The ``prioritylock`` command: look at, run under, override and free locks from a shell.

::

    prioritylock info URL PATH                       who holds the lock, on what terms
    prioritylock list URL [--prefix P]               every lock document under a prefix
    prioritylock run URL PATH [options] -- CMD ...   run CMD while holding the lock
    prioritylock override URL PATH --message MSG (--hold S | -- CMD ...)
    prioritylock force-unlock URL PATH --message MSG
    prioritylock watch URL PATH                      print each change of the lease
    prioritylock demo

Errors are one line on stderr and an exit code from :class:`Exit` (``docs/cli.md`` has the
table); a traceback is shown only with ``PRIORITYLOCK_TRACEBACK=1``. Store URLs may carry
secrets in their query strings, so a URL is never printed, and ``CMD`` gets it without one.

Standard library only (argparse), and POSIX only for ``run`` and ``override -- CMD``: CMD runs in
a process group of its own, which gets the signals.
"""

from __future__ import annotations

import argparse
import contextlib
import enum
import getpass
import json
import math
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator, Sequence
from datetime import datetime, timezone
from types import FrameType
from typing import Any, NoReturn, TextIO

import attrs

from prioritylock import __version__
from prioritylock._builder import LockBuilder
from prioritylock._errors import (
    ConfigError,
    CorruptLease,
    LockLost,
    LockTimeout,
    NotLockOwner,
    PreemptionTimeout,
    PriorityLockError,
    StoreAccessError,
    StoreError,
)
from prioritylock._info import LockInfo
from prioritylock._listener import CleanupNotice, LockListener
from prioritylock._lock import Lock
from prioritylock.stores import ObjectStore, open_store
from scopes import LockScope

__all__ = ["EXIT_CODES", "Exit", "main"]

PROG = "prioritylock"


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
    CANNOT_EXECUTE = 126
    NOT_FOUND = 127
    INTERRUPTED = 130


#: (code, meaning): the table shown by ``--help`` and in docs/cli.md.
EXIT_CODES: tuple[tuple[str, str], ...] = (
    ("0", "success (run/override -- CMD: CMD exited 0)"),
    ("1", "any other error"),
    ("2", "usage: unknown command or option, missing argument, malformed number"),
    ("3", "bad input: store URL, lock path, option value (ConfigError)"),
    ("4", "store unavailable or refused: network, credentials, missing bucket (StoreError)"),
    ("5", "corrupt or foreign lease document; it was left untouched (CorruptLease)"),
    ("6", "lock not acquired: --timeout ran out, or another override holds it"),
    ("7", "the lock was preempted or lost while CMD ran (or the hold lasted)"),
    ("8", "not held: force-unlock found nothing to free"),
    ("126/127", "run/override: CMD could not be executed / was not found"),
    ("128+N", "interrupted by signal N (130 for SIGINT, 143 for SIGTERM); the lock was released"),
    ("other", "run/override -- CMD: CMD's own exit status (128+N if a signal N killed it)"),
)

# Signals that ``run`` forwards to CMD rather than dying of them.
_FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class _Failure(Exception):
    """Ends the command with one line on stderr and ``code``."""

    def __init__(self, code: int, message: str, **extra: Any) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.extra = extra


class _Interrupted(BaseException):
    """A forwarded signal arrived while nothing could be forwarded to: stop what we are doing."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def _exit_code(exc: BaseException) -> int:
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
    return Exit.ERROR


# -- output ------------------------------------------------------------------------------------


def _clean(text: object) -> str:
    """User text made safe for a terminal: one line, no escape sequences."""
    return "".join(
        ch if ch.isprintable() else ch.encode("unicode_escape").decode("ascii") for ch in str(text)
    )


def _when(ts: float | None, *, ms: bool = False) -> str:
    if ts is None:
        return "-"
    moment = datetime.fromtimestamp(ts, timezone.utc)
    if ms:
        return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def _secs(value: float | None) -> str:
    return "-" if value is None else f"{value:g} s"


class _Output:
    """Where a command's results and its one error line go."""

    def __init__(self, json_mode: bool, stdout: TextIO, stderr: TextIO) -> None:
        self.json = json_mode
        self.stdout = stdout
        self.stderr = stderr

    def line(self, text: str) -> None:
        self.stdout.write(text + "\n")
        self.stdout.flush()

    def record(self, value: object, *, stream: TextIO | None = None) -> None:
        out = stream or self.stdout
        out.write(json.dumps(value, sort_keys=True) + "\n")
        out.flush()

    def error(self, code: int, message: str, **extra: Any) -> None:
        one_line = " ".join(message.split("\n"))
        if self.json:
            self.record({"error": one_line, "exit": code, **extra}, stream=self.stderr)
        else:
            self.stderr.write(f"{PROG}: {_clean(one_line)}\n")
            self.stderr.flush()


# -- arguments ---------------------------------------------------------------------------------


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (and the code is ours)."""

    def error(self, message: str) -> NoReturn:
        command = self.prog[len(PROG) :].strip()
        where = f"{command}: " if command else ""
        raise _Failure(Exit.USAGE, f"{where}{message} (see {self.prog} --help)")


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"must be a finite number of seconds >= 0: {text!r}")
    return value


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1: {text!r}")
    return value


def _integer(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None


def _build_parser() -> _Parser:
    epilog = "exit codes:\n" + "\n".join(f"  {code:<8} {text}" for code, text in EXIT_CODES)
    parser = _Parser(
        prog=PROG,
        description="Distributed locks with priorities and preemption, leased in object stores.",
        epilog=epilog,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    parser.add_argument("--json", action="store_true", help="machine-readable output")

    common = _Parser(add_help=False)
    common.add_argument(
        "--json", action="store_true", default=argparse.SUPPRESS, help="machine-readable output"
    )
    common.add_argument(
        "--store-timeout",
        type=_seconds,
        default=10.0,
        metavar="S",
        help="how long one store call is retried on throttling or 5xx (default 10)",
    )
    located = _Parser(add_help=False, parents=[common])
    located.add_argument("url", metavar="URL", help="store URL: file:///DIR, s3://BUCKET/PREFIX…")
    located.add_argument(
        "path", metavar="PATH", help="lock path (jobs/nightly) or scope key (v1/resource/prod/db)"
    )

    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    commands.add_parser(
        "info",
        parents=[located],
        help="who holds the lock, on what terms",
        description=(
            "Show the lease: holder, message, priority, timeouts, fence, time left, pending "
            "request and the last event."
        ),
    )

    lister = commands.add_parser(
        "list",
        parents=[common],
        help="every lock document under a prefix",
        description="List every lock document under a key prefix: one line each, or a JSON array.",
    )
    lister.add_argument("url", metavar="URL", help="store URL")
    lister.add_argument(
        "--prefix",
        default="",
        help="key prefix (v1/resource/prod/) or lock path prefix (jobs/ means v1/path/jobs/)",
    )

    runner = commands.add_parser(
        "run",
        parents=[located],
        help="run CMD while holding the lock",
        usage=f"{PROG} run [options] URL PATH -- CMD [ARGS ...]",
        description=(
            "Wait for the lock, run CMD while holding it (the lease is renewed), release it when "
            "CMD exits and exit with CMD's status. CMD gets PRIORITYLOCK_FENCE, PRIORITYLOCK_PATH, "
            "PRIORITYLOCK_KEY, PRIORITYLOCK_OWNER and PRIORITYLOCK_URL (without query string). "
            "Preempted, CMD's process group gets SIGTERM and the cleanup window, then SIGKILL."
        ),
    )
    runner.add_argument("--priority", type=_integer, default=0, help="0..2147483646 (default 0)")
    _add_timing(runner)
    runner.add_argument(
        "--wait", type=_seconds, metavar="S", help="as requestor, wait S for the holder's cleanup"
    )
    runner.add_argument(
        "--forceful", action="store_true", help="take the lock when the --wait runs out"
    )
    runner.add_argument(
        "--timeout", type=_seconds, metavar="S", help="give up after S (exit 6; default: wait)"
    )
    runner.add_argument("--owner", help="name shown to others (default user@host:pid)")
    runner.add_argument("--message", help="why this lock is held, shown to others")

    override = commands.add_parser(
        "override",
        parents=[located],
        help="the operators' emergency override",
        usage=f"{PROG} override [options] URL PATH --message MSG (--hold S | -- CMD [ARGS ...])",
        description=(
            "Take the lock at once from any holder (priority 2147483647, recorded with MSG and "
            "user@host), then hold it for S seconds or run CMD like `run`."
        ),
    )
    override.add_argument("--message", required=True, help="why (required; recorded)")
    override.add_argument("--hold", type=_seconds, metavar="S", help="hold for S, then release")
    _add_timing(override)

    force = commands.add_parser(
        "force-unlock",
        parents=[located],
        help="free a lock held by a dead client",
        description=(
            "Free the lock whoever holds it; recorded with MSG and user@host. The next holder "
            "gets a higher fence."
        ),
    )
    force.add_argument("--message", required=True, help="why (required; recorded)")
    force.add_argument(
        "--overwrite-corrupt",
        action="store_true",
        help="also replace a corrupt lease document with a free one",
    )

    watch = commands.add_parser(
        "watch",
        parents=[located],
        help="print each change of the lease",
        description="Poll the lease and print each change until Ctrl-C (exit 0) or --count.",
    )
    watch.add_argument(
        "--interval", type=_seconds, default=1.0, metavar="S", help="seconds between reads (1)"
    )
    watch.add_argument("--count", type=_positive_int, metavar="N", help="stop after N changes")

    commands.add_parser("demo", help="contention and preemption on a temporary local store")
    return parser


def _add_timing(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--lease", type=_seconds, metavar="S", help="lease timeout (default 30)")
    parser.add_argument(
        "--cleanup",
        type=_seconds,
        metavar="S",
        help="cleanup window when preempted, and the grace before SIGKILL (default 10)",
    )


def _split_command(argv: list[str]) -> tuple[list[str], list[str] | None]:
    """``run``/``override``: everything after the first ``--`` is CMD, never our options."""
    separator = "--"
    for index, word in enumerate(argv):
        if word == separator:
            return argv, None
        if not word.startswith("-"):
            if word not in ("run", "override") or separator not in argv[index:]:
                return argv, None
            cut = argv.index(separator, index)
            return argv[:cut], argv[cut + 1 :]
    return argv, None


# -- stores and locks ------------------------------------------------------------------------


def _scope(path: str) -> LockScope:
    try:
        return LockScope.from_key(path) if path.startswith("v1/") else LockScope.path(path)
    except ValueError as exc:
        raise ConfigError(f"lock path: {exc}") from None


def _public_url(url: str) -> str:
    """The URL without user-info, query or fragment: where, never how to get in."""
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError:
        return ""
    netloc = parts.netloc.rsplit("@", 1)[-1]
    return urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, "", ""))


@contextlib.contextmanager
def _opened(url: str, *, create: bool) -> Iterator[ObjectStore]:
    """The store; commands that only look must not create a missing store directory."""
    if not create and url.lower().startswith("file:"):
        with contextlib.suppress(ValueError):
            path = urllib.parse.unquote(urllib.parse.urlsplit(url).path)
            if path.startswith("/") and path != "/" and not os.path.isdir(path):
                raise StoreAccessError(f"store directory {path!r} does not exist")
    store = open_store(url)
    try:
        yield store
    finally:
        store.close()


def _builder(store: ObjectStore, scope: LockScope, args: argparse.Namespace) -> LockBuilder:
    if args.store_timeout <= 0:
        raise ConfigError("--store-timeout: must be positive")
    return LockBuilder().store(store).scope(scope).store_timeout(args.store_timeout)


def _operator() -> str:
    """``user@host``: who an operator's override or force-unlock is recorded as."""
    try:
        user = getpass.getuser()
    except Exception:
        user = "unknown"
    return f"{user}@{socket.gethostname()}"


def _path_of(scope: LockScope) -> str | None:
    return "/".join(scope.parts) if scope.kind.value == "path" else None


# -- info / list -------------------------------------------------------------------------------


def _state(info: LockInfo | None) -> str:
    if info is None:
        return "never taken"
    return "held" if info.held else "free"


def _record(scope: LockScope, info: LockInfo | None, now: float) -> dict[str, Any]:
    record: dict[str, Any] = {
        "key": scope.key,
        "path": _path_of(scope),
        "state": _state(info),
        "time_left_approx": None,
    }
    if info is not None:
        record.update(attrs.asdict(info))
        if info.held and info.expires_at is not None:
            record["time_left_approx"] = round(info.expires_at - now, 3)
    return record


def _time_left(info: LockInfo, now: float) -> str:
    if info.expires_at is None:
        return ""
    left = info.expires_at - now
    if left >= 0:
        return f"about {left:.0f} s left (approximate: by wall clocks)"
    return f"overdue by about {-left:.0f} s (approximate: by wall clocks; the holder may be dead)"


def _info_lines(scope: LockScope, info: LockInfo | None, now: float) -> list[str]:
    if info is None:
        return [f"{scope.key}: never taken (no lease document)"]
    head = f"{scope.key}: " + (f"held by {_clean(info.owner)}" if info.held else "free")
    rows: list[tuple[str, str]] = []
    if info.held:
        rows += [
            ("message", _clean(info.message or "")),
            ("priority", str(info.priority)),
            ("fence", str(info.fence)),
            ("lease", f"{_secs(info.lease_timeout)}, renewed {_when(info.renewed_at)}"),
            ("time left", _time_left(info, now)),
            (
                "cleanup",
                f"{_secs(info.cleanup_timeout)}" + ("; forceful" if info.forceful else ""),
            ),
            ("acquired", _when(info.acquired_at)),
        ]
    else:
        rows.append(("fence", f"{info.fence} (the next holder gets a higher one)"))
    if info.requestor_owner is not None:
        rows.append(
            (
                "requested",
                f"by {_clean(info.requestor_owner)}, priority {info.requestor_priority}, "
                f"waits {_secs(info.requestor_waiting_timeout)}"
                + (", forceful" if info.requestor_forceful else "")
                + f", since {_when(info.requestor_requested_at)}"
                + (f": {_clean(info.requestor_message)}" if info.requestor_message else ""),
            )
        )
    if info.last_event is not None:
        rows.append(
            (
                "last event",
                f"{info.last_event} by {_clean(info.last_event_by)} at "
                f"{_when(info.last_event_at)}"
                + (f": {_clean(info.last_event_message)}" if info.last_event_message else ""),
            )
        )
    return [head] + [f"  {name:<11} {value}" for name, value in rows]


def _cmd_info(args: argparse.Namespace, out: _Output) -> int:
    scope = _scope(args.path)
    with _opened(args.url, create=False) as store:
        info = _builder(store, scope, args).build().info()
    now = time.time()
    if out.json:
        out.record(_record(scope, info, now))
    else:
        for text in _info_lines(scope, info, now):
            out.line(text)
    return Exit.OK


def _key_prefix(prefix: str) -> str:
    """A key prefix as given, or a lock path prefix turned into one."""
    if "v1/".startswith(prefix) or prefix.startswith("v1/"):
        return prefix
    return "v1/path/" + prefix


def _cmd_list(args: argparse.Namespace, out: _Output) -> int:
    rows: list[dict[str, Any]] = []
    now = time.time()
    with _opened(args.url, create=False) as store:
        for key in store.list(_key_prefix(args.prefix)):
            try:
                scope = LockScope.from_key(key)
            except ValueError:
                rows.append({"key": key, "state": "foreign", "problem": "not a lock key"})
                continue
            try:
                info = _builder(store, scope, args).build().info()
            except CorruptLease as exc:
                rows.append({"key": key, "state": "corrupt", "problem": exc.problem})
                continue
            rows.append(_record(scope, info, now))
    if out.json:
        out.record(rows)
        return Exit.OK
    if not rows:
        out.line(f"no lock documents under {_key_prefix(args.prefix)!r}")
        return Exit.OK
    width = max(len("KEY"), *(len(_clean(row["key"])) for row in rows))
    out.line(f"{'KEY':<{width}}  {'STATE':<11}  {'FENCE':>6}  {'PRIORITY':>10}  OWNER")
    for row in rows:
        fence = row.get("fence")
        priority = row.get("priority")
        last = row.get("owner") or row.get("problem") or "-"
        out.line(
            f"{_clean(row['key']):<{width}}  {row['state']:<11}  "
            f"{'-' if fence is None else fence:>6}  {'-' if priority is None else priority:>10}  "
            f"{_clean(last)}"
        )
    return Exit.OK


# -- run / override ----------------------------------------------------------------------------


def _describe_status(status: int) -> str:
    if status < 0:
        try:
            name = signal.Signals(-status).name
        except ValueError:
            name = f"signal {-status}"
        return f"was killed by {name}"
    return f"exited with status {status}"


def _shell_status(status: int) -> int:
    return 128 - status if status < 0 else status


class _Supervisor(LockListener):
    """Runs CMD (or a timed hold) while the lock is held, and stops it when the lock goes.

    Every state change happens under ``_mutex``, a re-entrant lock because the signal handler
    runs on the main thread, possibly while the main thread holds it. CMD's process group is
    signalled only while its leader is unreaped (the main thread waits with ``WNOWAIT`` and
    marks it done before reaping), so a recycled pid is never hit.
    """

    def __init__(self, grace: float) -> None:
        self._grace = grace
        self._mutex = threading.RLock()
        self._proc: subprocess.Popen[bytes] | None = None
        self._began = False  # the work (CMD or the hold) has started
        self._holding = False  # the lock is ours: signals are forwarded from now on
        self._termed = False
        self.done = threading.Event()
        self.interrupted: int | None = None
        self.preempted: CleanupNotice | None = None
        self.lost: str | None = None
        #: Cooperative preemption that came only after the work had ended: the work ran
        #: entirely under the lock, so CMD's status stands.
        self.handover_after_end = False

    # -- the lock's side (library threads) ---------------------------------------------------

    def on_cleanup_notification(self, notice: CleanupNotice) -> None:
        with self._mutex:
            if self.done.is_set():
                self.handover_after_end = True
                return
            if self.preempted is None:
                self.preempted = notice
        self._stop(max(0.0, notice.seconds_left()))
        self.done.wait()  # returning hands the lock over: only once CMD is gone

    def on_lock_lost(self, lock: Lock, reason: str) -> None:
        with self._mutex:
            if self.done.is_set():
                return
            if self.lost is None:
                self.lost = reason
        self._stop(self._grace)

    # -- signals (main thread) -------------------------------------------------------------------

    def install(self) -> dict[int, Any]:
        previous: dict[int, Any] = {}
        for signum in _FORWARDED:
            previous[signum] = signal.signal(signum, self._on_signal)
        return previous

    def _on_signal(self, signum: int, _frame: FrameType | None) -> None:
        with self._mutex:
            if not self._holding:
                raise _Interrupted(signum)
            if self.interrupted is not None:
                self._signal(signal.SIGKILL)  # asked twice: no more grace
                return
            self.interrupted = signum
            if self.done.is_set() or not self._began:
                return  # not started: the main thread sees why and does not start it
            if self._proc is None:
                self.done.set()  # a hold: nothing to stop
                return
            self._termed = True
            self._signal(signum)
        self._escalate(self._grace)

    # -- stopping --------------------------------------------------------------------------------

    def _stop(self, grace: float) -> None:
        with self._mutex:
            if self.done.is_set() or not self._began:
                return  # not started: the main thread sees why and does not start it
            if self._proc is None:
                self.done.set()  # a hold: nothing to clean up
                return
            if not self._termed:
                self._termed = True
                self._signal(signal.SIGTERM)
        self._escalate(grace)

    def _escalate(self, grace: float) -> None:
        def kill_after() -> None:
            if not self.done.wait(grace):
                with self._mutex:
                    self._signal(signal.SIGKILL)

        threading.Thread(target=kill_after, name="prioritylock-kill", daemon=True).start()

    def _signal(self, signum: int) -> None:
        """Signal CMD's process group, only while its leader is unreaped. Caller holds _mutex."""
        if self._proc is not None and not self.done.is_set():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self._proc.pid, signum)

    # -- the work (main thread) ------------------------------------------------------------------

    def acquired(self) -> None:
        with self._mutex:
            self._holding = True

    def stopped_before_start(self) -> bool:
        return self.interrupted is not None or self.preempted is not None or self.lost is not None

    def run(self, cmd: list[str], env: dict[str, str]) -> int | None:
        """Run CMD to its end; its status, or None if it was not started (see the flags)."""
        with self._mutex:
            if self.stopped_before_start():
                self.done.set()
                return None
            group: dict[str, Any] = (
                {"process_group": 0} if sys.version_info >= (3, 11) else {"start_new_session": True}
            )
            try:
                proc = subprocess.Popen(cmd, env=env, **group)
            except BaseException:
                self.done.set()
                raise
            self._proc = proc
            self._began = True
            # A signal that came while CMD was being started was recorded, not forwarded.
            late = self.interrupted is not None
            if late:
                self._termed = True
                self._signal(self.interrupted or signal.SIGTERM)
        if late:
            self._escalate(self._grace)
        os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOWAIT)  # wait, but leave it unreaped
        with self._mutex:
            self.done.set()
        return proc.wait()

    def hold(self, seconds: float) -> None:
        with self._mutex:
            self._began = True  # first: from now on a stop ends the hold at once
            if self.stopped_before_start():
                self.done.set()
        self.done.wait(seconds)
        with self._mutex:
            self.done.set()


@contextlib.contextmanager
def _signals_to(supervisor: _Supervisor) -> Iterator[None]:
    previous = supervisor.install()
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def _loss_detail(lock: Lock) -> str:
    """Who took the lock, best effort (one read)."""
    try:
        info = lock.info()
    except PriorityLockError:
        return ""
    if info is None or info.last_event is None:
        return ""
    by = f" by {_clean(info.last_event_by)}" if info.last_event_by else ""
    message = f" ({_clean(info.last_event_message)})" if info.last_event_message else ""
    return f"; last event: {info.last_event}{by}{message}, fence now {info.fence}"


def _supervised(
    lock: Lock,
    supervisor: _Supervisor,
    args: argparse.Namespace,
    out: _Output,
    *,
    cmd: list[str] | None,
    hold: float | None,
) -> int:
    """Run the work while holding ``lock`` (already acquired), release, and say how it went."""
    key = lock.key
    fence = lock.fencing_token
    summary: dict[str, Any] = {"command": args.command, "key": key, "fence": fence}
    status: int | None = None
    supervisor.acquired()
    try:
        if cmd is not None:
            env = dict(os.environ)
            env.update(
                PRIORITYLOCK_FENCE=str(fence),
                PRIORITYLOCK_PATH=args.path,
                PRIORITYLOCK_KEY=key,
                PRIORITYLOCK_OWNER=lock.config.owner,
                PRIORITYLOCK_URL=_public_url(args.url),
            )
            try:
                status = supervisor.run(cmd, env)
            except FileNotFoundError:
                raise _Failure(Exit.NOT_FOUND, f"{cmd[0]}: command not found", **summary) from None
            except PermissionError:
                raise _Failure(
                    Exit.CANNOT_EXECUTE, f"{cmd[0]}: permission denied", **summary
                ) from None
            except OSError as exc:
                raise _Failure(
                    Exit.CANNOT_EXECUTE, f"{cmd[0]}: cannot execute ({exc.strerror})", **summary
                ) from None
        else:
            assert hold is not None
            if not out.json:
                out.line(f"holding {key} (fence {fence}) for {hold:g} s")
            else:
                out.record({"event": "holding", "key": key, "fence": fence, "seconds": hold})
            supervisor.hold(hold)
    finally:
        release_error = _release(lock)
    what = "CMD" if cmd is not None else "the hold"
    if status is not None:
        ended = f"; CMD {_describe_status(status)}"
    else:
        ended = "; CMD was not started" if cmd is not None else ""
    if status is not None:
        summary["status"] = status
    if supervisor.interrupted is not None:
        signum = supervisor.interrupted
        raise _Failure(
            128 + signum,
            f"interrupted by {signal.Signals(signum).name}{ended}; the lock was released",
            outcome="interrupted",
            **summary,
        )
    if supervisor.preempted is not None:
        notice = supervisor.preempted
        raise _Failure(
            Exit.LOST,
            f"{key}: preempted by {_clean(notice.requestor_owner)} (priority "
            f"{notice.requestor_priority}){ended}; the lock was handed over",
            outcome="preempted",
            **summary,
        )
    lost = supervisor.lost
    if (
        lost is None
        and isinstance(release_error, NotLockOwner)
        and not supervisor.handover_after_end
    ):
        reason = release_error.reason if isinstance(release_error, LockLost) else ""
        lost = reason or "not held at release"
    if lost is not None:
        raise _Failure(
            Exit.LOST,
            f"{key}: lock lost ({_clean(lost)}) while {what} ran{ended}{_loss_detail(lock)}",
            outcome="lost",
            reason=lost,
            **summary,
        )
    if isinstance(release_error, StoreError):
        raise _Failure(
            Exit.STORE,
            f"{key}: {what} ended{ended} but the release failed ({release_error}); the lease "
            f"expires {_secs(lock.config.lease_timeout)} after its last renewal",
            outcome="release failed",
            **summary,
        )
    if release_error is not None and not isinstance(release_error, NotLockOwner):
        raise _Failure(
            _exit_code(release_error),
            f"{key}: {what} ended{ended} but the release failed: {release_error}",
            outcome="release failed",
            **summary,
        )
    code = Exit.OK if status is None else _shell_status(status)
    if cmd is None and not out.json:
        out.line(f"released {key}")
    if out.json:
        summary.update(outcome="released", exit=code)
        out.record(summary, stream=out.stderr if cmd is not None else out.stdout)
    return code


def _release(lock: Lock) -> PriorityLockError | None:
    try:
        lock.unlock()
    except PriorityLockError as exc:
        return exc
    return None


def _take_and_supervise(
    lock: Lock,
    supervisor: _Supervisor,
    take: Callable[[], None],
    args: argparse.Namespace,
    out: _Output,
    *,
    cmd: list[str] | None,
    hold: float | None,
) -> int:
    """Take the lock with signals forwarded, then run the work under it."""
    with _signals_to(supervisor):
        try:
            take()
            supervisor.acquired()  # from here on, signals go to CMD instead of raising
        except _Interrupted:
            if lock.is_current_owner():
                _release(lock)
            raise
        return _supervised(lock, supervisor, args, out, cmd=cmd, hold=hold)


# The builder names its options; the command line calls them by their flags.
_FLAGS = {
    "lease_timeout": "--lease",
    "cleanup_timeout": "--cleanup",
    "waiting_timeout": "--wait",
    "priority": "--priority",
    "owner": "--owner",
    "message": "--message",
    "store_timeout": "--store-timeout",
}


@contextlib.contextmanager
def _flag_names() -> Iterator[None]:
    """Builder errors in the command line's words."""
    try:
        yield
    except ConfigError as exc:
        name, sep, rest = str(exc).partition(": ")
        if name == "max_clock_drift":
            drift = rest.split(" ", 1)[0]
            raise ConfigError(
                f"--lease: must be longer than the clock drift allowance ({drift} s)"
            ) from None
        if not sep or name not in _FLAGS:
            raise
        rest = rest.replace("LockBuilder.emergency_override(message=...)", f"'{PROG} override'")
        raise ConfigError(f"{_FLAGS[name]}: {rest}") from None


def _timings(builder: LockBuilder, args: argparse.Namespace) -> LockBuilder:
    if args.lease is not None:
        builder.lease_timeout(args.lease)
    if args.cleanup is not None:
        builder.cleanup_timeout(args.cleanup)
    return builder


def _cmd_run(args: argparse.Namespace, out: _Output, cmd: list[str] | None) -> int:
    if not cmd:
        raise _Failure(Exit.USAGE, "run: needs a command after '--' (see prioritylock run --help)")
    scope = _scope(args.path)
    with _opened(args.url, create=True) as store:
        with _flag_names():
            builder = _timings(_builder(store, scope, args), args).priority(args.priority)
            default_message = f"{PROG} run {os.path.basename(cmd[0])}"
            builder.message(default_message if args.message is None else args.message)
            if args.owner is not None:
                builder.owner(args.owner)
            if args.wait is not None:
                builder.waiting_timeout(args.wait)
            if args.forceful:
                builder.forceful()
            supervisor = _Supervisor(builder.config().cleanup_timeout)
        lock = builder.listener(supervisor).build()

        def take() -> None:
            try:
                lock.lock(timeout=args.timeout)
            except (LockTimeout, PreemptionTimeout) as exc:
                what = "" if isinstance(exc, LockTimeout) else "not acquired: "
                raise _Failure(
                    Exit.NOT_ACQUIRED, f"{what}{exc}{_holder_now(lock)}", key=lock.key
                ) from None

        return _take_and_supervise(lock, supervisor, take, args, out, cmd=cmd, hold=None)


def _holder_now(lock: Lock) -> str:
    try:
        info = lock.info()
    except PriorityLockError:
        return ""
    if info is None or not info.held:
        return ""
    return (
        f"; held by {_clean(info.owner)} (priority {info.priority}, fence {info.fence}"
        + (f": {_clean(info.message)}" if info.message else "")
        + ")"
    )


def _cmd_override(args: argparse.Namespace, out: _Output, cmd: list[str] | None) -> int:
    if (args.hold is None) == (not cmd):
        raise _Failure(
            Exit.USAGE,
            f"override: give either --hold S or a command after '--' (see {PROG} override --help)",
        )
    scope = _scope(args.path)
    with _opened(args.url, create=True) as store:
        with _flag_names():
            builder = _timings(_builder(store, scope, args), args)
            builder.owner(_operator()).emergency_override(message=args.message)
            supervisor = _Supervisor(builder.config().cleanup_timeout)
        lock = builder.listener(supervisor).build()

        def take() -> None:
            if not lock.try_lock():
                raise _Failure(
                    Exit.NOT_ACQUIRED,
                    f"{lock.key}: not taken: another emergency override holds it"
                    f"{_holder_now(lock)}",
                    key=lock.key,
                )

        return _take_and_supervise(
            lock, supervisor, take, args, out, cmd=cmd or None, hold=args.hold
        )


# -- force-unlock ------------------------------------------------------------------------------


def _cmd_force_unlock(args: argparse.Namespace, out: _Output) -> int:
    if not args.message.strip():
        raise ConfigError("--message: force-unlock needs a message saying why")
    scope = _scope(args.path)
    who = _operator()
    with _opened(args.url, create=False) as store:
        lock = _builder(store, scope, args).owner(who).build()
        corrupt = False
        try:
            current = lock.info()
        except CorruptLease as exc:
            if not args.overwrite_corrupt:
                raise _Failure(
                    Exit.CORRUPT,
                    f"{exc}; nothing was changed ('--overwrite-corrupt' replaces it)",
                    key=scope.key,
                ) from None
            corrupt = True
            current = None
        if not corrupt and (current is None or not current.held):
            state = _state(current)
            raise _Failure(
                Exit.NOT_HELD,
                f"{scope.key}: not held ({state}); nothing was changed",
                key=scope.key,
                state=state,
            )
        before = lock.force_unlock(args.message, by=who, overwrite_corrupt=args.overwrite_corrupt)
        after = lock.info()
    record: dict[str, Any] = {
        "key": scope.key,
        "freed": None if before is None else attrs.asdict(before),
        "overwrote_corrupt": corrupt,
        "fence": None if after is None else after.fence,
        "by": who,
    }
    if out.json:
        out.record(record)
        return Exit.OK
    if corrupt:
        freed = "a corrupt lease document (overwritten with a free lease)"
    elif before is not None and before.held:
        freed = (
            f"{_clean(before.owner)} (priority {before.priority}, fence {before.fence}"
            + (f": {_clean(before.message)}" if before.message else "")
            + ")"
        )
    else:
        freed = "nobody (it was released meanwhile)"
    fence = "-" if after is None else str(after.fence)
    out.line(f"{scope.key}: freed {freed}")
    out.line(f"  fence now {fence}; the next holder gets a higher one; recorded as {who}")
    return Exit.OK


# -- watch -------------------------------------------------------------------------------------


@attrs.frozen
class _Seen:
    """One observation of the lease: absent, a lease, or a corrupt document."""

    info: LockInfo | None = None
    problem: str | None = None

    @property
    def state(self) -> str:
        return "corrupt" if self.problem is not None else _state(self.info)


_TAKEN = {
    "acquired": "acquired",
    "expired_takeover": "acquired",
    "handover": "handover",
    "preempted": "preempted",
    "forceful_takeover": "preempted",
    "override": "override",
}


def _holder_text(info: LockInfo) -> str:
    return f"{_clean(info.owner)} (priority {info.priority}), fence {info.fence}"


def _changes(prev: _Seen, cur: _Seen) -> list[tuple[str, str]]:
    """What changed between two observations, as (change, detail) pairs."""
    if cur == prev:
        return []
    if cur.problem is not None:
        return [("corrupt", _clean(cur.problem))] if prev.problem != cur.problem else []
    c, p = cur.info, prev.info
    if c is None:
        return [("deleted", "the lease document is gone")]
    found: list[tuple[str, str]] = []
    event = c.last_event or ""
    by = f" by {_clean(c.last_event_by)}" if c.last_event_by else ""
    why = f": {_clean(c.last_event_message)}" if c.last_event_message else ""
    if p is None or c.fence != p.fence:
        skipped = "" if p is None or c.fence - p.fence <= 1 else f" ({c.fence - p.fence} changes)"
        if c.held:
            change = _TAKEN.get(event, "acquired")
            was = (
                f" from {_clean(p.owner)}"
                if p is not None and p.held and p.owner != c.owner
                else ""
            )
            detail = f"{_holder_text(c)}{was}"
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
        found.append(("renewed", f"{_holder_text(c)}, renewed {_when(c.renewed_at, ms=True)}"))
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
                    f"by {_clean(c.requestor_owner)} (priority {c.requestor_priority}"
                    + (", forceful" if c.requestor_forceful else "")
                    + ")"
                    + (f": {_clean(c.requestor_message)}" if c.requestor_message else ""),
                )
            )
        elif p is not None and p.fence == c.fence:
            found.append(("withdrawn", f"the request by {_clean(p.requestor_owner)} is gone"))
    return found


def _state_detail(seen: _Seen) -> str:
    if seen.problem is not None:
        return f"corrupt: {_clean(seen.problem)}"
    info = seen.info
    if info is None:
        return "never taken"
    if info.held:
        return f"held by {_holder_text(info)}"
    return f"free, fence {info.fence}"


def _cmd_watch(args: argparse.Namespace, out: _Output) -> int:
    scope = _scope(args.path)
    changes = 0
    previous = signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        with _opened(args.url, create=False) as store:
            lock = _builder(store, scope, args).build()
            prev: _Seen | None = None
            while True:
                try:
                    seen = _Seen(info=lock.info())
                except CorruptLease as exc:
                    seen = _Seen(problem=exc.problem)
                now = time.time()
                lines = [("state", _state_detail(seen))] if prev is None else _changes(prev, seen)
                for change, detail in lines:
                    if out.json:
                        out.record(
                            {
                                "at": _when(now, ms=True),
                                "time": now,
                                "change": change,
                                "detail": detail,
                                "key": scope.key,
                                "state": seen.state,
                                "lease": None if seen.info is None else attrs.asdict(seen.info),
                            }
                        )
                    else:
                        out.line(f"{_when(now, ms=True)}  {change:<9}  {detail}")
                    if change != "state":
                        changes += 1
                        if args.count is not None and changes >= args.count:
                            return Exit.OK
                prev = seen
                time.sleep(args.interval)
    except KeyboardInterrupt:
        return Exit.OK
    finally:
        signal.signal(signal.SIGTERM, previous)


# -- main --------------------------------------------------------------------------------------


def _cmd_demo(args: argparse.Namespace, out: _Output) -> int:
    from prioritylock import _demo

    return _demo.main([])


def _dispatch(args: argparse.Namespace, out: _Output, cmd: list[str] | None) -> int:
    if args.command == "run":
        return _cmd_run(args, out, cmd)
    if args.command == "override":
        return _cmd_override(args, out, cmd)
    handlers: dict[str, Callable[[argparse.Namespace, _Output], int]] = {
        "info": _cmd_info,
        "list": _cmd_list,
        "force-unlock": _cmd_force_unlock,
        "watch": _cmd_watch,
        "demo": _cmd_demo,
    }
    return handlers[args.command](args, out)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line ``argv`` (default ``sys.argv[1:]``); return the exit code."""
    tokens, cmd = _split_command(list(sys.argv[1:] if argv is None else argv))
    out = _Output("--json" in tokens, sys.stdout, sys.stderr)
    try:
        args = _build_parser().parse_args(tokens)
        out.json = bool(getattr(args, "json", False))
        if args.command is None:
            raise _Failure(Exit.USAGE, f"choose a command (see {PROG} --help)")
        return int(_dispatch(args, out, cmd))
    except _Failure as failure:
        out.error(failure.code, failure.message, **failure.extra)
        return failure.code
    except PriorityLockError as exc:
        code = _exit_code(exc)
        out.error(code, str(exc), type=type(exc).__name__)
        return code
    except _Interrupted as exc:
        code = 128 + exc.signum
        out.error(code, f"interrupted by {signal.Signals(exc.signum).name}")
        return code
    except KeyboardInterrupt:
        out.error(Exit.INTERRUPTED, "interrupted")
        return Exit.INTERRUPTED
    except BrokenPipeError:
        # Output piped into a command that stopped reading (| head): not an error. Point stdout
        # at /dev/null so the flush at exit does not complain again.
        with contextlib.suppress(OSError):
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        return Exit.OK
    except Exception as exc:
        if os.environ.get("PRIORITYLOCK_TRACEBACK"):
            raise
        out.error(Exit.ERROR, f"unexpected error: {type(exc).__name__}: {exc}")
        return Exit.ERROR
