"""S3Store: lease documents in an S3 (or S3-compatible) bucket, changed by conditional writes.

The five seam operations map onto S3 requests one to one:

==========  =================================================  ====================
operation   request                                            version token
==========  =================================================  ====================
read        ``GetObject``                                      the ``ETag`` header
create      ``PutObject`` with ``If-None-Match: *``            the new ``ETag``
replace     ``PutObject`` with ``If-Match: <etag>``            the new ``ETag``
delete      ``DeleteObject`` with ``If-Match: <etag>``         --
list        ``ListObjectsV2``, one request per page of 1000    --
==========  =================================================  ====================

``read_if_changed`` is ``GetObject`` with ``If-None-Match: <etag>``: an unchanged object costs a
304 without a body (a store that ignores the header sends the body, and the ETag tells).

Two decisions shape this module:

- **botocore never retries.** A retried conditional write whose first attempt landed comes back as
  412, which would read as "somebody else won". The client is built with one attempt per request,
  and every failure that may hide a landed write raises
  ``StoreUnavailable(outcome_unknown=True)``; the lock retries with its own backoff and decides by
  reading the document back. A client passed in by the caller may retry: a failed condition that
  follows an SDK retry is reported as outcome-unknown for the same reason.
- **Errors are translated in one place**, :func:`_translate`, and always chained.

Versions are the ETags S3 returns, always in their quoted form (``"9dd4..."``) whether a store
quotes them or not; ``If-Match`` gets them the same way. S3 ETags are content hashes: equal bytes
give equal versions, so the lease carries a nonce that makes every write's bytes differ.

Credentials live only inside the boto3 client: they are never stored on the store, and never
appear in an error message or a ``repr``.
"""

from __future__ import annotations

import re
import threading
import urllib.parse
from typing import Any

try:
    # botocore (which boto3 brings) is all this module needs: a botocore client is what
    # boto3.client("s3") returns, without boto3's transfer helpers.
    import botocore.config
    import botocore.exceptions
    import botocore.session
except ImportError as _exc:  # pragma: no cover - exercised only without the extra
    raise ImportError(f"S3 stores need boto3: pip install 'prioritylock[s3]' ({_exc})") from _exc

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

__all__ = ["S3Store", "store_from_url"]

DEFAULT_CONNECT_TIMEOUT = 5.0
DEFAULT_READ_TIMEOUT = 10.0
ADDRESSING_STYLES = ("auto", "path", "virtual")

# Permissive on purpose: S3-compatible stores and legacy us-east-1 buckets accept more than
# today's AWS rules; the store itself rejects what it can't take (InvalidBucketName).
_BUCKET_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._\-]{1,254}$")

# What a quoted ETag can be: printable ASCII without inner quotes, as a header value must be.
_ETAG_RE = re.compile(r'^"[\x21\x23-\x7e]{0,256}"$')

# Codes that mean "the condition did not hold" (or the key vanished under a conditional write).
_CONDITION_CODES = frozenset({"PreconditionFailed", "ConditionalRequestConflict", "NoSuchKey"})
_THROTTLE_CODES = frozenset(
    {"SlowDown", "Throttling", "ThrottlingException", "TooManyRequests", "RequestLimitExceeded"}
)
_TRANSIENT_CODES = _THROTTLE_CODES | frozenset(
    {"RequestTimeout", "InternalError", "ServiceUnavailable", "OperationAborted"}
)

