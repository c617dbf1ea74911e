"""AzureBlobStore: lease documents in an Azure Blob Storage container, changed by ETag conditions.

The five seam operations map onto Blob service requests:

==========  ===========================================================  ================
operation   request                                                      version token
==========  ===========================================================  ================
read        Get Blob (the first ranged GET carries bytes and ETag)       the ``ETag``
create      Put Blob with ``If-None-Match: *`` (409 ``BlobAlreadyExists``)  the new ``ETag``
replace     Put Blob with ``If-Match: <etag>`` (412 ``ConditionNotMet``)   the new ``ETag``
delete      Delete Blob with ``If-Match: <etag>``                         --
list        List Blobs with ``prefix``, one request per page              --
==========  ===========================================================  ================

``read_if_changed`` is Get Blob with ``If-None-Match: <etag>``: an unchanged blob costs a 304
without a body (Azurite honours it too). The SDK raises the 304 as an error, typed by its error
code (``ResourceModifiedError`` for ``ConditionNotMet``), so the store goes by the status alone.

Decisions that shape this module:

- **The SDK never retries.** Every call passes ``retry_total=0`` (the SDK's default is ten
  retries): a retried conditional write whose first attempt landed comes back as a failed
  condition. Failures that may hide a landed write raise ``StoreUnavailable(outcome_unknown=True)``
  and the lock reads the document back; ``ServiceRequestError`` (the SDK's "no request was sent")
  is the one transport failure whose outcome is known.
- **Errors are translated in one place**, :meth:`AzureBlobStore._translate`, and always chained.
  Azure's error codes tell a missing container (``ContainerNotFound``) from a missing blob
  (``BlobNotFound``) on every request, so a missing container is
  :class:`~prioritylock.StoreAccessError` everywhere.
- **No secret leaves the SDK.** Account keys, SAS tokens and connection strings are handed to the
  SDK and never kept, formatted or logged here: messages name the account, the container and the
  error code, never the server's message or a URL with a query. The SDK's own request log redacts
  SAS query values, but urllib3 logs every request line at DEBUG, SAS signature included: every
  cloud store blanks those (see :func:`~prioritylock.stores._cloud.scrub_sdk_logs`).

ETags are used exactly as Azure returns them (quoted, e.g. ``"0x8DC..."``); they change on every
write, even of identical bytes. A read of an empty blob takes two requests (the SDK's ranged GET
answers 416 and it asks again without a range); both are counted.
"""

from __future__ import annotations

import enum
import os
import re
import urllib.parse
from collections.abc import Iterator
from typing import Any, TypeAlias

from prioritylock.stores._registry import missing_extra

try:
    import requests
    import requests.adapters
    from azure.core import MatchConditions
    from azure.core.credentials import (
        AzureNamedKeyCredential,
        AzureSasCredential,
        TokenCredential,
    )
    from azure.core.exceptions import (
        AzureError,
        ClientAuthenticationError,
        DecodeError,
        HttpResponseError,
        ServiceRequestError,
        ServiceResponseError,
    )
    from azure.core.pipeline.transport import RequestsTransport
    from azure.storage.blob import BlobType, ContainerClient
    from urllib3.util.retry import Retry
except ImportError as _exc:  # pragma: no cover - exercised only without the extra
    raise missing_extra("Azure stores", "azure", _exc) from None

from prioritylock._errors import (
    ConditionFailed,
    ConfigError,
    PriorityLockError,
    StoreAccessError,
    StoreError,
    StoreUnavailable,
)
from prioritylock._scheduler import DEFAULT_WORKERS
from prioritylock.stores._base import NOT_MODIFIED, ReadResult, StoreCapabilities, Versioned
from prioritylock.stores._cloud import (
    DEFAULT_CONNECT_TIMEOUT,
    DEFAULT_READ_TIMEOUT,
    WRITES,
    CloudStore,
    HttpClassifier,
    Outcome,
    parse_store_url,
    validate_endpoint,
)

__all__ = ["AzureBlobStore", "Credential", "store_from_url"]

Credential: TypeAlias = (
    str | dict[str, str] | AzureNamedKeyCredential | AzureSasCredential | TokenCredential
)
"""What the SDK accepts as a credential: account key, SAS token, named key, SAS or token object."""

