"""What ``GET /metrics`` shows: a small metrics registry, its Prometheus text exposition
(format 0.0.4), the service's lock metrics, and a store wrapper that counts requests.

No client library is needed: counters, gauges and histograms with fixed buckets are a few
dozen lines, and the text format is simple. Updates and rendering hold one lock per registry,
because store requests run on worker threads while the lock front ends run on the event loop.

Labels are few and bounded: ``store`` (the store's name, never its URL), ``api`` (which front
end: :data:`API_ALPHA1`, ...), ``outcome``, ``reason`` and ``kind``. No resource id or owner is
ever a label: there may be millions, and their names may be private.

A lock front end reports through :class:`Metrics`; see its docstring for the rule that keeps
``prioritylock_locks_held`` right.
"""

from __future__ import annotations

import bisect
import contextlib
import math
import re
import threading
from collections.abc import Awaitable, Callable, Iterator, Sequence
from typing import Any, TypeVar, get_args

from prioritylock._clock import SYSTEM_CLOCK, Clock
from prioritylock._errors import ConditionFailed, StoreAccessError, StoreUnavailable
from prioritylock._state import LossReason
from prioritylock.stores._base import ObjectStore
from prioritylock.testing import DelegatingStore

__all__ = [
    "API_ALPHA1",
    "API_ALPHA2",
    "API_GRPC",
    "CONTENT_TYPE",
    "LOSS_REASONS",
    "Counter",
    "CountingStore",
    "Gauge",
    "Histogram",
    "Metrics",
    "Registry",
]

_T = TypeVar("_T")
_F = TypeVar("_F", bound="_Family")

#: The Content-Type of the text exposition format.
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

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
#: Seconds spent waiting for a lock held by another (blocking locks and handovers).
WAIT_BUCKETS = (0.01, 0.1, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0)
#: Seconds of one store request.
REQUEST_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)

_METRIC_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")


def _number(value: float) -> str:
    """A sample value as the text format writes it (Go's spelling of the infinities)."""
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if math.isnan(value):
        return "NaN"
    return repr(float(value))


