"""A lease as a JSON object: what ``prioritylock info --json`` prints and the service answers.

Shared by the CLI and the service (neither imports the other).
"""

from __future__ import annotations

from typing import Any

import attrs

from prioritylock._info import LockInfo
from scopes import LockScope

__all__ = ["path_of", "record", "state"]


def state(info: LockInfo | None) -> str:
    """``held``, ``free`` or ``never taken``."""
    if info is None:
        return "never taken"
    return "held" if info.held else "free"


def path_of(lock_scope: LockScope) -> str | None:
    """The lock path, or None for a scope that is not a plain path."""
    return "/".join(lock_scope.parts) if lock_scope.kind.value == "path" else None


def record(lock_scope: LockScope, info: LockInfo | None, now: float) -> dict[str, Any]:
    """The JSON object of one lock: its key, path, state, ``time_left_approx`` (by wall clocks,
    ``now`` a Unix time) and every field of ``info``."""
    result: dict[str, Any] = {
        "key": lock_scope.key,
        "path": path_of(lock_scope),
        "state": state(info),
        "time_left_approx": None,
    }
    if info is not None:
        result.update(attrs.asdict(info))
        if info.held and info.expires_at is not None:
            result["time_left_approx"] = round(info.expires_at - now, 3)
    return result
