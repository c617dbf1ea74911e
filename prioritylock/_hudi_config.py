"""Apache Hudi's lock keys, as ``LockBuilder.from_properties`` reads them.

The shipped keys are those of Hudi's ``StorageBasedLockConfig`` (``hoodie.write.lock.storage.*``,
Hudi 1.0.2 and later) and ``AzureStorageLockConfig`` (``hoodie.write.lock.azure.*``, Hudi 1.2.0).
The RFC-91 draft names (``hoodie.write.lock.conditional_write.*``) are read as deprecated aliases.
Hudi's own checks are applied, each as a :class:`~prioritylock.ConfigError` naming the key.
"""

from __future__ import annotations

import urllib.parse
import warnings
from collections.abc import Mapping
from typing import Final

import attrs

from prioritylock._errors import ConfigError
from prioritylock._hudi import LOCKS_FOLDER
from prioritylock.stores._base import ObjectStore
from prioritylock.stores._url import open_store

__all__ = [
    "BASE_PATH",
    "PROVIDER",
    "STORAGE_PROVIDER",
    "HudiSettings",
    "open_base_store",
    "read_hudi",
    "store_url",
]

BASE_PATH: Final = "hoodie.base.path"
PROVIDER: Final = "hoodie.write.lock.provider"
STORAGE_PROVIDER: Final = "org.apache.hudi.client.transaction.lock.StorageBasedLockProvider"

_LOCK: Final = "hoodie.write.lock."
VALIDITY: Final = _LOCK + "storage.validity.timeout.secs"
RENEW: Final = _LOCK + "storage.renew.interval.secs"
HEARTBEAT_POLL: Final = _LOCK + "storage.heartbeat.poll.secs"  # Hudi's deprecated alias of RENEW
DEFAULT_VALIDITY: Final = 300
DEFAULT_RENEW: Final = 30

_DRAFT: Final = _LOCK + "conditional_write."
DRAFT_LOCATION: Final = _DRAFT + "locks_location"
DRAFT_VALIDITY_MS: Final = _DRAFT + "lock_validity_timeout_ms"
DRAFT_POLL_MS: Final = _DRAFT + "heartbeat_poll_ms"

_AZURE: Final = _LOCK + "azure."
AZURE_KEYS: Final = tuple(
    _AZURE + name
    for name in (
        "connection.string",
        "sas.token",
        "managed.identity.client.id",
        "client.tenant.id",
        "client.id",
        "client.secret",
    )
)

# Hudi's other lock keys: its lock manager's retries and the other providers' settings. Known, so
# a writer's configuration passes without a warning; none of them changes this lock.
_OTHER_KNOWN: Final = frozenset(
    _LOCK + name
    for name in (
        "wait_time_ms",
        "wait_time_ms_between_retry",
        "max_wait_time_ms_between_retry",
        "num_retries",
        "client.num_retries",
        "client.wait_time_ms_between_retry",
        "heartbeat_interval_ms",
        "conflict.resolution.strategy",
    )
)
_OTHER_PROVIDER_PREFIXES: Final = tuple(
    _LOCK + name + "."
    for name in ("zookeeper", "dynamodb", "filesystem", "hivemetastore", "storage.audit")
)


@attrs.frozen
class HudiSettings:
    """What a writer configuration says about its table's lock."""

    base_path: str
    #: The configuration names Hudi's storage lock provider: lock Hudi's own object.
    storage_provider: bool
    validity: float
    renew_interval: float
    #: The draft's ``locks_location`` (prioritylock's own lease only), or None.
    location: str | None = None
    azure: Mapping[str, str] = attrs.field(factory=dict)


