"""S3 requests on native async I/O, for the asyncio lock: obstore (Rust's ``object_store``).

:class:`~prioritylock.stores.S3Store` sends every request through boto3, which blocks; the asyncio
lock runs those calls on a thread pool. With many leases on one event loop, boto3's CPU in the
pool threads and the garbage it leaves (the collector's pauses stop the loop too) stalled the
loop for 20-30 ms at a time; obstore's requests are made off the GIL and allocate little (see
``docs/decisions/001-s3-async-obstore.md``). So the two requests a held lock repeats, the watch
(``GetObject``, ``If-None-Match``) and the renewal (``PutObject``, ``If-Match``), and the
acquirer's create (``If-None-Match: *``), go through obstore when it is installed; everything
else (deletes, which obstore can't make conditional, and lists) stays on boto3.

The client is configured from the same settings as the store's boto3 client: the endpoint, the
region boto3 resolved, the addressing style, the timeouts, and the credentials boto3 resolved
(explicit keys, or boto3's chain through a provider that asks boto3 again every few minutes, so
refreshed role credentials are seen). It makes one attempt per request, as the boto3 client
does, and its errors are translated by ``S3Store._translate`` with boto3's.
"""

from __future__ import annotations

import datetime
import re
import urllib.parse
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import obstore
import obstore.exceptions
import obstore.store

from prioritylock.stores._base import NOT_MODIFIED, ReadResult, Versioned

if TYPE_CHECKING:
    from obstore.store import S3Credential

__all__ = ["ERRORS", "Failure", "NativeError", "ObstoreS3", "cleaned", "failure"]

#: What the native client raises for a failed request.
ERRORS: tuple[type[Exception], ...] = (obstore.exceptions.BaseError, FileNotFoundError)

# How long a credential from boto3's chain is used before boto3 is asked again (it refreshes
# role credentials itself, some minutes before they expire).
_CREDENTIAL_TTL = datetime.timedelta(minutes=5)


class _Boto3Credentials:
    """obstore's credential provider over boto3's resolved credentials (never logged)."""

    def __init__(self, credentials: Any) -> None:
        self._credentials = credentials

    def __call__(self) -> S3Credential:
        frozen = self._credentials.get_frozen_credentials()
        return {
            "access_key_id": frozen.access_key,
            "secret_access_key": frozen.secret_key,
            "token": frozen.token,
            "expires_at": datetime.datetime.now(datetime.timezone.utc) + _CREDENTIAL_TTL,
        }

    def __repr__(self) -> str:
        return "<boto3 credentials>"


class ObstoreS3:
    """The native client of one S3 store's bucket (``stores._cloud.NativeIO``)."""

    errors = ERRORS

    @staticmethod
    def cleaned(exc: Exception) -> Exception:
        return cleaned(exc)

    def __init__(
        self,
        bucket: str,
        *,
        no_version: Callable[[str, str, str], Exception],
        endpoint: str,
        region: str,
        virtual: bool,
        credentials: Any,
        timeouts: tuple[float, float],
        roots: bytes | None = None,
    ) -> None:
        self._no_version = no_version
        connect, read = timeouts
        options: dict[str, Any] = {
            "connect_timeout": datetime.timedelta(seconds=connect),
            # One request, start to end, like boto3's connect plus read timeouts.
            "timeout": datetime.timedelta(seconds=connect + read),
            "user_agent": "prioritylock",
        }
        if endpoint.startswith("http://"):
            options["allow_http"] = True
        if roots is not None:
            # boto3's CA bundle (AWS_CA_BUNDLE, ca_bundle in the profile); obstore trusts it on
            # top of the system's roots.
            options["root_certificate"] = roots
        where = _with_bucket(endpoint, bucket) if virtual else endpoint
        # Every setting that obstore would otherwise take from AWS_* environment variables that
        # boto3 ignores (or reads differently), pinned to what the boto3 client does: the two
        # clients of one store must reach the same bucket, with the same identity.
        config: dict[str, Any] = {
            "endpoint": where,
            "aws_endpoint_url_s3": where,
            "region": region,
            "virtual_hosted_style_request": virtual,
            "skip_signature": False,
            "unsigned_payload": False,
            "request_payer": False,
            "s3_express": False,
            "conditional_put": "etag",
        }
        self._store = obstore.store.S3Store(
            bucket,
            config=config,  # type: ignore[arg-type]
            client_options=options,  # type: ignore[arg-type]
            # Never retried: a retried conditional write whose first attempt landed fails its
            # condition (see S3Store), and the lock retries with its own backoff.
            retry_config={"max_retries": 0},
            credential_provider=_Boto3Credentials(credentials),
        )

    async def fetch(self, key: str, name: str, known: str | None) -> ReadResult:
        options = {} if known is None else {"if_none_match": known}
        try:
            result = await obstore.get_async(self._store, name, options=options)  # type: ignore[arg-type]
            data = bytes(await result.bytes_async())
        except (obstore.exceptions.NotFoundError, FileNotFoundError) as exc:
            if failure(exc).code != "NoSuchKey":
                raise  # the bucket, a proxy's page: not an absent object
            return None
        except obstore.exceptions.NotModifiedError:
            if known is None:
                raise
            return NOT_MODIFIED
        return Versioned(data, self._etag(result.meta.get("e_tag"), "read", key))

    async def put(self, op: str, key: str, name: str, data: bytes, condition: Any) -> str:
        mode: Any = "create" if condition is None else {"e_tag": condition}
        result = await obstore.put_async(self._store, name, data, mode=mode, use_multipart=False)
        return self._etag(result.get("e_tag"), op, key)

    def _etag(self, etag: str | None, op: str, key: str) -> str:
        if not etag:
            raise self._no_version(op, key, "ETag")
        return _quoted(etag)


