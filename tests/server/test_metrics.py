"""``GET /metrics``: the names, labels and types it shows, the alpha1 calls and store requests it
counts (in process on a fake clock, and through a running service on memory and on S3), the
token, and no store URL or credential in what it shows."""

from __future__ import annotations

import asyncio
import math
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import pytest
from prometheus_client import REGISTRY, CollectorRegistry, Counter, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from prioritylock import ConditionFailed, StoreAccessError, StoreUnavailable
from prioritylock._clock import FakeClock
from prioritylock.server._alpha1 import LOCK_BELONGS_TO_OTHERS, SUCCESS, Alpha1Locks
from prioritylock.server._metrics import (
    API_ALPHA1,
    API_GRPC,
    CONTENT_TYPE,
    CountingStore,
    Metrics,
)
from prioritylock.stores import UnsyncedWriter
from prioritylock.stores._local import LocalStore
from prioritylock.stores._memory import MemoryStore
from prioritylock.testing import DelegatingStore
from prioritylock.testing.faults import FaultyStore
from tests._servers.s3 import S3Server
from tests.server.helpers import Service

pytestmark = pytest.mark.timeout(90)

_T = TypeVar("_T")

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def parse(text: str) -> Samples:
    """Every sample of the exposition, by name and labels (prometheus_client's own parser)."""
    samples: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            key = (sample.name, frozenset(sample.labels.items()))
            assert key not in samples, f"sample twice: {key}"
            samples[key] = sample.value
    return samples


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


def alpha1(samples: Samples, name: str, store: str = "locks", **labels: str) -> float:
    return value(samples, name, store=store, api=API_ALPHA1, **labels)


def requests(samples: Samples, store: str = "locks") -> float:
    """All requests made to ``store``, whatever their kind and outcome."""
    return sum(
        count
        for (name, labels), count in samples.items()
        if name == "prioritylock_store_requests_total" and ("store", store) in labels
    )


# -- the exposition ---------------------------------------------------------------------------

PER_API = {"store", "api"}
#: What a scraper may rely on: each family's type and label names (histograms add ``le``).
FAMILIES = {
    "prioritylock_locks_held": ("gauge", PER_API),
    "prioritylock_acquires_total": ("counter", PER_API | {"outcome"}),
    "prioritylock_acquire_latency_seconds": ("histogram", PER_API | {"outcome"}),
    "prioritylock_acquire_wait_seconds": ("histogram", PER_API),
    "prioritylock_line_length": ("histogram", PER_API),
    "prioritylock_releases_total": ("counter", PER_API),
    "prioritylock_expirations_total": ("counter", PER_API),
    "prioritylock_losses_total": ("counter", PER_API | {"reason"}),
    "prioritylock_preemptions_total": ("counter", PER_API),
    "prioritylock_store_requests_total": ("counter", {"store", "kind", "outcome"}),
    "prioritylock_store_request_duration_seconds": ("histogram", {"store", "kind"}),
    "prioritylock_hints_total": ("counter", {"outcome"}),
}
SUFFIXES = {"gauge": {""}, "counter": {""}, "histogram": {"_bucket", "_sum", "_count"}}