CONNECTION_STRING_ENV = "AZURE_STORAGE_CONNECTION_STRING"
ACCOUNT_ENV = "AZURE_STORAGE_ACCOUNT"
KEY_ENV = "AZURE_STORAGE_KEY"
SAS_ENV = "AZURE_STORAGE_SAS_TOKEN"

# 3-63 lowercase letters, digits and single hyphens, starting and ending with a letter or digit.
_CONTAINER_RE = re.compile(r"^(?!.*--)[a-z0-9][a-z0-9-]{1,61}[a-z0-9]$")
_ACCOUNT_RE = re.compile(r"^[a-z0-9]{3,24}$")
_ETAG_RE = re.compile(r"^[\x21-\x7e]{1,256}$")  # printable ASCII, as a header value must be
_MISSING_CONTAINER_CODES = frozenset({"ContainerNotFound", "ContainerBeingDeleted"})


class AzureBlobStore(CloudStore):
    """Objects under ``prefix`` in an Azure Blob container; shared by every process and host.

    Keys are stored at ``prefix + key`` (a non-empty prefix always ends with ``/``); ``list``
    strips the prefix again. Version tokens are the quoted ETags Azure returns.

    Give one of: ``connection_string``; ``account_url`` with a ``credential`` (account key, SAS
    token, :class:`~azure.core.credentials.AzureNamedKeyCredential`,
    :class:`~azure.core.credentials.AzureSasCredential`, or a token credential such as
    ``azure.identity.DefaultAzureCredential()``); an existing ``ContainerClient`` as ``client``
    (which the store then does not close); or nothing, to use ``AZURE_STORAGE_CONNECTION_STRING``.
    Every request is sent with SDK retries off, and every request attempt counts in :attr:`stats`.

    :raises ConfigError: an invalid container name, prefix, timeout, account URL or connection
        string, or more than one way to connect (or none).
    """

    _LABEL = "Azure"
    _SCHEME = "az"
    _HOLDER = "container"
    _OBJECT = "blob name"
    _CLIENT_OPTIONS = "connection options"
    _CAPABILITIES = StoreCapabilities(
        shared_across_processes=True, shared_across_hosts=True, conditional_delete=True
    )
    _SDK_ERRORS = (AzureError,)
    _CLASSIFIER = HttpClassifier(
        condition_codes=frozenset({"BlobAlreadyExists", "ConditionNotMet", "BlobNotFound"}),
        throttle_codes=frozenset({"ServerBusy"}),
    )
    _ACCESS_HINT = (
        "check the account key, SAS token or connection string"
        f" ({KEY_ENV}, {SAS_ENV}, {CONNECTION_STRING_ENV}), that the SAS allows read, write,"
        " delete and list, and that a token identity has the Storage Blob Data Contributor role"
        " on the container"
    )

    def __init__(
        self,
        container: str,
        prefix: str = "",
        *,
        connection_string: str | None = None,
        account_url: str | None = None,
        credential: Credential | None = None,
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
        read_timeout: float = DEFAULT_READ_TIMEOUT,
        client: ContainerClient | None = None,
    ) -> None:
        if not isinstance(container, str) or not _CONTAINER_RE.match(container):
            raise ConfigError(
                "Azure container name must be 3-63 lowercase letters, digits and single hyphens,"
                f" starting and ending with a letter or digit; got {container!r}"
            )
        super().__init__(container, prefix, connect_timeout, read_timeout)
        # Sent with every request, so a client passed in by the caller never retries either.
        self._options: dict[str, Any] = {
            "retry_total": 0,
            "connection_timeout": self._timeouts[0],
            "read_timeout": self._timeouts[1],
        }
        given: dict[str, object] = {
            "connection_string": connection_string,
            "account_url": account_url,
            "credential": credential,
        }
        self._take_client(
            client,
            given,
            lambda: _make_client(
                container, connection_string, account_url, credential, self._options
            ),
        )
        if self._client.container_name != container:
            raise ConfigError(
                f"AzureBlobStore client is for container {self._client.container_name!r},"
                f" not {container!r}"
            )
        self._account = str(self._client.account_name or "")

    @property
    def container(self) -> str:
        return self._holder

    @property
    def account(self) -> str:
        """The storage account name (not a secret)."""
        return self._account

    @property
    def client(self) -> ContainerClient:
        """The ``ContainerClient`` the store sends its requests through."""
        client: ContainerClient = self._client
        return client

    # -- requests ------------------------------------------------------------------------------

    def _fetch(self, key: str, name: str, known: str | None) -> ReadResult:
        """One Get Blob (two for an empty blob, see the module notes)."""
        blob = self._client.get_blob_client(name)
        conditions: dict[str, Any] = {}
        if known is not None:
            conditions = {"etag": known, "match_condition": MatchConditions.IfModified}
        try:
            downloader = blob.download_blob(**conditions, **self._options)
            data = downloader.readall()
        except AzureError as exc:
            if _error_code(exc) == "BlobNotFound":
                return None
            if known is not None and isinstance(exc, HttpResponseError) and exc.status_code == 304:
                return NOT_MODIFIED
            raise
        if downloader.size == 0:
            self._stats.count("reads")  # the SDK's ranged GET got 416, then it asked again
        etag = downloader.properties.etag
        if not etag:
            raise self._no_version("read", key, "ETag")
        return Versioned(bytes(data), str(etag))

    def _put(self, op: str, key: str, name: str, data: bytes, condition: Any) -> str:
        blob = self._client.get_blob_client(name)
        conditions: dict[str, Any] = {"match_condition": MatchConditions.IfMissing}
        if condition is not None:
            conditions = {
                "overwrite": True,
                "etag": condition,
                "match_condition": MatchConditions.IfNotModified,
            }
        result = blob.upload_blob(
            data, blob_type=BlobType.BLOCKBLOB, length=len(data), **conditions, **self._options
        )
        etag = result.get("etag")
        if not etag:
            raise self._no_version(op, key, "ETag")
        return str(etag)

    def _remove(self, name: str, condition: Any) -> None:
        self._client.get_blob_client(name).delete_blob(
            etag=condition, match_condition=MatchConditions.IfNotModified, **self._options
        )

    def _list_names(self, full_prefix: str) -> Iterator[str]:
        pages = self._client.list_blobs(name_starts_with=full_prefix, **self._options).by_page()
        for page in pages:
            yield from (str(item.name) for item in page)
            if pages.continuation_token:
                self._stats.count("lists")  # the next page is one more request

    def _read_condition(self, version: str) -> str | None:
        return version if _is_etag(version) else None

    def _write_condition(self, key: str, version: str) -> str:
        """``version`` if it can be an ETag.

        :raises ConditionFailed: it can't (empty, not printable ASCII), so no blob is at it.
        """
        if _is_etag(version):
            return version
        raise ConditionFailed(key, f"version {version!r} is not an Azure ETag")

    # -- the rest ------------------------------------------------------------------------------

    def _namespace_root(self) -> str:
        return self._account

    def _repr_fields(self) -> list[str]:
        return [f"account={self._account!r}", *super()._repr_fields()]

    def _location_detail(self) -> str:
        return f" of account {self._account!r}" if self._account else ""

    def _translate(self, exc: Exception, op: str, key: str) -> PriorityLockError:
        """The one place where azure-storage-blob errors become prioritylock errors.

        Only the status and the error code are kept: the server's message and the request URL
        are never copied into ours.
        """
        write = op in WRITES
        what = self._describe_call(op, key)
        if isinstance(exc, DecodeError):  # the body was cut short or unreadable
            return StoreUnavailable(
                f"{what}: the response could not be read ({type(exc).__name__})",
                outcome_unknown=write,
            )
        if isinstance(exc, HttpResponseError) and exc.status_code:
            status = int(exc.status_code)
            code = _error_code(exc) or "no error code"
            if code in _MISSING_CONTAINER_CODES:
                return StoreAccessError(
                    f"{what} failed: the container does not exist ({code}); check the container"
                    " name and the account"
                )
            outcome = self._CLASSIFIER.outcome(status, code, write=write)
            if status == 404 and outcome is Outcome.FAILED:
                return StoreAccessError(
                    f"{what} failed: not found ({code}, HTTP 404); check the account URL and the"
                    " container"
                )
            label = f"{code}, HTTP {status}"
            return self._http_error(outcome, op, key, label, _condition_detail(op, code))
        if isinstance(exc, ClientAuthenticationError):
            # No response: the credential could not sign the request or fetch a token.
            return StoreAccessError(
                f"{what}: the credential could not authenticate ({type(exc).__name__});"
                f" {self._ACCESS_HINT}"
            )
        if isinstance(exc, ServiceRequestError):
            # azure-core's promise: the request was not sent, so even a write did not land.
            return self._not_sent(op, key, exc)
        if isinstance(exc, ServiceResponseError):
            return self._lost(op, key, exc)
        return StoreError(f"{what} failed ({type(exc).__name__})")


