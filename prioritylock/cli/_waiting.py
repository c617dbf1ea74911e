"""What ``run`` says while it waits for a held lock: on a terminal a status line, off one a line
when it starts waiting and one when it has the lock (stderr; ``--quiet`` silences both).

A fast acquisition says nothing and costs nothing: the first look at the lease (one read) comes
only once the acquisition has taken :data:`GRACE` seconds. While it waits, the lease is read
again every :data:`REFRESH` seconds (a new holder is then named); a terminal's elapsed time is
redrawn every second from the local clock, without a read.
"""

from __future__ import annotations

import shutil
import threading
import time
from collections.abc import Callable

from prioritylock._errors import PriorityLockError
from prioritylock._info import LockInfo
from prioritylock.cli._output import PROG, Output, clean

__all__ = ["GRACE", "REFRESH", "WaitReport"]

#: Seconds an acquisition may take before anything is read or said.
GRACE = 0.5

#: Seconds between reads of the lease while waiting.
REFRESH = 5.0


def _holder(info: LockInfo) -> str:
    return (
        f"{clean(info.owner)} (priority {info.priority}"
        + (f": {clean(info.message)}" if info.message else "")
        + ")"
    )


def _elapsed(seconds: float) -> str:
    whole = int(seconds)
    return f"{whole // 60}m{whole % 60:02d}s" if whole >= 60 else f"{whole}s"


class WaitReport:
    """Tells the user about one acquisition (``with WaitReport(...): lock.lock()``)."""

    def __init__(
        self,
        key: str,
        look: Callable[[], LockInfo | None],
        out: Output,
        *,
        terminal: bool,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._key = key
        self._look = look
        self._out = out
        self._terminal = terminal and not out.json
        self._clock = clock
        self._began = clock()
        self._done = threading.Event()
        self._mutex = threading.Lock()  # nothing is written once done is set
        self._holder: str | None = None  # as last said, while waiting
        self._drawn = False
        self._thread = threading.Thread(target=self._watch, name="prioritylock-wait", daemon=True)

    def __enter__(self) -> WaitReport:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        with self._mutex:
            self._done.set()
            self._clear()

    def acquired(self, fence: int) -> None:
        """The lock is ours: say so, if waiting was said."""
        with self._mutex:
            self._done.set()
            self._clear()
            if self._holder is not None:
                waited = self._clock() - self._began
                self._out.note(f"acquired {self._key} (fence {fence}) after {waited:.1f} s")

    # -- the reporter's thread ------------------------------------------------------------------

    def _watch(self) -> None:
        if self._done.wait(GRACE):
            return
        next_look = self._clock()
        while True:
            if self._clock() >= next_look:
                next_look = self._clock() + REFRESH
                self._refresh()
            if self._terminal and self._holder is not None:
                self._draw()
            if self._done.wait(1.0 if self._terminal else max(0.0, next_look - self._clock())):
                return

    def _refresh(self) -> None:
        try:
            info = self._look()
        except PriorityLockError:
            return  # the acquisition meets the same store: it reports what matters
        holder = _holder(info) if info is not None and info.held else None
        with self._mutex:
            if self._done.is_set() or holder is None or holder == self._holder:
                return
            first = self._holder is None
            self._holder = holder
            if not self._terminal:
                what = "waiting for" if first else "still waiting for"
                self._out.note(f"{what} {self._key}: held by {holder}")

    def _draw(self) -> None:
        waited = _elapsed(self._clock() - self._began)
        text = f"{PROG}: waiting {waited} for {self._key}: held by {self._holder}"
        width = shutil.get_terminal_size().columns
        with self._mutex:
            if self._done.is_set():
                return
            self._out.stderr.write("\r\x1b[K" + text[: max(10, width - 1)])
            self._out.stderr.flush()
            self._drawn = True

    def _clear(self) -> None:
        """Erase the status line (caller holds the mutex)."""
        if self._drawn:
            self._out.stderr.write("\r\x1b[K")
            self._out.stderr.flush()
            self._drawn = False
