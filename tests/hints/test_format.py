"""The hint string, the setting, the lease fields and whom a write concerns: no sockets."""

from __future__ import annotations

import json
from typing import Any

import attrs
import pytest

from prioritylock import ConfigError
from prioritylock import _protocol as proto
from prioritylock._hints import (
    DATAGRAM_BYTES,
    format_hint,
    parse_address,
    parse_hint,
    parse_setting,
    token_for,
)
from prioritylock._lease import Entry, Holder, Lease, Requestor, decode, encode, new_lock_id

pytestmark = pytest.mark.timeout(10)

TOKEN = "Ab3_-defghijklmnopqrstu"[:22]  # fixed: test ids must not vary between processes


def test_a_token_is_22_chars_of_base64url_and_a_datagram_26_bytes() -> None:
    token = token_for("some-lock-id")
    assert len(token) == 22
    assert set(token) <= set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")
    assert token_for("some-lock-id") == token  # worked out again when the acquisition ends
    assert len({token_for(new_lock_id()) for _ in range(1000)}) == 1000
    assert DATAGRAM_BYTES == 26


@pytest.mark.parametrize(
    ("host", "port", "text"),
    [
        ("10.1.2.3", 7700, f"10.1.2.3:7700/{TOKEN}"),
        ("fd00::1", 7700, f"[fd00::1]:7700/{TOKEN}"),
    ],
)
def test_a_hint_formats_and_parses_back(host: str, port: int, text: str) -> None:
    assert format_hint(host, port, TOKEN) == text
    assert parse_hint(text) == (host, port, TOKEN)
    assert len(text) <= 80


@pytest.mark.parametrize(
    "text",
    [
        None,
        42,
        "",
        f"10.1.2.3/{TOKEN}",  # no port
        f"10.1.2.3:0/{TOKEN}",  # port 0
        f"0.0.0.0:7700/{TOKEN}",  # reaches nobody
        f"host.example:7700/{TOKEN}",  # names are never resolved
        f"fd00::1:7700/{TOKEN}",  # IPv6 without brackets
        "10.1.2.3:7700/short",
        f"10.1.2.3:7700/{TOKEN}x",
        f"10.1.2.3:70000/{TOKEN}",
        f"10.1.2.3:7700/{TOKEN[:-1]}=",
        "x" * 81,
    ],
)
def test_anything_else_is_no_hint(text: Any) -> None:
    assert parse_hint(text) is None


def test_the_setting() -> None:
    assert parse_setting(None) == (("127.0.0.1", 0), None)
    assert parse_setting("") == (("127.0.0.1", 0), None)
    assert parse_setting("off") is None
    assert parse_setting("10.0.0.7") == (("10.0.0.7", 0), None)
    assert parse_setting("10.0.0.7:7700") == (("10.0.0.7", 7700), None)
    assert parse_setting("[fd00::7]:7700") == (("fd00::7", 7700), None)
    assert parse_setting("fd00::7") == (("fd00::7", 0), None)
    assert parse_setting("0.0.0.0:7700=203.0.113.5") == (
        ("0.0.0.0", 7700),
        ("203.0.113.5", 7700),
    )
    assert parse_setting("0.0.0.0:7700=203.0.113.5:9000") == (
        ("0.0.0.0", 7700),
        ("203.0.113.5", 9000),
    )
    assert parse_address("127.0.0.2") == ("127.0.0.2", 0)