def _error_code(exc: AzureError) -> str:
    """The ``x-ms-error-code`` of a failed request ("" if none)."""
    code = getattr(exc, "error_code", None)
    if isinstance(code, enum.Enum):
        code = code.value
    if not code:
        response = getattr(exc, "response", None)
        headers = getattr(response, "headers", None) or {}
        code = headers.get("x-ms-error-code")
    return str(code or "")


def _condition_detail(operation: str, code: str) -> str:
    if code == "BlobAlreadyExists":
        return "already exists"
    if code == "BlobNotFound":
        return "absent"
    if operation == "create":
        return "already exists"
    return "absent or at another version"


def _is_etag(version: str) -> bool:
    """Whether ``version`` can be an ETag (and so be sent in a header)."""
    return isinstance(version, str) and _ETAG_RE.match(version) is not None


def _validate_account_url(account_url: str) -> str:
    """``account_url`` if it is ``http(s)://HOST[:PORT][/ACCOUNT]`` without a query: a SAS token
    belongs in the credential, where it is never printed. Never echoes the URL."""
    return validate_endpoint("Azure", account_url, "account URL")


def _pooled_transport() -> RequestsTransport:
    """azure-core's requests transport with one connection per heartbeat worker (its default
    pool of 10 would open and discard connections, logging a warning each time, when many
    leases renew at once), and urllib3's retries off as azure-core sets them."""
    session = requests.Session()
    adapter = requests.adapters.HTTPAdapter(
        max_retries=Retry(total=False, redirect=False, raise_on_status=False),
        pool_connections=1,
        pool_maxsize=DEFAULT_WORKERS,
    )
    for scheme in ("https://", "http://"):
        session.mount(scheme, adapter)
    return RequestsTransport(session=session, session_owner=True)


