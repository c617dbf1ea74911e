"""What ``GET /metrics`` shows: the service's lock metrics in a private
``prometheus_client`` registry, rendered in the Prometheus text format 0.0.4, and a store
wrapper that counts requests.

Each :class:`Metrics` has its own :class:`~prometheus_client.CollectorRegistry`: nothing goes to
the process-wide default registry, so services built in one process (tests, embedding) never
collide, and a user's own ``prometheus_client`` metrics are not mixed into ours. The registry
shows no ``*_created`` series (prometheus_client adds one per counter and histogram series; its
only switch, ``disable_created_metrics()``, is process-wide, so :class:`_WithoutCreated` drops
them for our registry alone). prometheus_client's metrics are thread-safe: store requests are
counted on worker threads while the lock front ends run on the event loop.

Labels are few and bounded: ``store`` (the store's name, never its URL), ``api`` (which front
end: :data:`API_ALPHA1`, :data:`API_ALPHA2`, :data:`API_GRPC`), ``outcome``, ``reason`` and
``kind``. No resource id or owner is ever a label: there may be millions, and their names may be
private.

A lock front end reports through :class:`Metrics`; see its docstring for the rule that keeps
``prioritylock_locks_held`` right.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable, Iterable, Iterator
from typing import Any, TypeVar, get_args

from prometheus_client import (
    CONTENT_TYPE_PLAIN_0_0_4,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from prometheus_client.metrics import MetricWrapperBase
from prometheus_client.metrics_core import CounterMetricFamily, Metric

from prioritylock._clock import SYSTEM_CLOCK, Clock
from prioritylock._errors import ConditionFailed, StoreAccessError, StoreUnavailable
from prioritylock._hints import hint_stats
from prioritylock._state import LossReason
from prioritylock.stores._base import ObjectStore
from prioritylock.stores._delegate import DelegatingStore

__all__ = [
    "API_ALPHA1",
    "API_ALPHA2",
    "API_GRPC",
    "CONTENT_TYPE",
    "LOSS_REASONS",
    "CountingStore",
    "Metrics",
]

_T = TypeVar("_T")
_M = TypeVar("_M", bound=MetricWrapperBase)

#: The Content-Type of the text exposition format that :meth:`Metrics.render` writes.
CONTENT_TYPE = CONTENT_TYPE_PLAIN_0_0_4

#: The ``api`` label of Dapr's alpha1 lock API.
API_ALPHA1 = "alpha1"
#: The ``api`` label of the full lock API over HTTP (``/v1.0-alpha2``).
API_ALPHA2 = "alpha2"
#: The ``api`` label of the full lock API over gRPC (``prioritylock.v1.LockService``).
API_GRPC = "grpc"

#: The ``reason`` label values of ``prioritylock_losses_total``: the library's loss reasons,
#: and ``other`` for anything else a front end reports (kept bounded).
LOSS_REASONS: tuple[str, ...] = (*get_args(LossReason), "other")

#: Seconds; a lock call is a few store round trips, or a wait when it blocks.
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
#: Waiters in a lock's line (at most 32).
LINE_BUCKETS = (0, 1, 2, 4, 8, 16, 32)
#: Seconds spent waiting for a lock held by another (blocking locks and handovers).
WAIT_BUCKETS = (0.01, 0.1, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0)
#: Seconds of one store request.
REQUEST_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


def _seconds(value: float) -> float:
    """A duration to observe: a difference of monotonic readings is never negative or NaN, but
    a histogram given NaN would count it in no bucket while its sum turns NaN for good, so
    anything but a duration counts as 0."""
    return value if value >= 0 else 0.0


class _WithoutCreated:
    """A collector of ``metrics`` that leaves out their ``*_created`` series."""

    def __init__(self, metrics: Iterable[MetricWrapperBase]) -> None:
        self._metrics = tuple(metrics)

    def describe(self) -> list[Metric]:
        # Lets the registry refuse a name twice without collecting.
        return [family for metric in self._metrics for family in metric.describe()]

    def collect(self) -> Iterator[Metric]:
        for metric in self._metrics:
            for family in metric.collect():  # made afresh on each collect: ours to trim
                created = family.name + "_created"
                family.samples = [s for s in family.samples if s.name != created]
                yield family


class _HintCounts:
    """``prioritylock_hints_total``: what the process's hint listener did (``_hints``)."""

    def describe(self) -> list[Metric]:
        return list(self.collect())

    def collect(self) -> Iterator[Metric]:
        stats = hint_stats()
        family = CounterMetricFamily(
            "prioritylock_hints",
            "Hints this process's listener heard, by outcome: delivered (a lock read sooner), "
            "coalesced (past the per-lock rate: folded into a later read), dropped (malformed, "
            "or a token of no lock here).",
            labels=["outcome"],
        )
        for outcome in ("delivered", "coalesced", "dropped"):
            family.add_metric([outcome], getattr(stats, outcome))
        yield family