def test_exposition_keeps_names_types_and_labels() -> None:
    """Every family, under the names and labels scrapers already use, and no other series
    (prometheus_client's ``*_created`` ones are left out)."""
    metrics = Metrics()
    metrics.prepare("locks", API_GRPC)
    metrics.acquired("locks", API_GRPC, latency=0.005, waited=0.5)  # le is inclusive
    metrics.acquired("locks", API_GRPC, latency=0.2)
    metrics.lost("locks", API_GRPC, "forced")
    metrics.store_request("locks", "read", "ok", 0.002)
    text = metrics.render()
    lines = text.splitlines()
    for name, (kind, _) in FAMILIES.items():
        assert f"# TYPE {name} {kind}" in lines
    seen = set()
    for family in text_string_to_metric_families(text):
        name = family.name + ("_total" if family.type == "counter" else "")
        kind, labels = FAMILIES[name]
        assert family.type == kind
        seen.add(name)
        for sample in family.samples:
            assert sample.name.removeprefix(name) in SUFFIXES[kind], sample.name
            assert set(sample.labels) - {"le"} == labels, sample
    assert seen == set(FAMILIES)
    assert "_created" not in text

    samples = parse(text)
    at = {"store": "locks", "api": API_GRPC}
    latency = "prioritylock_acquire_latency_seconds"
    acquired = {**at, "outcome": "acquired"}
    assert value(samples, f"{latency}_bucket", **acquired, le="0.005") == 1
    assert value(samples, f"{latency}_bucket", **acquired, le="0.25") == 2
    assert value(samples, f"{latency}_bucket", **acquired, le="+Inf") == 2
    assert value(samples, f"{latency}_count", **acquired) == 2
    assert value(samples, f"{latency}_sum", **acquired) == pytest.approx(0.205)
    assert value(samples, "prioritylock_acquire_wait_seconds_sum", **at) == 0.5
    assert value(samples, "prioritylock_acquires_total", **acquired) == 2
    assert value(samples, "prioritylock_losses_total", **at, reason="forced") == 1
    assert value(samples, "prioritylock_locks_held", **at) == 1
    assert value(samples, "prioritylock_releases_total", **at) == 0  # prepared: shown at 0
    assert ("prioritylock_releases_total", frozenset(at.items())) in samples


def test_a_duration_that_is_no_number_counts_as_zero() -> None:
    """A histogram given NaN would count it in no bucket and turn its sum NaN for good."""
    metrics = Metrics()
    metrics.refused("locks", API_ALPHA1, latency=math.nan)
    metrics.store_request("locks", "read", "ok", -1.0)
    samples = parse(metrics.render())
    refused = {"store": "locks", "api": API_ALPHA1, "outcome": "refused"}
    latency = "prioritylock_acquire_latency_seconds"
    assert value(samples, f"{latency}_count", **refused) == 1
    assert value(samples, f"{latency}_sum", **refused) == 0
    assert value(samples, f"{latency}_bucket", **refused, le="0.005") == 1
    duration = "prioritylock_store_request_duration_seconds"
    assert value(samples, f"{duration}_sum", store="locks", kind="read") == 0


def test_each_service_has_a_registry_of_its_own() -> None:
    """Two services in one process count apart, nothing goes to prometheus_client's global
    registry, and other registries keep their ``*_created`` series (no process-wide switch)."""
    first, second = Metrics(), Metrics()
    first.acquired("locks", API_ALPHA1, latency=0.1)
    assert alpha1(parse(first.render()), "prioritylock_acquires_total", outcome="acquired") == 1
    assert alpha1(parse(second.render()), "prioritylock_acquires_total", outcome="acquired") == 0
    assert "prioritylock_" not in generate_latest(REGISTRY).decode()
    other = CollectorRegistry()
    Counter("demo_things_total", "Things.", registry=other).inc()
    assert "demo_things_created" in generate_latest(other).decode()


def test_held_is_what_acquisitions_leave_and_unknown_reasons_stay_bounded() -> None:
    metrics = Metrics()
    metrics.prepare("locks", "alpha2")
    for _ in range(5):
        metrics.acquired("locks", "alpha2", latency=0.2, waited=1.5)
    metrics.released("locks", "alpha2")
    metrics.expired("locks", "alpha2")
    metrics.lost("locks", "alpha2", "preempted")
    metrics.lost("locks", "alpha2", "some resource name")
    metrics.preempted("locks", "alpha2")
    metrics.refused("locks", "alpha2", latency=0.01)
    metrics.failed("locks", "alpha2", latency=0.03)
    samples = parse(metrics.render())
    at = {"store": "locks", "api": "alpha2"}
    assert value(samples, "prioritylock_locks_held", **at) == 1
    assert value(samples, "prioritylock_acquires_total", **at, outcome="acquired") == 5
    assert value(samples, "prioritylock_acquires_total", **at, outcome="refused") == 1
    assert value(samples, "prioritylock_acquires_total", **at, outcome="error") == 1
    assert value(samples, "prioritylock_acquire_wait_seconds_sum", **at) == pytest.approx(7.5)
    assert value(samples, "prioritylock_losses_total", **at, reason="preempted") == 1
    assert value(samples, "prioritylock_losses_total", **at, reason="other") == 1
    assert value(samples, "prioritylock_preemptions_total", **at) == 1
    assert not any("some resource name" in str(labels) for _, labels in samples)