def _escape_label(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def _labels(names: Sequence[str], values: Sequence[str], extra: str = "") -> str:
    pairs = [f'{name}="{_escape_label(value)}"' for name, value in zip(names, values, strict=True)]
    if extra:
        pairs.append(extra)
    return "{" + ",".join(pairs) + "}" if pairs else ""


class _Family:
    """One metric name, its help and type, and a value per combination of label values."""

    kind = ""

    def __init__(self, registry: Registry, name: str, help: str, labels: Sequence[str]) -> None:
        if not _METRIC_NAME.fullmatch(name):
            raise ValueError(f"invalid metric name {name!r}")
        for label in labels:
            if not _LABEL_NAME.fullmatch(label) or label.startswith("__"):
                raise ValueError(f"invalid label name {label!r} of {name}")
        if len(set(labels)) != len(labels):
            raise ValueError(f"repeated label name in {name}")
        self.name = name
        self.help = help
        self.labels = tuple(labels)
        self._lock = registry.lock

    def _key(self, values: Sequence[str]) -> tuple[str, ...]:
        if len(values) != len(self.labels):
            raise ValueError(f"{self.name} takes labels {self.labels}, got {len(values)} values")
        return tuple(str(value) for value in values)

    def render(self) -> list[str]:
        """The family's lines (the registry's lock is held)."""
        return [f"# HELP {self.name} {_escape_help(self.help)}", f"# TYPE {self.name} {self.kind}"]


class Gauge(_Family):
    """A value that goes up and down, per combination of label values."""

    kind = "gauge"

    def __init__(self, registry: Registry, name: str, help: str, labels: Sequence[str]) -> None:
        super().__init__(registry, name, help, labels)
        self._values: dict[tuple[str, ...], float] = {}

    def add(self, amount: float, *values: str) -> None:
        key = self._key(values)
        with self._lock:
            self._values[key] = self._values.get(key, 0.0) + amount

    def touch(self, *values: str) -> None:
        """Show this combination (at 0) before anything happened to it."""
        key = self._key(values)
        with self._lock:
            self._values.setdefault(key, 0.0)

    def render(self) -> list[str]:
        lines = super().render()
        for key in sorted(self._values):
            lines.append(f"{self.name}{_labels(self.labels, key)} {_number(self._values[key])}")
        return lines


class Counter(Gauge):
    """A value that only goes up; its name ends in ``_total``."""

    kind = "counter"

    def __init__(self, registry: Registry, name: str, help: str, labels: Sequence[str]) -> None:
        if not name.endswith("_total"):
            raise ValueError(f"a counter's name ends in _total: {name!r}")
        super().__init__(registry, name, help, labels)

    def add(self, amount: float, *values: str) -> None:
        if not amount >= 0:  # also refuses NaN
            raise ValueError(f"{self.name} only goes up")
        super().add(amount, *values)

    def inc(self, *values: str) -> None:
        self.add(1.0, *values)


class _Series:
    """One histogram series: a count per bucket (not cumulative) and the sum observed."""

    __slots__ = ("counts", "sum")

    def __init__(self, buckets: int) -> None:
        self.counts = [0] * buckets
        self.sum = 0.0


class Histogram(_Family):
    """Observations counted into fixed buckets, with their sum and count."""

    kind = "histogram"

    def __init__(
        self,
        registry: Registry,
        name: str,
        help: str,
        labels: Sequence[str],
        buckets: Sequence[float],
    ) -> None:
        if "le" in labels:
            raise ValueError(f"a histogram can't have a label named le: {name}")
        super().__init__(registry, name, help, labels)
        bounds = [float(bound) for bound in buckets]
        if not bounds or bounds != sorted(set(bounds)) or any(map(math.isnan, bounds)):
            raise ValueError(f"buckets of {name} must be increasing: {buckets!r}")
        if bounds[-1] != math.inf:
            bounds.append(math.inf)
        self.buckets = tuple(bounds)
        self._values: dict[tuple[str, ...], _Series] = {}

    def _series(self, key: tuple[str, ...]) -> _Series:
        series = self._values.get(key)
        if series is None:
            series = self._values[key] = _Series(len(self.buckets))
        return series

    def observe(self, amount: float, *values: str) -> None:
        key = self._key(values)
        # The first bucket whose bound is at least ``amount`` (NaN goes to +Inf).
        last = len(self.buckets) - 1
        index = last if math.isnan(amount) else min(bisect.bisect_left(self.buckets, amount), last)
        with self._lock:
            series = self._series(key)
            series.counts[index] += 1
            series.sum += amount

    def touch(self, *values: str) -> None:
        key = self._key(values)
        with self._lock:
            self._series(key)

    def render(self) -> list[str]:
        lines = super().render()
        for key in sorted(self._values):
            series = self._values[key]
            running = 0
            for bound, count in zip(self.buckets, series.counts, strict=True):
                running += count
                le = f'le="{_number(bound)}"'
                lines.append(f"{self.name}_bucket{_labels(self.labels, key, le)} {running}")
            lines.append(f"{self.name}_sum{_labels(self.labels, key)} {_number(series.sum)}")
            lines.append(f"{self.name}_count{_labels(self.labels, key)} {running}")
        return lines


class Registry:
    """Metric families in the order they were made, rendered as Prometheus text."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self._families: dict[str, _Family] = {}

    def _add(self, family: _F) -> _F:
        if family.name in self._families:
            raise ValueError(f"metric {family.name} exists already")
        self._families[family.name] = family
        return family

    def counter(self, name: str, help: str, labels: Sequence[str] = ()) -> Counter:
        return self._add(Counter(self, name, help, labels))

    def gauge(self, name: str, help: str, labels: Sequence[str] = ()) -> Gauge:
        return self._add(Gauge(self, name, help, labels))

    def histogram(
        self, name: str, help: str, labels: Sequence[str], buckets: Sequence[float]
    ) -> Histogram:
        return self._add(Histogram(self, name, help, labels, buckets))

    def render(self) -> str:
        """The text exposition format 0.0.4 of every family, ending in a newline."""
        with self.lock:
            lines = [line for family in self._families.values() for line in family.render()]
        return "\n".join(lines) + "\n"


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
        self.registry = registry = Registry()
        self._scrape_hooks: list[Callable[[], None]] = []
        per_api = ("store", "api")
        self.held = registry.gauge(
            "prioritylock_locks_held",
            "Locks held through this service now. An alpha1 lease is counted off when a request "
            "or a scrape finds its time is up on this service's clock.",
            per_api,
        )
        self.acquires = registry.counter(
            "prioritylock_acquires_total",
            "Lock attempts by outcome: acquired, refused (held by another), error (the store "
            "failed).",
            (*per_api, "outcome"),
        )
        self.latency = registry.histogram(
            "prioritylock_acquire_latency_seconds",
            "Time of a lock attempt, from the request to the answer, waiting included.",
            (*per_api, "outcome"),
            LATENCY_BUCKETS,
        )
        self.wait = registry.histogram(
            "prioritylock_acquire_wait_seconds",
            "Time an acquisition waited for the lock to be free or handed over (alpha1 locks "
            "never wait: 0).",
            per_api,
            WAIT_BUCKETS,
        )
        self.releases = registry.counter(
            "prioritylock_releases_total", "Holdings ended by their owner's unlock.", per_api
        )
        self.expirations = registry.counter(
            "prioritylock_expirations_total",
            "Holdings whose lease ran out without renewal (alpha1: seen by a later request or "
            "scrape).",
            per_api,
        )
        self.losses = registry.counter(
            "prioritylock_losses_total",
            "Holdings taken from their holder, by reason: " + ", ".join(LOSS_REASONS) + ".",
            (*per_api, "reason"),
        )
        self.preemptions = registry.counter(
            "prioritylock_preemptions_total",
            "Holders asked to clean up and hand over to a higher priority.",
            per_api,
        )
        self.store_requests = registry.counter(
            "prioritylock_store_requests_total",
            "Requests to the stores by kind (read, create, replace, delete, list) and outcome "
            "(ok, not-found, condition-failed, unavailable, access-denied, error).",
            ("store", "kind", "outcome"),
        )
        self.store_latency = registry.histogram(
            "prioritylock_store_request_duration_seconds",
            "Time of one store request, by kind.",
            ("store", "kind"),
            REQUEST_BUCKETS,
        )

    def prepare(self, store: str, api: str) -> None:
        """Show the series of ``store`` and ``api`` at 0 before anything happened to them."""
        self.held.touch(store, api)
        for outcome in ("acquired", "refused"):
            self.acquires.touch(store, api, outcome)
        self.latency.touch(store, api, "acquired")
        for counter in (self.releases, self.expirations, self.preemptions):
            counter.touch(store, api)

    def acquired(self, store: str, api: str, *, latency: float, waited: float = 0.0) -> None:
        """A lock was taken: ``latency`` seconds from the request, ``waited`` of them waiting
        for another holder to go."""
        self.acquires.inc(store, api, "acquired")
        self.latency.observe(latency, store, api, "acquired")
        self.wait.observe(waited, store, api)
        self.held.add(1, store, api)

    def refused(self, store: str, api: str, *, latency: float) -> None:
        """A lock attempt found the lock held by another and gave up."""
        self.acquires.inc(store, api, "refused")
        self.latency.observe(latency, store, api, "refused")

    def failed(self, store: str, api: str, *, latency: float) -> None:
        """A lock attempt failed on a store error (its caller got an error, not a refusal)."""
        self.acquires.inc(store, api, "error")
        self.latency.observe(latency, store, api, "error")

    def released(self, store: str, api: str) -> None:
        """A holding ended by its owner's unlock (a handover after cleanup counts here too)."""
        self.releases.inc(store, api)
        self.held.add(-1, store, api)

    def expired(self, store: str, api: str) -> None:
        """A holding ended because its lease ran out."""
        self.expirations.inc(store, api)
        self.held.add(-1, store, api)

    def lost(self, store: str, api: str, reason: str) -> None:
        """A holding was taken from its holder; ``reason`` is the library's loss reason
        (``expired``, ``preempted``, ``overridden``, ``forced``, ``superseded``)."""
        if reason not in LOSS_REASONS:
            reason = "other"
        self.losses.inc(store, api, reason)
        self.held.add(-1, store, api)

    def preempted(self, store: str, api: str) -> None:
        """A holder was asked to clean up for a higher priority (its holding ends later, with
        :meth:`released` or :meth:`lost`)."""
        self.preemptions.inc(store, api)

    def store_request(self, store: str, kind: str, outcome: str, seconds: float) -> None:
        """One request to a store (see :class:`CountingStore`)."""
        self.store_requests.inc(store, kind, outcome)
        self.store_latency.observe(seconds, store, kind)

    def on_scrape(self, hook: Callable[[], None]) -> None:
        """Call ``hook`` before each :meth:`render` (to bring a gauge up to date)."""
        self._scrape_hooks.append(hook)

    def render(self) -> str:
        """Every metric, as the text exposition format 0.0.4."""
        for hook in self._scrape_hooks:
            hook()
        return self.registry.render()


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
            metrics.store_requests.touch(name, kind, "ok")

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
