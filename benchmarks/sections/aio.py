"""``aio``: the asyncio lock (``AsyncLock``) against the sync ``Lock``, µs per cycle.

An uncontended ``await try_lock()`` + ``await unlock()`` on every picked store (the same
``AsyncLock`` object, and a new one per cycle), against the sync ``Lock`` doing the same on the
same store; one event loop for the whole section, variants interleaved in rounds. (The handoff
between two tasks of one loop is in the ``push`` section.)
"""

from __future__ import annotations

import asyncio
from functools import partial

from _bench import Bench, alock_cycle, close_loop, lock_cycle
from _harness import CycleVariant, Section, compare, run_interleaved, timed, timed_async

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
        on_loop = partial(timed_async, loop)
        cases = [
            ("sync-same", "Lock, same object", timed(partial(lock_cycle, same))),
            ("async-same", "AsyncLock, same object", on_loop(partial(alock_cycle, asame))),
        ]
        if kind.emulator is None:
            async_fresh = on_loop(alock_cycle, afresh.build_async)
            cases += [
                ("sync-fresh", "Lock, new each cycle", timed(lock_cycle, fresh.build)),
                ("async-fresh", "AsyncLock, new each cycle", async_fresh),
            ]
        variants += [
            CycleVariant(f"{key}/{case}", f"{label}, {text}", n, run) for case, text, run in cases
        ]
        against |= {f"{key}/async-{x}": f"{key}/sync-{x}" for x in ("same", "fresh")}
    return variants, against


def section_aio(b: Bench) -> Section:
    loop = asyncio.new_event_loop()
    built: list[AsyncLock] = []
    try:
        variants, against = _cycle_variants(b, loop, built)
        run_interleaved(variants, b.sizes)
    finally:
        close_loop(loop)
    if any(lock.is_current_owner() for lock in built):
        raise RuntimeError("an AsyncLock still holds its lock after its cycles")
    note = (
        "vs sync: the AsyncLock's median over the sync Lock's on the same store (target, "
        f"issue 11: <= {TARGET_RATIO:g}x)."
    )
    title = "asyncio: await try_lock() + await unlock() (µs per cycle)"
    return compare("aio", title, variants, against, "sync", b.sizes, [note])
