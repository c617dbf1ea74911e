"""GCSStore: lease documents in a Google Cloud Storage bucket, changed by generation preconditions.

The five seam operations map onto one JSON-API request each:

==========  ==========================================================  ==================
operation   request                                                     version token
==========  ==========================================================  ==================
read        media download (``alt=media``); generation from its header  ``str(generation)``
create      multipart upload with ``ifGenerationMatch=0``               the new generation
replace     multipart upload with ``ifGenerationMatch=<generation>``    the new generation
delete      object delete with ``ifGenerationMatch=<generation>``       --
list        object list with ``prefix``, one request per page           --
==========  ==========================================================  ==================

``read_if_changed`` is the media download with ``ifGenerationNotMatch=<generation>``: GCS answers
an unchanged object with 304 and no body. fake-gcs-server 0.1.1 ignores the parameter and sends the
object; the store then compares generations, so the answer is the same either way.

Decisions that shape this module:

- **The SDK never retries.** Every call passes ``retry=None``: a retried conditional write whose
  first attempt landed comes back 412 and would read as "somebody else won". Failures that may hide
  a landed write raise ``StoreUnavailable(outcome_unknown=True)``; the lock retries with its own
  backoff (GCS allows about one write per second to one object) and decides by reading back.
- **One request per operation.** Reads use the media download, which returns the generation in
  ``x-goog-generation``: no ``reload()`` first. Uploads stay multipart (at most
  :data:`MAX_OBJECT_BYTES`), never resumable: one request, and the path on which emulators
  enforce preconditions too. google-cloud-storage 3.x also fetches bucket metadata in background
  threads (once per client, and again after every 404) for tracing; the store turns that off on
  its client, so the requests counted in :attr:`GCSStore.stats` are all the requests sent.
- **Errors are translated in one place**, :func:`_translate`, and always chained.

Generations are integers (microsecond timestamps, not promised to grow): compare them for equality
only. ``0`` means "no live object" to GCS, so a version token is accepted only if it is a positive
integer; anything else fails the condition without a request.

A 404 cannot tell a missing bucket from a missing object for reads and deletes (GCS answers
"No such object" for both; fake-gcs-server answers "Not Found"): ``read`` returns ``None`` and
``delete`` raises :class:`~prioritylock.ConditionFailed` there, unless the message names the
bucket. Create, replace and list can only 404 on a missing bucket, and raise
:class:`~prioritylock.StoreAccessError` naming it — so the lock's first acquire reports it.
"""

from __future__ import annotations

import os
import re
import urllib.parse
from typing import Any

try:
    import requests
    import requests.adapters
    import urllib3.exceptions
    from google.api_core import exceptions as api_exceptions
    from google.auth import exceptions as auth_exceptions
    from google.auth.credentials import AnonymousCredentials, Credentials
    from google.cloud import storage
    from google.cloud.storage import exceptions as storage_exceptions
except ImportError as _exc:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        f"GCS stores need google-cloud-storage: pip install 'prioritylock[gcs]' ({_exc})"
    ) from _exc

from prioritylock._errors import (
    ConditionFailed,
    ConfigError,
    PriorityLockError,
    StoreAccessError,
    StoreError,
    StoreUnavailable,
)
from prioritylock._heartbeat import DEFAULT_WORKERS
from prioritylock.stores._base import (
    NOT_MODIFIED,
    ReadResult,
    StoreCapabilities,
    StoreStats,
    Versioned,
    normalize_prefix,
    prefixed_key,
    validate_prefix,
)

__all__ = ["MAX_OBJECT_BYTES", "GCSStore", "store_from_url"]

DEFAULT_CONNECT_TIMEOUT = 5.0
DEFAULT_READ_TIMEOUT = 10.0
MAX_OBJECT_BYTES = 8 * 1024 * 1024
"""The largest object the store writes: the SDK's multipart limit (one request per write)."""

EMULATOR_ENV = "STORAGE_EMULATOR_HOST"

