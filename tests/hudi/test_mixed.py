"""Java-style writers (tests/_helpers/hudi_participant.py, other processes) and HudiTableLock (and
its asyncio twin) on one table's lock, on a real emulator, directly and through the fault proxy.

moto runs in every run; fake-gcs-server and Azurite on demand:
``PRIORITYLOCK_HUDI_EMULATORS=all pytest tests/hudi/test_mixed.py``.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from prioritylock import LockTimeout, NotLockOwner, StoreUnavailable
from prioritylock._hudi_lock import KEY, force_unlock, read_info
from prioritylock.stores import ObjectStore
from tests._helpers.fault_proxy import FaultPlan, FaultProxy
from tests.conftest import selected_kinds
from tests.hudi.drivers import HudiFace, hudi_lock

pytestmark = pytest.mark.timeout(90)

ROOT = Path(__file__).resolve().parents[2]
TABLE = "warehouse/orders/"  # the table's base path in the bucket
KINDS = (
    ["s3-moto", "gcs", "azure"]
    if os.environ.get("PRIORITYLOCK_HUDI_EMULATORS") == "all"
    else ["s3-moto"]
)


@dataclass
class Table:
    """One Hudi table on an emulator: our stores on it, and the participant's settings."""

    kind: str
    upstream: str
    open_store: Callable[[str | None], ObjectStore]  # endpoint (None: direct) -> store
    participant: Callable[[str | None], dict[str, Any]]  # endpoint -> participant settings


def _hostport(url: str) -> str:
    return url.split("://", 1)[1].split("/", 1)[0]


@pytest.fixture(params=selected_kinds(KINDS))
def table(request: pytest.FixtureRequest) -> Iterator[Table]:
    kind = str(request.param)
    if kind == "s3-moto":
        server = request.getfixturevalue("moto_server")
        bucket = server.create_bucket()

        def s3(url: str | None) -> ObjectStore:
            extra = {} if url is None else {"endpoint_url": url, "read_timeout": 1.0}
            return server.store(bucket, TABLE, **extra)  # type: ignore[no-any-return]

        yield Table(
            kind,
            _hostport(server.endpoint_url),
            s3,
            lambda url: {
                "backend": "s3",
                "endpoint": url or server.endpoint_url,
                "bucket": bucket,
                "key": TABLE + KEY,
                "access_key": server.access_key_id,
                "secret_key": server.secret_access_key,
                "timeout": 1.0,
            },
        )
        server.remove_bucket(bucket)
    elif kind == "gcs":
        server = request.getfixturevalue("fake_gcs_server")
        bucket = server.create_bucket()
        yield Table(
            kind,
            _hostport(server.url),
            lambda url: server.store(bucket, TABLE, **({} if url is None else {"endpoint": url})),
            lambda url: {
                "backend": "gcs",
                "endpoint": url or server.url,
                "bucket": bucket,
                "key": TABLE + KEY,
            },
        )
    else:
        from azure.core.credentials import AzureNamedKeyCredential

        from tests._servers.azure import ACCOUNT, ACCOUNT_KEY

        server = request.getfixturevalue("azurite_server")
        container = server.create_container()
        path = server.account_url.split("://", 1)[1].partition("/")[2]

        def az(url: str | None) -> ObjectStore:
            if url is None:
                return server.store(container, TABLE)  # type: ignore[no-any-return]
            return server.store(  # type: ignore[no-any-return]
                container,
                TABLE,
                account_url=f"{url}/{path}",
                credential=AzureNamedKeyCredential(ACCOUNT, ACCOUNT_KEY),
            )

        yield Table(
            kind,
            _hostport(server.account_url),
            az,
            lambda url: {
                "backend": "azure",
                "endpoint": f"{url}/{path}" if url else server.account_url,
                "bucket": container,
                "key": TABLE + KEY,
                "account": ACCOUNT,
                "account_key": ACCOUNT_KEY,
            },
        )
        server.remove_container(container)