class Failure:
    """What an obstore error says about a request: the HTTP status and S3 error code when the
    server answered (``status`` 0 when it did not); else ``kind`` says whether the request
    certainly never left (``"unsent"``, ``"credentials"``), may have reached the server
    (``"lost"``), or failed in a way not understood (``"other"``)."""

    __slots__ = ("code", "kind", "status")

    def __init__(self, kind: str, status: int = 0, code: str = "") -> None:
        self.kind, self.status, self.code = kind, status, code


# obstore gives the status and the body of an answer only in its message (the class alone
# misleads: a 409 is AlreadyExistsError even for a read, a 404 on If-Match is PreconditionError).
_STATUS = re.compile(r"non-2xx status code: ([1-5]\d\d)\b")
_CODE = re.compile(r"<Code>([A-Za-z0-9.]{1,64})</Code>")
# Without an answer, only the message's debug part tells how the request failed: hyper's
# "Connect" kind (refused, or reset before the request was read) means it never left.
_KIND = re.compile(r"HttpError \{\s*kind: (\w+)")


def failure(exc: Exception) -> Failure:
    """Read an obstore error: the status and S3 code of an answer, else what kind of failure."""
    text = str(exc)
    status = _STATUS.search(text)
    if status is not None:
        # The code from the answer's body, after the status (not from the object's path before).
        code = _CODE.search(text, status.end())
        return Failure("answered", int(status.group(1)), code.group(1) if code else "")
    if isinstance(exc, obstore.exceptions.UnauthenticatedError):
        return Failure("credentials")  # our provider failed: no request was sent
    kind = _KIND.search(text)
    if kind is not None:
        return Failure("unsent" if kind.group(1) == "Connect" else "lost")
    return Failure("other")


class NativeError(Exception):
    """What a failed native request is chained to instead of obstore's own error, whose message
    carries the whole answer: on a refused signature AWS echoes the canonical request, session
    token included. This keeps the class, the status and the S3 code, or the transport kind."""


def cleaned(exc: Exception) -> NativeError:
    seen = failure(exc)
    answer = f"HTTP {seen.status} {seen.code}".rstrip()
    said = answer if seen.status else f"no answer ({seen.kind})"
    return NativeError(f"obstore {type(exc).__name__}: {said}")


def _quoted(etag: str) -> str:
    return '"' + etag.strip().strip('"') + '"'


def _with_bucket(endpoint: str, bucket: str) -> str:
    """``endpoint`` with the bucket as its host's first label (virtual-hosted addressing)."""
    parts = urllib.parse.urlsplit(endpoint)
    return urllib.parse.urlunsplit(parts._replace(netloc=f"{bucket}.{parts.netloc}"))