# -- counting store requests -------------------------------------------------------------------


def test_counting_store_counts_each_kind_and_outcome() -> None:
    metrics = Metrics()
    clock = FakeClock()
    faulty = FaultyStore(MemoryStore())
    store = CountingStore(faulty, "locks", metrics, clock=clock)
    assert store.read("k") is None
    version = store.create("k", b"1")
    assert store.read("k") is not None
    with pytest.raises(ConditionFailed):
        store.create("k", b"2")
    version = store.replace("k", b"3", version)
    faulty.inject("replace", "unavailable")
    with pytest.raises(StoreUnavailable):
        store.replace("k", b"4", version)
    assert store.read_if_changed("k", version) is not None  # a read, unchanged
    assert store.list("") == ["k"]
    store.delete("k", version)
    samples = parse(metrics.render())

    def count(kind: str, outcome: str) -> float:
        return store_requests(samples, "locks", kind, outcome)

    assert count("read", "not-found") == 1
    assert count("read", "ok") == 2
    assert count("create", "ok") == 1
    assert count("create", "condition-failed") == 1
    assert count("replace", "ok") == 1
    assert count("replace", "unavailable") == 1
    assert count("list", "ok") == 1
    assert count("delete", "ok") == 1
    assert requests(samples) == 9


def store_requests(samples: Any, store: str, kind: str, outcome: str) -> float:
    return value(
        samples, "prioritylock_store_requests_total", store=store, kind=kind, outcome=outcome
    )


class Failing(DelegatingStore):
    """Every request fails with ``exc``."""

    def __init__(self, inner: Any, exc: Exception) -> None:
        super().__init__(inner)
        self.exc = exc

    def _forward(self, op: str, key: str, call: Callable[[], _T]) -> _T:
        raise self.exc


def test_counting_store_names_other_failures() -> None:
    metrics = Metrics()
    for name, exc in [("denied", StoreAccessError("no")), ("broken", RuntimeError("bug"))]:
        store = CountingStore(Failing(MemoryStore(), exc), name, metrics)
        with pytest.raises(type(exc)):
            store.read("k")
    samples = parse(metrics.render())
    requests_total = "prioritylock_store_requests_total"
    assert value(samples, requests_total, store="denied", kind="read", outcome="access-denied") == 1
    assert value(samples, requests_total, store="broken", kind="read", outcome="error") == 1


def test_counting_store_keeps_what_the_inner_store_can_do(tmp_path: Any) -> None:
    local = LocalStore(tmp_path)
    counted = CountingStore(local, "disk", Metrics())
    assert isinstance(local, UnsyncedWriter)
    assert isinstance(counted, UnsyncedWriter)  # so a lock syncs what it would sync
    assert not isinstance(CountingStore(MemoryStore(), "mem", Metrics()), UnsyncedWriter)
    assert counted.capabilities == local.capabilities


