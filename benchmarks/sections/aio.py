"""``aio``: the asyncio lock (``AsyncLock``) against the sync ``Lock``, µs per cycle.

An uncontended ``await try_lock()`` + ``await unlock()`` on every picked store (the same
``AsyncLock`` object, and a new one per cycle), against the sync ``Lock`` doing the same on the
same store; one event loop for the whole section, variants interleaved in rounds. (The handoff
between two tasks of one loop is in the ``handoff`` section.)
"""

from __future__ import annotations

import asyncio
from functools import partial

from _bench import Bench, alock_cycle, lock_cycle
from _harness import (
    CycleVariant,
    Section,
    compare,
    run_interleaved,
    timed,
    timed_async,
)

from prioritylock import AsyncLock, LockBuilder
from prioritylock.stores import open_store

#: The target of issue 11: the async cycle within this factor of the sync one.
TARGET_RATIO = 1.5


def _cycle_variants(
    b: Bench, loop: asyncio.AbstractEventLoop, built: list[AsyncLock]
) -> tuple[list[CycleVariant], dict[str, str]]:
    """The variants, and which sync variant each async one is compared with."""
    s = b.sizes
    variants: list[CycleVariant] = []
    against: dict[str, str] = {}

    async def build(builder: LockBuilder) -> AsyncLock:  # on the loop, as a user builds one
        return builder.build_async()

    for kind in b.store_kinds:
        key, label, store = kind.name, kind.label, open_store(b.url(kind))
        n = s.cloud_iterations if kind.emulator else s.cycles_slow if kind.slow else s.cycles
        same = b.builder(store, b.path("same"), "bench").build()
        asame = loop.run_until_complete(build(b.builder(store, b.path("async-same"), "bench")))
        built.append(asame)
        fresh = b.builder(store, b.path("fresh"), "bench")
        afresh = b.builder(store, b.path("async-fresh"), "bench")
        variants += [
            CycleVariant(
                f"{key}/sync-same",
                f"{label}, Lock, same object",
                n,
                timed(partial(lock_cycle, same)),
            ),
            CycleVariant(
                f"{key}/async-same",
                f"{label}, AsyncLock, same object",
                n,
                timed_async(loop, partial(alock_cycle, asame)),
            ),
        ]
        against[f"{key}/async-same"] = f"{key}/sync-same"
        if kind.emulator is None:
            variants += [
                CycleVariant(
                    f"{key}/sync-fresh",
                    f"{label}, Lock, new each cycle",
                    n,
                    timed(lock_cycle, fresh.build),
                ),
                CycleVariant(
                    f"{key}/async-fresh",
                    f"{label}, AsyncLock, new each cycle",
                    n,
                    timed_async(loop, alock_cycle, afresh.build_async),
                ),
            ]
            against[f"{key}/async-fresh"] = f"{key}/sync-fresh"
    return variants, against


def section_aio(b: Bench) -> Section:
    loop = asyncio.new_event_loop()
    built: list[AsyncLock] = []
    try:
        variants, against = _cycle_variants(b, loop, built)
        run_interleaved(variants, b.sizes)
    finally:
        loop.run_until_complete(loop.shutdown_default_executor())
        loop.close()
    if any(lock.is_current_owner() for lock in built):
        raise RuntimeError("an AsyncLock still holds its lock after its cycles")
    table, rows = compare(variants, against)
    s = b.sizes
    return Section(
        name="aio",
        title="asyncio: await try_lock() + await unlock() (µs per cycle)",
        headers=["variant", "median", "p99", "vs sync", "CPU µs", "CPU vs sync", "n"],
        table=table,
        rows=rows,
        notes=[
            f"vs sync: the AsyncLock's median over the sync Lock's on the same store (target, "
            f"issue 11: <= {TARGET_RATIO:g}x); CPU: process CPU of all threads per cycle, mean.",
            f"Variants interleaved in {s.rounds} rounds after {s.warmup} warm-up cycles each; "
            f"each capped at {s.budget_s:g} s.",
        ],
    )
