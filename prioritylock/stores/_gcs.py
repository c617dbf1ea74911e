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
- **Errors are translated in one place**, :meth:`GCSStore._translate`, and always chained.

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
from collections.abc import Iterator
from typing import Any

from prioritylock.stores._registry import missing_extra

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
    raise missing_extra("GCS stores", "gcs", _exc) from None

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

__all__ = ["MAX_OBJECT_BYTES", "GCSStore", "store_from_url"]

MAX_OBJECT_BYTES = 8 * 1024 * 1024
"""The largest object the store writes: the SDK's multipart limit (one request per write)."""

EMULATOR_ENV = "STORAGE_EMULATOR_HOST"

# Bucket names: 3-63 characters (up to 222 with dots), lowercase letters, digits, '-', '_', '.',
# starting and ending with a letter or digit.
_BUCKET_RE = re.compile(r"^[a-z0-9][a-z0-9._-]{1,220}[a-z0-9]$")


class GCSStore(CloudStore):
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

    _LABEL = "GCS"
    _SCHEME = "gs"
    _OBJECT = "object name"
    # GCS enforces ifGenerationMatch on deletes (fake-gcs-server 0.1.1 does not: a known gap of
    # the emulator, not of the store).
    _CAPABILITIES = StoreCapabilities(
        shared_across_processes=True, shared_across_hosts=True, conditional_delete=True
    )
    # Everything the SDK raises for a failed request.
    _SDK_ERRORS = (
        api_exceptions.GoogleAPIError,
        auth_exceptions.GoogleAuthError,
        requests.exceptions.RequestException,
        storage_exceptions.InvalidResponse,
        storage_exceptions.DataCorruption,
    )
    # 409: a conflicting write was in progress; status 0: no HTTP answer at all.
    _CLASSIFIER = HttpClassifier(
        condition_statuses=frozenset({409, 412}), unavailable_statuses=frozenset({0, 408})
    )
    _ACCESS_HINT = (
        "check the credentials and that they grant storage.objects.get, create, delete and list"
        " on the bucket (roles/storage.objectUser)"
    )
    _THROTTLE_HINT = "; GCS allows about one write per second to one object"

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
        super().__init__(bucket, prefix, connect_timeout, read_timeout)
        given: dict[str, object] = {
            "project": project,
            "credentials": credentials,
            "endpoint": endpoint,
        }
        self._take_client(
            client, given, lambda: _make_client(bucket, project, credentials, endpoint)
        )
        _disable_background_requests(self._client)
        self._bucket = self._client.bucket(bucket)

    @property
    def bucket(self) -> str:
        return self._holder

    # -- requests ------------------------------------------------------------------------------

    def _fetch(self, key: str, name: str, known: str | None) -> ReadResult:
        """One media download: the bytes, and the generation from its header."""
        blob = self._bucket.blob(name)
        try:
            data = blob.download_as_bytes(
                if_generation_not_match=None if known is None else int(known),
                retry=None,
                timeout=self._timeouts,
            )
        except api_exceptions.NotFound as exc:
            if _names_bucket(exc):
                raise
            return None
        except api_exceptions.NotModified:
            if known is None:
                raise
            return NOT_MODIFIED
        return Versioned(bytes(data), self._generation_of(blob, "read", key))

    def _payload(self, op: str, key: str, data: bytes) -> bytes:
        payload = bytes(data)
        if len(payload) > MAX_OBJECT_BYTES:
            raise ConfigError(
                f"GCS {op} of {key!r}: {len(payload)} bytes is over the store's limit of"
                f" {MAX_OBJECT_BYTES} (one multipart request per write)"
            )
        return payload

    def _put(self, op: str, key: str, name: str, data: bytes, condition: Any) -> str:
        blob = self._bucket.blob(name)
        # chunk_size stays None: objects up to MAX_OBJECT_BYTES go as one multipart upload.
        blob.upload_from_string(
            data,
            content_type="application/octet-stream",
            if_generation_match=0 if condition is None else condition,
            retry=None,
            timeout=self._timeouts,
        )
        return self._generation_of(blob, op, key)

    def _remove(self, name: str, condition: Any) -> None:
        self._bucket.delete_blob(
            name, if_generation_match=condition, retry=None, timeout=self._timeouts
        )

    def _list_names(self, full_prefix: str) -> Iterator[str]:
        iterator = self._client.list_blobs(
            self._bucket,
            prefix=full_prefix,
            fields="items(name),nextPageToken",
            retry=None,
            timeout=self._timeouts,
        )
        for page in iterator.pages:
            yield from (str(blob.name) for blob in page)
            if iterator.next_page_token:
                self._stats.count("lists")  # the next page is one more request

    def _read_condition(self, version: str) -> str | None:
        generation = _generation(version)
        return None if generation is None else str(generation)

    def _write_condition(self, key: str, version: str) -> int:
        """The generation a version token names.

        :raises ConditionFailed: not a positive integer, so no GCS object can be at that version
            (and ``0`` would turn a replace into a create).
        """
        generation = _generation(version)
        if generation is None:
            raise ConditionFailed(key, f"version {version!r} is not a GCS generation")
        return generation

    # -- the rest ------------------------------------------------------------------------------

    def _namespace_root(self) -> str:
        return str(self._client.project)

    def _generation_of(self, blob: Any, op: str, key: str) -> str:
        generation = blob.generation
        if not isinstance(generation, int) or generation <= 0:
            raise self._no_version(op, key, "generation")
        return str(generation)

    def _translate(self, exc: Exception, op: str, key: str) -> PriorityLockError:
        """The one place where google-cloud-storage errors become prioritylock errors.

        Server messages are never copied into ours (they are not needed, and are not ours to vet).
        """
        write = op in WRITES
        what = self._describe_call(op, key)
        if isinstance(exc, api_exceptions.GoogleAPICallError):
            status = int(exc.code or 0)
            outcome = self._CLASSIFIER.outcome(status, "", write=write)
            if status == 404 and outcome is not Outcome.CONDITION_FAILED:
                if op == "delete" and not _names_bucket(exc):
                    return ConditionFailed(key, "absent")
                # Uploads and lists can only 404 on the bucket: an absent object fails with 412.
                return StoreAccessError(
                    f"{what} failed: the bucket does not exist (HTTP 404); check the bucket name"
                    " and the project"
                )
            label = f"{type(exc).__name__}, HTTP {status}"
            return self._http_error(outcome, op, key, label, _condition_detail(op, status))
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
            # A 401 makes the SDK refresh the token; this is what a refused or unusable
            # credential (revoked key, anonymous credentials on a private bucket) ends as.
            return StoreAccessError(
                f"{what}: the credentials were refused or could not be refreshed"
                f" ({type(exc).__name__}): {self._ACCESS_HINT}"
            )
        if isinstance(exc, storage_exceptions.DataCorruption):
            return StoreUnavailable(f"{what}: the download failed its checksum; read it again")
        if isinstance(exc, requests.exceptions.RequestException):
            if _never_sent(exc):
                return self._not_sent(op, key, exc)
            return self._lost(op, key, exc)
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


def _generation(version: str) -> int | None:
    """The generation a version token names, or ``None`` if it is not a positive integer."""
    if isinstance(version, str) and version.isascii() and version.isdigit():
        generation = int(version)
        if generation > 0:
            return generation
    return None


def _make_client(
    bucket: str, project: str | None, credentials: Credentials | None, endpoint: str | None
) -> Any:
    """A storage client; anonymous when ``STORAGE_EMULATOR_HOST`` is set and none are given.

    :raises ConfigError: an invalid endpoint.
    :raises StoreAccessError: no credentials could be found.
    """
    client_options: dict[str, str] | None = None
    if endpoint is not None:
        client_options = {"api_endpoint": validate_endpoint("GCS", endpoint).rstrip("/")}
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
    bucket, prefix, timeouts = parse_store_url(
        parts,
        options,
        known=_URL_OPTIONS,
        holder="bucket",
        credentials_hint="use GOOGLE_APPLICATION_CREDENTIALS or Application Default Credentials",
        port_hint=f"point {EMULATOR_ENV} at an emulator instead",
    )
    return GCSStore(
        bucket,
        prefix,
        project=options.get("project"),
        **timeouts,
    )
