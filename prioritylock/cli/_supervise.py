"""Work under a lock: ``run`` and ``override`` (CMD or a timed hold), signals, process groups."""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any

import attrs

from prioritylock._builder import LockBuilder
from prioritylock._errors import (
    ConditionFailed,
    ConfigError,
    LockLost,
    LockTimeout,
    NotLockOwner,
    PreemptionTimeout,
    PriorityLockError,
    StoreError,
)
from prioritylock._lease import OVERRIDE_PRIORITY
from prioritylock._listener import CleanupNotice, LockListener
from prioritylock._lock import Lock
from prioritylock.cli._admin import confirm, confirmation_needed, describe, guard_failed
from prioritylock.cli._exits import Exit, Failure, Interrupted, exit_code
from prioritylock.cli._output import PROG, Output, clean, secs
from prioritylock.cli._parse import flag_names
from prioritylock.cli._target import builder, opened, operator, public_url, scope
from prioritylock.cli._waiting import WaitReport

__all__ = ["cmd_override", "cmd_run"]

# Signals that ``run`` forwards to CMD rather than dying of them.
_FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


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


class Supervisor(LockListener):
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
                raise Interrupted(signum)
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
def _signals_to(supervisor: Supervisor) -> Iterator[None]:
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
    by = f" by {clean(info.last_event_by)}" if info.last_event_by else ""
    message = f" ({clean(info.last_event_message)})" if info.last_event_message else ""
    return f"; last event: {info.last_event}{by}{message}, fence now {info.fence}"


def _supervised(
    lock: Lock,
    supervisor: Supervisor,
    args: argparse.Namespace,
    out: Output,
    *,
    cmd: list[str] | None,
    hold: float | None,
) -> int:
    """Run the work while holding ``lock`` (already acquired), release, and say how it went."""
    key = lock.key
    summary: dict[str, Any] = {"command": args.command, "key": key, "fence": lock.fencing_token}
    ended = _work(lock, supervisor, args, out, summary, cmd=cmd, hold=hold)
    verdict = _verdict(
        ended,
        key=key,
        ran_cmd=cmd is not None,
        lease_timeout=lock.config.lease_timeout,
        loss_detail=lambda: _loss_detail(lock),
    )
    if ended.status is not None:
        summary["status"] = ended.status
    if isinstance(verdict, Failure):
        verdict.extra.update(summary)
        raise verdict
    if cmd is None and not out.json:
        out.line(f"released {key}")
    if out.json:
        summary.update(outcome="released", exit=verdict)
        out.record(summary, stream=out.stderr if cmd is not None else out.stdout)
    return verdict


@attrs.frozen
class Ended:
    """How the work under the lock ended: what :func:`_verdict` decides on."""

    #: CMD's status (None: not started, or a hold).
    status: int | None
    #: What the release raised, if anything.
    release_error: PriorityLockError | None
    #: The supervisor's record: a signal, a preemption, a loss, a handover after the end.
    interrupted: int | None = None
    preempted: CleanupNotice | None = None
    lost: str | None = None
    handover_after_end: bool = False


