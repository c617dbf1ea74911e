"""Pytest plugins running the cloud-store emulators for a session (listed in tests/conftest.py).

The process plumbing (ports, process groups, readiness, logs, stopping) is
:mod:`tools.emulators`, which the benchmarks share; the plugins add the fixtures,
per-test namespaces and SDK clients, and the emulators' known gaps as strict xfails. This module has
the helpers every plugin uses: :func:`emulator`, :func:`store_factory` and :func:`fresh_prefix`.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from prioritylock.stores import ObjectStore
from tools import emulators

__all__ = ["emulator", "store_factory", "fresh_prefix"]

StoreFactory = Callable[[], ObjectStore]


@contextlib.contextmanager
def emulator(name: str, work: Path) -> Iterator[emulators.Emulator]:
    """The emulator ``name`` running for the ``with`` block, its logs and data in ``work``.

    A test that needs it fails (without a traceback into the plumbing) if it is not installed or
    does not start; the message says what to install, or holds the server's log tail.
    """
    with contextlib.ExitStack() as stack:
        try:
            started = stack.enter_context(emulators.running([name], work))
        except emulators.EmulatorError as exc:
            pytest.fail(str(exc), pytrace=False)
        yield started[name]


def store_factory(
    open_store: StoreFactory, cleanup: Callable[[], None] = lambda: None
) -> Iterator[StoreFactory]:
    """For a fixture to ``yield from``: ``open_store``, closing every store it opened at the end,
    then calling ``cleanup`` (e.g. to remove the test's bucket)."""
    opened: list[ObjectStore] = []

    def open_new() -> ObjectStore:
        store = open_store()
        opened.append(store)
        return store

    try:
        yield open_new
    finally:
        for store in opened:
            store.close()
        cleanup()


def fresh_prefix(prefix: str) -> str:
    """``prefix`` under a new random folder: one test's empty namespace in a bucket or container
    that the session's tests share.

    A bucket per test cost more than most tests it served (creating, first write and removal:
    0.1-0.5 s each on moto and SeaweedFS, which grows a new volume for a new bucket); a store sees
    only the keys under its prefix, so a fresh prefix is as empty as a fresh bucket.
    """
    return f"t-{uuid.uuid4().hex[:16]}/{prefix}"