# What each refusal means, and what the user should check. Never include the server's own
# message: a SignatureDoesNotMatch body may echo the string-to-sign and the access key id.
_ACCESS_HINTS = {
    "NoSuchBucket": "the bucket does not exist: check the bucket name, the endpoint and the region",
    "InvalidAccessKeyId": (
        "the access key id is unknown to the store: check AWS_ACCESS_KEY_ID or the profile"
    ),
    "SignatureDoesNotMatch": (
        "the request signature was refused: check the secret access key (for S3-compatible "
        "stores also the region and the addressing style)"
    ),
    "ExpiredToken": "the session token has expired: refresh the credentials",
    "TokenRefreshRequired": "the session token has expired: refresh the credentials",
    "InvalidToken": "the session token is invalid: check AWS_SESSION_TOKEN or the profile",
    "RequestTimeTooSkewed": "this host's clock is too far from the store's: fix the clock (NTP)",
    "AllAccessDisabled": "all access to the bucket is disabled: check the bucket's account",
    "AccountProblem": "the account has a problem: check the account's status",
    "InvalidBucketName": "the bucket name is not valid for this store: check the bucket name",
}
_PERMISSIONS_HINT = (
    "check the credentials and that they grant s3:GetObject, s3:PutObject, s3:DeleteObject "
    "and s3:ListBucket on the bucket and prefix"
)