@pytest.mark.timeout(60)
def test_a_counted_s3_store_keeps_the_native_path_and_counts_it(moto_server: S3Server) -> None:
    """The service wraps every store in a CountingStore: an AsyncLock on it still sends its
    S3 requests natively (not on the thread pool), and each is counted once, outcome and all."""
    bucket = moto_server.create_bucket()
    inner = moto_server.store(bucket, async_io="native")
    metrics = Metrics()
    counted = CountingStore(inner, "s3", metrics)
    assert CountingStore(MemoryStore(), "mem", Metrics())._call_async("read", "k") is None
    assert counted._call_async("delete", "k", '"0"') is None  # left to boto3 by the store

    async def native(op: str, *args: Any) -> Any:
        pending = counted._call_async(op, *args)
        assert pending is not None, op
        return await pending

    async def calls() -> None:
        assert await native("read", "k") is None
        version = await native("create", "k", b"1")
        with pytest.raises(ConditionFailed):
            await native("create", "k", b"2")
        await native("replace", "k", b"3", version)

    try:
        asyncio.run(calls())
    finally:
        inner.close()
        moto_server.remove_bucket(bucket)
    samples = parse(metrics.render())

    def count(kind: str, outcome: str) -> float:
        return store_requests(samples, "s3", kind, outcome)

    assert count("read", "not-found") == 1
    assert count("create", "ok") == 1
    assert count("create", "condition-failed") == 1
    assert count("replace", "ok") == 1
    assert requests(samples, "s3") == 4
    assert inner.stats.total == 4


# -- alpha1 in process, on a fake clock --------------------------------------------------------


class SlowStore(DelegatingStore):
    """Each request takes 10 ms of the fake clock."""

    def __init__(self, inner: Any, clock: FakeClock) -> None:
        super().__init__(inner)
        self.clock = clock

    def _forward(self, op: str, key: str, call: Callable[[], _T]) -> _T:
        self.clock.advance(0.01)
        return call()


def _replica(store: MemoryStore, clock: FakeClock) -> tuple[Alpha1Locks, Metrics]:
    metrics = Metrics()
    counted = CountingStore(SlowStore(store, clock), "locks", metrics, clock=clock)
    return Alpha1Locks({"locks": counted}, "app1", clock=clock, metrics=metrics), metrics


def test_alpha1_sequence_in_process() -> None:
    clock = FakeClock()
    locks, metrics = _replica(MemoryStore(), clock)

    async def scenario() -> list[Samples]:
        seen = [parse(metrics.render())]
        assert await locks.try_lock("locks", "r1", "owner1", 30) is True
        seen.append(parse(metrics.render()))
        assert await locks.try_lock("locks", "r1", "owner2", 30) is False
        seen.append(parse(metrics.render()))
        assert await locks.unlock("locks", "r1", "owner1") == SUCCESS
        seen.append(parse(metrics.render()))
        assert await locks.try_lock("locks", "r2", "owner1", 5) is True
        clock.advance(5.5)  # its lease runs out, and nobody asks
        seen.append(parse(metrics.render()))
        assert await locks.try_lock("locks", "r2", "owner3", 5) is True  # clears it first
        seen.append(parse(metrics.render()))
        return seen

    start, locked, refused, unlocked, expired, relocked = asyncio.run(scenario())
    assert alpha1(start, "prioritylock_locks_held") == 0
    assert requests(start) == 0

    assert alpha1(locked, "prioritylock_locks_held") == 1
    assert alpha1(locked, "prioritylock_acquires_total", outcome="acquired") == 1
    cost = requests(locked)
    assert 1 <= cost <= 2  # the budget of an uncontended acquire
    # Its latency is the time of its requests on the fake clock, 10 ms each.
    latency = alpha1(locked, "prioritylock_acquire_latency_seconds_sum", outcome="acquired")
    assert latency == pytest.approx(0.01 * cost)
    assert alpha1(locked, "prioritylock_acquire_wait_seconds_count") == 1
    assert alpha1(locked, "prioritylock_acquire_wait_seconds_sum") == 0

    assert alpha1(refused, "prioritylock_acquires_total", outcome="refused") == 1
    assert alpha1(refused, "prioritylock_locks_held") == 1
    assert requests(refused) - requests(locked) == 1  # a refusal is one read

    assert alpha1(unlocked, "prioritylock_releases_total") == 1
    assert alpha1(unlocked, "prioritylock_locks_held") == 0
    assert requests(unlocked) - requests(refused) == 1  # a release is one request

    # The scrape counted the run-out lease off, without a request.
    assert alpha1(expired, "prioritylock_expirations_total") == 1
    assert alpha1(expired, "prioritylock_locks_held") == 0
    assert requests(expired) - requests(unlocked) <= 2  # only the second acquire

    # Clearing the run-out lease counts it off no second time.
    assert alpha1(relocked, "prioritylock_expirations_total") == 1
    assert alpha1(relocked, "prioritylock_locks_held") == 1
    assert alpha1(relocked, "prioritylock_acquires_total", outcome="acquired") == 3