def _work(
    lock: Lock,
    supervisor: Supervisor,
    args: argparse.Namespace,
    out: Output,
    summary: dict[str, Any],
    *,
    cmd: list[str] | None,
    hold: float | None,
) -> Ended:
    """Run CMD (or hold for ``hold`` seconds) and release: the doing, and nothing decided."""
    key, fence = lock.key, lock.fencing_token
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
                PRIORITYLOCK_URL=public_url(args.url),
            )
            try:
                status = supervisor.run(cmd, env)
            except FileNotFoundError:
                raise Failure(Exit.NOT_FOUND, f"{cmd[0]}: command not found", **summary) from None
            except PermissionError:
                raise Failure(
                    Exit.CANNOT_EXECUTE, f"{cmd[0]}: permission denied", **summary
                ) from None
            except OSError as exc:
                raise Failure(
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
    return Ended(
        status,
        release_error,
        interrupted=supervisor.interrupted,
        preempted=supervisor.preempted,
        lost=supervisor.lost,
        handover_after_end=supervisor.handover_after_end,
    )


def _verdict(
    ended: Ended,
    *,
    key: str,
    ran_cmd: bool,
    lease_timeout: float,
    loss_detail: Callable[[], str],
) -> Failure | int:
    """The exit code of the work that ended so, or the failure to report (the deciding, and
    nothing done: ``loss_detail`` is called only for a loss)."""
    what = "CMD" if ran_cmd else "the hold"
    status, release_error = ended.status, ended.release_error
    if status is not None:
        how = f"; CMD {_describe_status(status)}"
    else:
        how = "; CMD was not started" if ran_cmd else ""
    if ended.interrupted is not None:
        signum = ended.interrupted
        return Failure(
            128 + signum,
            f"interrupted by {signal.Signals(signum).name}{how}; the lock was released",
            outcome="interrupted",
        )
    if ended.preempted is not None:
        notice = ended.preempted
        return Failure(
            Exit.LOST,
            f"{key}: preempted by {clean(notice.requestor_owner)} (priority "
            f"{notice.requestor_priority}){how}; the lock was handed over",
            outcome="preempted",
        )
    lost = ended.lost
    if lost is None and isinstance(release_error, NotLockOwner) and not ended.handover_after_end:
        reason = release_error.reason if isinstance(release_error, LockLost) else ""
        lost = reason or "not held at release"
    if lost is not None:
        return Failure(
            Exit.LOST,
            f"{key}: lock lost ({clean(lost)}) while {what} ran{how}{loss_detail()}",
            outcome="lost",
            reason=lost,
        )
    if isinstance(release_error, StoreError):
        return Failure(
            Exit.STORE,
            f"{key}: {what} ended{how} but the release failed ({release_error}); the lease "
            f"expires {secs(lease_timeout)} after its last renewal",
            outcome="release failed",
        )
    if release_error is not None and not isinstance(release_error, NotLockOwner):
        return Failure(
            exit_code(release_error),
            f"{key}: {what} ended{how} but the release failed: {release_error}",
            outcome="release failed",
        )
    return Exit.OK if status is None else _shell_status(status)


def _release(lock: Lock) -> PriorityLockError | None:
    try:
        lock.unlock()
    except PriorityLockError as exc:
        return exc
    return None


def _take_and_supervise(
    lock: Lock,
    supervisor: Supervisor,
    take: Callable[[], None],
    args: argparse.Namespace,
    out: Output,
    *,
    cmd: list[str] | None,
    hold: float | None,
) -> int:
    """Take the lock with signals forwarded, then run the work under it."""
    with _signals_to(supervisor):
        try:
            take()
            supervisor.acquired()  # from here on, signals go to CMD instead of raising
        except Interrupted:
            if lock.is_current_owner():
                _release(lock)
            raise
        return _supervised(lock, supervisor, args, out, cmd=cmd, hold=hold)


def _timings(lock_builder: LockBuilder, args: argparse.Namespace) -> LockBuilder:
    if args.lease is not None:
        lock_builder.lease_timeout(args.lease)
    if args.cleanup is not None:
        lock_builder.cleanup_timeout(args.cleanup)
    return lock_builder


def cmd_run(args: argparse.Namespace, out: Output, cmd: list[str] | None) -> int:
    if not cmd:
        missing = " ('--' is missing)" if cmd is None else ""
        raise Failure(
            Exit.USAGE,
            f"run: needs a command after '--'{missing}: "
            f"{PROG} run [options] URL PATH -- CMD [ARGS ...]",
        )
    if args.priority == OVERRIDE_PRIORITY:
        raise ConfigError(
            f"--priority: {OVERRIDE_PRIORITY} is reserved for the operators' emergency override; "
            f"use '{PROG} override'",
            option="priority",
        )
    lock_scope = scope(args.path)
    with opened(args.url, create=True) as store:
        with flag_names():
            lock_builder = _timings(builder(store, lock_scope, args), args)
            lock_builder.priority(args.priority)
            default_message = f"{PROG} run {os.path.basename(cmd[0])}"
            lock_builder.message(default_message if args.message is None else args.message)
            if args.owner is not None:
                lock_builder.owner(args.owner)
            if args.wait is not None:
                lock_builder.waiting_timeout(args.wait)
            if args.forceful:
                lock_builder.forceful()
            supervisor = Supervisor(lock_builder.config().cleanup_timeout)
        lock = lock_builder.listener(supervisor).build()

        def take() -> None:
            report = WaitReport(lock.key, lock.info, out, terminal=out.stderr.isatty())
            try:
                with contextlib.nullcontext() if args.quiet else report:
                    lock.lock(timeout=args.timeout)
                    report.acquired(lock.fencing_token)  # says nothing unless waiting was said
            except LockTimeout as exc:
                holder = _holder_now(lock)
                # Its own words name the holder too: say it once, with priority and message.
                said: object = exc
                if holder and "(held by " in str(exc):
                    said = f"{lock.key!r}: not acquired within {args.timeout:g} s"
                raise Failure(Exit.NOT_ACQUIRED, f"{said}{holder}", key=lock.key) from None
            except PreemptionTimeout as exc:
                raise Failure(
                    Exit.NOT_ACQUIRED, f"not acquired: {exc}{_holder_now(lock)}", key=lock.key
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
        f"; held by {clean(info.owner)} (priority {info.priority}, fence {info.fence}"
        + (f": {clean(info.message)}" if info.message else "")
        + ")"
    )


def cmd_override(args: argparse.Namespace, out: Output, cmd: list[str] | None) -> int:
    if (args.hold is None) == (not cmd):
        raise Failure(
            Exit.USAGE,
            f"override: give either --hold S or a command after '--' (see {PROG} override --help)",
        )
    ask = confirmation_needed(args)
    lock_scope = scope(args.path)
    with opened(args.url, create=True) as store:
        if_fence, if_owner = args.fence, args.owner
        if ask:
            seen = builder(store, lock_scope, args).build().info()
            confirm(
                out, f"{lock_scope.key}: {describe(seen)}", "Take it with the emergency override?"
            )
            # Act on what was confirmed: the lease must still show it when the override lands.
            if seen is not None:
                if_fence = seen.fence
                if_owner = seen.owner if seen.held else None
        with flag_names():
            lock_builder = _timings(builder(store, lock_scope, args), args)
            lock_builder.owner(operator()).emergency_override(
                message=args.message, if_fence=if_fence, if_owner=if_owner
            )
            supervisor = Supervisor(lock_builder.config().cleanup_timeout)
        lock = lock_builder.listener(supervisor).build()

        def take() -> None:
            try:
                taken = lock.try_lock()
            except ConditionFailed:
                raise guard_failed(lock, "not taken", if_fence, if_owner) from None
            if not taken:
                raise Failure(
                    Exit.NOT_ACQUIRED,
                    f"{lock.key}: not taken: another emergency override holds it"
                    f"{_holder_now(lock)}",
                    key=lock.key,
                )

        return _take_and_supervise(
            lock, supervisor, take, args, out, cmd=cmd or None, hold=args.hold
        )