class S3Store:
    """Objects under ``prefix`` in an S3 bucket; shared by every process and host that opens it.

    Keys are stored at ``prefix + key`` (a non-empty prefix always ends with ``/``); ``list``
    strips the prefix again. Version tokens are the quoted ETags S3 returns.

    Pass either client options (``endpoint_url``, ``region``, ``profile``, ``addressing_style``,
    explicit credentials, timeouts; missing credentials come from boto3's default chain), or an
    existing boto3 S3 ``client`` (which the store then does not close). A client built here makes
    exactly one attempt per request and never retries: the lock layer retries and reconciles.

    Every request attempt counts in :attr:`stats`.

    :raises ConfigError: an invalid bucket name, prefix, option, endpoint or unknown profile, or
        client options given together with ``client``.
    """

    def __init__(
        self,
        bucket: str,
        prefix: str = "",
        *,
        endpoint_url: str | None = None,
        region: str | None = None,
        profile: str | None = None,
        addressing_style: str | None = None,
        aws_access_key_id: str | None = None,
        aws_secret_access_key: str | None = None,
        aws_session_token: str | None = None,
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
        read_timeout: float = DEFAULT_READ_TIMEOUT,
        client: Any = None,
    ) -> None:
        if not isinstance(bucket, str) or not _BUCKET_RE.match(bucket):
            raise ConfigError(
                f"S3 bucket name must be 2-255 letters, digits, '.', '-' or '_', got {bucket!r}"
            )
        self._bucket = bucket
        self._prefix = normalize_prefix(prefix, "S3")
        self._stats = StoreStats()
        self._local = threading.local()
        if client is not None:
            given = {
                "endpoint_url": endpoint_url,
                "region": region,
                "profile": profile,
                "addressing_style": addressing_style,
                "aws_access_key_id": aws_access_key_id,
                "aws_secret_access_key": aws_secret_access_key,
                "aws_session_token": aws_session_token,
            }
            clash = sorted(name for name, value in given.items() if value is not None)
            if clash:
                raise ConfigError(
                    f"S3Store takes either client= or client options, not both: got {clash}"
                )
            self._client = client
            self._owns_client = False
        else:
            self._client = _make_client(
                endpoint_url=endpoint_url,
                region=region,
                profile=profile,
                addressing_style=addressing_style,
                aws_access_key_id=aws_access_key_id,
                aws_secret_access_key=aws_secret_access_key,
                aws_session_token=aws_session_token,
                connect_timeout=connect_timeout,
                read_timeout=read_timeout,
            )
            self._owns_client = True
        self._endpoint = _redact_endpoint(str(getattr(self._client.meta, "endpoint_url", "")))
        # One count per attempt: request-created fires once per attempt, retries included.
        self._handler_id = f"prioritylock-s3-stats-{id(self)}"
        self._client.meta.events.register(
            "request-created.s3", self._count_attempt, unique_id=self._handler_id
        )

    # -- the seam --------------------------------------------------------------------------

    @property
    def stats(self) -> StoreStats:
        return self._stats

    @property
    def capabilities(self) -> StoreCapabilities:
        return StoreCapabilities(
            shared_across_processes=True,
            shared_across_hosts=True,
            conditional_delete=True,
            unique_versions=False,  # ETags are MD5 hashes of the content
        )

    @property
    def bucket(self) -> str:
        return self._bucket

    @property
    def namespace(self) -> str:
        """Names what this store addresses: two stores with one namespace share objects."""
        return f"s3:{self._client.meta.endpoint_url}/{self._bucket}/{self._prefix}"

    @property
    def prefix(self) -> str:
        """The normalized prefix: empty, or ending with ``/``."""
        return self._prefix

    @property
    def client(self) -> Any:
        """The boto3 S3 client (for instrumentation: ``client.meta.events``)."""
        return self._client

    def read(self, key: str) -> Versioned | None:
        """The object's bytes and quoted ETag, or ``None`` when absent.

        :raises StoreUnavailable: throttled, 5xx, timeout or lost connection.
        :raises StoreAccessError: credentials refused or the bucket is missing.
        :raises StoreError: any other failure of the store.
        :raises ConfigError: an invalid key, refused before any request.
        """
        found = self._get(key, None)
        assert found is not NOT_MODIFIED, "an unconditional GetObject answered 304"
        return found

    def read_if_changed(self, key: str, version: str) -> ReadResult:
        """:data:`~prioritylock.stores.NOT_MODIFIED` if the object's ETag is still ``version``
        (``If-None-Match``: S3 answers 304, without the body); else what :meth:`read` returns.

        :raises StoreUnavailable: throttled, 5xx, timeout or lost connection.
        :raises StoreAccessError: credentials refused or the bucket is missing.
        :raises StoreError: any other failure of the store.
        :raises ConfigError: an invalid key, refused before any request.
        """
        return self._get(key, version)

    def create(self, key: str, data: bytes) -> str:
        """Store ``data`` only if ``key`` is absent (``If-None-Match: *``); return the new ETag.

        :raises ConditionFailed: the key exists.
        :raises StoreUnavailable: throttled, 5xx, timeout or lost connection;
            ``outcome_unknown`` when the write may have landed.
        :raises StoreAccessError: credentials refused or the bucket is missing.
        :raises StoreError: any other failure of the store.
        :raises ConfigError: an invalid key, refused before any request.
        """
        full = self._full_key(key)
        try:
            with self._counting("creates"):
                response = self._client.put_object(
                    Bucket=self._bucket, Key=full, Body=bytes(data), IfNoneMatch="*"
                )
        except (botocore.exceptions.ClientError, botocore.exceptions.BotoCoreError) as exc:
            raise self._translate(exc, "create", key, write=True) from exc
        return self._etag(response, "create", key)

    def replace(self, key: str, data: bytes, version: str) -> str:
        """Store ``data`` only if the object's ETag is ``version``; return the new ETag.

        :raises ConditionFailed: the object is absent or at another version.
        :raises StoreUnavailable: throttled, 5xx, timeout or lost connection;
            ``outcome_unknown`` when the write may have landed.
        :raises StoreAccessError: credentials refused or the bucket is missing.
        :raises StoreError: any other failure of the store.
        :raises ConfigError: an invalid key, refused before any request.
        """
        full = self._full_key(key)
        try:
            with self._counting("replaces"):
                response = self._client.put_object(
                    Bucket=self._bucket, Key=full, Body=bytes(data), IfMatch=_quoted(version)
                )
        except (botocore.exceptions.ClientError, botocore.exceptions.BotoCoreError) as exc:
            raise self._translate(exc, "replace", key, write=True) from exc
        return self._etag(response, "replace", key)

    def delete(self, key: str, version: str) -> None:
        """Delete the object only if its ETag is ``version``.

        :raises ConditionFailed: the object is absent or at another version.
        :raises StoreUnavailable: throttled, 5xx, timeout or lost connection;
            ``outcome_unknown`` when the delete may have landed.
        :raises StoreAccessError: credentials refused or the bucket is missing.
        :raises StoreError: any other failure of the store.
        :raises ConfigError: an invalid key, refused before any request.
        """
        full = self._full_key(key)
        try:
            with self._counting("deletes"):
                self._client.delete_object(Bucket=self._bucket, Key=full, IfMatch=_quoted(version))
        except (botocore.exceptions.ClientError, botocore.exceptions.BotoCoreError) as exc:
            raise self._translate(exc, "delete", key, write=True) from exc

    def list(self, prefix: str) -> list[str]:
        """Every key under this store's prefix that starts with ``prefix``, sorted.

        :raises StoreUnavailable: throttled, 5xx, timeout or lost connection.
        :raises StoreAccessError: credentials refused or the bucket is missing.
        :raises StoreError: any other failure of the store.
        :raises ConfigError: an invalid prefix, refused before any request.
        """
        validate_prefix(prefix)
        keys: list[str] = []
        skip = len(self._prefix)
        try:
            with self._counting("lists"):
                pages = self._client.get_paginator("list_objects_v2").paginate(
                    Bucket=self._bucket, Prefix=self._prefix + prefix
                )
                for page in pages:
                    keys.extend(str(item["Key"])[skip:] for item in page.get("Contents", ()))
        except (botocore.exceptions.ClientError, botocore.exceptions.BotoCoreError) as exc:
            raise self._translate(exc, "list", prefix, write=False) from exc
        return sorted(keys)

    def close(self) -> None:
        """Close the client's connections if this store made the client; safe to call twice."""
        self._client.meta.events.unregister(
            "request-created.s3", self._count_attempt, unique_id=self._handler_id
        )
        if self._owns_client:
            self._client.close()

    def __repr__(self) -> str:
        endpoint = f", endpoint={self._endpoint!r}" if self._endpoint else ""
        return f"S3Store(bucket={self._bucket!r}, prefix={self._prefix!r}{endpoint})"

    # -- internals -------------------------------------------------------------------------

    def _full_key(self, key: str) -> str:
        return prefixed_key(self._prefix, key, "S3 key")

    def _get(self, key: str, version: str | None) -> ReadResult:
        """One ``GetObject``; with ``version``, only if the object is no longer at it."""
        full = self._full_key(key)
        known = None if version is None else _if_none_match(version)
        conditions = {} if known is None else {"IfNoneMatch": known}
        try:
            with self._counting("reads"):
                response = self._client.get_object(Bucket=self._bucket, Key=full, **conditions)
                body = response["Body"]
                try:
                    data = body.read()
                finally:
                    body.close()
        except (botocore.exceptions.ClientError, botocore.exceptions.BotoCoreError) as exc:
            if _error_code(exc) == "NoSuchKey":
                return None
            if known is not None and _not_modified(exc):
                self._stats.count_not_modified()
                return NOT_MODIFIED
            raise self._translate(exc, "read", key, write=False) from exc
        etag = self._etag(response, "read", key)
        if etag == known:
            # A store that ignores If-None-Match sends the body anyway: the answer is the same.
            self._stats.count_not_modified()
            return NOT_MODIFIED
        return Versioned(bytes(data), etag)

    def _counting(self, kind: str) -> _Counting:
        return _Counting(self._local, kind)

    def _count_attempt(self, **_kwargs: Any) -> None:
        # Only this store's own calls, on this thread, are counted (a caller's client may be
        # shared with other code).
        kind = getattr(self._local, "kind", None)
        if kind is not None:
            self._stats.count(kind)

    def _etag(self, response: Any, operation: str, key: str) -> str:
        etag = response.get("ETag")
        if not etag:
            # The write (if any) landed but its version is unknown: make the lock read it back.
            raise StoreUnavailable(
                f"S3 {operation} of {key!r} in bucket {self._bucket!r} returned no ETag",
                outcome_unknown=operation != "read",
            )
        return _quoted(str(etag))

    def _where(self) -> str:
        where = f"bucket {self._bucket!r}"
        if self._prefix:
            where += f" (prefix {self._prefix!r})"
        if self._endpoint:
            where += f" at {self._endpoint}"
        return where

    def _translate(
        self, exc: Exception, operation: str, key: str, *, write: bool
    ) -> PriorityLockError:
        return _translate(exc, operation=operation, key=key, write=write, where=self._where())