def read_hudi(properties: Mapping[str, object]) -> HudiSettings | None:
    """The Hudi lock settings in ``properties``; None when there are no Hudi lock keys.

    Warns (:class:`DeprecationWarning`) of the draft names and of Hudi's deprecated alias, and
    (:class:`UserWarning`) of a ``hoodie.write.lock.*`` key it does not know.

    :raises ConfigError: no ``hoodie.base.path``, a value that is not a whole number of seconds,
        Hudi's own limits broken (validity at least 10 s and 10 x the renew interval, renew
        interval at least 1 s), or another lock provider named; the message names the key.
    """
    lock_keys = [k for k in properties if isinstance(k, str) and k.startswith(_LOCK)]
    if not lock_keys and BASE_PATH not in properties:
        return None
    base = properties.get(BASE_PATH)
    if not isinstance(base, str) or not base.strip():
        raise ConfigError(
            f"{BASE_PATH}: required with Hudi's lock keys (the table path)", option=BASE_PATH
        )
    for key in sorted(lock_keys):
        if key.startswith(_DRAFT):
            if key not in (DRAFT_LOCATION, DRAFT_VALIDITY_MS, DRAFT_POLL_MS):
                _unknown(key)
        elif not _known(key):
            _unknown(key)

    provider = properties.get(PROVIDER)
    storage = False
    if provider is not None:
        name = str(provider).strip()
        if name == STORAGE_PROVIDER:
            storage = True
        else:
            raise ConfigError(
                f"{PROVIDER}: {name} keeps its lock where prioritylock can't take it; only"
                f" {STORAGE_PROVIDER} (Hudi's storage lock on the table's own bucket) can be"
                " shared with Java writers. Drop the key to lock among Python writers only.",
                option=PROVIDER,
            )

    validity: float | None = _seconds(properties, VALIDITY)
    renew: float | None = _seconds(properties, RENEW)
    alias = _seconds(properties, HEARTBEAT_POLL)
    if alias is not None:
        _deprecated(HEARTBEAT_POLL, RENEW)
        if renew is None:
            renew = alias
    draft_validity = _millis(properties, DRAFT_VALIDITY_MS)
    if draft_validity is not None:
        _deprecated(DRAFT_VALIDITY_MS, VALIDITY)
        if validity is None:
            validity = draft_validity
    draft_poll = _millis(properties, DRAFT_POLL_MS)
    if draft_poll is not None:
        _deprecated(DRAFT_POLL_MS, RENEW)
        if renew is None:
            renew = draft_poll
    location = properties.get(DRAFT_LOCATION)
    if location is not None:
        _deprecated(DRAFT_LOCATION, f"{BASE_PATH} (Hudi keeps the lock under the table)")
        if not isinstance(location, str):
            raise ConfigError(f"{DRAFT_LOCATION}: must be a string", option=DRAFT_LOCATION)
        if storage:
            raise ConfigError(
                f"{DRAFT_LOCATION}: Hudi's storage lock provider always keeps the lock at"
                f" <{BASE_PATH}>/{LOCKS_FOLDER}; a lock elsewhere would not exclude Java writers",
                option=DRAFT_LOCATION,
            )
        location = location or None

    validity = DEFAULT_VALIDITY if validity is None else validity
    renew = DEFAULT_RENEW if renew is None else renew
    # Hudi's StorageBasedLockConfig.Builder.checkRequiredProps, in its order.
    if validity < 10 * renew:
        raise ConfigError(
            f"{VALIDITY}: {validity:g} s must be at least 10 x {RENEW} ({renew:g} s)",
            option=VALIDITY,
        )
    if validity < 10:
        raise ConfigError(f"{VALIDITY}: must be at least 10 s, got {validity:g}", option=VALIDITY)
    if renew < 1:
        raise ConfigError(f"{RENEW}: must be at least 1 s, got {renew:g}", option=RENEW)
    azure = {k: str(properties[k]) for k in AZURE_KEYS if properties.get(k) not in (None, "")}
    return HudiSettings(
        base_path=_trim(base),
        storage_provider=storage,
        validity=float(validity),
        renew_interval=float(renew),
        location=location,
        azure=azure,
    )


def store_url(path: str, option: str = BASE_PATH) -> str:
    """A Hudi storage path as a prioritylock store URL.

    ``s3a://``/``s3n://`` become ``s3://``, ``gcs://`` becomes ``gs://``, Azure's
    ``abfs[s]://CONTAINER@ACCOUNT.dfs.core.windows.net/PATH`` and
    ``wasb[s]://CONTAINER@ACCOUNT.blob.core.windows.net/PATH`` become
    ``az://CONTAINER/PATH?account=ACCOUNT``, and an absolute path becomes ``file://``.

    :raises ConfigError: neither an absolute path nor a URL; an Azure URL without its account.
    """
    scheme, sep, rest = path.partition("://")
    if not sep:
        if not path.startswith("/"):
            raise ConfigError(f"{option}: not an absolute path or a URL", option=option)
        return "file://" + path
    scheme = scheme.lower()
    if scheme in ("abfs", "abfss", "wasb", "wasbs"):
        parts = urllib.parse.urlsplit(path)
        container, at, host = parts.netloc.partition("@")
        account = host.split(".", 1)[0]
        if not at or not container or not account:
            raise ConfigError(
                f"{option}: an Azure path is {scheme}://CONTAINER@ACCOUNT.<endpoint>/PATH",
                option=option,
            )
        tail = parts.path.strip("/")
        return f"az://{container}/{tail}?account={account}" if tail else f"az://{container}"
    return {"s3a": "s3", "s3n": "s3", "gcs": "gs"}.get(scheme, scheme) + "://" + rest


