"""What a command prints: human lines or JSON values on stdout, one error line on stderr."""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Iterator
from datetime import datetime, timezone
from typing import Any, TextIO

from prioritylock._info import LockInfo
from prioritylock._record import state

__all__ = ["PROG", "SLOW_CALL", "Output", "clean", "holder_text", "secs", "state", "when"]

PROG = "prioritylock"

#: Seconds a call may take before the command says on stderr what it is waiting for.
SLOW_CALL = 1.0


def clean(text: object) -> str:
    """User text made safe for a terminal: one line, no escape sequences."""
    return "".join(
        ch if ch.isprintable() else ch.encode("unicode_escape").decode("ascii") for ch in str(text)
    )


def when(ts: float | None, *, ms: bool = False) -> str:
    """A Unix time as UTC ISO 8601 (``-`` for None)."""
    if ts is None:
        return "-"
    moment = datetime.fromtimestamp(ts, timezone.utc)
    if ms:
        return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def secs(value: float | None) -> str:
    return "-" if value is None else f"{value:g} s"


def holder_text(info: LockInfo) -> str:
    return f"{clean(info.owner)} (priority {info.priority}), fence {info.fence}"


class Output:
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
            self.stderr.write(f"{PROG}: {clean(one_line)}\n")
            self.stderr.flush()

    def note(self, message: str) -> None:
        """A line on stderr that is not an error: what the command is doing."""
        if self.json:
            self.record({"note": message}, stream=self.stderr)
        else:
            self.stderr.write(f"{PROG}: {clean(message)}\n")
            self.stderr.flush()

    @contextlib.contextmanager
    def waiting(self, what: str, after: float = SLOW_CALL) -> Iterator[None]:
        """Say ``waiting for {what}`` on stderr if the block is still running ``after`` seconds
        on (once): a slow store is then not mistaken for a hung command."""
        done = threading.Event()

        def tell() -> None:
            if not done.wait(after):
                self.note(f"waiting for {what}")

        teller = threading.Thread(target=tell, name="prioritylock-waiting", daemon=True)
        teller.start()
        try:
            yield
        finally:
            done.set()
            teller.join()
