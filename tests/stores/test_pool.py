"""Cloud stores keep one connection per heartbeat worker.

The heartbeat runs up to ``DEFAULT_WORKERS`` renewals and watch reads of one process at once. A
client whose connection pool is smaller (botocore's and requests' default is 10) opens a fresh
connection for each request beyond it and discards it afterwards, logging urllib3's "Connection
pool is full" warning every time: slower renewals and a noisy log exactly when a process holds
many leases.
"""

from __future__ import annotations

import logging
import threading

import pytest

from prioritylock._scheduler import DEFAULT_WORKERS
from tests.conftest import StoreFactory


def test_as_many_concurrent_requests_as_workers_reuse_pooled_connections(
    store_factory: StoreFactory, store_kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    if store_kind in ("memory", "local"):
        pytest.skip("no connections")
    store = store_factory()
    try:
        store.create("pool/key", b"x" * 64)
        start = threading.Barrier(DEFAULT_WORKERS)
        errors: list[BaseException] = []

        def reader() -> None:
            try:
                start.wait(timeout=30)
                for _ in range(3):
                    assert store.read("pool/key") is not None
            except BaseException as exc:  # reported below
                errors.append(exc)

        threads = [threading.Thread(target=reader) for _ in range(DEFAULT_WORKERS)]
        with caplog.at_level(logging.WARNING, logger="urllib3"):
            for t in threads:
                t.start()
            for t in threads:
                t.join(timeout=60)
        assert not errors, errors[0]
        full = [r for r in caplog.records if "pool is full" in r.getMessage()]
        assert not full, f"{len(full)} connections discarded: {full[0].getMessage()}"
        assert store.stats.reads == 3 * DEFAULT_WORKERS
    finally:
        store.close()