class Metrics:
    """The service's metrics, and the calls its lock front ends make.

    Every holding a front end reports with :meth:`acquired` ends with exactly one of
    :meth:`released`, :meth:`expired` or :meth:`lost`; ``prioritylock_locks_held`` is what
    remains. :meth:`preempted` and :meth:`refused` change nothing held. Each call takes the
    store's name and the front end's ``api`` label; call :meth:`prepare` once per pair so that
    its series show 0 before anything happens. A front end wires in like this::

        started = clock.monotonic()
        if await lock.try_lock():
            metrics.acquired(store, API, latency=clock.monotonic() - started, waited=waited)
        else:
            metrics.refused(store, API, latency=clock.monotonic() - started)

    Store requests are counted by :class:`CountingStore`. The calls never raise on a value
    they don't expect (an unknown loss reason counts as ``other``): metrics must not break a
    request.
    """

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self._scrape_hooks: list[Callable[[], None]] = []
        made: list[MetricWrapperBase] = []

        def metric(kind: type[_M], name: str, help: str, labels: Iterable[str], **kw: Any) -> _M:
            made.append(new := kind(name, help, labels, registry=None, **kw))
            return new

        per_api = ("store", "api")
        self.held = metric(
            Gauge,
            "prioritylock_locks_held",
            "Locks held through this service now. An alpha1 lease is counted off when a request "
            "or a scrape finds its time is up on this service's clock.",
            per_api,
        )
        self.acquires = metric(
            Counter,
            "prioritylock_acquires_total",
            "Lock attempts by outcome: acquired, refused (held by another), error (the store "
            "failed).",
            (*per_api, "outcome"),
        )
        self.latency = metric(
            Histogram,
            "prioritylock_acquire_latency_seconds",
            "Time of a lock attempt, from the request to the answer, waiting included.",
            (*per_api, "outcome"),
            buckets=LATENCY_BUCKETS,
        )
        self.wait = metric(
            Histogram,
            "prioritylock_acquire_wait_seconds",
            "Time an acquisition waited for the lock to be free or handed over (alpha1 locks "
            "never wait: 0).",
            per_api,
            buckets=WAIT_BUCKETS,
        )
        self.line = metric(
            Histogram,
            "prioritylock_line_length",
            "Waiters left in the lock's line when an acquisition through this service took it "
            "(the fair line of blocking lock requests).",
            per_api,
            buckets=LINE_BUCKETS,
        )
        self.releases = metric(
            Counter,
            "prioritylock_releases_total",
            "Holdings ended by their owner's unlock.",
            per_api,
        )
        self.expirations = metric(
            Counter,
            "prioritylock_expirations_total",
            "Holdings whose lease ran out without renewal (alpha1: seen by a later request or "
            "scrape).",
            per_api,
        )
        self.losses = metric(
            Counter,
            "prioritylock_losses_total",
            "Holdings taken from their holder, by reason: " + ", ".join(LOSS_REASONS) + ".",
            (*per_api, "reason"),
        )
        self.preemptions = metric(
            Counter,
            "prioritylock_preemptions_total",
            "Holders asked to clean up and hand over to a higher priority.",
            per_api,
        )
        self.store_requests = metric(
            Counter,
            "prioritylock_store_requests_total",
            "Requests to the stores by kind (read, create, replace, delete, list) and outcome "
            "(ok, not-found, condition-failed, unavailable, access-denied, error).",
            ("store", "kind", "outcome"),
        )
        self.store_latency = metric(
            Histogram,
            "prioritylock_store_request_duration_seconds",
            "Time of one store request, by kind.",
            ("store", "kind"),
            buckets=REQUEST_BUCKETS,
        )
        self.registry.register(_WithoutCreated(made))
        self.registry.register(_HintCounts())

    def prepare(self, store: str, api: str) -> None:
        """Show the series of ``store`` and ``api`` at 0 before anything happened to them."""
        self.held.labels(store, api)
        for outcome in ("acquired", "refused"):
            self.acquires.labels(store, api, outcome)
        self.latency.labels(store, api, "acquired")
        for counter in (self.releases, self.expirations, self.preemptions):
            counter.labels(store, api)

    def acquired(
        self, store: str, api: str, *, latency: float, waited: float = 0.0, line: int = 0
    ) -> None:
        """A lock was taken: ``latency`` seconds from the request, ``waited`` of them waiting
        for another holder to go; ``line`` waiters still in its line."""
        self.acquires.labels(store, api, "acquired").inc()
        self.line.labels(store, api).observe(line)
        self.latency.labels(store, api, "acquired").observe(_seconds(latency))
        self.wait.labels(store, api).observe(_seconds(waited))
        self.held.labels(store, api).inc()

    def refused(self, store: str, api: str, *, latency: float) -> None:
        """A lock attempt found the lock held by another and gave up."""
        self.acquires.labels(store, api, "refused").inc()
        self.latency.labels(store, api, "refused").observe(_seconds(latency))

    def failed(self, store: str, api: str, *, latency: float) -> None:
        """A lock attempt failed on a store error (its caller got an error, not a refusal)."""
        self.acquires.labels(store, api, "error").inc()
        self.latency.labels(store, api, "error").observe(_seconds(latency))

    def released(self, store: str, api: str) -> None:
        """A holding ended by its owner's unlock (a handover after cleanup counts here too)."""
        self.releases.labels(store, api).inc()
        self.held.labels(store, api).dec()

    def expired(self, store: str, api: str) -> None:
        """A holding ended because its lease ran out."""
        self.expirations.labels(store, api).inc()
        self.held.labels(store, api).dec()

    def lost(self, store: str, api: str, reason: str) -> None:
        """A holding was taken from its holder; ``reason`` is the library's loss reason
        (``expired``, ``preempted``, ``overridden``, ``forced``, ``superseded``)."""
        if reason not in LOSS_REASONS:
            reason = "other"
        self.losses.labels(store, api, reason).inc()
        self.held.labels(store, api).dec()

    def preempted(self, store: str, api: str) -> None:
        """A holder was asked to clean up for a higher priority (its holding ends later, with
        :meth:`released` or :meth:`lost`)."""
        self.preemptions.labels(store, api).inc()

    def store_request(self, store: str, kind: str, outcome: str, seconds: float) -> None:
        """One request to a store (see :class:`CountingStore`)."""
        self.store_requests.labels(store, kind, outcome).inc()
        self.store_latency.labels(store, kind).observe(_seconds(seconds))

    def on_scrape(self, hook: Callable[[], None]) -> None:
        """Call ``hook`` before each :meth:`render` (to bring a gauge up to date)."""
        self._scrape_hooks.append(hook)

    def render(self) -> str:
        """Every metric, as the text exposition format 0.0.4 (:data:`CONTENT_TYPE`)."""
        for hook in self._scrape_hooks:
            hook()
        return generate_latest(self.registry).decode()


