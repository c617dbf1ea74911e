"""A holder that dies (SIGKILL) or freezes (SIGSTOP) while it holds the lock: a blocked waiter
takes over once, and only once, the lease has surely expired; a frozen holder, when it thaws,
is told it lost the lock.

The holder is a child process (``tests/_helpers/hold_lock.py``) on a
:class:`~prioritylock.stores.LocalStore`; it reports on stdout the ``time.monotonic_ns`` at which
each of its conditional writes starts and returns (CLOCK_MONOTONIC is system-wide on Linux, so
the parent can compare those readings with its own). The waiter is a lock object in this
process, blocked in ``lock(timeout=...)`` on a thread.

The bound asserted on the takeover (``check_takeover_bound``): let W be the holder's last
heartbeat write, landing (the file renamed into place) at an instant ``w`` with
``W_start <= w <= W_end``. The waiter counts from when it first *sees* a heartbeat, at
``s >= w``, and writes its takeover only after that heartbeat stayed unchanged for ``L + D`` on
its own clock, so the takeover write starts at ``>= s + L + D >= W_start + L + D``. That is
tighter than "start of the last renew + L + D" (a renewal starts before its write) and is what
the protocol promises. Conversely the waiter polls at least every ``POLL`` seconds, so ``s`` is
at most about one poll after ``w`` and the takeover follows at the first poll after
``s + L + D``: it starts well within ``W_end + L + D + SLACK``. (Were a write in flight when the
holder stopped, it could land up to that moment, so the upper bound would count from it.)
"""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from prioritylock import Lock, LockBuilder
from prioritylock.stores import LocalStore, Versioned

HELPERS = Path(__file__).parent / "_helpers"
LEASE = 1.0  # L: the holder's lease timeout, seconds
DRIFT = 0.2  # D: max_clock_drift, seconds
POLL = 0.05  # the waiter's longest pause between reads
#: Slack for the upper bound: the waiter's poll that first sees the last heartbeat, the poll
#: that finds it expired, the takeover write (an fsync'ed rename) and scheduling on a busy box.
SLACK = 1.5
#: How long the waiter must have watched a live, renewing holder before it is stopped: longer
#: than L + D, so a waiter that counted from its first sight of the holder (not of the latest
#: heartbeat) would take over a live lease, and fail the test.
WATCH_BEFORE_STOP = LEASE + DRIFT + 0.3
NS = 1_000_000_000
LOCK_PATH = "kill/holder"


class WatchedStore(LocalStore):
    """A LocalStore that reports its first read and times its successful replaces."""

    def __init__(self, directory: Path) -> None:
        super().__init__(directory)
        self.first_read = threading.Event()
        self.first_read_ns = 0
        self.replaced: list[tuple[int, int]] = []  # (start ns, end ns) of each that returned

    def read(self, key: str) -> Versioned | None:
        found = super().read(key)
        if not self.first_read.is_set():
            self.first_read_ns = time.monotonic_ns()
            self.first_read.set()
        return found

    def replace(self, key: str, data: bytes, version: str) -> str:
        start = time.monotonic_ns()
        new_version = super().replace(key, data, version)
        self.replaced.append((start, time.monotonic_ns()))
        return new_version

    def replace_unsynced(self, key: str, data: bytes, version: str) -> str:
        start = time.monotonic_ns()
        new_version = super().replace_unsynced(key, data, version)
        self.replaced.append((start, time.monotonic_ns()))
        return new_version


