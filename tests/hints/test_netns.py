"""Hints between two network stacks: a holder and a requestor (``_peer`` processes), each in a
network namespace of its own with its own address, both reaching moto over the bridge that
joins them (``tools.netns``), as two pods would. Needs root and ``ip netns``; without them the
tests skip saying so (the loopback-address tests of ``test_hosts``, 127.0.0.2 and 127.0.0.3,
cover the same code)."""

from __future__ import annotations

from collections.abc import Iterator
from urllib.parse import urlsplit

import pytest

from tests._servers.s3 import S3Server, needs_moto
from tests.hints.test_hosts import AT_ONCE, PEER, Peer, bucket, path
from tools.netns import Hosts, unavailable

__all__ = ["bucket", "path"]  # the fixtures of test_hosts, used here too

pytestmark = [pytest.mark.timeout(60), pytest.mark.serial, needs_moto]


@pytest.fixture(scope="module")
def hosts() -> Iterator[Hosts]:
    why = unavailable()
    if why is not None:
        pytest.skip(why)
    try:
        with Hosts() as made:
            yield made
    except OSError as exc:
        pytest.skip(f"network namespaces could not be made: {exc}")


@pytest.fixture(scope="module")
def peers(hosts: Hosts, moto_server: S3Server, bucket: str) -> Iterator[tuple[Peer, Peer]]:
    """(the holder's host, the requestor's): each hears hints on its own address."""
    moto = urlsplit(moto_server.endpoint_url)
    assert moto.hostname is not None and moto.port is not None
    gateway, port = hosts.forward((moto.hostname, moto.port))
    endpoint = f"http://{gateway}:{port}"
    running: list[Peer] = []
    try:
        for n in (0, 1):
            wrap = hosts.wrap(n)
            running.append(
                Peer(moto_server, bucket, hosts.addresses[n], endpoint=endpoint, wrap=wrap)
            )
        yield running[0], running[1]
    finally:
        for peer in running:
            peer.close()


@pytest.mark.parametrize("how", ["request", "force_unlock"])
def test_a_write_from_one_namespace_reaches_a_holder_in_another_at_once(
    peers: tuple[Peer, Peer], path: str, how: str
) -> None:
    holder, other = peers
    holder.send("hold", driver="sync", priority=1, path=path, **PEER)
    holder.expect("held")
    if how == "request":
        other.send("ask", priority=5, waiting=10.0, path=path, **PEER)
        told_ns = int(holder.expect("cleanup")[0])
        got, landed_ns = other.expect("asked")
        assert got == "True"  # the holder's cleanup returned at once: handed over
        took = (told_ns - int(landed_ns)) / 1e9
    else:
        other.send("force", path=path)
        reason, lost_ns = holder.expect("lost")
        done_ns = int(other.expect("forced")[0])
        assert reason == "forced"
        took = (int(lost_ns) - done_ns) / 1e9
    print(f"{how}: the holder in the other namespace heard in {took * 1000:.1f} ms")
    assert took < AT_ONCE
