"""Time, injected: the Clock protocol, the system clock, and a fake clock for tests.

Correctness rests only on each client's own monotonic clock; wall time is for display.
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable
from typing import Protocol, runtime_checkable

__all__ = ["Clock", "FakeClock", "SystemClock"]


@runtime_checkable
class Clock(Protocol):
    """Where the library reads the time and waits."""

    def monotonic(self) -> float:
        """Seconds on a clock that never goes backwards (only differences mean anything)."""
        ...

    def time(self) -> float:
        """Wall-clock seconds since the epoch, for display."""
        ...

    def sleep(self, seconds: float) -> None:
        """Wait ``seconds``."""
        ...

    def wait(self, event: threading.Event, timeout: float) -> bool:
        """Wait until ``event`` is set or ``timeout`` seconds pass; return whether it is set."""
        ...


# CLOCK_BOOTTIME keeps counting while the machine is suspended; CLOCK_MONOTONIC (what
# time.monotonic reads on Linux) stops. A holder whose laptop or VM slept through its lease must
# see that the lease is gone when it wakes up.
_BOOTTIME: int | None = getattr(time, "CLOCK_BOOTTIME", None)


class SystemClock:
    """The real clocks: a monotonic clock that counts suspended time too, and ``time.time``."""

    # The C functions themselves, called without a Python frame: a lock reads the clock about
    # ten times per acquire and release.
    monotonic: Callable[[], float] = staticmethod(
        time.monotonic if _BOOTTIME is None else functools.partial(time.clock_gettime, _BOOTTIME)
    )
    time: Callable[[], float] = staticmethod(time.time)

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            time.sleep(seconds)

    def wait(self, event: threading.Event, timeout: float) -> bool:
        return event.wait(max(0.0, timeout))

    def __repr__(self) -> str:
        return "SystemClock()"


SYSTEM_CLOCK = SystemClock()


class FakeClock:
    """A clock that moves only when told to; ``sleep`` and ``wait`` advance it at once.

    Several fake clocks can share one ``master`` and run at different ``rate`` s, to model clients
    whose clocks drift: a clock with rate 1.01 sees 1.01 s pass for every master second.
    """

    def __init__(
        self,
        start: float = 1000.0,
        *,
        rate: float = 1.0,
        wall_offset: float = 1_700_000_000.0,
        master: FakeClock | None = None,
    ) -> None:
        if rate <= 0:
            raise ValueError("rate must be positive")
        self._lock = threading.Lock()
        self._master = master
        self._now = start  # master seconds when this is a master
        self._start = start
        self._master_start = master.monotonic() if master is not None else start
        self.rate = rate
        self.wall_offset = wall_offset

    def monotonic(self) -> float:
        if self._master is not None:
            return self._start + (self._master.monotonic() - self._master_start) * self.rate
        with self._lock:
            return self._start + (self._now - self._start) * self.rate

    def time(self) -> float:
        return self.wall_offset + self.monotonic()

    def advance(self, seconds: float) -> None:
        """Move time forward by ``seconds`` of this clock's time."""
        if seconds < 0:
            raise ValueError("time only moves forward")
        if self._master is not None:
            self._master.advance(seconds / self.rate)
            return
        with self._lock:
            self._now += seconds / self.rate

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            self.advance(seconds)

    def wait(self, event: threading.Event, timeout: float) -> bool:
        if not event.is_set():
            self.sleep(timeout)
        return event.is_set()

    def __repr__(self) -> str:
        return f"FakeClock(monotonic={self.monotonic():.6f}, rate={self.rate})"