def test_alpha1_expiry_seen_by_a_request() -> None:
    clock = FakeClock()
    locks, metrics = _replica(MemoryStore(), clock)

    async def scenario() -> None:
        assert await locks.try_lock("locks", "r", "owner1", 5) is True
        clock.advance(6)
        assert await locks.try_lock("locks", "r", "owner2", 5) is True

    asyncio.run(scenario())
    samples = parse(metrics.render())
    assert alpha1(samples, "prioritylock_expirations_total") == 1
    assert alpha1(samples, "prioritylock_locks_held") == 1


def test_alpha1_losses_when_another_replica_frees_the_lease() -> None:
    clock = FakeClock()
    store = MemoryStore()
    first, metrics = _replica(store, clock)
    second, _ = _replica(store, clock)

    async def scenario() -> None:
        # Freed on the other replica, then unlocked here: lost (forced), not released.
        assert await first.try_lock("locks", "a", "owner1", 30) is True
        assert await second.unlock("locks", "a", "owner1") == SUCCESS
        assert await first.unlock("locks", "a", "owner1") != SUCCESS
        # Freed on the other replica, then taken again here: the old holding is lost.
        assert await first.try_lock("locks", "b", "owner1", 30) is True
        assert await second.unlock("locks", "b", "owner1") == SUCCESS
        assert await first.try_lock("locks", "b", "owner2", 30) is True
        assert await first.unlock("locks", "b", "owner1") == LOCK_BELONGS_TO_OTHERS

    asyncio.run(scenario())
    samples = parse(metrics.render())
    assert alpha1(samples, "prioritylock_losses_total", reason="forced") == 2
    assert alpha1(samples, "prioritylock_releases_total") == 0
    assert alpha1(samples, "prioritylock_locks_held") == 1


def test_alpha1_store_failure_counts_as_error() -> None:
    metrics = Metrics()
    failing = Failing(MemoryStore(), StoreAccessError("access denied"))
    locks = Alpha1Locks(
        {"locks": CountingStore(failing, "locks", metrics)}, "app1", metrics=metrics
    )

    async def scenario() -> None:
        with pytest.raises(StoreAccessError):
            await locks.try_lock("locks", "r", "owner1", 30)
        with pytest.raises(LookupError):  # an unknown store name is no label
            await locks.try_lock("nope", "r", "owner1", 30)

    asyncio.run(scenario())
    samples = parse(metrics.render())
    assert alpha1(samples, "prioritylock_acquires_total", outcome="error") == 1
    assert alpha1(samples, "prioritylock_locks_held") == 0
    assert not any(("store", "nope") in labels for _, labels in samples)


# -- through a running service -----------------------------------------------------------------