def _make_client(
    container: str,
    connection_string: str | None,
    account_url: str | None,
    credential: Credential | None,
    options: dict[str, Any],
) -> ContainerClient:
    """A container client with SDK retries off.

    :raises ConfigError: both or neither of a connection string and an account URL (and no
        ``AZURE_STORAGE_CONNECTION_STRING``), or either one malformed (never echoed).
    """
    if connection_string is not None and account_url is not None:
        raise ConfigError("AzureBlobStore takes connection_string= or account_url=, not both")
    if connection_string is not None and credential is not None:
        raise ConfigError("AzureBlobStore takes credential= only with account_url=")
    if connection_string is None and account_url is None:
        connection_string = os.environ.get(CONNECTION_STRING_ENV) or None
        if connection_string is None:
            raise ConfigError(
                "AzureBlobStore needs connection_string=, account_url= with credential=, or"
                f" {CONNECTION_STRING_ENV} in the environment"
            )
    options = {**options, "transport": _pooled_transport()}
    try:
        if connection_string is not None:
            return ContainerClient.from_connection_string(connection_string, container, **options)
        assert account_url is not None
        return ContainerClient(
            _validate_account_url(account_url), container, credential=credential, **options
        )
    except ConfigError:
        raise
    except (ValueError, TypeError, AzureError) as exc:
        what = "connection string" if connection_string is not None else "account URL"
        raise ConfigError(
            f"could not configure the Azure client: the {what} or credential is malformed"
            f" ({type(exc).__name__})"
        ) from exc