class HolderProcess:
    """``hold_lock.py`` in a child process, its stdout lines forwarded to a queue by a thread."""

    def __init__(self, tmp_path: Path, store_dir: Path) -> None:
        self.stderr_path = tmp_path / "holder-stderr.txt"
        with self.stderr_path.open("w", encoding="utf-8") as stderr:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    str(HELPERS / "hold_lock.py"),
                    str(store_dir),
                    LOCK_PATH,
                    "holder",
                    str(LEASE),
                    str(DRIFT),
                ],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=stderr,
                text=True,
            )
        assert self.proc.stdout is not None
        self._lines: queue.Queue[list[str] | None] = queue.Queue()
        self._pump = threading.Thread(target=self._forward, daemon=True)
        self._pump.start()
        self.seen: list[list[str]] = []  # every line so far, split

    def _forward(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._lines.put(line.split())
        self._lines.put(None)

    def next_line(self) -> list[str]:
        fields = self._lines.get(timeout=30)
        if fields is None:
            pytest.fail(f"the holder's output ended: {self.stderr_path.read_text('utf-8')}")
        self.seen.append(fields)
        return fields

    def wait_for(self, kind: str) -> list[str]:
        fields = self.next_line()
        while fields[0] != kind:
            fields = self.next_line()
        return fields

    def drain_available(self) -> None:
        """Take in every line already forwarded, without waiting (the holder may be frozen)."""
        while True:
            try:
                fields = self._lines.get_nowait()
            except queue.Empty:
                return
            if fields is None:
                self._lines.put(None)  # keep the end-of-file marker for finish()
                return
            self.seen.append(fields)

    def heartbeat_write_after(self, not_before_ns: int) -> None:
        """Read lines until a write returns that started at ``not_before_ns`` or later."""
        while True:
            fields = self.next_line()
            assert fields[0] != "write-failed", f"a write of the live holder failed: {self.seen}"
            if fields[0] == "write-end" and self.write_starts()[int(fields[1])] >= not_before_ns:
                return

    def finish(self) -> int:
        """Close stdin, wait for exit and read the rest of the output; return the exit status."""
        assert self.proc.stdin is not None
        if not self.proc.stdin.closed:
            self.proc.stdin.close()
        status = self.proc.wait(timeout=30)
        self._pump.join(timeout=10)
        assert not self._pump.is_alive(), "the holder's stdout did not reach end of file"
        while (fields := self._lines.get_nowait()) is not None:  # the pump ends with None
            self.seen.append(fields)
        return status

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def close(self) -> None:
        self.kill()
        for stream in (self.proc.stdin, self.proc.stdout):
            if stream is not None:
                stream.close()

    def write_starts(self) -> dict[int, int]:
        return {int(f[1]): int(f[2]) for f in self.seen if f[0] == "write-start"}

    def write_ends(self) -> dict[int, int]:
        return {int(f[1]): int(f[2]) for f in self.seen if f[0] == "write-end"}

    def count(self, kind: str) -> int:
        return sum(1 for f in self.seen if f[0] == kind)


class Waiter:
    """A lock object blocked in ``lock(timeout=...)`` on its own thread."""

    def __init__(self, store_dir: Path) -> None:
        self.store = WatchedStore(store_dir)
        self.lock: Lock = (
            LockBuilder()
            .store(self.store)
            .path(LOCK_PATH)
            .owner("waiter")
            .lease_timeout(LEASE)
            .max_clock_drift(DRIFT)
            .poll_interval(POLL)
            # Out of the line: its join would meet the holder's next renewal (a 412 and a
            # retry, which the holder's output reports as a failed write); tests/line has it.
            .fair(False)
            .build()
        )
        self.acquired = threading.Event()
        self.failures: list[BaseException] = []
        self._thread = threading.Thread(target=self._wait, name="waiter", daemon=True)

    def _wait(self) -> None:
        try:
            self.lock.lock(timeout=30)
            self.acquired.set()
        except BaseException as exc:
            self.failures.append(exc)

    def start(self) -> None:
        """Start waiting; return once the waiter has read the lease (it is polling)."""
        self._thread.start()
        assert self.store.first_read.wait(timeout=10), "the waiter never read the lease"

    def join(self, timeout: float) -> None:
        self._thread.join(timeout=timeout)
        assert not self._thread.is_alive(), "the waiter is still blocked in lock()"
        assert not self.failures, f"the waiter's lock() raised: {self.failures!r}"
        assert self.acquired.is_set()


def check_takeover_bound(holder: HolderProcess, waiter: Waiter, stopped_ns: int) -> str:
    """Assert the takeover came within the bound (module docstring); describe the timing.

    :param stopped_ns: a moment when the holder had surely stopped writing (killed or frozen).
    """
    starts, ends = holder.write_starts(), holder.write_ends()
    last = max(ends)
    in_flight = [n for n in starts if n > last]
    assert not in_flight, f"writes in flight when the holder stopped: {in_flight} ({holder.seen})"
    lower_ns = starts[last] + int((LEASE + DRIFT) * NS)
    upper_ns = ends[last] + int((LEASE + DRIFT + SLACK) * NS)
    assert len(waiter.store.replaced) == 1, f"the waiter wrote {waiter.store.replaced}, not once"
    takeover_ns = waiter.store.replaced[0][0]
    assert takeover_ns >= lower_ns, (
        f"takeover {(lower_ns - takeover_ns) / 1e6:.1f} ms before last heartbeat + L + D"
    )
    assert takeover_ns <= upper_ns, (
        f"takeover {(takeover_ns - upper_ns) / 1e6:.1f} ms after last heartbeat + L + D + {SLACK}"
    )
    return (
        f"holder stopped {(stopped_ns - ends[last]) / 1e6:.1f} ms after its last heartbeat write "
        f"returned; takeover write started {(takeover_ns - starts[last]) / 1e9:.3f} s after that "
        f"write started (L + D = {LEASE + DRIFT:g} s: {(takeover_ns - lower_ns) / 1e6:.1f} ms "
        f"past the bound), {(takeover_ns - stopped_ns) / 1e9:.3f} s after the holder stopped"
    )


def check_waiter_took_over(waiter: Waiter, holder_fence: int) -> None:
    assert waiter.lock.is_current_owner()
    assert waiter.lock.fencing_token == holder_fence + 1
    info = waiter.lock.info()
    assert info is not None
    assert info.held
    assert info.owner == "waiter"
    assert info.fence == waiter.lock.fencing_token
    assert info.last_event == "expired_takeover"


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_waiter_takes_over_from_a_killed_holder_after_lease_plus_drift(tmp_path: Path) -> None:
    """SIGKILL the holder right after a heartbeat write W returns: the waiter's takeover write
    starts no sooner than ``W_start + L + D`` and no later than ``W_end + L + D + 1.5 s`` (see
    the module docstring for why), with fence + 1 and ``last_event == "expired_takeover"``.

    The waiter has watched the holder renew for more than ``L + D`` before the kill, and must not
    have taken over the live holder.
    """
    store_dir = tmp_path / "store"
    holder = HolderProcess(tmp_path, store_dir)
    waiter = Waiter(store_dir)
    try:
        holder_fence = int(holder.wait_for("acquired")[1])
        waiter.start()
        holder.heartbeat_write_after(waiter.store.first_read_ns + int(WATCH_BEFORE_STOP * NS))
        assert not waiter.acquired.is_set() and not waiter.failures, (
            f"the waiter took the lock from a live, renewing holder ({waiter.failures!r})"
        )
        os.kill(holder.proc.pid, signal.SIGKILL)
        status = holder.finish()
        dead_ns = time.monotonic_ns()
        assert status == -signal.SIGKILL

        waiter.join(timeout=LEASE + DRIFT + SLACK + 10)
        timing = check_takeover_bound(holder, waiter, dead_ns)
        renewals = holder.count("renewed")
        assert renewals >= 3, f"the holder renewed only {renewals} times: {holder.seen}"
        check_waiter_took_over(waiter, holder_fence)
        print(
            f"\n[kill] {renewals} renewals; {timing}; fence {holder_fence} -> "
            f"{waiter.lock.fencing_token}"
        )
    finally:
        holder.close()
        waiter.lock.close()


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_frozen_holder_is_told_it_lost_the_lock_when_it_thaws(tmp_path: Path) -> None:
    """SIGSTOP the holder right after a heartbeat write: the waiter takes over within the same
    bound as for a killed holder. On SIGCONT the holder must learn it lost the lock (the
    ``lock_lost`` signal, reason ``expired``: its own deadline, last renew start + L, passed
    while it was frozen), must write nothing more, must say ``is_current_owner() == False``, and
    its ``close()`` must not release the waiter's lock.
    """
    store_dir = tmp_path / "store"
    holder = HolderProcess(tmp_path, store_dir)
    waiter = Waiter(store_dir)
    try:
        holder_fence = int(holder.wait_for("acquired")[1])
        waiter.start()
        holder.heartbeat_write_after(waiter.store.first_read_ns + int(WATCH_BEFORE_STOP * NS))
        assert not waiter.acquired.is_set() and not waiter.failures
        os.kill(holder.proc.pid, signal.SIGSTOP)
        stopped_ns = time.monotonic_ns()

        waiter.join(timeout=LEASE + DRIFT + SLACK + 10)
        holder.drain_available()  # lines written just before the freeze, if any
        timing = check_takeover_bound(holder, waiter, stopped_ns)
        check_waiter_took_over(waiter, holder_fence)
        writes_before_thaw = holder.count("write-start")

        os.kill(holder.proc.pid, signal.SIGCONT)
        thawed_ns = time.monotonic_ns()
        lost = holder.wait_for("lost")
        lost_after = (int(lost[2]) - thawed_ns) / 1e9
        assert lost[1] == "expired", f"the holder lost the lock for {lost[1]!r}, not expiry"
        assert holder.finish() == 0, holder.stderr_path.read_text("utf-8")
        assert holder.count("write-start") == writes_before_thaw, (
            f"the thawed holder wrote to the lease after losing it: {holder.seen}"
        )
        assert holder.count("lost") == 1, f"lock_lost sent more than once: {holder.seen}"
        owner_at_exit = [f for f in holder.seen if f[0] == "owner-at-exit"]
        assert owner_at_exit and owner_at_exit[0][1] == "0", f"{holder.seen}"
        check_waiter_took_over(waiter, holder_fence)  # the holder's close() released nothing
        print(
            f"\n[freeze] {timing}; holder told it lost the lock {lost_after * 1e3:.1f} ms "
            f"after SIGCONT"
        )
    finally:
        if holder.proc.poll() is None:
            os.kill(holder.proc.pid, signal.SIGCONT)
        holder.close()
        waiter.lock.close()
