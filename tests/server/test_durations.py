"""Durations of the full lock API: Go's duration strings, or numbers of seconds."""

from __future__ import annotations

import pytest

from prioritylock.server._alpha2 import parse_duration
from prioritylock.server._names import BadRequest


@pytest.mark.parametrize(
    ("given", "seconds"),
    [
        ("30s", 30.0),
        ("1m30s", 90.0),
        ("250ms", 0.25),
        ("1h", 3600.0),
        ("1.5h", 5400.0),
        (".5s", 0.5),
        ("2h45m10s", 9910.0),
        ("1500us", 0.0015),
        ("1500µs", 0.0015),
        ("10ns", 1e-8),
        ("0", 0.0),
        ("12", 12.0),
        (" 7.5 ", 7.5),
        (3, 3.0),
        (0.25, 0.25),
    ],
)
def test_valid(given: object, seconds: float) -> None:
    assert parse_duration(given, "ttl") == pytest.approx(seconds)


@pytest.mark.parametrize(
    "given",
    ["", "s", "1d", "30 s", "-5s", "5s-", "1m30", "nan", "inf", "1e400", -1, True, None, [1]],
)
def test_invalid(given: object) -> None:
    with pytest.raises(BadRequest, match="ttl"):
        parse_duration(given, "ttl")
