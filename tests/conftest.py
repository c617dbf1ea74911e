"""Fixtures shared by the whole suite: one parametrized store fixture over every store.

``store_factory`` makes a fresh, empty namespace (a bucket, container, directory, Redis key
prefix or znode) for one test and returns a callable that opens a *new client* on it each time it is
called, so tests can give each thread or client its own SDK connection. ``store`` is one client
from that factory.

Cloud stores come from plugin modules in ``tests/_servers`` which start their server once per
session on 127.0.0.1 and stop it at the end. ``PRIORITYLOCK_STORES`` (comma-separated kinds)
narrows the run, e.g. ``PRIORITYLOCK_STORES=memory,local pytest``.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from prioritylock.stores import LocalStore, MemoryStore, ObjectStore

StoreFactory = Callable[[], ObjectStore]

LOCAL_KINDS = ["memory", "local"]
CLOUD_KINDS = ["s3-moto", "s3-seaweedfs", "gcs", "azure", "redis", "zookeeper", "etcd"]
ALL_KINDS = LOCAL_KINDS + CLOUD_KINDS

pytest_plugins = [
    "tests._servers.s3",
    "tests._servers.gcs",
    "tests._servers.azure",
    "tests._servers.redis",
    "tests._servers.zookeeper",
    "tests._servers.etcd",
]


def selected_kinds(candidates: list[str]) -> list[str]:
    wanted = os.environ.get("PRIORITYLOCK_STORES", "").strip()
    if not wanted:
        return candidates
    chosen = {k.strip() for k in wanted.split(",") if k.strip()}
    return [k for k in candidates if k in chosen]


@pytest.fixture
def memory_store_factory() -> StoreFactory:
    shared = MemoryStore(f"test-{uuid.uuid4().hex}")
    return lambda: shared


@pytest.fixture
def local_store_factory(tmp_path: Path) -> StoreFactory:
    directory = tmp_path / "store"
    return lambda: LocalStore(directory)


@pytest.fixture(params=selected_kinds(ALL_KINDS))
def store_kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(params=selected_kinds(LOCAL_KINDS))
def local_store_kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def store_factory(request: pytest.FixtureRequest, store_kind: str) -> StoreFactory:
    factory: StoreFactory = request.getfixturevalue(f"{store_kind.replace('-', '_')}_store_factory")
    return factory


@pytest.fixture
def store(store_factory: StoreFactory) -> Iterator[ObjectStore]:
    opened = store_factory()
    yield opened
    opened.close()


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Shows, after the run, the figures tests report (``record_property("figure", text)``),
    such as the container image's size: from every xdist worker too."""
    figures = [
        value
        for reports in terminalreporter.stats.values()
        for report in reports
        if getattr(report, "when", None) == "call"
        for name, value in getattr(report, "user_properties", ())
        if name == "figure"
    ]
    if figures:
        terminalreporter.section("figures")
        for figure in figures:
            terminalreporter.write_line(str(figure))
