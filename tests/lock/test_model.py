"""Hypothesis stateful models of the protocol: fake clocks, skewed rates, injected faults.

Clients share one MemoryStore, each through its own FaultyStore (lost responses, 412 after a
write that landed, 429/5xx) and its own fake clock running at its own rate off one master clock.
Heartbeats are stepped whenever time moves, so renewals, watches and cleanups interleave with
the clients' calls; a client can be paused (a GC pause or a partition) so its lease runs out.

Checked after every step and at every tick of the clock:
- mutual exclusion: at most one client believes it holds the lock (outside the recorded
  break-glass paths in the priority model: then the old holder must learn within one watch
  interval);
- fences strictly increase in acquisition order;
- every holder that lost its lock was told exactly once.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import random
from typing import Any

import pytest
from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from prioritylock import (
    FakeClock,
    Heartbeat,
    Lock,
    LockHeld,
    NotLockOwner,
    PreemptionTimeout,
    StoreUnavailable,
)
from prioritylock.stores import MemoryStore
from prioritylock.testing.faults import FaultyStore
from tests.lock.helpers import Recorder, make

LEASE = 10.0
DRIFT = 0.5
WATCH = 1.0
BREAK_GLASS = {"forceful_takeover", "override", "preempted"}


class World(FakeClock):
    """The master clock: every time it moves, the world gets a chance to act and be checked."""

    def __init__(self) -> None:
        super().__init__()
        self.on_tick: list[Any] = []
        self._ticking = False

    def advance(self, seconds: float) -> None:
        super().advance(seconds)
        if self._ticking:
            return
        self._ticking = True
        try:
            for hook in self.on_tick:
                hook()
        finally:
            self._ticking = False


class RecordingStore(MemoryStore):
    """A MemoryStore that remembers the (fence, event) of every lease written to it."""

    def __init__(self) -> None:
        super().__init__()
        self.history: list[tuple[int, str]] = []

    def _record(self, data: bytes) -> None:
        body = json.loads(data)
        event = body.get("event") or {}
        self.history.append((body["fence"], event.get("kind", "")))

    def create(self, key: str, data: bytes) -> str:
        version = super().create(key, data)
        self._record(data)
        return version

    def replace(self, key: str, data: bytes, version: str) -> str:
        new_version = super().replace(key, data, version)
        self._record(data)
        return new_version


class Client:
    def __init__(
        self,
        name: str,
        world: World,
        store: MemoryStore,
        rng: random.Random,
        *,
        driver: str = "sync",
        **opts: Any,
    ) -> None:
        self.name = name
        self.clock = FakeClock(
            master=world, rate=rng.uniform(0.98, 1.02), start=rng.uniform(0, 1e6)
        )
        self.heartbeat = Heartbeat(self.clock, threaded=False)
        self.faulty = FaultyStore(store, rate=0.0, rng=rng)
        self.recorder = Recorder()
        self.lock: Lock = make(
            self.faulty,
            owner=name,
            clock=self.clock,
            heartbeat=self.heartbeat,
            listener=self.recorder,
            lease_timeout=LEASE,
            max_clock_drift=DRIFT,
            watch_interval=WATCH,
            store_timeout=3.0,
            poll_interval=0.5,
            driver=driver,
            **opts,
        )
        self.paused = False
        self.believed = False  # the model's view: did it hold at the last check?
        self.losses_expected = 0
        self.counted: set[int] = set()  # holdings whose loss the model has counted
        self.keep: list[object] = []  # ...kept alive, so their ids are never reused

    def lost_count(self) -> int:
        return self.recorder.names().count("lost")


class LeaseModel(RuleBasedStateMachine):
    """Equal priorities: strict mutual exclusion under faults, pauses and skew."""

    priorities: tuple[int, ...] = (0, 0, 0)
    driver = "sync"  # the async models below drive AsyncLock through the same rules

    def __init__(self) -> None:
        super().__init__()
        self.world = World()
        self.store = RecordingStore()
        self.clients: list[Client] = []
        self.fences: list[int] = []
        self.overlap_since: float | None = None
        self.world.on_tick.append(self._tick)

    def client_options(self, index: int, rng: random.Random) -> dict[str, Any]:
        return {}

    @initialize(seed=st.integers(0, 2**32 - 1), fault_rate=st.sampled_from([0.0, 0.05, 0.2]))
    def setup(self, seed: int, fault_rate: float) -> None:
        rng = random.Random(seed)
        for i, _ in enumerate(self.priorities):
            client = Client(
                f"c{i}",
                self.world,
                self.store,
                rng,
                driver=self.driver,
                **self.client_options(i, rng),
            )
            client.faulty.rate = fault_rate
            self.clients.append(client)

    # -- the world's clock ticks -------------------------------------------------------------

    def _tick(self) -> None:
        for client in self.clients:
            if not client.paused:
                client.heartbeat.run_due()
        self._check()

    def _believers(self) -> list[Client]:
        return [c for c in self.clients if c.lock.is_current_owner()]

    def _check(self) -> None:
        believers = self._believers()
        for client in self.clients:
            holding = client.lock._st.holding
            # Every holding that ends lost (expired, preempted, overridden, forced, found lost
            # while unlocking) must be told exactly once; a voluntary release is not a loss.
            if holding is not None and holding.lost and id(holding) not in client.counted:
                client.counted.add(id(holding))
                client.keep.append(holding)
                client.losses_expected += 1
            client.believed = client in believers
            assert client.lost_count() == client.losses_expected, (
                f"{client.name} not told exactly once"
            )
        self.check_exclusion(believers)

    def check_exclusion(self, believers: list[Client]) -> None:
        assert len(believers) <= 1, f"two holders at once: {[c.name for c in believers]}"

    def _acquired(self, client: Client) -> None:
        fence = client.lock.fencing_token
        assert not self.fences or fence > self.fences[-1], f"fence {fence} after {self.fences}"
        self.fences.append(fence)

    # -- rules -----------------------------------------------------------------------------------

    @rule(i=st.integers(0, 2))
    def try_lock(self, i: int) -> None:
        client = self.clients[i]
        try:
            got = client.lock.try_lock()
        except (StoreUnavailable, LockHeld, PreemptionTimeout):
            got = False
        self._check()
        if got and client.lock.is_current_owner():
            self._acquired(client)

    @rule(i=st.integers(0, 2), timeout=st.floats(0, 30))
    def lock(self, i: int, timeout: float) -> None:
        client = self.clients[i]
        try:
            client.lock.lock(timeout=timeout)
        except (StoreUnavailable, LockHeld, TimeoutError):
            self._check()
            return
        self._check()
        if client.lock.is_current_owner():
            self._acquired(client)

    @rule(i=st.integers(0, 2))
    def unlock(self, i: int) -> None:
        client = self.clients[i]
        with contextlib.suppress(NotLockOwner, StoreUnavailable):  # LockLost is a NotLockOwner
            client.lock.unlock()
        self._check()

    @rule(i=st.integers(0, 2))
    def renew(self, i: int) -> None:
        with contextlib.suppress(NotLockOwner, StoreUnavailable):
            self.clients[i].lock.renew()
        self._check()

    @rule(seconds=st.floats(0.01, 8.0))
    def wait(self, seconds: float) -> None:
        self.world.advance(seconds)

    @rule(i=st.integers(0, 2))
    def pause(self, i: int) -> None:
        self.clients[i].paused = True

    @rule(i=st.integers(0, 2))
    def resume(self, i: int) -> None:
        self.clients[i].paused = False
        if self.overlap_since is not None:
            # A paused old holder hears of its loss once it runs again: count from now.
            self.overlap_since = self.world.monotonic()

    @invariant()
    def consistent(self) -> None:
        if self.clients:
            self._check()

    def teardown(self) -> None:
        for kind in sorted({k for _, k in self.store.history}):
            event(f"lease event: {kind}")
        if any(c.faulty.injected for c in self.clients):
            event("faults injected")
        for client in self.clients:
            client.heartbeat.close()


class PriorityModel(LeaseModel):
    """Priorities, cleanup and waiting timeouts, forcefulness: exclusion outside break-glass."""

    priorities = (0, 1, 2)

    def client_options(self, index: int, rng: random.Random) -> dict[str, Any]:
        return {
            "priority": self.priorities[index],
            "cleanup_timeout": rng.choice([0.0, 2.0, 5.0]),
            "waiting_timeout": rng.choice([0.0, 3.0, 8.0]),
            "forceful": rng.random() < 0.5,
        }

    def check_exclusion(self, believers: list[Client]) -> None:
        if len(believers) <= 1:
            self.overlap_since = None
            return
        fences = sorted(c.lock.fencing_token for c in believers)
        for older, newer in itertools.pairwise(fences):
            # Between an old believer's fence and a newer one's, a break-glass event must stand.
            kinds = {k for f, k in self.store.history if older < f <= newer}
            assert kinds & BREAK_GLASS, f"two holders at once (fences {older}, {newer}): {kinds}"
        now = self.world.monotonic()
        if self.overlap_since is None:
            self.overlap_since = now
        # The old holder learns within one watch interval (plus the store timeout when its
        # watch read is failing, and clock-rate slack); a paused client learns when it resumes.
        if not any(c.paused for c in believers):
            assert now - self.overlap_since <= WATCH * 1.1 + 3.0 + 0.5, "old holder never told"


_settings = settings(
    max_examples=int(__import__("os").environ.get("PRIORITYLOCK_MODEL_EXAMPLES", "60")),
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)


class AsyncLeaseModel(LeaseModel):
    driver = "async"


class AsyncPriorityModel(PriorityModel):
    driver = "async"


TestLeaseModel = pytest.mark.timeout(300)(LeaseModel.TestCase)
TestLeaseModel.settings = _settings
TestPriorityModel = pytest.mark.timeout(300)(PriorityModel.TestCase)
TestPriorityModel.settings = _settings
TestAsyncLeaseModel = pytest.mark.timeout(300)(AsyncLeaseModel.TestCase)
TestAsyncLeaseModel.settings = _settings
TestAsyncPriorityModel = pytest.mark.timeout(300)(AsyncPriorityModel.TestCase)
TestAsyncPriorityModel.settings = _settings
