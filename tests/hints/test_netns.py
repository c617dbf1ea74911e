"""Hints between two network stacks: the peer (``_peer``) runs in a network namespace the test
makes, joined to this one by a veth pair; it reaches moto over the pair (through a small TCP
forwarder here, as moto listens on 127.0.0.1) and hears hints on its own address, as a pod
would. Needs root and ``ip netns``; without them the tests skip saying so (the loopback-address
tests of ``test_hosts`` cover the same code)."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from urllib.parse import urlsplit

import pytest

from prioritylock import configure_hints
from prioritylock._hints import HINTS, parse_setting
from tests._servers.s3 import S3Server, needs_moto
from tests.hints.test_hosts import AT_ONCE, PEER, Counted, Peer, _lock, bucket, path, store

__all__ = ["bucket", "path", "store"]  # the fixtures of test_hosts, used here too

pytestmark = [pytest.mark.timeout(60), pytest.mark.serial, needs_moto]


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=10)


@pytest.fixture(scope="module")
def namespace() -> Iterator[tuple[str, str, str]]:
    """(name, our address, its address): a namespace joined to ours by a veth pair."""
    if os.geteuid() != 0 or shutil.which("ip") is None:
        pytest.skip("making network namespaces needs root and iproute2 (ip netns)")
    n = os.getpid() % 10_000
    name, here, there = f"plh-{n}", f"10.213.{n % 250}.1", f"10.213.{n % 250}.2"
    try:
        _ip("netns", "add", name)
    except subprocess.CalledProcessError as exc:
        pytest.skip(f"ip netns add failed: {exc.stderr.decode().strip()}")
    try:
        _ip("link", "add", f"plhh{n}", "type", "veth", "peer", "name", f"plhn{n}")
        _ip("link", "set", f"plhn{n}", "netns", name)
        _ip("addr", "add", f"{here}/30", "dev", f"plhh{n}")
        _ip("link", "set", f"plhh{n}", "up")
        for args in (("addr", "add", f"{there}/30", "dev", f"plhn{n}"),
                     ("link", "set", f"plhn{n}", "up"), ("link", "set", "lo", "up")):  # fmt: skip
            _ip("netns", "exec", name, "ip", *args)
        yield name, here, there
    finally:
        with contextlib.suppress(subprocess.CalledProcessError):
            _ip("netns", "del", name)  # its end of the pair goes with it, and so does ours


def _forward(
    listen: tuple[str, int], to: tuple[str, int], opened: list[socket.socket]
) -> tuple[socket.socket, int]:
    """A TCP forwarder on ``listen`` to ``to`` (threads, for the test's few connections); every
    socket it opens goes in ``opened``, for the caller to close."""
    server = socket.create_server(listen)
    opened.append(server)

    def pump(a: socket.socket, b: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := a.recv(65536):
                b.sendall(data)
        with contextlib.suppress(OSError):
            b.shutdown(socket.SHUT_WR)

    def accept() -> None:
        with contextlib.suppress(OSError):
            while True:
                client, _ = server.accept()
                upstream = socket.create_connection(to)
                opened.extend((client, upstream))
                threading.Thread(target=pump, args=(client, upstream), daemon=True).start()
                threading.Thread(target=pump, args=(upstream, client), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    return server, server.getsockname()[1]


@pytest.fixture(scope="module")
def peer(namespace: tuple[str, str, str], moto_server: S3Server, bucket: str) -> Iterator[Peer]:
    name, here, there = namespace
    moto = urlsplit(moto_server.endpoint_url)
    assert moto.hostname is not None and moto.port is not None
    opened: list[socket.socket] = []
    _server, port = _forward((here, 0), (moto.hostname, moto.port), opened)
    running = Peer(
        moto_server,
        bucket,
        there,
        endpoint=f"http://{here}:{port}",
        wrap=("ip", "netns", "exec", name),
    )
    try:
        yield running
    finally:
        running.close()
        for sock in opened:
            sock.close()


@pytest.fixture
def here(namespace: tuple[str, str, str]) -> Iterator[str]:
    configure_hints(namespace[1])
    yield namespace[1]
    HINTS.configure(parse_setting(os.environ.get("PRIORITYLOCK_HINTS")))


@pytest.mark.parametrize("how", ["request", "force_unlock"])
def test_a_write_reaches_a_holder_in_another_network_namespace_at_once(
    store: Counted, peer: Peer, here: str, path: str, how: str
) -> None:
    peer.send("hold", driver="sync", priority=1, path=path, **PEER)
    peer.expect("held")
    store.replaced_ns.clear()
    if how == "request":
        asking = _lock(store, path, "asker", 5, waiting_timeout=10.0)
        assert asking.try_lock()  # handed over at once
        told_ns = int(peer.expect("cleanup")[0])
        took = (told_ns - store.replaced_ns[0]) / 1e9
    else:
        asking = _lock(store, path, "operator", 1)
        asking.force_unlock("hint test")
        done_ns = time.monotonic_ns()
        reason, lost_ns = peer.expect("lost")
        assert reason == "forced"
        took = (int(lost_ns) - done_ns) / 1e9
    print(f"{how}: the holder in the other namespace heard in {took * 1000:.1f} ms")
    assert took < AT_ONCE
    with contextlib.suppress(Exception):
        asking.unlock()
    asking.close()
