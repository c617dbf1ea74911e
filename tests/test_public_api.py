"""The public surface: sorted __all__, everything importable, the error tree."""

from __future__ import annotations

import importlib
import subprocess
import sys

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
    "module", [prioritylock, prioritylock.stores, scopes, prioritylock.signals]
)
def test_all_is_sorted_and_importable(module: object) -> None:
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