#: The ``kind`` label of each store operation: one request each.
_KINDS = {
    "read": "read",
    "read_if_changed": "read",
    "create": "create",
    "replace": "replace",
    "replace_unsynced": "replace",
    "delete": "delete",
    "list": "list",
}


class CountingStore(DelegatingStore):
    """A served store whose every request is counted in ``metrics`` under ``name``.

    Built on the public :class:`~prioritylock.testing.DelegatingStore`, which forwards the
    whole seam (and only the optional parts the inner store has), so a lock on this store
    behaves exactly as on the inner one.
    """

    def __init__(
        self, inner: ObjectStore, name: str, metrics: Metrics, *, clock: Clock = SYSTEM_CLOCK
    ) -> None:
        super().__init__(inner)
        self.name = name
        self.metrics = metrics
        self.clock = clock
        for kind in sorted(set(_KINDS.values())):
            metrics.store_requests.labels(name, kind, "ok")

    def _forward(self, op: str, key: str, call: Callable[[], _T]) -> _T:
        with self._counting(op) as outcome:
            result = call()
            outcome[0] = _ok(op, result)
            return result

    def _call_async(self, op: str, *args: Any) -> Awaitable[Any] | None:
        """The inner store's native async call (``stores._base.NativeAsync``), counted the same
        way; ``None`` where the inner store has none, so the lock uses a thread as it would."""
        entry = getattr(self.inner, "_call_async", None)
        pending = entry(op, *args) if callable(entry) else None
        return None if pending is None else self._counted(op, pending)

    async def _counted(self, op: str, pending: Awaitable[_T]) -> _T:
        with self._counting(op) as outcome:
            result = await pending
            outcome[0] = _ok(op, result)
            return result

    @contextlib.contextmanager
    def _counting(self, op: str) -> Iterator[list[str]]:
        """Count one request of ``op``: its outcome is what the block sets in the list it is
        given, or what it raised."""
        started = self.clock.monotonic()
        outcome = ["error"]
        try:
            yield outcome
        except ConditionFailed:
            outcome[0] = "condition-failed"
            raise
        except StoreUnavailable:
            outcome[0] = "unavailable"
            raise
        except StoreAccessError:
            outcome[0] = "access-denied"
            raise
        finally:
            kind = _KINDS.get(op, op)
            self.metrics.store_request(
                self.name, kind, outcome[0], self.clock.monotonic() - started
            )


def _ok(op: str, result: object) -> str:
    return "not-found" if result is None and _KINDS.get(op, op) == "read" else "ok"