_URL_OPTIONS = ("account", "connect_timeout", "endpoint", "read_timeout")


def store_from_url(parts: urllib.parse.SplitResult, options: dict[str, str]) -> AzureBlobStore:
    """The store for ``az://CONTAINER/PREFIX?account=NAME&endpoint=URL``.

    Where the account is:

    - ``?endpoint=URL``: the account URL, e.g. ``http://127.0.0.1:10000/devstoreaccount1`` for
      Azurite (the account name is taken from the URL's host or path, or from ``?account=``);
    - ``?account=NAME`` alone: ``https://NAME.blob.core.windows.net``;
    - neither: ``AZURE_STORAGE_CONNECTION_STRING`` (account, endpoint and credential in one), else
      ``AZURE_STORAGE_ACCOUNT``.

    With an account URL, the credential comes from ``AZURE_STORAGE_KEY`` (the account key), else
    ``AZURE_STORAGE_SAS_TOKEN``, else ``azure.identity.DefaultAzureCredential`` when azure-identity
    is installed. Credentials never go in the URL. ``connect_timeout`` and ``read_timeout`` are
    seconds.

    :raises ConfigError: no container, credentials or a port in the URL, an unknown or empty
        option (named), an invalid value, or no way to find the account or a credential.
    """
    container, prefix, common = parse_store_url(
        parts,
        options,
        known=_URL_OPTIONS,
        holder="container",
        credentials_hint=f"use {KEY_ENV}, {SAS_ENV} or {CONNECTION_STRING_ENV}",
        port_hint="give the account URL as ?endpoint=http://HOST:PORT/ACCOUNT",
    )
    account = options.get("account")
    endpoint = options.get("endpoint")
    if account is None and endpoint is None:
        connection_string = os.environ.get(CONNECTION_STRING_ENV)
        if connection_string:
            return AzureBlobStore(container, prefix, connection_string=connection_string, **common)
        account = os.environ.get(ACCOUNT_ENV) or None
        if account is None:
            raise ConfigError(
                "az:// store URL needs ?account=NAME or ?endpoint=URL, or"
                f" {CONNECTION_STRING_ENV} (or {ACCOUNT_ENV}) in the environment"
            )
    if account is not None and not _ACCOUNT_RE.match(account):
        raise ConfigError(
            f"Azure account name must be 3-24 lowercase letters and digits, got {account!r}"
        )
    if endpoint is not None:
        account_url = _validate_account_url(endpoint)
        account = account or _account_from_url(account_url)
    else:
        account_url = f"https://{account}.blob.core.windows.net"
    return AzureBlobStore(
        container,
        prefix,
        account_url=account_url,
        credential=_credential_from_env(account),
        **common,
    )


def _account_from_url(account_url: str) -> str | None:
    """The account name in ``https://NAME.blob.core...`` or ``http://HOST:PORT/NAME`` (Azurite)."""
    parts = urllib.parse.urlsplit(account_url)
    host = parts.hostname or ""
    path = parts.path.strip("/")
    if path and "/" not in path:
        return path
    first = host.split(".", 1)[0]
    return first if ".blob." in host and _ACCOUNT_RE.match(first) else None


def _credential_from_env(account: str | None) -> Credential:
    """The credential for an account URL: account key, SAS token or DefaultAzureCredential.

    :raises ConfigError: an account key without a known account name, or no credential at all.
    """
    key = os.environ.get(KEY_ENV)
    if key:
        if not account:
            raise ConfigError(
                f"{KEY_ENV} needs the account name: add ?account=NAME to the az:// URL"
            )
        return AzureNamedKeyCredential(account, key)
    sas = os.environ.get(SAS_ENV)
    if sas:
        return AzureSasCredential(sas.lstrip("?"))
    try:
        from azure.identity import DefaultAzureCredential  # optional: only for token auth
    except ImportError as exc:
        raise ConfigError(
            f"no Azure credential: set {KEY_ENV} or {SAS_ENV}, or {CONNECTION_STRING_ENV} without"
            " ?account/?endpoint, or pip install azure-identity for DefaultAzureCredential"
        ) from exc
    credential: TokenCredential = DefaultAzureCredential()
    return credential