class _Counting:
    """Marks this thread as inside one store operation of ``kind`` (for the attempt counter)."""

    def __init__(self, local: threading.local, kind: str) -> None:
        self._local = local
        self._kind = kind
        self._previous: str | None = None

    def __enter__(self) -> None:
        self._previous = getattr(self._local, "kind", None)
        self._local.kind = self._kind

    def __exit__(self, *_exc: object) -> None:
        self._local.kind = self._previous


def _translate(
    exc: Exception, *, operation: str, key: str, write: bool, where: str
) -> PriorityLockError:
    """The one place where boto3/botocore errors become prioritylock errors.

    ``write`` is true for create, replace and delete: then a failure after the request may have
    reached the store is ``StoreUnavailable(outcome_unknown=True)``.
    """
    what = f"S3 {operation} of {key!r} in {where}"
    if isinstance(exc, botocore.exceptions.ClientError):
        code = _error_code(exc)
        status = _http_status(exc)
        retries = _retry_attempts(exc)
        if write and (code in _CONDITION_CODES or status == 412):
            if retries:
                # An earlier attempt of this very write may have landed and made the condition
                # fail for the retry: only a read-back can tell.
                return StoreUnavailable(
                    f"{what}: condition failed ({code}) after {retries} SDK retr"
                    f"{'y' if retries == 1 else 'ies'}; an earlier attempt may have landed",
                    outcome_unknown=True,
                )
            return ConditionFailed(key, _condition_detail(operation, code))
        if code in _ACCESS_HINTS:
            return StoreAccessError(
                f"{what} refused ({code}, HTTP {status}): {_ACCESS_HINTS[code]}"
            )
        if status in (401, 403):
            return StoreAccessError(f"{what} refused ({code}, HTTP {status}): {_PERMISSIONS_HINT}")
        if status in (429, 503) or code in _THROTTLE_CODES:
            return StoreUnavailable(
                f"{what} was throttled ({code}, HTTP {status}); retry with backoff",
                outcome_unknown=write,
            )
        if status >= 500 or code in _TRANSIENT_CODES:
            if status == 501:
                return StoreError(
                    f"{what} failed: the store does not implement this request ({code}, HTTP 501);"
                    " it needs conditional writes (If-None-Match / If-Match)"
                )
            return StoreUnavailable(
                f"{what} failed on the server ({code}, HTTP {status})", outcome_unknown=write
            )
        if code == "KeyTooLongError":
            return ConfigError(f"{what} failed: the key is too long for this store")
        return StoreError(f"{what} failed ({code}, HTTP {status})")
    if isinstance(exc, botocore.exceptions.NoCredentialsError):
        return StoreAccessError(
            f"{what}: no AWS credentials found; set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY,"
            " a profile (AWS_PROFILE or ?profile=NAME), or run with an instance or task role"
        )
    if isinstance(
        exc,
        (
            botocore.exceptions.PartialCredentialsError,
            botocore.exceptions.CredentialRetrievalError,
        ),
    ):
        return StoreAccessError(
            f"{what}: AWS credentials are incomplete or could not be loaded"
            f" ({type(exc).__name__}); check the environment variables and the profile"
        )
    if isinstance(exc, botocore.exceptions.ParamValidationError):
        return ConfigError(f"{what}: the request was invalid ({exc})")
    if isinstance(exc, botocore.exceptions.SSLError):
        return StoreUnavailable(
            f"{what}: TLS failed ({type(exc).__name__}); check the endpoint URL and the CA bundle",
            outcome_unknown=write,
        )
    if isinstance(exc, botocore.exceptions.ConnectionError):
        # Connect refused or timed out (or the proxy refused): the request never left this
        # host, so even a write certainly did not land.
        return StoreUnavailable(f"{what}: could not connect ({type(exc).__name__})")
    if isinstance(exc, botocore.exceptions.HTTPClientError):
        # Read timeout, connection closed or reset mid-request: the store may have applied it.
        return StoreUnavailable(
            f"{what}: the response was lost ({type(exc).__name__})", outcome_unknown=write
        )
    return StoreError(f"{what} failed ({type(exc).__name__})")


