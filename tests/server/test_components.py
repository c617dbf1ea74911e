"""``--components DIR``: the lock stores of Dapr component files, with Dapr's keyPrefix."""

from __future__ import annotations

from pathlib import Path

import pytest

from prioritylock._errors import ConfigError
from prioritylock.server._components import StoreSpec, read_components
from tests.server.helpers import Service

pytestmark = pytest.mark.timeout(60)

COMPONENT = """\
apiVersion: dapr.io/v1alpha1
kind: Component
metadata:
  name: {name}
spec:
  type: lock.prioritylock
  version: v1
  metadata:
  - name: url
    value: "{url}"
{extra}"""

REDIS = """\
apiVersion: dapr.io/v1alpha1
kind: Component
metadata:
  name: statestore
spec:
  type: state.redis
  version: v1
  metadata:
  - name: redisHost
    value: localhost:6379
"""


def _write(directory: Path, name: str, text: str) -> None:
    directory.mkdir(exist_ok=True)
    (directory / name).write_text(text, encoding="utf-8")


def test_read_components_and_key_prefixes(tmp_path: Path) -> None:
    comp = tmp_path / "components"
    _write(comp, "a.yaml", COMPONENT.format(name="locka", url="memory://a", extra=""))
    _write(comp, "state.yaml", REDIS)
    for n, value in enumerate(["name", "none", "shared"]):
        extra = f"  - name: keyPrefix\n    value: {value}\n"
        _write(comp, f"b{n}.yml", COMPONENT.format(name=f"lock{n}", url="memory://b", extra=extra))
    found = read_components(comp, "orders")
    assert found["locka"] == StoreSpec(url="memory://a", key_prefix="orders")
    assert [found[f"lock{n}"].key_prefix for n in range(3)] == ["lock0", None, "shared"]
    assert "statestore" not in found


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        (COMPONENT.format(name="x", url="", extra=""), "needs a 'url'"),
        (
            COMPONENT.format(
                name="x", url="memory://x", extra="  - name: key\n    secretKeyRef: {}\n"
            ),
            "secretKeyRef is not supported",
        ),
        ("kind: [", "not readable YAML"),
    ],
)
def test_bad_components(tmp_path: Path, text: str, problem: str) -> None:
    _write(tmp_path / "c", "x.yaml", text)
    with pytest.raises(ConfigError, match=problem):
        read_components(tmp_path / "c", "app")


def test_service_from_components(tmp_path: Path) -> None:
    comp = tmp_path / "components"
    store = (tmp_path / "store").as_uri()
    _write(comp, "lock.yaml", COMPONENT.format(name="lockstore", url=store, extra=""))
    extra = "  - name: keyPrefix\n    value: none\n"
    _write(comp, "plain.yaml", COMPONENT.format(name="plain", url=store, extra=extra))
    service = Service({}, components=comp, app_id="orders")
    try:
        assert service.lock("lockstore", "job", "o1") is True
        assert service.lock("plain", "job", "o2") is True  # no prefix: another key
        assert service.lock("plain", "orders/job", "o2") is False  # the same key as lockstore's
    finally:
        assert service.stop()[0] == 0