def participant(settings: dict[str, Any]) -> subprocess.Popen[str]:
    """A participant process, returned once it is ready (its SDK imported, its client made)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests._helpers.hudi_participant", json.dumps(settings)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    assert json.loads(proc.stdout.readline() or "{}").get("event") == "ready"
    return proc


def events(proc: subprocess.Popen[str], timeout: float = 30) -> list[dict[str, Any]]:
    out, _ = proc.communicate(timeout=timeout)
    assert proc.returncode == 0
    return [json.loads(line) for line in out.splitlines() if line.strip()]


def our_lock(
    driver: str, store: ObjectStore, *, lease: float = 3.0, renew: float = 0.3
) -> HudiFace:
    return hudi_lock(
        driver,
        store,
        lease_timeout=lease,
        renew_interval=renew,
        poll_interval=0.05,
        store_timeout=2.0,
    )


def _contend(lock: HudiFace, until: float, holds: list[tuple[float, float, str]]) -> None:
    while time.time() < until:
        try:
            lock.lock(timeout=max(0.05, until - time.time()))
        except (LockTimeout, StoreUnavailable):
            continue
        start = time.time()
        time.sleep(0.05)  # the work under the lock
        end = time.time()
        if lock.is_current_owner():
            holds.append((start, end, lock.owner_id))
        with contextlib.suppress(NotLockOwner, StoreUnavailable):
            lock.unlock()
        time.sleep(0.05)  # as the Java-style writers do between attempts: no starving them


@pytest.mark.parametrize("faults", [False, True], ids=["direct", "fault-proxy"])
def test_never_two_holders(driver: str, table: Table, faults: bool) -> None:
    seconds = 4.0
    with FaultProxy(
        table.upstream,
        seed=2424,
        plan=FaultPlan(drop=0.03, reset=0.03, delay=0.05) if faults else FaultPlan(),
    ) as proxy:
        javas = [
            participant(
                {
                    **table.participant(proxy.route(f"java-{i}")),
                    "mode": "contend",
                    "validity": 3.0,
                    "renew": 0.3,
                    "retry": 0.05,
                    "hold": 0.05,
                    "seconds": seconds,
                }
            )
            for i in range(2)
        ]
        until = time.time() + seconds
        holds: list[tuple[float, float, str]] = []
        threads = [
            threading.Thread(
                target=_contend,
                args=(our_lock(driver, table.open_store(proxy.route(f"py-{i}"))), until, holds),
            )
            for i in range(2)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        if not holds:  # every try lost to the Java writers' 50 ms retries (a loaded machine)
            late = our_lock(driver, table.open_store(proxy.route("py-late")))
            late_until = time.time() + 6.0
            while not holds and time.time() < late_until:
                _contend(late, min(late_until, time.time() + 0.5), holds)
        java_holds = [
            (e["start"], e["end"], e["owner"])
            for p in javas
            for e in events(p)
            if e["event"] == "held"
        ]
    assert holds, "no prioritylock client ever held the lock"
    assert java_holds, "no Java-style writer ever held the lock"
    every = sorted(holds + java_holds)
    for (_, end, who), (start, _, next_who) in itertools.pairwise(every):
        assert end <= start, f"{who} and {next_who} held the lock at once"


def test_a_dead_java_holder_is_taken_over_after_valid_until_plus_drift(
    driver: str, table: Table
) -> None:
    lock = our_lock(driver, table.open_store(None))
    assert lock.info() is None  # the store's client is ready before the Java writer starts
    crashed = events(
        participant({**table.participant(None), "mode": "crash", "validity": 3.0, "renew": 0.3})
    )
    valid_until = crashed[0]["validUntil"]
    assert not lock.try_lock()
    lock.lock(timeout=10)
    taken_ms = time.time() * 1000
    assert taken_ms > valid_until + 500
    assert taken_ms < valid_until + 500 + 2500  # within a poll and a few requests, under load
    lock.unlock()


def test_a_dangling_lock_is_recovered_by_the_guarded_force_unlock(
    driver: str, table: Table
) -> None:
    crashed = events(
        participant({**table.participant(None), "mode": "crash", "validity": 600.0, "renew": 60.0})
    )
    store = table.open_store(None)
    lock = our_lock(driver, store)
    assert not lock.try_lock()
    seen = read_info(store)
    assert seen is not None and not seen.free and seen.owner == crashed[0]["owner"]
    force_unlock(store, if_owner=seen.owner, if_valid_until_ms=seen.valid_until_ms)
    assert lock.try_lock()
    lock.unlock()


def test_our_holder_is_never_seen_free_by_a_java_reader(driver: str, table: Table) -> None:
    lock = our_lock(driver, table.open_store(None), lease=2.0, renew=0.2)
    reader = participant(
        {**table.participant(None), "mode": "watch", "retry": 0.02, "seconds": 4.0}
    )
    assert lock.try_lock()
    held_from = time.time() * 1000
    time.sleep(3.0)  # twice the lease: only renewals keep it
    assert lock.is_current_owner()
    held_to = time.time() * 1000
    lock.unlock()
    every = events(reader)
    reads = [r for r in every if r["event"] == "read"]
    # Reads wholly inside the holding (one that started before the acquire may see the past).
    during = [r for r in reads if held_from < r["start"] and r["at"] < held_to]
    assert len(during) > 20, [r for r in every if r["event"] != "read"][:3]
    seen_free = [r for r in during if r["free"]]
    assert not seen_free, f"a Java reader saw our lock free while we held it: {seen_free[:3]}"
    assert any(r["free"] for r in reads if r["at"] > held_to + 100)  # and it sees the release