def _error_code(exc: Exception) -> str:
    if isinstance(exc, botocore.exceptions.ClientError):
        return str(exc.response.get("Error", {}).get("Code", "") or "")
    return ""


def _http_status(exc: botocore.exceptions.ClientError) -> int:
    status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
    return int(status or 0)


def _retry_attempts(exc: botocore.exceptions.ClientError) -> int:
    return int(exc.response.get("ResponseMetadata", {}).get("RetryAttempts", 0) or 0)


def _condition_detail(operation: str, code: str) -> str:
    if code == "ConditionalRequestConflict":
        return "a conflicting conditional write was in progress"
    if code == "NoSuchKey":
        return "absent"
    if operation == "create":
        return "already exists"
    return "absent or at another version"


def _not_modified(exc: Exception) -> bool:
    """Whether a conditional GetObject was answered 304 (botocore: a ClientError, code "304")."""
    if not isinstance(exc, botocore.exceptions.ClientError):
        return False
    return _http_status(exc) == 304 or _error_code(exc) in ("304", "NotModified")


def _if_none_match(version: str) -> str | None:
    """``version`` as an ``If-None-Match`` value, or ``None`` if no object can be at it (a
    token that can't be an ETag: then a plain read answers the same, in one request too)."""
    quoted = _quoted(version)
    return quoted if _ETAG_RE.match(quoted) else None


