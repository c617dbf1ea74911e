"""``requests``: store requests per operation on every store, from ``store.stats``.

One client's operations are each counted alone; where two clients share a store (a blocked
waiter, a preemption) a per-thread tally (:class:`TallyStore`) splits them. Also what a held lock
and an idle one cost per renew interval, with the default timings and with Hudi's, scaled down
by :data:`HELD_SCALE` so a short window holds several intervals.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass

from _bench import Bench, StoreKind
from _harness import Json, Section, fmt_counts, run_threads, stats_delta
from _wrappers import TallyStore

from prioritylock import FakeClock, Heartbeat, LockBuilder, LockConfig, LockTimeout
from prioritylock.stores import ObjectStore, open_store
from sections.preemption import PREEMPT_VARIANTS, preemptions


def _single_client_ops(b: Bench, store: ObjectStore) -> dict[str, dict[str, int]]:
    """Requests of one client's operations, each counted alone with ``store.stats``."""
    out: dict[str, dict[str, int]] = {}
    absent = b.builder(store, b.path("absent"), "a").build()
    out["acquire_absent"] = stats_delta(store, absent.try_lock)
    absent.unlock()

    path = b.path("free")
    first = b.builder(store, path, "a").build()
    first.lock(timeout=5)
    first.unlock()
    fresh = b.builder(store, path, "b").build()
    out["acquire_free_fresh"] = stats_delta(store, fresh.try_lock)
    out["renew"] = stats_delta(store, fresh.renew)
    out["release"] = stats_delta(store, fresh.unlock)
    out["acquire_known_own_release"] = stats_delta(store, fresh.try_lock)
    fresh.unlock()
    after_info = b.builder(store, path, "c").build()
    after_info.info()
    out["acquire_known_after_info"] = stats_delta(store, after_info.try_lock)

    refused = b.builder(store, path, "d").build()
    out["try_lock_refused"] = stats_delta(store, refused.try_lock)
    after_info.unlock()
    # ``fresh`` still caches the version of its own release; others have written since.
    out["acquire_stale_cache"] = stats_delta(store, fresh.try_lock)
    fresh.unlock()
    out.update(_expired_takeover(b, store))
    return out


def _expired_takeover(b: Bench, store: ObjectStore) -> dict[str, dict[str, int]]:
    """A holder that died (its heartbeat never runs) and a rival that takes over: one request to
    see the holder (refused), then, lease_timeout + max_clock_drift later on the rival's own
    clock, what taking the expired lease costs. Fake clocks: no waiting."""
    clock = FakeClock()
    stopped = Heartbeat(clock, threaded=False)  # never stepped: the holder never renews
    path = b.path("expired")
    dead = b.builder(store, path, "dead").clock(clock).heartbeat(stopped).lease_timeout(2).build()
    if not dead.try_lock():
        raise RuntimeError("the expired-takeover holder could not take a fresh lock")
    rival = b.builder(store, path, "rival").clock(clock).heartbeat(stopped).build()
    out = {"acquire_expired_sight": stats_delta(store, rival.try_lock)}
    clock.advance(2 + 0.5 + 0.01)  # the holder's lease timeout + the default max_clock_drift
    out["acquire_expired"] = stats_delta(store, rival.try_lock)
    if not rival.is_current_owner():
        raise RuntimeError("the rival did not take over the expired lease")
    rival.unlock()
    return out


_OPS = [
    ("acquire_absent", "acquire, document absent (fresh Lock)"),
    ("acquire_free_fresh", "acquire, free document, fresh Lock (version unknown)"),
    ("acquire_known_own_release", "acquire, version known (same Lock after its release)"),
    ("acquire_known_after_info", "acquire, version known (after info())"),
    ("renew", "renew()"),
    ("release", "unlock()"),
    ("acquire_stale_cache", "acquire, stale cached version (same Lock, others wrote since)"),
    ("try_lock_refused", "try_lock() refused (held by another)"),
    ("acquire_expired_sight", "expired holder: first sight (try_lock refused)"),
    ("acquire_expired", "expired holder: take over after lease_timeout + drift"),
]


@dataclass
class WaiterResult:
    reads: int
    first_second: int
    steady_per_s: float
    steady_reads: int
    steady_window_s: float
    holder: dict[str, int]
    waited_s: float


def _blocked_waiter(
    b: Bench, kind: StoreKind, poll: float | None, out: dict[str, WaiterResult]
) -> Callable[[], None]:
    """A waiter blocked for ``waiter_s`` behind a holder; returns a function that runs it."""
    tally = TallyStore(open_store(b.url(kind)))
    path = b.path("waiter")
    holder = b.builder(tally, path, "holder").build()
    waiter_builder = b.builder(tally, path, "waiter")
    if poll is not None:
        waiter_builder.poll_interval(poll)
    waiter = waiter_builder.build()
    s = b.sizes

    def run() -> None:
        holder.lock(timeout=5)
        tally.label_thread("waiter")
        t0 = time.monotonic()
        try:
            waiter.lock(timeout=s.waiter_s)
        except LockTimeout:
            pass
        else:
            raise RuntimeError("the blocked waiter got a held lock")
        t1 = time.monotonic()
        holder.unlock()
        steady_window = t1 - (t0 + s.waiter_settle_s)
        steady_reads = tally.counts("waiter", t0 + s.waiter_settle_s, t1)["reads"]
        out[f"{kind.name}/{poll}"] = WaiterResult(
            reads=tally.counts("waiter", t0, t1)["reads"],
            first_second=tally.counts("waiter", t0, t0 + 1.0)["reads"],
            steady_per_s=steady_reads / steady_window,
            steady_reads=steady_reads,
            steady_window_s=steady_window,
            holder={k: v for k, v in tally.counts("other", t0, t1).items() if v},
            waited_s=t1 - t0,
        )

    return run