def _trim(base: str) -> str:
    """The base path as Hudi's ``getLockFolderPath`` normalises it: no trailing slashes."""
    base = base.strip()
    trimmed = base.rstrip("/")
    return trimmed or base


def _known(key: str) -> bool:
    return (
        key in (PROVIDER, VALIDITY, RENEW, HEARTBEAT_POLL)
        or key in AZURE_KEYS
        or key in _OTHER_KNOWN
        or key.startswith(_OTHER_PROVIDER_PREFIXES)
    )


def _unknown(key: str) -> None:
    warnings.warn(
        f"{key}: not a Hudi lock key prioritylock knows; ignored (a misspelling?)",
        UserWarning,
        stacklevel=4,
    )


def _deprecated(key: str, instead: str) -> None:
    warnings.warn(
        f"{key}: a draft name from Hudi's RFC-91 (or a deprecated alias); use {instead}",
        DeprecationWarning,
        stacklevel=4,
    )


def _whole(properties: Mapping[str, object], key: str) -> int | None:
    """A Hudi long: a whole number, from a string (a properties file) or an int."""
    value = properties.get(key)
    if value is None or value == "":
        return None
    if isinstance(value, bool):
        raise ConfigError(f"{key}: must be a whole number, got {value!r}", option=key)
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    try:
        return int(str(value).strip())
    except ValueError:
        raise ConfigError(f"{key}: must be a whole number, got {value!r}", option=key) from None


def _seconds(properties: Mapping[str, object], key: str) -> int | None:
    return _whole(properties, key)


def _millis(properties: Mapping[str, object], key: str) -> float | None:
    value = _whole(properties, key)
    return None if value is None else value / 1000


def open_base_store(settings: HudiSettings) -> ObjectStore:
    """A store rooted at the table's base path (Hudi's lock is its ``.hoodie/.locks/...`` key).

    Endpoint, region and credentials come from where the stores read them (the AWS, Google and
    Azure SDKs' environment and profiles); on Azure, the ``hoodie.write.lock.azure.*`` keys, when
    given, take precedence in Hudi's order: connection string, SAS token, managed identity,
    service principal.

    :raises ConfigError: the path can't be a store, or the Azure keys are incomplete.
    """
    url = store_url(settings.base_path)
    if settings.azure and url.startswith("az://"):
        return _azure_store(url, settings.azure)
    return open_store(url)


def _azure_store(url: str, keys: Mapping[str, str]) -> ObjectStore:
    from prioritylock.stores._azure import AzureBlobStore  # optional SDK: imported when needed

    parts = urllib.parse.urlsplit(url)
    container, prefix = parts.netloc, parts.path.strip("/")
    account = urllib.parse.parse_qs(parts.query).get("account", [""])[0]
    account_url = f"https://{account}.blob.core.windows.net"
    connection = keys.get(_AZURE + "connection.string")
    if connection:
        return AzureBlobStore(container, prefix, connection_string=connection)
    sas = keys.get(_AZURE + "sas.token")
    if sas:
        from azure.core.credentials import AzureSasCredential

        return AzureBlobStore(
            container,
            prefix,
            account_url=account_url,
            credential=AzureSasCredential(sas.lstrip("?")),
        )
    try:
        from azure import identity  # type: ignore[attr-defined,unused-ignore]
    except ImportError as exc:
        raise ConfigError(
            f"{_AZURE}*: managed identity and service principal need azure-identity"
            " (pip install azure-identity)",
            option=_AZURE + "client.id",
        ) from exc
    managed = keys.get(_AZURE + "managed.identity.client.id")
    if managed:
        token: object = identity.ManagedIdentityCredential(client_id=managed)
    else:
        principal = [
            keys.get(_AZURE + n) for n in ("client.tenant.id", "client.id", "client.secret")
        ]
        if not all(principal):
            raise ConfigError(
                f"{_AZURE}client.id: a service principal needs client.tenant.id, client.id and"
                " client.secret together",
                option=_AZURE + "client.id",
            )
        tenant, client, secret = (str(p) for p in principal)
        token = identity.ClientSecretCredential(tenant, client, secret)
    return AzureBlobStore(container, prefix, account_url=account_url, credential=token)  # type: ignore[arg-type]