@pytest.mark.parametrize("bad", ["0.0.0.0", "[::]:7700", "pod.local", "1.2.3.4:x", "1.2.3.4=name"])
def test_a_bad_setting_says_what_is_wrong(bad: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_setting(bad)
    assert caught.value.option == "hints"


# -- the lease fields ---------------------------------------------------------------------------

_H = Holder("hid", "holder", "", 5, 30.0, 10.0, False, 1.0, 1.0, 0, hint=f"10.0.0.1:1/{TOKEN}")
_R = Requestor("rid", "req", "", 7, 5.0, False, 1.0, 30.0, 10.0, hint=f"10.0.0.2:2/{TOKEN}")


def test_a_lease_without_hints_is_written_as_before() -> None:
    plain = Lease("n", 3, "x", attrs.evolve(_H, hint=None), attrs.evolve(_R, hint=None))
    data = encode(plain)
    assert b"hint" not in data
    assert decode("k", data) == plain


def test_hints_read_back() -> None:
    lease = Lease("n", 3, "x", _H, _R)
    assert decode("k", encode(lease)) == lease


@pytest.mark.parametrize("value", [None, 7, True, [], {}, "x" * 81])
def test_a_malformed_recorded_hint_is_no_hint_not_a_corrupt_lease(value: Any) -> None:
    body = json.loads(encode(Lease("n", 3, "x", _H, _R)))
    body["holder"]["hint"] = value
    body["requestor"]["hint"] = value
    lease = decode("k", json.dumps(body).encode())
    assert lease.holder is not None and lease.holder.hint is None
    assert lease.requestor is not None and lease.requestor.hint is None


def test_a_recorded_hint_of_another_format_is_kept_but_never_sent_to() -> None:
    body = json.loads(encode(Lease("n", 3, "x", _H)))
    body["holder"]["hint"] = "udp://pod-7.example/abc"
    lease = decode("k", json.dumps(body).encode())
    assert lease.holder is not None and parse_hint(lease.holder.hint) is None


# -- whom a write concerns (the core's decision) --------------------------------------------------


def _lease(holder: Holder | None = _H, requestor: Requestor | None = None) -> Lease:
    return Lease("n", 3, "x", holder, requestor)


def test_a_request_hints_the_holder_and_a_displaced_requestor() -> None:
    me = attrs.evolve(_R, requestor_id="me", priority=9, hint="10.0.0.9:9/" + TOKEN)
    assert proto.hinted(_lease(), _lease(requestor=me), "me") == (_H.hint,)
    displaced = proto.hinted(_lease(requestor=_R), _lease(requestor=me), "me")
    assert displaced == (_H.hint, _R.hint)


def test_a_withdrawal_hints_the_holder() -> None:
    assert proto.hinted(_lease(requestor=_R), _lease(), "rid") == (_H.hint,)


def test_a_release_or_handover_hints_the_requestor_and_a_renewal_nobody() -> None:
    before = _lease(requestor=_R)
    assert proto.hinted(before, proto.released(before, 2.0), "hid") == (_R.hint,)
    assert proto.hinted(before, proto.handed_over(before, 2.0, None), "hid") == (_R.hint,)
    assert proto.hinted(before, proto.renewed(before, 2.0), "hid") == ()
    assert proto.hinted(_lease(), proto.released(_lease(), 2.0), "hid") == ()


def test_a_lock_freed_hints_the_head_of_its_line_and_a_handover_does_not() -> None:
    head = Entry("w1", "first", 1, 1.0, 10.0, 0, "10.0.0.7:7/" + TOKEN)
    second = Entry("w2", "second", 1, 2.0, 10.0, 0, "10.0.0.8:8/" + TOKEN)
    before = attrs.evolve(_lease(requestor=_R), line=(head, second))
    assert proto.hinted(before, proto.released(before, 2.0), "hid") == (_R.hint, head.hint)
    freed = proto.forced_free(before, by="op", message="m", wall=2.0, boot=None)
    assert proto.hinted(before, freed, None) == (_H.hint, _R.hint, head.hint)
    assert proto.hinted(before, proto.handed_over(before, 2.0, None), "hid") == (_R.hint,)


def test_a_force_unlock_or_override_hints_holder_and_requestor() -> None:
    before = _lease(requestor=_R)
    freed = proto.forced_free(before, by="op", message="m", wall=2.0, boot=None)
    assert proto.hinted(before, freed, None) == (_H.hint, _R.hint)
    claim = proto.Claim("ov", "op", "", 2_147_483_647, 30.0, 10.0, 5.0, False)
    step = proto.acquire_step(
        before,
        "n",
        claim,
        now=0.0,
        wall=2.0,
        drift=1.0,
        holder_seen=None,
        request_seen=None,
        mine=None,
    )
    assert isinstance(step, proto.Write)
    assert proto.hinted(before, step.lease, "ov") == (_H.hint, _R.hint)


def test_the_hint_follows_the_acquisition_from_requestor_to_holder() -> None:
    handed = proto.handed_over(_lease(requestor=_R), 2.0, None)
    assert handed.holder is not None and handed.holder.hint == _R.hint
    renewed = proto.renewed(handed, 3.0)
    assert renewed.holder is not None and renewed.holder.hint == _R.hint


def test_the_early_hint_goes_to_a_holder_of_another_process_only() -> None:
    me = proto.Claim("me", "me", "", 9, 30.0, 10.0, 5.0, False, hint=f"10.0.0.9:9/{TOKEN}")
    assert proto.early_hint(_lease(), me) == _H.hint
    assert proto.early_hint(_lease(), attrs.evolve(me, hint=None)) is None  # we don't hint
    assert proto.early_hint(_lease(holder=attrs.evolve(_H, hint=None)), me) is None
    same = attrs.evolve(_H, hint=f"10.0.0.9:9/{TOKEN[::-1]}")  # our own listener
    assert proto.early_hint(_lease(holder=same), me) is None
