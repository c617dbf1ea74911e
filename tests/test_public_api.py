"""The public surface: sorted __all__, everything importable, the error tree."""

from __future__ import annotations

import importlib
import inspect
import pickle
import subprocess
import sys
from typing import Any

import pytest

import prioritylock
import prioritylock.stores
import scopes
from prioritylock import (
    ConditionFailed,
    ConfigError,
    CorruptLease,
    LockHeld,
    LockLost,
    LockTimeout,
    NotLockOwner,
    PreemptionTimeout,
    PriorityLockError,
    StoreAccessError,
    StoreError,
    StoreUnavailable,
)

pytestmark = pytest.mark.timeout(60)


@pytest.mark.parametrize(
    "module", [prioritylock, prioritylock.stores, scopes, prioritylock.signals, "client"]
)
def test_all_is_sorted_and_importable(module: object) -> None:
    if module == "client":  # needs the 'client' extra
        module = importlib.import_module("prioritylock.client")
    names = module.__all__  # type: ignore[attr-defined]
    assert names == sorted(names)
    for name in names:
        assert hasattr(module, name), name


def test_error_tree() -> None:
    for error in (
        ConfigError,
        LockTimeout,
        PreemptionTimeout,
        LockHeld,
        NotLockOwner,
        LockLost,
        CorruptLease,
        ConditionFailed,
        StoreError,
        StoreUnavailable,
        StoreAccessError,
    ):
        assert issubclass(error, PriorityLockError)
    assert issubclass(ConfigError, ValueError)
    assert issubclass(LockTimeout, TimeoutError) and issubclass(PreemptionTimeout, TimeoutError)
    assert issubclass(LockLost, NotLockOwner)
    assert issubclass(StoreAccessError, PermissionError)


def test_importing_prioritylock_imports_no_cloud_sdk() -> None:
    code = (
        "import sys, prioritylock, prioritylock.stores; "
        "sdks = ('boto3', 'google.cloud.storage', 'azure.storage.blob'); "
        "bad = [m for m in sdks if m in sys.modules]; "
        "print(bad); sys.exit(1 if bad else 0)"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_py_typed_markers_ship() -> None:
    for package in ("prioritylock", "scopes"):
        spec = importlib.util.find_spec(package)
        assert spec is not None and spec.origin is not None
        assert (__import__("pathlib").Path(spec.origin).parent / "py.typed").exists()


def _public_objects() -> list[tuple[str, Any]]:
    found: list[tuple[str, Any]] = []
    for module in (prioritylock, prioritylock.stores, scopes):
        for name in module.__all__:
            obj = getattr(module, name)
            if inspect.isclass(obj) or inspect.isfunction(obj):
                found.append((module.__name__, obj))
    return found


@pytest.mark.parametrize(
    ("package", "obj"), _public_objects(), ids=lambda v: getattr(v, "__name__", str(v))
)
def test_public_names_live_at_their_public_path(package: str, obj: Any) -> None:
    """``prioritylock.ConfigError``, not ``prioritylock._errors.ConfigError``: in ``repr``, in
    tracebacks, in pickles and in the generated reference."""
    if obj.__module__.startswith("blinker"):
        return  # re-exported from a dependency, not ours to rename
    assert obj.__module__ == package
    name = obj.__qualname__
    assert getattr(importlib.import_module(package), name) is obj


def test_public_names_cover_every_kind() -> None:
    names = {obj.__name__ for _, obj in _public_objects()}
    # classes, errors, lazily loaded stores, scope classes and functions are all checked
    assert {"Lock", "ConfigError", "S3Store", "LockScope", "open_store"} <= names


def test_tracebacks_and_pickles_show_the_public_path() -> None:
    error = pickle.loads(pickle.dumps(ConfigError("bad option")))
    assert type(error) is ConfigError
    assert repr(prioritylock.Lock) == "<class 'prioritylock.Lock'>"
    code = "import prioritylock; raise prioritylock.LockTimeout('gave up')"
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.stderr.splitlines()[-1] == "prioritylock.LockTimeout: gave up"


def test_store_contract_without_pytest_says_what_to_install() -> None:
    code = (
        "import sys; sys.modules['pytest'] = None\n"
        "from prioritylock.testing.faults import FaultyStore\n"  # no pytest needed
        "from prioritylock.testing import StoreContract\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 1
    last = result.stderr.splitlines()[-1]
    assert last.startswith("ModuleNotFoundError: prioritylock.testing.StoreContract runs under")
    assert "pip install 'prioritylock[testing]'" in last
    assert result.stderr.count("Traceback") == 1, result.stderr