def _quoted(etag: str) -> str:
    """The ETag in its quoted form, however the store or caller spelled it."""
    return '"' + etag.strip().strip('"') + '"'


def _redact_endpoint(endpoint: str) -> str:
    """The endpoint without any user-info (which could carry credentials)."""
    if not endpoint:
        return ""
    parts = urllib.parse.urlsplit(endpoint)
    netloc = parts.netloc.rsplit("@", 1)[-1]
    return urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def _validate_endpoint(endpoint_url: str) -> str:
    try:
        parts = urllib.parse.urlsplit(endpoint_url)
    except ValueError as exc:
        raise ConfigError(f"S3 endpoint is not a URL: {exc}") from exc
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ConfigError(
            f"S3 endpoint must be http(s)://HOST[:PORT], got {_redact_endpoint(endpoint_url)!r}"
        )
    if "@" in parts.netloc:
        raise ConfigError(
            "S3 endpoint must not carry credentials; use a profile or the environment"
        )
    return endpoint_url


# Building a botocore session from scratch costs ~250 ms (it parses the service models); one
# that borrows an already-warm data loader makes a client in ~20 ms. Each store still gets its
# own session, so credentials and config files are resolved afresh for every store.
_client_lock = threading.Lock()
_shared_loader: Any = None


def _new_session(profile: str | None) -> Any:
    """A new botocore session for ``profile`` that shares the parsed models; hold _client_lock."""
    global _shared_loader
    session = botocore.session.Session(profile=profile)
    if _shared_loader is None:
        _shared_loader = session.get_component("data_loader")
    else:
        session.register_component("data_loader", _shared_loader)
    return session


