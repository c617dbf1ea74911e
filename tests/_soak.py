"""Sizes for the soak-style tests: what CI runs, and the long version ``scripts/soak`` runs.

A soak-style test (seeded random sequences, stress for a while) is marked ``soak`` and takes its
size from :func:`size`: the CI size is what its assertion needs to fail on the bugs it guards
against; ``PRIORITYLOCK_SOAK=1`` (``scripts/soak``) runs the long version, with the same seeds
first, so a CI failure reproduces under the soak run too.
"""

from __future__ import annotations

import os
from typing import TypeVar

__all__ = ["SOAK", "size"]

SOAK = os.environ.get("PRIORITYLOCK_SOAK", "").strip() not in ("", "0")


T = TypeVar("T", int, float)


def size(ci: T, soak: T) -> T:
    """``soak`` under ``scripts/soak``, else ``ci``."""
    return soak if SOAK else ci
