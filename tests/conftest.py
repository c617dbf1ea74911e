"""Fixtures shared by the whole suite: one parametrized store fixture over every store.

``store_factory`` makes a fresh, empty namespace (a bucket, container, directory, Redis key
prefix or znode) for one test and returns a callable that opens a *new client* on it each time it is
called, so tests can give each thread or client its own SDK connection. ``store`` is one client
from that factory.

Cloud stores come from plugin modules in ``tests/_servers`` which start their server once per
session on 127.0.0.1 and stop it at the end. ``PRIORITYLOCK_STORES`` (comma-separated kinds)
narrows the run, e.g. ``PRIORITYLOCK_STORES=memory,local pytest``.

How a run is ordered and cut (:func:`pytest_collection_modifyitems`): the modules of
:data:`LONG_FIRST` run first, so that pytest-xdist hands their long tests out at the start, not as
a tail after every other worker is done; ``PRIORITYLOCK_SAMPLE=COUNT:SEED`` runs a seeded sample
of COUNT of the tests collected (tests/lock/test_notices_faults.py replays the lock suites so);
``PRIORITYLOCK_SERIAL_IDS=FILE`` writes the ids of the tests marked ``serial`` to FILE, one a
line, and those of the tests marked ``load`` to FILE.load, so that scripts/test's passes of them
after the parallel one collect only their modules.
"""

from __future__ import annotations

import os
import random
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


#: Modules with tests of 10 s or more (CPU-bound searches, a docs build, the lock suites replayed,
#: benchmark runs), longest first: pytest-xdist deals the first tests out to its workers in turn.
LONG_FIRST = (
    "tests/core/test_exhaustive.py",
    "tests/test_docs.py",
    "tests/lock/test_notices_faults.py",
    "tests/test_benchmark_serve.py",
    "tests/lock/test_model.py",
    "tests/lock/test_skew.py",
    "tests/test_lease.py",
)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The serial and load tests' ids when asked; a sample (in node id order) when asked, else
    long modules first (see the module docstring). Runs before ``-m`` and ``-k`` deselect
    anything."""
    path = os.environ.get("PRIORITYLOCK_SERIAL_IDS")
    if path:
        for marker, name in (("serial", path), ("load", f"{path}.load")):
            ids = "".join(f"{i.nodeid}\n" for i in items if i.get_closest_marker(marker))
            written = Path(f"{name}.{os.getpid()}")  # every xdist worker writes the same list
            written.write_text(ids, encoding="utf-8")
            written.replace(name)
    sample = os.environ.get("PRIORITYLOCK_SAMPLE")
    if sample:
        count, seed = sample.split(":", 1)
        chosen = set(random.Random(seed).sample(range(len(items)), min(int(count), len(items))))
        config.hook.pytest_deselected(items=[t for n, t in enumerate(items) if n not in chosen])
        items[:] = sorted((t for n, t in enumerate(items) if n in chosen), key=lambda t: t.nodeid)
        return
    rank = {module: n for n, module in enumerate(LONG_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::", 1)[0], len(rank)))
