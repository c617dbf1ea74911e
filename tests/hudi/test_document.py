"""Hudi's lock document, byte for byte, and its pure rules (prioritylock._hudi)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from prioritylock import CorruptLease
from prioritylock import _hudi as hudi
from prioritylock._hudi import HudiLockData

DOCS: dict[str, str] = json.loads((Path(__file__).parent / "fixtures/documents.json").read_text())
OWNER = "0b6f0c5e-2d2a-4c55-9a53-0f4b2f7a9c11"
T0 = 1_764_159_900_000  # the Java writer's wall clock when it acquired (ms)
VALIDITY = 300_000


def test_hudis_own_test_document_round_trips_byte_for_byte() -> None:
    raw = DOCS["hudi_test_valid"].encode()
    data = hudi.decode(raw, key="k")
    assert data == HudiLockData(False, 1_700_000_000_000, "testOwner")
    assert hudi.encode(data) == raw


def test_unknown_fields_are_ignored_on_read() -> None:
    data = hudi.decode(DOCS["hudi_test_extra_field"].encode(), key="k")
    assert data == HudiLockData(True, 1_600_000_000_000, "otherOwner")


@pytest.mark.parametrize(
    "raw",
    [
        DOCS["hudi_test_invalid"],
        '{"expired":null,"validUntil":1,"owner":"o"}',
        '{"expired":false,"validUntil":null,"owner":"o"}',
        '{"expired":false,"validUntil":1}',
        '{"expired":"no","validUntil":1,"owner":"o"}',
        '{"expired":false,"validUntil":true,"owner":"o"}',
        '{"expired":false,"validUntil":1,"owner":7}',
        '{"expired":false,"validUntil":99999999999999999999,"owner":"o"}',
        "[]",
        "not json",
        "\xff",
    ],
)
def test_what_hudis_reader_rejects_is_corrupt(raw: str) -> None:
    with pytest.raises(CorruptLease, match=r"table_lock\.json"):
        hudi.decode(raw.encode("utf-8", "surrogateescape"), key=".hoodie/.locks/table_lock.json")


def test_a_java_writers_lifecycle_as_it_leaves_the_document() -> None:
    got = hudi.acquired(OWNER, T0, VALIDITY)
    assert hudi.encode(got) == DOCS["java_after_acquire"].encode()
    renewed = hudi.renewed(got, T0 + 30_000, VALIDITY)
    assert hudi.encode(renewed) == DOCS["java_after_renew"].encode()
    assert hudi.encode(hudi.released(renewed)) == DOCS["java_after_release"].encode()
    # A crash leaves the last renewal in place.
    crashed = hudi.decode(DOCS["java_after_crash"].encode(), key="k")
    assert crashed == renewed


def test_free_by_hudis_rule() -> None:
    held = hudi.decode(DOCS["java_after_renew"].encode(), key="k")
    until = held.valid_until_ms
    assert hudi.is_free(None, 0)
    assert not hudi.is_free(held, until)
    assert not hudi.is_free(held, until + 500)  # within the drift: still held
    assert hudi.is_free(held, until + 501)
    assert not hudi.is_free(held, until + 900, drift_ms=1000)
    assert hudi.is_free(hudi.decode(DOCS["java_after_release"].encode(), key="k"), 0)
    assert hudi.time_left_ms(held, until + 500) == 1
    assert hudi.time_left_ms(held, until + 501) == 0
    assert hudi.time_left_ms(hudi.released(held), 0) == 0


def test_a_renewal_never_shortens_the_lease() -> None:
    held = hudi.acquired(OWNER, T0, VALIDITY)
    stepped_back = hudi.renewed(held, T0 - 60_000, VALIDITY)  # the wall clock stepped back
    assert stepped_back.valid_until_ms == held.valid_until_ms and not stepped_back.expired


def test_a_force_unlock_writes_what_was_seen_expired_a_millisecond_short() -> None:
    seen = hudi.decode(DOCS["java_after_crash"].encode(), key="k")
    until = seen.valid_until_ms
    java_release = DOCS["java_after_release"].encode()
    # Java's release document, but for validUntil: the holder tells it from its own release.
    shorter = java_release.replace(str(until).encode(), str(until - 1).encode())
    assert hudi.encode(hudi.forced(seen)) == shorter != java_release
    assert hudi.forced(seen) != hudi.released(seen) and hudi.is_free(hudi.forced(seen), 0)


def test_non_ascii_owners_are_written_as_utf8_like_jackson() -> None:
    data = HudiLockData(False, 1, 'ø"\\')
    assert hudi.encode(data) == '{"expired":false,"validUntil":1,"owner":"ø\\"\\\\"}'.encode()
