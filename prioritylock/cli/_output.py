"""What a command prints: human lines or JSON values on stdout, one error line on stderr."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Any, TextIO

from prioritylock._info import LockInfo

__all__ = ["PROG", "Output", "clean", "holder_text", "secs", "state", "when"]

PROG = "prioritylock"


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


def state(info: LockInfo | None) -> str:
    """``held``, ``free`` or ``never taken``."""
    if info is None:
        return "never taken"
    return "held" if info.held else "free"


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
