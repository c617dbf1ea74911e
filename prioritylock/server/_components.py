"""Dapr component files: ``--components DIR`` reads the lock stores a Dapr user already has.

A lock store is a ``kind: Component`` whose ``spec.type`` is ``lock.prioritylock``; its
``metadata.name`` is the store name the apps use, and ``spec.metadata`` gives ``url`` (the
store URL) and optionally ``keyPrefix`` (Dapr's: ``appid`` by default, ``name`` for the store
name, ``none``, or any other text used as it is). A Dapr ``lock.redis`` component is served as
it is, through the Redis store: its metadata becomes a ``redis://`` URL (:func:`_redis_url`).
Components of other types are Dapr's business and are skipped.
"""

from __future__ import annotations

import re
import urllib.parse
from pathlib import Path
from typing import Any

import attrs

from prioritylock._errors import ConfigError

__all__ = ["COMPONENT_TYPE", "REDIS_TYPE", "StoreSpec", "read_components"]

COMPONENT_TYPE = "lock.prioritylock"
REDIS_TYPE = "lock.redis"


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
            + f"; a lock store for prioritylock is a Component of type {COMPONENT_TYPE!r}"
            + f" (or Dapr's {REDIS_TYPE!r})",
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
    return _type(doc) in (COMPONENT_TYPE, REDIS_TYPE)


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
    url = _redis_url(values, where) if doc["spec"]["type"] == REDIS_TYPE else values.get("url")
    if not url:
        raise ConfigError(f"{where}: needs a 'url' in spec.metadata", option="components")
    prefix = values.get("keyPrefix", "appid")
    key_prefix = {"appid": app_id, "name": name, "none": None}.get(prefix, prefix)
    return StoreSpec(url=url, key_prefix=key_prefix)


# -- Dapr's lock.redis -------------------------------------------------------------------------

#: Dapr's lock.redis metadata that tunes its Go client's retries, pool and pub/sub: the Redis
#: store has its own (no client retries; the lock retries and reads back), so these are ignored.
_REDIS_IGNORED = frozenset(
    {
        "maxRetries",
        "maxRetryBackoff",
        "redisMaxRetries",
        "redisMinRetryInterval",
        "redisMaxRetryInterval",
        "writeTimeout",
        "poolSize",
        "poolTimeout",
        "maxConnAge",
        "minIdleConns",
        "idleCheckFrequency",
        "idleTimeout",
        "redeliverInterval",
        "processingTimeout",
    }
)
#: What the Redis store takes from a lock.redis component (``keyPrefix`` is every lock store's).
_REDIS_USED = frozenset(
    {"redisHost", "redisPassword", "redisUsername", "redisDB", "enableTLS", "redisType"}
    | {"dialTimeout", "readTimeout", "keyPrefix", "failover", "useEntraID"}
)
_GO_DURATION = re.compile(r"^(\d+(?:\.\d+)?)(ns|us|µs|ms|s|m|h)?$")
_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def _redis_url(values: dict[str, str], where: str) -> str:
    """The ``redis://`` URL for a Dapr ``lock.redis`` component's metadata.

    ``redisHost`` (``HOST:PORT``), ``redisUsername``, ``redisPassword`` (empty: no ``AUTH``, as
    in Dapr), ``redisDB``, ``enableTLS`` (``rediss://``), ``dialTimeout`` and ``readTimeout``
    (Go durations, ``5s``) carry over; the client-tuning options are ignored.

    :raises ConfigError: no ``redisHost``, or metadata the Redis store can't honour (Sentinel
        failover, a cluster, Entra ID, client certificates, or a name it does not know), named.
    """

    def refuse(problem: str) -> ConfigError:
        return ConfigError(f"{where} ({REDIS_TYPE}): {problem}", option="components")

    unknown = sorted(set(values) - _REDIS_USED - _REDIS_IGNORED)
    if unknown:
        raise refuse(
            f"metadata {', '.join(unknown)} not supported by prioritylock's Redis store (it takes"
            f" {', '.join(sorted(_REDIS_USED))}; it ignores {', '.join(sorted(_REDIS_IGNORED))})"
        )
    for name, wanted in (("failover", "false"), ("useEntraID", "false"), ("redisType", "node")):
        if values.get(name, wanted).strip().lower() != wanted:
            raise refuse(
                f"{name}: {values[name]!r} is not supported (only a single node: {wanted})"
            )
    host = values.get("redisHost", "").strip()
    if not host:
        raise refuse("needs redisHost (HOST:PORT)")
    if "," in host or "/" in host or "@" in host:
        raise refuse("redisHost must be one HOST:PORT (clusters and Sentinel are not supported)")
    scheme = "rediss" if values.get("enableTLS", "false").strip().lower() == "true" else "redis"
    user = urllib.parse.quote(values.get("redisUsername", ""), safe="")
    password = urllib.parse.quote(values.get("redisPassword", ""), safe="")
    credentials = f"{user}:{password}@" if password else (f"{user}@" if user else "")
    db = values.get("redisDB", "0").strip() or "0"
    if not db.isdigit():
        raise refuse(f"redisDB must be a database number, got {db!r}")
    query = {}
    for name, option in (("dialTimeout", "connect_timeout"), ("readTimeout", "read_timeout")):
        if values.get(name):
            query[option] = str(_seconds(values[name], name, refuse))
    suffix = f"?{urllib.parse.urlencode(query)}" if query else ""
    return f"{scheme}://{credentials}{host}/{db}{suffix}"


def _seconds(text: str, name: str, refuse: Any) -> float:
    """A Go duration (``5s``, ``500ms``; a bare number is seconds) in seconds."""
    found = _GO_DURATION.match(text.strip())
    if not found or float(found.group(1)) <= 0:
        raise refuse(f"{name} must be a positive duration such as 5s or 500ms, got {text!r}")
    return float(found.group(1)) * _UNITS[found.group(2) or "s"]
