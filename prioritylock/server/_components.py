"""Dapr component files: ``--components DIR`` reads the lock stores a Dapr user already has.

A lock store is a ``kind: Component`` whose ``spec.type`` is ``lock.prioritylock``; its
``metadata.name`` is the store name the apps use, and ``spec.metadata`` gives ``url`` (the
store URL) and optionally ``keyPrefix`` (Dapr's: ``appid`` by default, ``name`` for the store
name, ``none``, or any other text used as it is). Components of other types are Dapr's
business and are skipped.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import attrs

from prioritylock._errors import ConfigError

__all__ = ["COMPONENT_TYPE", "StoreSpec", "read_components"]

COMPONENT_TYPE = "lock.prioritylock"


@attrs.frozen
class StoreSpec:
    """One lock store: its URL and its key prefix (None: no prefix)."""

    url: str = attrs.field(repr=False)
    key_prefix: str | None


def read_components(directory: Path, app_id: str) -> dict[str, StoreSpec]:
    """The lock stores declared in the ``*.yaml`` / ``*.yml`` files of ``directory``.

    :raises ConfigError: a file can't be read or parsed, a lock store lacks its ``url``, uses
        a secret reference, or its name is given twice; or ``directory`` holds no lock store
        (the message names the component types it does hold).
    """
    import yaml

    if not directory.is_dir():
        raise ConfigError(f"--components: {directory} is not a directory", option="components")
    found: dict[str, StoreSpec] = {}
    others: dict[str, str] = {}  # type -> the first file declaring it
    files = sorted([*directory.glob("*.yaml"), *directory.glob("*.yml")])
    for path in files:
        try:
            documents = list(yaml.safe_load_all(path.read_text(encoding="utf-8")))
        except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
            raise ConfigError(
                f"--components: {path.name}: not readable YAML ({type(exc).__name__})",
                option="components",
            ) from None
        for doc in documents:
            if not _is_lock_store(doc):
                kind = _type(doc)
                if kind is not None:
                    others.setdefault(kind, path.name)
                continue
            name = _name(doc, path)
            if name in found:
                raise ConfigError(
                    f"--components: {path.name}: lock store {name!r} is declared twice",
                    option="components",
                )
            found[name] = _spec(doc, name, path, app_id)
    if not found:
        seen = ", ".join(f"{kind} ({name})" for kind, name in sorted(others.items()))
        raise ConfigError(
            f"--components: no prioritylock component in {directory}: "
            + (f"found only {seen}" if seen else f"no Dapr component in {len(files)} YAML files")
            + f"; a lock store for prioritylock is a Component of type {COMPONENT_TYPE!r}",
            option="components",
        )
    return found


def _type(doc: Any) -> str | None:
    """The ``spec.type`` of a Dapr component document (None: not a component)."""
    if not isinstance(doc, dict) or doc.get("kind") != "Component":
        return None
    spec = doc.get("spec")
    kind = spec.get("type") if isinstance(spec, dict) else None
    return kind if isinstance(kind, str) else None


def _is_lock_store(doc: Any) -> bool:
    return _type(doc) == COMPONENT_TYPE


def _name(doc: dict[str, Any], path: Path) -> str:
    meta = doc.get("metadata")
    name = meta.get("name") if isinstance(meta, dict) else None
    if not isinstance(name, str) or not name:
        raise ConfigError(f"--components: {path.name}: a component without metadata.name")
    return name


def _spec(doc: dict[str, Any], name: str, path: Path, app_id: str) -> StoreSpec:
    items = doc["spec"].get("metadata") or []
    values: dict[str, str] = {}
    where = f"--components: {path.name}: lock store {name!r}"
    if not isinstance(items, list):
        raise ConfigError(f"{where}: spec.metadata is not a list", option="components")
    for item in items:
        if not isinstance(item, dict) or not isinstance(item.get("name"), str):
            raise ConfigError(f"{where}: a spec.metadata item without a name", option="components")
        if "secretKeyRef" in item:
            raise ConfigError(
                f"{where}: {item['name']}: secretKeyRef is not supported; put credentials in "
                "the environment of the service (the store SDK's own variables)",
                option="components",
            )
        value = item.get("value")
        if not isinstance(value, str | int | float | bool):
            raise ConfigError(f"{where}: {item['name']} has no value", option="components")
        values[item["name"]] = str(value)
    url = values.get("url")
    if not url:
        raise ConfigError(f"{where}: needs a 'url' in spec.metadata", option="components")
    prefix = values.get("keyPrefix", "appid")
    key_prefix = {"appid": app_id, "name": name, "none": None}.get(prefix, prefix)
    return StoreSpec(url=url, key_prefix=key_prefix)
