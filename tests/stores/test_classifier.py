"""HttpClassifier: one map from an HTTP status and error code to what it means to the lock, with
each cloud store's own codes. Pure: no servers."""

from __future__ import annotations

import pytest

from prioritylock.stores._azure import AzureBlobStore
from prioritylock.stores._cloud import HttpClassifier, Outcome
from prioritylock.stores._gcs import GCSStore
from prioritylock.stores._s3 import S3Store

pytestmark = [pytest.mark.timeout(30)]

C, A, T, U, F = (
    Outcome.CONDITION_FAILED,
    Outcome.ACCESS,
    Outcome.THROTTLED,
    Outcome.UNAVAILABLE,
    Outcome.FAILED,
)
S3, GCS, AZURE = S3Store._CLASSIFIER, GCSStore._CLASSIFIER, AzureBlobStore._CLASSIFIER

CASES: list[tuple[HttpClassifier, int, str, Outcome, Outcome]] = [
    # classifier, status, code, outcome of a write, outcome of a read
    (S3, 412, "PreconditionFailed", C, F),
    (S3, 409, "ConditionalRequestConflict", C, F),
    (S3, 404, "NoSuchKey", C, F),  # the key vanished under a conditional write
    (S3, 403, "AccessDenied", A, A),
    (S3, 503, "SlowDown", T, T),
    (S3, 503, "", T, T),
    (S3, 429, "", T, T),
    (S3, 400, "RequestTimeout", U, U),
    (S3, 500, "InternalError", U, U),
    (S3, 408, "", F, F),  # S3 says RequestTimeout by its code
    (S3, 400, "InvalidArgument", F, F),
    (GCS, 412, "", C, F),
    (GCS, 409, "", C, F),
    (GCS, 401, "", A, A),
    (GCS, 429, "", T, T),
    (GCS, 408, "", U, U),
    (GCS, 0, "", U, U),  # no HTTP answer at all
    (GCS, 503, "", U, U),
    (GCS, 400, "", F, F),
    (AZURE, 412, "ConditionNotMet", C, F),
    (AZURE, 409, "BlobAlreadyExists", C, F),
    (AZURE, 404, "BlobNotFound", C, F),
    (AZURE, 403, "AuthorizationFailure", A, A),
    (AZURE, 503, "ServerBusy", T, T),
    (AZURE, 429, "", T, T),
    (AZURE, 503, "", U, U),
    (AZURE, 408, "", U, U),
    (AZURE, 400, "InvalidHeaderValue", F, F),
]


@pytest.mark.parametrize(("classifier", "status", "code", "write", "read"), CASES)
def test_status_and_code_map_to_one_outcome(
    classifier: HttpClassifier, status: int, code: str, write: Outcome, read: Outcome
) -> None:
    assert classifier.outcome(status, code, write=True) is write
    assert classifier.outcome(status, code, write=False) is read