#: The held-lock figures run with every default timing scaled by this (lease 3 s instead of
#: 30 s...), so a short window holds many renew intervals; counts per interval are unchanged.
HELD_SCALE = 0.1


@dataclass
class HeldResult:
    """Requests of one held lock and one idle (built, locked, released) lock over a window."""

    window_s: float
    renew_interval_s: float  # scaled
    watch_interval_s: float  # scaled
    held: dict[str, int]
    idle: dict[str, int]

    def per_interval(self, kind: str) -> float:
        """``kind`` requests ("reads", "replaces") of the held lock per renew interval."""
        return self.held[kind] / (self.window_s / self.renew_interval_s)


def _default_timings() -> LockConfig:
    """A Lock's configuration with every timing at its default."""
    return LockBuilder().store("memory://").path("bench", "defaults").build().config


#: Short poll interval for the blocked-waiter figures (the default is the library's, 1 s).
SHORT_POLL = 0.05

#: Apache Hudi's default lock timings, as ``LockBuilder.from_properties`` maps them: lease
#: (``lock_validity_timeout_ms``) 5 min, renew (``heartbeat_poll_ms``) 30 s.
HUDI_LEASE_S = 300.0
HUDI_RENEW_S = 30.0


def _held_lock(
    b: Bench, kind: StoreKind, timings: str, out: dict[str, HeldResult]
) -> Callable[[], None]:
    """A lock held for about ``waiter_s`` and an idle one next to it; returns a function that
    runs them. ``timings``: ``defaults``, or ``hudi`` (Hudi's lease and renew interval, watched
    at the renew interval, as ``from_properties`` sets them); either way scaled by
    :data:`HELD_SCALE`."""
    defaults = _default_timings()
    held_tally = TallyStore(open_store(b.url(kind)))
    builder = b.builder(held_tally, b.path("held"), "holder").cleanup_timeout(
        defaults.cleanup_timeout * HELD_SCALE
    )
    if timings == "hudi":
        # As LockBuilder.from_properties sets them: Hudi's lease and heartbeat, and watching at
        # the renew interval (Hudi has no preemption to hear of).
        builder.lease_timeout(HUDI_LEASE_S * HELD_SCALE).renew_interval(HUDI_RENEW_S * HELD_SCALE)
        builder.watch_interval(HUDI_RENEW_S * HELD_SCALE)
    else:
        builder.lease_timeout(defaults.lease_timeout * HELD_SCALE)
    held = builder.build()
    idle_tally = TallyStore(open_store(b.url(kind)))
    idle = b.builder(idle_tally, b.path("idle"), "idle").build()
    s = b.sizes

    def run() -> None:
        idle.lock(timeout=5)
        idle.unlock()
        held.lock(timeout=5)
        # Renewals come every renew interval after the acquire, watch reads in between: a
        # window a quarter interval off that phase, a whole number of intervals long, holds
        # each of them exactly as often as an interval does.
        cfg = held.config
        every = cfg.renew_interval
        t0 = time.monotonic() + every / 4
        t1 = t0 + every * max(1, int((s.waiter_s - every / 4) // every))
        time.sleep(t1 - time.monotonic())
        held.unlock()
        out[f"{kind.name}/{timings}"] = HeldResult(
            window_s=t1 - t0,
            renew_interval_s=cfg.renew_interval,
            watch_interval_s=cfg.watch_interval,
            held=held_tally.counts(None, t0, t1),
            idle=idle_tally.counts(None, t0, t1),
        )

    return run


def section_requests(b: Bench) -> Section:
    kinds = b.store_kinds
    per_kind = {kind.name: _single_client_ops(b, open_store(b.url(kind))) for kind in kinds}
    # Blocked waiters and held locks: every one at the same time, each on its own lock.
    waiters: dict[str, WaiterResult] = {}
    held: dict[str, HeldResult] = {}
    runs = [_blocked_waiter(b, k, p, waiters) for k in kinds for p in (None, SHORT_POLL)]
    runs += [_held_lock(b, k, t, held) for k in kinds for t in ("defaults", "hudi")]
    run_threads(runs, "bench-waiter")

    table: list[list[str]] = []
    rows: list[Json] = []
    for op, label in _OPS:
        table.append([label, *(fmt_counts(dict(per_kind[k.name][op])) for k in kinds)])
        rows.append(
            {"operation": op, "label": label, **{k.name: per_kind[k.name][op] for k in kinds}}
        )
    for poll, poll_label in (
        (None, "default poll_interval (1 s)"),
        (SHORT_POLL, f"poll_interval {SHORT_POLL:g} s"),
    ):
        cells = []
        for kind in kinds:
            w = waiters[f"{kind.name}/{poll}"]
            cells.append(f"{w.steady_per_s:.2f}/s (1st s: {w.first_second})")
        table.append([f"blocked waiter reads, {poll_label}", *cells])
        rows.append(
            {
                "operation": "waiter_reads",
                "poll_interval": poll,
                **{k.name: asdict(waiters[f"{k.name}/{poll}"]) for k in kinds},
            }
        )
    for timings, label in (
        ("defaults", "held lock, default timings: per renew interval"),
        ("hudi", "held lock, Hudi's timings: per renew interval"),
    ):
        table.append(
            [
                label,
                *(
                    f"{held[f'{k.name}/{timings}'].per_interval('replaces'):.2f} w, "
                    f"{held[f'{k.name}/{timings}'].per_interval('reads'):.2f} r"
                    for k in kinds
                ),
            ]
        )
        rows.append(
            {
                "operation": "held",
                "timings": timings,
                "scale": HELD_SCALE,
                **{
                    k.name: {
                        **asdict(held[f"{k.name}/{timings}"]),
                        "writes_per_renew_interval": held[f"{k.name}/{timings}"].per_interval(
                            "replaces"
                        ),
                        "reads_per_renew_interval": held[f"{k.name}/{timings}"].per_interval(
                            "reads"
                        ),
                    }
                    for k in kinds
                },
            }
        )
    table.append(
        [
            "idle lock (built, used, released)",
            *(fmt_counts(held[f"{k.name}/defaults"].idle) for k in kinds),
        ]
    )
    for variant, label in PREEMPT_VARIANTS:
        counts = {k.name: preemptions(b, k, variant).requests for k in b.store_kinds}
        for who in ("requestor", "holder"):
            cells = [fmt_counts(counts[k.name][who]) if k.name in counts else "-" for k in kinds]
            table.append([f"preemption, {label}: {who}", *cells])
        rows.append({"operation": "preemption", "variant": variant, **counts})

    s = b.sizes
    pooled = [waiters[f"{k.name}/None"] for k in kinds]
    pooled_rate = sum(w.steady_reads for w in pooled) / sum(w.steady_window_s for w in pooled)
    defaults = _default_timings()

    def per_day(timings: str, what: str) -> float:
        renew = defaults.renew_interval if timings == "defaults" else HUDI_RENEW_S
        mean = statistics.fmean(held[f"{k.name}/{timings}"].per_interval(what) for k in kinds)
        return mean * 86400 / renew

    rows.append(
        {
            "operation": "per_day_at_full_scale",
            "waiter_reads_per_s_pooled": pooled_rate,
            "waiter_reads_per_day": pooled_rate * 86400,
            "held_defaults": {
                "writes": per_day("defaults", "replaces"),
                "reads": per_day("defaults", "reads"),
            },
            "held_hudi": {"writes": per_day("hudi", "replaces"), "reads": per_day("hudi", "reads")},
        }
    )
    dflt = held[f"{kinds[0].name}/defaults"]
    hudi = held[f"{kinds[0].name}/hudi"]
    return Section(
        name="requests",
        title="Store requests per operation (from store.stats; two-client cases split per thread)",
        headers=["operation", *(k.label for k in kinds)],
        table=table,
        rows=rows,
        notes=[
            f"Blocked waiter: steady reads/s counted after the first {s.waiter_settle_s:g} s of "
            f"a {s.waiter_s:g} s wait (backoff from 5 ms up to the poll interval); all stores "
            f"pooled, default poll_interval: {pooled_rate:.2f} reads/s "
            f"({sum(w.steady_reads for w in pooled)} reads), {pooled_rate * 86400:,.0f} a day.",
            f"Held lock: timings x{HELD_SCALE:g} so a short window holds several renew intervals "
            f"(defaults: renew every {dflt.renew_interval_s:g} s, watch every "
            f"{dflt.watch_interval_s:g} s, over {dflt.window_s:.1f} s; Hudi's: lease "
            f"{HUDI_LEASE_S:g} s, renew {HUDI_RENEW_S:g} s and watch every "
            f"{hudi.watch_interval_s / HELD_SCALE:g} s, as from_properties maps them; "
            f"over {hudi.window_s:.1f} s); w = conditional writes, r = reads. Per day at full "
            f"scale: defaults {per_day('defaults', 'replaces'):,.0f} writes + "
            f"{per_day('defaults', 'reads'):,.0f} reads; Hudi's {per_day('hudi', 'replaces'):,.0f}"
            f" writes + {per_day('hudi', 'reads'):,.0f} reads (extrapolated from the scaled "
            "window, where the heartbeat's 50 ms wakeup grid stretches each 1 s interval by up to "
            "5%, against 0.5% at full scale: full-scale counts are up to ~5% higher). Idle: "
            "requests in the same window.",
            "Preemption: mean over the preemption-latency runs, from the requestor's try_lock() "
            "call until the holder is told it lost the lock.",
        ],
    )
