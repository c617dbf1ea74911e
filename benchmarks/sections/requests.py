"""``requests``: store requests per operation on every store, from ``store.stats``.

One client's operations are each counted alone; where two clients share a store (a blocked
waiter, a preemption) a per-client tally (:class:`TallyStore`) splits them. Also what a held lock
and an idle one cost per renew interval, with the default timings and with Hudi's, scaled down
by :data:`HELD_SCALE` so a short window holds several intervals.
"""

from __future__ import annotations

import contextlib
import statistics
import time
from collections.abc import Callable

from _bench import Bench, StoreKind, TallyStore
from _harness import Json, Section, fmt_counts, run_threads, stats_delta

from prioritylock import FakeClock, Heartbeat, LockBuilder, LockTimeout
from prioritylock.stores import ObjectStore, open_store
from sections.preemption import PREEMPT_VARIANTS, preemptions


def _single_client_ops(b: Bench, store: ObjectStore) -> dict[str, dict[str, int]]:
    """Requests of one client's operations, each counted alone with ``store.stats``."""
    out: dict[str, dict[str, int]] = {}
    absent = b.builder(store, b.path("absent"), "a").build()
    out["acquire_absent"] = stats_delta(store, absent.try_lock)
    absent.unlock()
    path = b.path("free")
    (first := b.builder(store, path, "a").build()).lock(timeout=5)
    first.unlock()
    fresh = b.builder(store, path, "b").build()
    out["acquire_free_fresh"] = stats_delta(store, fresh.try_lock)
    out["renew"] = stats_delta(store, fresh.renew)
    out["release"] = stats_delta(store, fresh.unlock)
    out["acquire_known_own_release"] = stats_delta(store, fresh.try_lock)
    fresh.unlock()
    (after_info := b.builder(store, path, "c").build()).info()
    out["acquire_known_after_info"] = stats_delta(store, after_info.try_lock)
    out["try_lock_refused"] = stats_delta(store, b.builder(store, path, "d").build().try_lock)
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


#: Short poll interval for the blocked-waiter figures (the default is the library's, 1 s).
SHORT_POLL = 0.05
#: The held-lock figures run with every default timing scaled by this (lease 3 s instead of
#: 30 s...), so a short window holds many renew intervals; counts per interval are unchanged.
HELD_SCALE = 0.1
#: Apache Hudi's default lock timings, as ``LockBuilder.from_properties`` maps them: lease
#: (``lock_validity_timeout_ms``) 5 min, renew (``heartbeat_poll_ms``) 30 s.
HUDI_LEASE_S, HUDI_RENEW_S = 300.0, 30.0
#: Every timing at its default.
DEFAULTS = LockBuilder().store("memory://").path("bench", "defaults").build().config


def _blocked_waiter(b: Bench, kind: StoreKind, poll: float) -> Callable[[], Json]:
    """A waiter blocked for ``waiter_s`` behind a holder, polling at ``poll``: its reads in the
    first second and per second once settled."""
    tally, path, s = TallyStore(open_store(b.url(kind))), b.path("waiter"), b.sizes
    holder = b.builder(tally, path, "holder").build()
    waiter = b.builder(tally.client("waiter"), path, "waiter").poll_interval(poll).build()

    def run() -> Json:
        holder.lock(timeout=5)
        t0 = time.monotonic()
        with contextlib.suppress(LockTimeout):
            waiter.lock(timeout=s.waiter_s)
            raise RuntimeError("the blocked waiter got a held lock")
        t1 = time.monotonic()
        holder.unlock()
        reads = {"reads": (t0, t1), "first_second": (t0, t0 + 1.0)}
        reads |= {"steady_reads": (t0 + s.waiter_settle_s, t1)}
        got = {k: tally.counts("waiter", *window)["reads"] for k, window in reads.items()}
        steady_s = t1 - t0 - s.waiter_settle_s
        return got | {"steady_window_s": steady_s, "steady_per_s": got["steady_reads"] / steady_s}

    return run


