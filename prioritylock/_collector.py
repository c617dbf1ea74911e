"""The garbage collector's settings for a process that holds many long-lived objects.

A full collection walks every object the collector tracks, so with thousands of leases held (or
streams open) its pauses stall an event loop for as long as it takes: 1.9 s at 100,000
``AsyncLock`` leases with Python's defaults. A process that owns its collector (the service,
``benchmarks/scale.py``, an application) may call :func:`tune_collector` once its long-lived
objects exist; the library never calls it in a user's process (decisions 003 and 004).
"""

from __future__ import annotations

import gc

__all__ = ["tune_collector"]

#: Collect the young generation every 50,000 allocations instead of 700; then every 20.
THRESHOLDS = (50_000, 20, 20)


def tune_collector() -> None:
    """Take every object alive now out of the collector's walks (``gc.freeze()``: what exists
    after startup, or once the leases are held, is not garbage), and collect young objects
    less often, so that fewer are promoted and full collections come rarely."""
    gc.freeze()
    gc.set_threshold(*THRESHOLDS)