def scrape(service: Service, headers: dict[str, str] | None = None) -> tuple[int, str, str]:
    """(status, Content-Type, body) of ``GET /metrics``."""
    request = urllib.request.Request(service.url + "/metrics", headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.headers["Content-Type"], response.read().decode()
    except urllib.error.HTTPError as exc:
        with exc:
            return exc.code, exc.headers["Content-Type"], exc.read().decode()


def test_service_counts_an_alpha1_sequence(fresh_service: Service) -> None:
    service = fresh_service
    resource = f"r-{uuid.uuid4().hex[:8]}"
    status, content_type, text = scrape(service)
    assert (status, content_type) == (200, CONTENT_TYPE)
    before = parse(text)
    assert alpha1(before, "prioritylock_locks_held") == 0

    assert service.lock("locks", resource, "owner1", 30) is True
    locked = parse(scrape(service)[2])
    assert alpha1(locked, "prioritylock_locks_held") == 1
    assert 1 <= requests(locked) - requests(before) <= 2  # the acquire budget

    assert service.lock("locks", resource, "owner2", 30) is False
    refused = parse(scrape(service)[2])
    assert alpha1(refused, "prioritylock_acquires_total", outcome="refused") == 1
    assert requests(refused) - requests(locked) == 1  # a refusal is one read

    assert service.unlock("locks", resource, "owner1") == 0
    unlocked = parse(scrape(service)[2])
    assert alpha1(unlocked, "prioritylock_releases_total") == 1
    assert alpha1(unlocked, "prioritylock_locks_held") == 0
    assert requests(unlocked) - requests(refused) == 1  # a release is one request

    assert service.lock("locks", resource, "owner3", 1) is True
    time.sleep(1.1)  # let the 1 s lease run out: the passing of time is what is tested
    expired = parse(scrape(service)[2])
    assert alpha1(expired, "prioritylock_expirations_total") == 1
    assert alpha1(expired, "prioritylock_locks_held") == 0
    assert alpha1(expired, "prioritylock_acquires_total", outcome="acquired") == 2
    count = alpha1(expired, "prioritylock_acquire_latency_seconds_count", outcome="acquired")
    assert count == 2
    assert (
        value(
            expired,
            "prioritylock_store_requests_total",
            store="locks",
            kind="replace",
            outcome="ok",
        )
        >= 1
    )


@pytest.fixture(scope="module")
def guarded() -> Iterator[Service]:
    running = Service({"locks": f"memory://{uuid.uuid4().hex}"}, token="s3cret-token")
    try:
        yield running
    finally:
        running.close()


@pytest.mark.parametrize(
    ("headers", "status"),
    [
        ({}, 401),
        ({"dapr-api-token": "wrong"}, 401),
        ({"Authorization": "Bearer wrong"}, 401),
        ({"Authorization": "Basic s3cret-token"}, 401),
        ({"dapr-api-token": "s3cret-token"}, 200),
        ({"Authorization": "Bearer s3cret-token"}, 200),
        ({"Authorization": "bearer s3cret-token"}, 200),
    ],
)
def test_metrics_token(guarded: Service, headers: dict[str, str], status: int) -> None:
    got, _, text = scrape(guarded, headers)
    assert got == status, text
    assert "s3cret-token" not in text
    if status == 200:
        assert "prioritylock_locks_held" in text


def test_bearer_token_is_for_metrics_only(guarded: Service) -> None:
    request = urllib.request.Request(
        guarded.url + "/v1.0-alpha1/lock/locks",
        data=b'{"resourceId": "r", "lockOwner": "o", "expiryInSeconds": 5}',
        headers={"Authorization": "Bearer s3cret-token"},
        method="POST",
    )
    with pytest.raises(urllib.error.HTTPError) as caught:
        urllib.request.urlopen(request, timeout=10)
    caught.value.close()
    assert caught.value.code == 401
    assert guarded.request("GET", "/v1.0/healthz", token="")[0] == 204  # still open


def test_no_store_url_or_credential_in_metrics(
    moto_server: S3Server, s3_url: str, s3_env: dict[str, str]
) -> None:
    assert "?endpoint=" in s3_url
    service = Service({"locks": s3_url}, env=s3_env)
    try:
        assert service.lock("locks", "r", "owner1", 30) is True
        status, _, text = scrape(service)
    finally:
        service.close()
    assert status == 200
    assert alpha1(parse(text), "prioritylock_locks_held") == 1
    endpoint = moto_server.endpoint_url.split("//", 1)[1]
    for secret in (
        "s3://",
        endpoint,
        "endpoint",
        s3_env["AWS_SECRET_ACCESS_KEY"],
        s3_env["AWS_ACCESS_KEY_ID"],
    ):
        assert secret not in text