def _make_client(
    *,
    endpoint_url: str | None,
    region: str | None,
    profile: str | None,
    addressing_style: str | None,
    aws_access_key_id: str | None,
    aws_secret_access_key: str | None,
    aws_session_token: str | None,
    connect_timeout: float,
    read_timeout: float,
) -> Any:
    """A boto3 (botocore) S3 client that makes one attempt per request.

    :raises ConfigError: an invalid option, endpoint or an unknown profile.
    """
    if addressing_style is not None and addressing_style not in ADDRESSING_STYLES:
        raise ConfigError(
            f"S3 addressing style must be one of {list(ADDRESSING_STYLES)},"
            f" got {addressing_style!r}"
        )
    for name, value in (("connect_timeout", connect_timeout), ("read_timeout", read_timeout)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
            raise ConfigError(f"S3 {name} must be a positive number of seconds, got {value!r}")
    if endpoint_url is not None:
        _validate_endpoint(endpoint_url)
    if (aws_access_key_id is None) != (aws_secret_access_key is None) or (
        aws_session_token is not None and aws_access_key_id is None
    ):
        raise ConfigError(
            "S3 credentials need both aws_access_key_id and aws_secret_access_key (and"
            " optionally aws_session_token), or none of them"
        )
    config = botocore.config.Config(
        connect_timeout=connect_timeout,
        read_timeout=read_timeout,
        # total_max_attempts counts the first attempt ("max_attempts" would count retries).
        retries={"total_max_attempts": 1, "mode": "standard"},
        s3={"addressing_style": addressing_style} if addressing_style else None,
        user_agent_extra="prioritylock",
        # One connection per heartbeat worker: a smaller pool would open and discard connections
        # (and log a warning each time) when many leases renew at once.
        max_pool_connections=DEFAULT_WORKERS,
    )
    try:
        with _client_lock:
            return _new_session(profile).create_client(
                "s3",
                endpoint_url=endpoint_url,
                region_name=region,
                aws_access_key_id=aws_access_key_id,
                aws_secret_access_key=aws_secret_access_key,
                aws_session_token=aws_session_token,
                config=config,
            )
    except botocore.exceptions.ProfileNotFound as exc:
        raise ConfigError(f"AWS profile {profile!r} is not in the AWS config files") from exc
    except (botocore.exceptions.BotoCoreError, ValueError) as exc:
        raise ConfigError(f"could not configure the S3 client ({type(exc).__name__})") from exc


_URL_OPTIONS = ("addressing", "connect_timeout", "endpoint", "profile", "read_timeout", "region")


def store_from_url(parts: urllib.parse.SplitResult, options: dict[str, str]) -> S3Store:
    """The store for ``s3://BUCKET/PREFIX?endpoint=...&region=...&profile=...&addressing=...``.

    Options: ``endpoint`` (an ``http(s)://`` URL, for S3-compatible stores), ``region``,
    ``profile``, ``addressing`` (``path``, ``virtual`` or ``auto``), ``connect_timeout`` and
    ``read_timeout`` (seconds). Credentials never go in the URL: they come from boto3's default
    chain (environment, profile, instance or task role).

    :raises ConfigError: no bucket name, credentials or a port in the URL, an unknown or empty
        option (named), or an invalid value.
    """
    for name in sorted(options):
        if name not in _URL_OPTIONS:
            raise ConfigError(
                f"unknown s3:// store URL option {name!r}; known options: {', '.join(_URL_OPTIONS)}"
            )
        if not options[name]:
            raise ConfigError(f"s3:// store URL option {name!r} is empty")
    if "@" in parts.netloc:
        raise ConfigError(
            "s3:// store URLs must not carry credentials; use AWS_ACCESS_KEY_ID and"
            " AWS_SECRET_ACCESS_KEY, a profile (?profile=NAME) or an instance role"
        )
    bucket = parts.netloc
    if not bucket:
        raise ConfigError("s3:// store URL needs a bucket name: s3://BUCKET/PREFIX")
    if ":" in bucket:
        raise ConfigError(
            f"s3:// store URL takes a bucket name, not host:port ({bucket!r});"
            " give the server as ?endpoint=http://HOST:PORT"
        )
    if parts.fragment:
        raise ConfigError("s3:// store URL must not have a #fragment")
    timeouts: dict[str, float] = {}
    for name in ("connect_timeout", "read_timeout"):
        if name in options:
            try:
                timeouts[name] = float(options[name])
            except ValueError as exc:
                raise ConfigError(
                    f"s3:// store URL option {name!r} must be a number of seconds,"
                    f" got {options[name]!r}"
                ) from exc
    return S3Store(
        bucket,
        urllib.parse.unquote(parts.path),
        endpoint_url=options.get("endpoint"),
        region=options.get("region"),
        profile=options.get("profile"),
        addressing_style=options.get("addressing"),
        connect_timeout=timeouts.get("connect_timeout", DEFAULT_CONNECT_TIMEOUT),
        read_timeout=timeouts.get("read_timeout", DEFAULT_READ_TIMEOUT),
    )