# Bucket names: 3-63 characters (up to 222 with dots), lowercase letters, digits, '-', '_', '.',
# starting and ending with a letter or digit.
_BUCKET_RE = re.compile(r"^[a-z0-9][a-z0-9._-]{1,220}[a-z0-9]$")
_WRITES = frozenset({"create", "replace", "delete"})
_PERMISSIONS_HINT = (
    "check the credentials and that they grant storage.objects.get, create, delete and list on "
    "the bucket (roles/storage.objectUser)"
)


class GCSStore:
    """Objects under ``prefix`` in a GCS bucket; shared by every process and host that opens it.

    Keys are stored at ``prefix + key`` (a non-empty prefix always ends with ``/``); ``list``
    strips the prefix again. Version tokens are object generations as decimal strings.

    Pass client options (``project``, ``credentials``, ``endpoint``, timeouts; credentials default
    to Application Default Credentials, or anonymous ones when ``STORAGE_EMULATOR_HOST`` is set),
    or an existing ``google.cloud.storage.Client`` (which the store then does not close, and whose
    background bucket-metadata fetches it turns off). Every request attempt counts in
    :attr:`stats`.

    :raises ConfigError: an invalid bucket name, prefix, timeout or endpoint, or client options
        given together with ``client``.
    :raises StoreAccessError: no credentials could be found (Application Default Credentials).
    """

    def __init__(
        self,
        bucket: str,
        prefix: str = "",
        *,
        project: str | None = None,
        credentials: Credentials | None = None,
        endpoint: str | None = None,
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
        read_timeout: float = DEFAULT_READ_TIMEOUT,
        client: Any = None,
    ) -> None:
        if not isinstance(bucket, str) or not _BUCKET_RE.match(bucket):
            raise ConfigError(
                "GCS bucket name must be 3-222 lowercase letters, digits, '-', '_' or '.',"
                f" starting and ending with a letter or digit; got {bucket!r}"
            )
        for name, value in (("connect_timeout", connect_timeout), ("read_timeout", read_timeout)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
                raise ConfigError(f"GCS {name} must be a positive number of seconds, got {value!r}")
        self._bucket_name = bucket
        self._prefix = normalize_prefix(prefix, "GCS")
        self._timeout = (float(connect_timeout), float(read_timeout))
        self._stats = StoreStats()
        if client is not None:
            given = {"project": project, "credentials": credentials, "endpoint": endpoint}
            clash = sorted(name for name, value in given.items() if value is not None)
            if clash:
                raise ConfigError(
                    f"GCSStore takes either client= or client options, not both: got {clash}"
                )
            self._client = client
            self._owns_client = False
        else:
            self._client = _make_client(bucket, project, credentials, endpoint)
            self._owns_client = True
        _disable_background_requests(self._client)
        self._bucket = self._client.bucket(bucket)

    # -- the seam --------------------------------------------------------------------------

    @property
    def stats(self) -> StoreStats:
        return self._stats

    @property
    def capabilities(self) -> StoreCapabilities:
        # GCS enforces ifGenerationMatch on deletes (fake-gcs-server 0.1.1 does not: a known gap
        # of the emulator, not of the store).
        return StoreCapabilities(
            shared_across_processes=True, shared_across_hosts=True, conditional_delete=True
        )

    @property
    def bucket(self) -> str:
        return self._bucket_name

    @property
    def namespace(self) -> str:
        """Names what this store addresses: two stores with one namespace share objects."""
        return f"gs:{self._client.project}/{self._bucket_name}/{self._prefix}"

    @property
    def prefix(self) -> str:
        """The normalized prefix: empty, or ending with ``/``."""
        return self._prefix

    @property
    def client(self) -> Any:
        """The ``google.cloud.storage.Client`` the store sends its requests through."""
        return self._client

    def read(self, key: str) -> Versioned | None:
        """The object's bytes and generation, in one request, or ``None`` when absent.

        :raises ConfigError: invalid key.
        :raises StoreUnavailable: throttled, 5xx, timeout, lost connection or a corrupt download.
        :raises StoreAccessError: credentials refused.
        :raises StoreError: any other failure of the store.
        """
        found = self._download(key, None)
        assert found is not NOT_MODIFIED, "an unconditional download answered 304"
        return found

    def read_if_changed(self, key: str, version: str) -> ReadResult:
        """:data:`~prioritylock.stores.NOT_MODIFIED` if the object is still at generation
        ``version`` (``ifGenerationNotMatch``: GCS answers 304, without the body); else what
        :meth:`read` returns. One request.

        :raises ConfigError: invalid key.
        :raises StoreUnavailable: throttled, 5xx, timeout, lost connection or a corrupt download.
        :raises StoreAccessError: credentials refused.
        :raises StoreError: any other failure of the store.
        """
        return self._download(key, version)

    def create(self, key: str, data: bytes) -> str:
        """Store ``data`` only if ``key`` is absent (``ifGenerationMatch=0``); return the version.

        :raises ConfigError: invalid key, or ``data`` over :data:`MAX_OBJECT_BYTES`.
        :raises ConditionFailed: the key exists.
        :raises StoreUnavailable: throttled, 5xx, timeout or lost connection;
            ``outcome_unknown`` when the write may have landed.
        :raises StoreAccessError: credentials refused or the bucket is missing.
        :raises StoreError: any other failure of the store.
        """
        return self._upload("create", key, data, 0)

    def replace(self, key: str, data: bytes, version: str) -> str:
        """Store ``data`` only if the object is at generation ``version``; return the new one.

        :raises ConfigError: invalid key, or ``data`` over :data:`MAX_OBJECT_BYTES`.
        :raises ConditionFailed: the object is absent or at another generation (a ``version``
            that is not a positive integer fails without a request).
        :raises StoreUnavailable: throttled, 5xx, timeout or lost connection;
            ``outcome_unknown`` when the write may have landed.
        :raises StoreAccessError: credentials refused or the bucket is missing.
        :raises StoreError: any other failure of the store.
        """
        self._name(key)
        return self._upload("replace", key, data, _parse_generation(key, version))

    def delete(self, key: str, version: str) -> None:
        """Delete the object only if it is at generation ``version``.

        :raises ConfigError: invalid key.
        :raises ConditionFailed: the object is absent or at another generation.
        :raises StoreUnavailable: throttled, 5xx, timeout or lost connection;
            ``outcome_unknown`` when the delete may have landed.
        :raises StoreAccessError: credentials refused.
        :raises StoreError: any other failure of the store.
        """
        name = self._name(key)
        generation = _parse_generation(key, version)
        self._stats.count("deletes")
        try:
            self._bucket.delete_blob(
                name, if_generation_match=generation, retry=None, timeout=self._timeout
            )
        except _SDK_ERRORS as exc:
            raise self._translate(exc, "delete", key) from exc

    def list(self, prefix: str) -> list[str]:
        """Every key under this store's prefix that starts with ``prefix``, sorted.

        :raises ConfigError: invalid prefix.
        :raises StoreUnavailable: throttled, 5xx, timeout or lost connection.
        :raises StoreAccessError: credentials refused or the bucket is missing.
        :raises StoreError: any other failure of the store.
        """
        validate_prefix(prefix)
        keys: list[str] = []
        skip = len(self._prefix)
        self._stats.count("lists")
        try:
            iterator = self._client.list_blobs(
                self._bucket,
                prefix=self._prefix + prefix,
                fields="items(name),nextPageToken",
                retry=None,
                timeout=self._timeout,
            )
            for page in iterator.pages:
                keys.extend(str(blob.name)[skip:] for blob in page)
                if iterator.next_page_token:
                    self._stats.count("lists")  # the next page is one more request
        except _SDK_ERRORS as exc:
            raise self._translate(exc, "list", prefix) from exc
        return sorted(keys)

    def close(self) -> None:
        """Close the client's connections if this store made the client; safe to call twice."""
        if self._owns_client:
            self._client.close()

    def __repr__(self) -> str:
        return f"GCSStore(bucket={self._bucket_name!r}, prefix={self._prefix!r})"

    # -- internals -------------------------------------------------------------------------

    def _name(self, key: str) -> str:
        return prefixed_key(self._prefix, key, "GCS object name")

    def _download(self, key: str, version: str | None) -> ReadResult:
        """One media download; with ``version``, only if the object is no longer at it."""
        blob = self._bucket.blob(self._name(key))
        # A token that is not a generation names no object: a plain download answers the same.
        known = None if version is None else _generation(version)
        self._stats.count("reads")
        try:
            data = blob.download_as_bytes(
                if_generation_not_match=known, retry=None, timeout=self._timeout
            )
        except _SDK_ERRORS as exc:
            if isinstance(exc, api_exceptions.NotFound) and not _names_bucket(exc):
                return None
            if known is not None and isinstance(exc, api_exceptions.NotModified):
                self._stats.count_not_modified()
                return NOT_MODIFIED
            raise self._translate(exc, "read", key) from exc
        generation = self._generation_of(blob, "read", key)
        if known is not None and generation == str(known):
            # fake-gcs-server ignores ifGenerationNotMatch and sends the object anyway.
            self._stats.count_not_modified()
            return NOT_MODIFIED
        return Versioned(bytes(data), generation)

    def _upload(self, operation: str, key: str, data: bytes, generation: int) -> str:
        blob = self._bucket.blob(self._name(key))
        payload = bytes(data)
        if len(payload) > MAX_OBJECT_BYTES:
            raise ConfigError(
                f"GCS {operation} of {key!r}: {len(payload)} bytes is over the store's limit of"
                f" {MAX_OBJECT_BYTES} (one multipart request per write)"
            )
        self._stats.count(operation + "s")
        try:
            # chunk_size stays None: objects up to MAX_OBJECT_BYTES go as one multipart upload.
            blob.upload_from_string(
                payload,
                content_type="application/octet-stream",
                if_generation_match=generation,
                retry=None,
                timeout=self._timeout,
            )
        except _SDK_ERRORS as exc:
            raise self._translate(exc, operation, key) from exc
        return self._generation_of(blob, operation, key)

    def _generation_of(self, blob: Any, operation: str, key: str) -> str:
        generation = blob.generation
        if not isinstance(generation, int) or generation <= 0:
            # A write (if any) landed but its version is unknown: make the lock read it back.
            raise StoreUnavailable(
                f"GCS {operation} of {key!r} in {self._where()} returned no generation",
                outcome_unknown=operation in _WRITES,
            )
        return str(generation)

    def _where(self) -> str:
        where = f"bucket {self._bucket_name!r}"
        if self._prefix:
            where += f" (prefix {self._prefix!r})"
        return where

    def _translate(self, exc: Exception, operation: str, key: str) -> PriorityLockError:
        return _translate(exc, operation=operation, key=key, where=self._where())


# Everything the SDK raises for a failed request. Anything else is a bug and propagates as is.
_SDK_ERRORS: tuple[type[Exception], ...] = (
    api_exceptions.GoogleAPIError,
    auth_exceptions.GoogleAuthError,
    requests.exceptions.RequestException,
    storage_exceptions.InvalidResponse,
    storage_exceptions.DataCorruption,
)


def _translate(exc: Exception, *, operation: str, key: str, where: str) -> PriorityLockError:
    """The one place where google-cloud-storage errors become prioritylock errors.

    For create, replace and delete, a failure after the request may have reached GCS is
    ``StoreUnavailable(outcome_unknown=True)``: the lock reads the object back to decide.
    Server messages are never copied into ours (they are not needed, and are not ours to vet).
    """
    write = operation in _WRITES
    what = f"GCS {operation} of {key!r} in {where}"
    if isinstance(exc, api_exceptions.GoogleAPICallError):
        status = int(exc.code or 0)
        name = type(exc).__name__
        if write and status in (409, 412):
            return ConditionFailed(key, _condition_detail(operation, status))
        if status == 404:
            if operation == "delete" and not _names_bucket(exc):
                return ConditionFailed(key, "absent")
            # Uploads and lists can only 404 on the bucket: an absent object fails with 412.
            return StoreAccessError(
                f"{what} failed: the bucket does not exist (HTTP 404); check the bucket name and"
                " the project"
            )
        if status in (401, 403):
            return StoreAccessError(f"{what} refused ({name}, HTTP {status}): {_PERMISSIONS_HINT}")
        if status == 429:
            return StoreUnavailable(
                f"{what} was throttled (HTTP 429; GCS allows about one write per second to one"
                " object); retry with backoff",
                outcome_unknown=write,
            )
        if status == 408 or status >= 500 or status == 0:
            return StoreUnavailable(f"{what} failed ({name}, HTTP {status})", outcome_unknown=write)
        return StoreError(f"{what} failed ({name}, HTTP {status})")
    if isinstance(exc, (auth_exceptions.TransportError, auth_exceptions.TimeoutError)):
        # Fetching a token failed on the network: the request itself was never sent.
        return StoreUnavailable(
            f"{what}: could not reach the token endpoint ({type(exc).__name__})"
        )
    if type(exc) is auth_exceptions.DefaultCredentialsError or isinstance(
        exc, auth_exceptions.OSError
    ):
        return StoreAccessError(f"{what}: {_NO_CREDENTIALS_HINT}")
    if isinstance(exc, auth_exceptions.GoogleAuthError):
        # A 401 makes the SDK refresh the token; this is what a refused or unusable credential
        # (revoked key, anonymous credentials on a private bucket) ends as.
        return StoreAccessError(
            f"{what}: the credentials were refused or could not be refreshed"
            f" ({type(exc).__name__}): {_PERMISSIONS_HINT}"
        )
    if isinstance(exc, storage_exceptions.DataCorruption):
        return StoreUnavailable(f"{what}: the download failed its checksum; read it again")
    if isinstance(exc, requests.exceptions.RequestException):
        if _never_sent(exc):
            return StoreUnavailable(f"{what}: could not connect ({type(exc).__name__})")
        return StoreUnavailable(
            f"{what}: the response was lost ({type(exc).__name__})", outcome_unknown=write
        )
    return StoreError(f"{what} failed ({type(exc).__name__})")


_NO_CREDENTIALS_HINT = (
    "no usable Google Cloud credentials; set GOOGLE_APPLICATION_CREDENTIALS to a service account"
    " key file, run `gcloud auth application-default login`, run on Google Cloud with a service"
    f" account, pass credentials=, or set {EMULATOR_ENV} for an emulator"
)


def _names_bucket(exc: Exception) -> bool:
    """Whether a 404 says the bucket (not the object) is missing, as GCS says on some requests."""
    return "bucket does not exist" in str(getattr(exc, "message", "")).lower()


def _never_sent(exc: requests.exceptions.RequestException) -> bool:
    """Whether the connection failed before the request went out (refused, or connect timeout)."""
    if isinstance(exc, requests.exceptions.ConnectTimeout):
        return True
    if isinstance(exc, requests.exceptions.ConnectionError) and exc.args:
        reason = getattr(exc.args[0], "reason", None)
        return isinstance(reason, urllib3.exceptions.NewConnectionError)
    return False


def _condition_detail(operation: str, status: int) -> str:
    if status == 409:
        return "a conflicting write was in progress"
    if operation == "create":
        return "already exists"
    return "absent or at another generation"


def _parse_generation(key: str, version: str) -> int:
    """The generation a version token names.

    :raises ConditionFailed: not a positive integer, so no GCS object can be at that version (and
        ``0`` would turn a replace into a create).
    """
    generation = _generation(version)
    if generation is None:
        raise ConditionFailed(key, f"version {version!r} is not a GCS generation")
    return generation


def _generation(version: str) -> int | None:
    """The generation a version token names, or ``None`` if it is not a positive integer."""
    if isinstance(version, str) and version.isascii() and version.isdigit():
        generation = int(version)
        if generation > 0:
            return generation
    return None


def _validate_endpoint(endpoint: str) -> str:
    try:
        parts = urllib.parse.urlsplit(endpoint)
    except ValueError as exc:
        raise ConfigError(f"GCS endpoint is not a URL: {exc}") from exc
    if parts.scheme not in ("http", "https") or not parts.netloc or "@" in parts.netloc:
        raise ConfigError("GCS endpoint must be http(s)://HOST[:PORT] without credentials")
    if parts.query or parts.fragment:
        raise ConfigError("GCS endpoint must not have a query or a fragment")
    return endpoint


def _make_client(
    bucket: str, project: str | None, credentials: Credentials | None, endpoint: str | None
) -> Any:
    """A storage client; anonymous when ``STORAGE_EMULATOR_HOST`` is set and none are given.

    :raises ConfigError: an invalid endpoint.
    :raises StoreAccessError: no credentials could be found.
    """
    client_options: dict[str, str] | None = None
    if endpoint is not None:
        client_options = {"api_endpoint": _validate_endpoint(endpoint).rstrip("/")}
    if credentials is None and os.environ.get(EMULATOR_ENV):
        credentials = AnonymousCredentials()  # type: ignore[no-untyped-call]
    try:
        # project=None: object requests need no project, and the SDK does not go looking for one.
        client = storage.Client(
            project=project, credentials=credentials, client_options=client_options
        )
    except auth_exceptions.DefaultCredentialsError as exc:
        raise StoreAccessError(
            f"GCS bucket {bucket!r}: {_NO_CREDENTIALS_HINT} ({type(exc).__name__})"
        ) from exc
    except (auth_exceptions.GoogleAuthError, ValueError) as exc:
        raise ConfigError(f"could not configure the GCS client ({type(exc).__name__})") from exc
    # One connection per heartbeat worker: requests' default pool (10) would open and discard
    # connections (and log a warning each time) when many leases renew at once.
    adapter = requests.adapters.HTTPAdapter(
        pool_connections=1, pool_maxsize=DEFAULT_WORKERS, max_retries=0
    )
    for scheme in ("https://", "http://"):
        client._http.mount(scheme, adapter)
    return client


def _disable_background_requests(client: Any) -> None:
    """Stop google-cloud-storage 3.x from fetching bucket metadata behind the store's back.

    The SDK starts a thread that GETs the bucket the first time a client touches it, and another
    that checks the bucket after every 404 (every read of an absent lease), only to decorate
    tracing spans. Those requests cost money, need ``storage.buckets.get`` (which the object roles
    lack) and would not show in :attr:`GCSStore.stats`.
    """
    if getattr(client, "_bucket_metadata_cache", None) is not None:
        client._bucket_metadata_cache = None


_URL_OPTIONS = ("connect_timeout", "project", "read_timeout")


def store_from_url(parts: urllib.parse.SplitResult, options: dict[str, str]) -> GCSStore:
    """The store for ``gs://BUCKET/PREFIX?project=...``.

    Options: ``project``, ``connect_timeout`` and ``read_timeout`` (seconds). Credentials never go
    in the URL: they come from Application Default Credentials, or are anonymous when
    ``STORAGE_EMULATOR_HOST`` points at an emulator.

    :raises ConfigError: no bucket name, credentials or a port in the URL, an unknown or empty
        option (named), or an invalid value.
    :raises StoreAccessError: no credentials could be found.
    """
    for name in sorted(options):
        if name not in _URL_OPTIONS:
            raise ConfigError(
                f"unknown gs:// store URL option {name!r}; known options: {', '.join(_URL_OPTIONS)}"
            )
        if not options[name]:
            raise ConfigError(f"gs:// store URL option {name!r} is empty")
    if "@" in parts.netloc:
        raise ConfigError(
            "gs:// store URLs must not carry credentials; use GOOGLE_APPLICATION_CREDENTIALS or"
            " Application Default Credentials"
        )
    bucket = parts.netloc
    if not bucket:
        raise ConfigError("gs:// store URL needs a bucket name: gs://BUCKET/PREFIX")
    if ":" in bucket:
        raise ConfigError(
            f"gs:// store URL takes a bucket name, not host:port ({bucket!r}); point"
            f" {EMULATOR_ENV} at an emulator instead"
        )
    if parts.fragment:
        raise ConfigError("gs:// store URL must not have a #fragment")
    timeouts: dict[str, float] = {}
    for name in ("connect_timeout", "read_timeout"):
        if name in options:
            try:
                timeouts[name] = float(options[name])
            except ValueError as exc:
                raise ConfigError(
                    f"gs:// store URL option {name!r} must be a number of seconds,"
                    f" got {options[name]!r}"
                ) from exc
    return GCSStore(
        bucket,
        urllib.parse.unquote(parts.path),
        project=options.get("project"),
        connect_timeout=timeouts.get("connect_timeout", DEFAULT_CONNECT_TIMEOUT),
        read_timeout=timeouts.get("read_timeout", DEFAULT_READ_TIMEOUT),
    )