def _held_lock(b: Bench, kind: StoreKind, timings: str) -> Callable[[], Json]:
    """A lock held for about ``waiter_s`` and an idle one next to it, with the default timings
    or Hudi's (watched at the renew interval, as ``from_properties`` sets them), scaled by
    :data:`HELD_SCALE`: the held lock's writes and reads per renew interval, the idle one's."""
    held_tally, idle_tally = (TallyStore(open_store(b.url(kind))) for _ in range(2))
    builder = b.builder(held_tally, b.path("held"), "holder").cleanup_timeout(
        DEFAULTS.cleanup_timeout * HELD_SCALE
    )
    if timings == "hudi":
        builder.lease_timeout(HUDI_LEASE_S * HELD_SCALE).renew_interval(HUDI_RENEW_S * HELD_SCALE)
        builder.watch_interval(HUDI_RENEW_S * HELD_SCALE)
    else:
        builder.lease_timeout(DEFAULTS.lease_timeout * HELD_SCALE)
    held = builder.build()
    idle = b.builder(idle_tally, b.path("idle"), "idle").build()

    def run() -> Json:
        idle.lock(timeout=5)
        idle.unlock()
        held.lock(timeout=5)
        # Renewals come every renew interval after the acquire, watch reads in between: a
        # window a quarter interval off that phase, a whole number of intervals long, holds
        # each of them exactly as often as an interval does.
        every = held.config.renew_interval
        t0 = time.monotonic() + every / 4
        t1 = t0 + every * max(1, int((b.sizes.waiter_s - every / 4) // every))
        time.sleep(t1 - time.monotonic())
        held.unlock()
        counts, intervals = held_tally.counts(None, t0, t1), (t1 - t0) / every
        figures = {"window_s": t1 - t0, "renew_interval_s": every}
        figures |= {"watch_interval_s": held.config.watch_interval}
        figures |= {"writes_per_renew_interval": counts["replaces"] / intervals}
        figures |= {"reads_per_renew_interval": counts["reads"] / intervals}
        return figures | {"idle": idle_tally.counts(None, t0, t1)}

    return run


def section_requests(b: Bench) -> Section:
    kinds = b.store_kinds
    per_kind = {kind.name: _single_client_ops(b, open_store(b.url(kind))) for kind in kinds}
    # Blocked waiters and held locks: every one at the same time, each on its own lock.
    runs = {f"{k.name}/{p}": _blocked_waiter(b, k, p) for k in kinds for p in (1.0, SHORT_POLL)}
    runs |= {f"{k.name}/{t}": _held_lock(b, k, t) for k in kinds for t in ("defaults", "hudi")}
    got = dict(zip(runs, run_threads(list(runs.values()), "bench-waiter"), strict=True))

    table = [[label, *(fmt_counts(per_kind[k.name][op]) for k in kinds)] for op, label in _OPS]
    rows: list[Json] = [
        {"operation": op, "label": label} | {k.name: per_kind[k.name][op] for k in kinds}
        for op, label in _OPS
    ]
    for poll in (1.0, SHORT_POLL):
        w = {k.name: got[f"{k.name}/{poll}"] for k in kinds}
        cells = [f"{x['steady_per_s']:.2f}/s (1st s: {x['first_second']})" for x in w.values()]
        table.append([f"blocked waiter reads, poll_interval {poll:g} s", *cells])
        rows.append({"operation": "waiter_reads", "poll_interval": poll} | w)
    for timings, name in (("defaults", "default"), ("hudi", "Hudi's")):
        h = {k.name: got[f"{k.name}/{timings}"] for k in kinds}
        wr, rd = "writes_per_renew_interval", "reads_per_renew_interval"
        cells = [f"{x[wr]:.2f} w, {x[rd]:.2f} r" for x in h.values()]
        table.append([f"held lock, {name} timings: per renew interval", *cells])
        rows.append({"operation": "held", "timings": timings, "scale": HELD_SCALE} | h)
    idle = [fmt_counts(got[f"{k.name}/defaults"]["idle"]) for k in kinds]
    table.append(["idle lock (built, used, released)", *idle])
    for variant, label in PREEMPT_VARIANTS:
        counts = {k.name: preemptions(b, k, variant)[1] for k in kinds}
        for who in ("requestor", "holder"):
            cells = [fmt_counts(counts[k.name][who]) for k in kinds]
            table.append([f"preemption, {label}: {who}", *cells])
        rows.append({"operation": "preemption", "variant": variant} | counts)

    s = b.sizes
    pooled = [got[f"{k.name}/1.0"] for k in kinds]
    rate = sum(w["steady_reads"] for w in pooled) / sum(w["steady_window_s"] for w in pooled)

    def per_day(timings: str, what: str) -> float:
        renew = DEFAULTS.renew_interval if timings == "defaults" else HUDI_RENEW_S
        mean = statistics.fmean(got[f"{k.name}/{timings}"][what] for k in kinds)
        return mean * 86400 / renew

    day = {
        t: {w: per_day(t, f"{w}_per_renew_interval") for w in ("writes", "reads")}
        for t in ("defaults", "hudi")
    }
    rows.append({"operation": "per_day_at_full_scale", "waiter_reads_per_day": rate * 86400} | day)
    title = "Store requests per operation (from store.stats; two-client cases split per client)"
    headers = ["operation", *(k.label for k in kinds)]
    notes = [
        f"Blocked waiter: steady reads/s counted after the first {s.waiter_settle_s:g} s of "
        f"a {s.waiter_s:g} s wait; all stores pooled, default poll_interval: {rate:.2f} "
        f"reads/s, {rate * 86400:,.0f} a day.",
        f"Held lock: timings x{HELD_SCALE:g} so a short window holds several renew intervals "
        f"(Hudi's: lease {HUDI_LEASE_S:g} s, renew and watch every {HUDI_RENEW_S:g} s, as "
        "from_properties maps them); w = conditional writes, r = reads. Per day at full "
        f"scale: defaults {day['defaults']['writes']:,.0f} writes + "
        f"{day['defaults']['reads']:,.0f} reads; Hudi's {day['hudi']['writes']:,.0f} writes + "
        f"{day['hudi']['reads']:,.0f} reads (the heartbeat's 50 ms grid stretches each scaled "
        "interval by up to 5%: full-scale counts are up to ~5% higher).",
        "Preemption: mean over the preemption-latency runs, from the requestor's try_lock() "
        "call until the holder is told it lost the lock.",
    ]
    return Section("requests", title, headers, table, rows, notes)
